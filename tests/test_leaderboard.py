"""Leaderboards: a bundle round trip on a small offline track, tampering caught, hostile bundles
refused safely, and the board's rank rule."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from cli_helpers import assert_one_line_error
from ibrl_bench.agents.cards import load_card
from ibrl_bench.domains import get_domain
from ibrl_bench.errors import UserError
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.board import Entry, build_board, render_md, write_board
from ibrl_bench.leaderboard.files import BundleRefused
from ibrl_bench.leaderboard.scoring import SCORING_VERSION
from ibrl_bench.leaderboard.submit import default_run_folder, suite_config
from ibrl_bench.leaderboard.track import Track, check_pins, current_pins, load_track
from ibrl_bench.leaderboard.verify import verify_bundle
from ibrl_bench.runner.crossplay import episode_key
from ibrl_bench.stats.intervals import Interval
from leaderboard_helpers import CARD, POLICY, submit, write_track


def episodes(bundle: Path) -> list[dict]:
    with gzip.open(bundle / files.EPISODES, "rt") as f:
        return [json.loads(line) for line in f]


def rewrite(bundle: Path, records: list[dict]) -> None:
    """Replace the episodes and update their checksum, as a careful forger would."""
    files.write_gz_lines(bundle / files.EPISODES, (json.dumps(r) for r in records))
    sub = json.loads((bundle / files.SUBMISSION).read_text())
    sub["files"]["episodes"]["sha256"] = files.sha256(bundle, files.EPISODES)
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))


def problems(bundle: Path) -> list[str]:
    verdict = verify_bundle(bundle)
    assert not verdict.ok
    return verdict.problems


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


# ------------------------------------------------------------------------------ round trip

def test_a_submitted_bundle_verifies_and_reaches_the_board(bundle, board_root):
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.problems
    assert verdict.n_episodes == 2 * 2 * 4  # counterparts x roles x scenarios
    sub = verdict.submission
    assert sub.track.id == "dealnodeal/tiny" and sub.model["kind"] == "scripted"
    assert sub.counts.cells == 4 and sub.earlier_submissions == 0
    assert set(sub.scores.metrics) == {"policy_score", "agreement"} and sub.scoring == SCORING_VERSION
    assert "one attempt per scenario" in (bundle / files.README).read_text()
    # Every episode records the hash of the card it faced.
    tough = load_card("tough").hash
    assert {e["cards"].get("b" if e["policy_role"] == "a" else "a") for e in episodes(bundle)} == {tough, None}

    track = load_track("dealnodeal/tiny")
    board = build_board(track)
    assert [e.name for e in board.entries] == ["Boulware"] and not board.rejected
    (entry,) = board.entries
    assert entry.rank == 1 and entry.submissions == 1
    assert entry.estimate == sub.scores.metrics["policy_score"].overall
    assert entry.metrics["agreement"] == sub.scores.metrics["agreement"]
    assert set(entry.per_counterpart) == {"scripted:dealnodeal/random", "card:tough"}
    md, js = write_board(board, track)
    assert json.loads(js.read_text())["entries"][0]["name"] == "Boulware"
    assert "| 1 | Boulware (tests) |" in md.read_text()
    # The build is reproducible: the same bundles give the same board, byte for byte.
    before = js.read_bytes()
    write_board(build_board(track), track)
    assert js.read_bytes() == before


def test_the_second_submission_under_a_name_is_counted_and_replaces_the_first(bundle, board_root):
    second = submit(board_root, name="Boulware", policy="scripted:dealnodeal/boulware?beta=0.5")
    assert verify_bundle(second).submission.earlier_submissions == 1
    board = build_board(load_track("dealnodeal/tiny"))
    (entry,) = board.entries  # one row per name: the latest bundle, not the best
    assert entry.policy == "scripted:dealnodeal/boulware?beta=0.5" and entry.submissions == 2


def test_a_declared_training_counterpart_gives_the_mismatch_column(board_root):
    bundle = submit(board_root, name="Trained", train="scripted:dealnodeal/conceder")
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.problems
    gap = verdict.submission.scores.mismatch
    assert gap is not None and gap.estimate is not None
    (entry,) = build_board(load_track("dealnodeal/tiny")).entries
    assert entry.mismatch == gap and entry.train_counterpart == "scripted:dealnodeal/conceder"
    # The training counterpart is not part of the held-out estimate.
    assert "scripted:dealnodeal/conceder" not in entry.per_counterpart


@pytest.mark.slow
def test_submit_defaults_keep_tracks_apart_and_pass_the_move_timeout(ibrl, board_root):
    # Track `tiny` + name "x y" and a track `tiny-x` + name "y" must not share a run folder.
    track = load_track("dealnodeal/tiny")
    other = track.model_copy(update={"name": "tiny-x"})
    assert default_run_folder(track, "x y") != default_run_folder(other, "y")
    proc = ibrl("submit", "--track", "dealnodeal/tiny", "--policy", POLICY, "--name", "Boulware CLI",
                "--move-timeout", "7.5", "--bundle", "bundle", "--quiet", cwd=board_root)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((board_root / default_run_folder(track, "Boulware CLI") / "manifest.json").read_text())
    assert manifest["config"]["move_timeout"] == 7.5


@pytest.mark.slow
def test_submit_verify_build_show_on_the_command_line(ibrl, board_root):
    bundle = board_root / "bundle"
    # A relative bundle path, as `submit` makes by default.
    proc = ibrl("submit", "--track", "dealnodeal/tiny", "--policy", POLICY, "--name", "Boulware CLI",
                "--out", str(board_root / "run"), "--bundle", "bundle", "--quiet", cwd=board_root)
    assert proc.returncode == 0, proc.stderr
    assert "bundle: bundle (16 episodes" in proc.stdout
    again = ibrl("submit", "--track", "dealnodeal/tiny", "--policy", POLICY, "--name", "Boulware CLI",
                 "--out", str(board_root / "run"), "--bundle", str(bundle), "--quiet", cwd=board_root)
    assert_one_line_error(again, "is not empty")  # a bundle is never overwritten
    proc = ibrl("leaderboard", "verify", str(bundle), cwd=board_root)
    assert proc.returncode == 0, proc.stderr
    assert "16 episodes replayed on dealnodeal/tiny" in proc.stdout
    submissions = board_root / "leaderboards" / "dealnodeal" / "tiny" / "submissions"
    submissions.mkdir()
    bundle.rename(submissions / "boulware-cli")
    proc = ibrl("leaderboard", "build", cwd=board_root)
    assert proc.returncode == 0, proc.stderr
    assert "1 entries, 0 bundles rejected" in proc.stdout
    proc = ibrl("leaderboard", "show", "--track", "dealnodeal/tiny", cwd=board_root)
    assert proc.returncode == 0, proc.stderr
    assert "Boulware CLI" in proc.stdout and "tough" in proc.stdout


# ------------------------------------------------------------------------------ tampering

def test_an_edited_outcome_is_caught_by_the_replay(bundle):
    records = episodes(bundle)
    target = next(r for r in records if not r["outcome"]["agreement"])
    target["outcome"].update(agreement=True, success=True)
    rewrite(bundle, records)
    found = problems(bundle)
    assert any(target["key"] in p and "outcome agreement: recorded True, replay gives False" in p for p in found), found


def test_an_edited_file_without_a_new_checksum_is_caught(bundle):
    records = episodes(bundle)
    files.write_gz_lines(bundle / files.EPISODES, (json.dumps(r) for r in records[1:]))
    assert any("sha256 differs" in p for p in problems(bundle))


def test_a_dropped_episode_is_caught(bundle):
    records = episodes(bundle)
    dropped = records.pop(3)
    rewrite(bundle, records)
    found = problems(bundle)
    assert any("1 episodes of the suite are missing" in p and dropped["scenario_id"] in p for p in found), found


def test_a_duplicated_episode_is_caught(bundle):
    records = episodes(bundle)
    rewrite(bundle, [records[0], *records[:-1]])  # as many lines as planned, one game twice
    assert any("one attempt per scenario and seed" in p for p in problems(bundle))


def test_a_changed_counterpart_card_is_caught(bundle):
    records = episodes(bundle)
    target = next(r for r in records if r["cards"])
    role = next(iter(target["cards"]))
    target["cards"][role] = "0123456789abcdef"
    rewrite(bundle, records)
    found = problems(bundle)
    assert any(target["key"] in p and "card hashes" in p and "0123456789abcdef" in p for p in found), found


def test_a_counterpart_swapped_behind_its_card_is_caught(board_root, bundle):
    """Episodes played against another counterpart (the random one), relabelled as the pinned card:
    every hash and key is right, but the card's agent does not say what the transcript says."""
    easy = submit(board_root, name="Easy-run", policy=POLICY)
    records = episodes(bundle)
    by_game = {(r["counterpart"], r["policy_role"], r["scenario_id"]): r for r in episodes(easy)}
    swapped = 0
    for r in records:
        if r["counterpart"] != "card:tough":
            continue
        src = by_game[("scripted:dealnodeal/random", r["policy_role"], r["scenario_id"])]
        if src["transcript"] != r["transcript"]:
            r["transcript"], r["outcome"], r["starter"] = src["transcript"], src["outcome"], src["starter"]
            swapped += 1
    assert swapped
    rewrite(bundle, records)
    assert any("the agent says" in p for p in problems(bundle))


def test_a_swapped_scenario_is_caught(bundle):
    records = episodes(bundle)
    others = get_domain("dealnodeal").scenario_set("test", 6).scenarios
    records[0]["scenario_hash"] = others[5].hash  # the record claims a scenario with another's content
    train = get_domain("dealnodeal").scenario_set("train", 1).scenarios[0]
    r = records[1]
    r["scenario_id"], r["scenario_hash"] = train.id, train.hash  # a scenario from outside the track
    r["key"] = episode_key(r["policy"], r["counterpart"], r["policy_role"], train.id, r["seed"])
    rewrite(bundle, records)
    found = problems(bundle)
    assert any(records[0]["key"] in p and "scenario hash" in p and "swapped" in p for p in found), found
    assert any(train.id in p and "not in the track's scenario set" in p for p in found), found


def test_a_bundle_from_an_older_track_version_is_caught(bundle, board_root):
    write_track(board_root / "leaderboards", version=2)
    (only,) = problems(bundle)
    assert "version 1" in only and "now version 2" in only


def test_a_restated_metric_is_caught(bundle):
    sub = json.loads((bundle / files.SUBMISSION).read_text())
    overall = sub["scores"]["metrics"]["agreement"]["overall"]
    overall["estimate"] = min(1.0, overall["estimate"] + 0.1)
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))
    found = problems(bundle)
    assert any(p.startswith("metric agreement overall: submission.json states") for p in found), found


def test_a_track_whose_card_changed_cannot_be_played(board_root):
    (board_root / "counterparts" / "tough.yaml").write_text(yaml.safe_dump({**CARD, "description": "softer now"}))
    with pytest.raises(Exception, match="pins card:tough at card hash"):
        check_pins(load_track("dealnodeal/tiny"))


# ------------------------------------------------------------------------------ hostile bundles

def _escape(bundle: Path) -> None:
    outside = bundle.parent.parent / "elsewhere.jsonl.gz"
    outside.write_bytes((bundle / files.EPISODES).read_bytes())
    sub = json.loads((bundle / files.SUBMISSION).read_text())
    sub["files"]["episodes"]["path"] = "../../elsewhere.jsonl.gz"
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))


def _symlink(bundle: Path) -> None:
    outside = bundle.parent.parent / "elsewhere.jsonl.gz"
    outside.write_bytes((bundle / files.EPISODES).read_bytes())
    (bundle / files.EPISODES).unlink()
    os.symlink(outside, bundle / files.EPISODES)


def _huge(bundle: Path) -> None:
    with open(bundle / files.EPISODES, "r+b") as f:
        f.truncate(files.CAPS[files.EPISODES] + 1)  # sparse: costs no disk, and must never be read


def _invalid_json(bundle: Path) -> None:
    (bundle / files.SUBMISSION).write_text('{"format": 1, "name": ')


@pytest.mark.slow
@pytest.mark.parametrize("attack, message", [
    (_escape, "leaves the bundle folder"),
    (_symlink, "is a symlink"),
    (_huge, "over the"),
    (_invalid_json, "is not valid JSON"),
])
def test_a_hostile_bundle_is_refused_in_one_line_and_nothing_is_written(ibrl, bundle, board_root, attack, message):
    attack(bundle)
    before = tree(board_root)
    proc = ibrl("leaderboard", "verify", str(bundle), cwd=board_root)
    assert_one_line_error(proc, "refused", message)
    assert tree(board_root) == before
    # The board builder lists it as rejected and writes only the board files.
    track = load_track("dealnodeal/tiny")
    board = build_board(track)
    assert board.entries == [] and message in board.rejected[0].reason
    assert str(board_root) not in board.rejected[0].reason  # no absolute path of the machine that built it
    write_board(board, track)
    assert set(tree(board_root)) - set(before) == {"leaderboards/dealnodeal/tiny/board.json",
                                           "leaderboards/dealnodeal/tiny/board.md",
                                           "leaderboards/dealnodeal/tiny/ledger.json"}


def test_a_hard_link_is_refused(bundle, board_root):
    outside = board_root / "elsewhere.md"
    outside.write_text("not part of the bundle")
    (bundle / files.README).unlink()
    os.link(outside, bundle / files.README)
    with pytest.raises(BundleRefused, match="README.md is a hard link"):
        verify_bundle(bundle)


@pytest.mark.parametrize("policy, train, member", [
    ("scripted:dealnodeal/random", None, "scripted:dealnodeal/random"),
    ("scripted:dealnodeal/random?greed=2", None, "scripted:dealnodeal/random"),  # a variant is the agent
    ("card:tough", None, "card:tough"),
    ("scripted:dealnodeal/hardliner", None, "card:tough"),  # the agent behind the card
    (POLICY, "card:tough", "card:tough"),
    (POLICY, "scripted:dealnodeal/hardliner?accept=8", "card:tough"),
])
def test_a_panel_member_as_policy_or_training_counterpart_is_refused_at_submit(board_root, policy, train, member):
    with pytest.raises(UserError, match=f"is the track's panel member {re.escape(member)}") as e:
        suite_config(load_track("dealnodeal/tiny"), policy, train, concurrency=1)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("field, value, message", [
    ("policy", "scripted:dealnodeal/random", "the policy scripted:dealnodeal/random is the track's panel member "
                                             "scripted:dealnodeal/random"),
    ("train_counterpart", "scripted:dealnodeal/hardliner",
     "the declared training counterpart scripted:dealnodeal/hardliner is the track's panel member card:tough"),
    ("model", {"kind": "hf", "weights_sha256": "0" * 64}, "kind 'hf' does not fit the policy"),
])
def test_a_bundle_naming_a_panel_member_or_a_foreign_identity_is_rejected_in_one_line(bundle, field, value, message):
    sub = json.loads((bundle / files.SUBMISSION).read_text())
    sub[field] = value
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))
    (only,) = problems(bundle)
    assert message in only


def test_a_gzip_that_inflates_past_its_cap_is_refused(bundle, monkeypatch):
    monkeypatch.setattr(files, "INFLATED_CAP", 10_000)
    with pytest.raises(BundleRefused, match="inflates to more than 10,000 bytes"):
        verify_bundle(bundle)


def test_unexpected_files_and_records_that_are_not_episodes_are_refused(bundle):
    (bundle / "run.py").write_text("print('hi')")
    with pytest.raises(BundleRefused, match="unexpected file 'run.py'"):
        verify_bundle(bundle)
    (bundle / "run.py").unlink()
    rewrite(bundle, [{"key": "x"}])
    with pytest.raises(BundleRefused, match="line 1 is not an episode record"):
        verify_bundle(bundle)


# ------------------------------------------------------------------------------ the board

@pytest.mark.slow
def test_the_shipped_boards_are_built_from_reference_bundles_that_verify(monkeypatch):
    """The seeded entries are real bundles: each verifies, and the committed board is what the
    build gives from them (a harness change that alters a transcript or a number shows here)."""
    pytest.importorskip("torch", reason="the miniature entries' hf: seats are re-asked (the [hf] extra)")
    monkeypatch.delenv("IBRL_BENCH_LEADERBOARDS", raising=False)
    monkeypatch.delenv("IBRL_BENCH_COUNTERPARTS", raising=False)
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    seeded = 0
    for track_id in ("dealnodeal/offline", "telesales/offline"):
        track = load_track(track_id)
        board = build_board(track)
        assert not board.rejected, board.rejected
        assert all(e.org == "ibrl-bench reference" for e in board.entries)
        assert all(not e.not_reasked for e in board.entries)  # every seat of every entry was asked again
        committed = (repo / "leaderboards" / track_id / "board.json").read_text()
        assert board.model_dump_json(indent=2) + "\n" == committed  # with the committed ledger's clock
        seeded += len(board.entries)
        if track_id == "dealnodeal/offline":
            # The pushover agrees most and ranks last: the board ranks points, not agreement.
            last = board.entries[-1]
            assert last.name == "scripted pushover" and last.rank == max(e.rank for e in board.entries)
            assert last.metrics["agreement"].overall.estimate == max(
                e.metrics["agreement"].overall.estimate for e in board.entries)
    assert seeded >= 8


def _entry(name: str, low: float, est: float, high: float) -> Entry:
    iv = Interval(estimate=est, low=low, high=high, method="test", confidence=0.95, n=10, n_clusters=10)
    return Entry(rank=None, name=name, org=None, policy=f"scripted:dealnodeal/{name}", model={}, estimate=iv,
                 per_counterpart={}, first_seen="2026-12-01T00:00:00+00:00",
                 submitted_at="2026-12-01T00:00:00+00:00", submissions=1, bundle=name)


def _board_frame(shifts: dict[str, float], scenarios: int = 30, seed: int = 7) -> pd.DataFrame:
    """Episodes of entries on the same games: a common per-game score plus each entry's shift and a
    little noise of its own, so marginal intervals overlap while paired differences are clear."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(2, 8, size=(scenarios, 2))  # scenario x counterpart
    rows = []
    for name, shift in shifts.items():
        noise = rng.normal(0, 0.2, size=base.shape)
        for s in range(scenarios):
            for c, cp in enumerate(("x", "y")):
                rows.append({"key": f"{name}-{s}-{cp}", "policy": name, "counterpart": cp, "policy_role": "a",
                             "scenario_id": f"s{s}", "seed": 0, "status": "ok", "agreement": True, "success": True,
                             "policy_score": base[s, c] + shift + noise[s, c], "counterpart_score": 5.0,
                             "policy_violated": False, "turns": 4, "attempts": 1})
    return pd.DataFrame(rows)


def test_board_ranks_come_from_paired_comparisons_on_the_same_games():
    # Fails if ranks came from overlapping marginal intervals (a and b would share rank 1), or if
    # two entries that play alike were split: b and c are equal up to noise, d far below.
    from ibrl_bench.leaderboard.board import board_ranks

    ranks = board_ranks(_board_frame({"a": 0.6, "b": 0.0, "c": 0.0, "d": -3.0}), "policy_score")
    assert ranks == {"a": (1, (1, 1)), "b": (2, (2, 3)), "c": (2, (2, 3)), "d": (4, (4, 4))}


def test_the_board_markdown_has_a_column_per_counterpart(bundle):
    track = load_track("dealnodeal/tiny")
    md = render_md(build_board(track), track)
    header = next(line for line in md.splitlines() if line.startswith("| rank"))
    assert "random" in header and "card:tough" in header and "mismatch" in header and "first seen" in header
    assert "policy score" in header and "agreement (%)" in header  # every metric, the ranked one first
    assert "### agreement (%) per counterpart" in md


# ------------------------------------------------------------------------------ tracks

def test_the_track_hash_covers_what_changes_a_number_and_not_the_prose(board_root):
    track = load_track("dealnodeal/tiny")
    assert track.model_copy(update={"description": "other words"}).hash == track.hash
    for change in ({"seeds": 2}, {"max_turns": 12}, {"roles": ["a"]}, {"metrics": ["policy_score"]},
                   {"min_episodes_per_cell": 2}, {"panel": track.panel[:1]}, {"version": 2}):
        assert track.model_copy(update=change).hash != track.hash, change


def test_a_malformed_track_is_one_clear_line(ibrl, board_root):
    path = board_root / "leaderboards" / "dealnodeal" / "tiny" / "track.yaml"
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "seeds": 0}))
    with pytest.raises(Exception, match=r"track.yaml: seeds: .*see leaderboards/README.md"):
        load_track("dealnodeal/tiny")
    path.write_text(yaml.safe_dump({**data, "min_episodes_per_cell": 99}))
    with pytest.raises(Exception, match="fewer episodes per cell than min_episodes_per_cell"):
        load_track("dealnodeal/tiny")
    proc = ibrl("submit", "--track", "dealnodeal/nope", "--policy", POLICY, "--name", "x", cwd=board_root)
    assert_one_line_error(proc, "unknown track 'dealnodeal/nope'", "dealnodeal/tiny")


# ------------------------------------------------------------------------------ bounded reading

MB = 2**20


def _set_episodes_bytes(bundle: Path, raw: bytes) -> None:
    """Episodes replaced by `raw` (already gzipped), with the checksum updated, as a forger would."""
    (bundle / files.EPISODES).write_bytes(raw)
    sub = json.loads((bundle / files.SUBMISSION).read_text())
    sub["files"]["episodes"]["sha256"] = files.sha256(bundle, files.EPISODES)
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))


def _gz_repeat(piece: bytes, times: int) -> bytes:
    """gzip of `piece` repeated, compressed as it streams (a bomb is built without holding it)."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(z.compress(piece) for _ in range(times)) + z.flush()


def _nested_submission(bundle: Path) -> None:
    (bundle / files.SUBMISSION).write_text("[" * 200_000 + "]" * 200_000)


def _nested_episode(bundle: Path) -> None:
    _set_episodes_bytes(bundle, gzip.compress(b"[" * 100_000 + b"]" * 100_000 + b"\n"))


def _newline_bomb(bundle: Path) -> None:
    _set_episodes_bytes(bundle, _gz_repeat(b"\n" * MB, 64))  # 64 MiB of newlines, 65 KB on disk


def _long_line_bomb(bundle: Path) -> None:
    _set_episodes_bytes(bundle, _gz_repeat(b"a" * MB, 64))  # one 64 MiB line


def _extra_records(bundle: Path) -> None:
    line = gzip.decompress((bundle / files.EPISODES).read_bytes()).split(b"\n")[0] + b"\n"
    _set_episodes_bytes(bundle, _gz_repeat(line, 50_000))  # copies of one valid record


def _fat_records(bundle: Path) -> None:
    # Lines under the line cap, and no more lines than planned, but far more bytes than 16 games take.
    _set_episodes_bytes(bundle, _gz_repeat(b" " * 900_000 + b"\n", 8))


def _big_readme(bundle: Path) -> None:
    (bundle / files.README).write_text("x" * 70 * 1024)


def _not_gzip(bundle: Path) -> None:
    _set_episodes_bytes(bundle, os.urandom(4096))


HOSTILE = [
    (_nested_submission, "submission.json nests JSON 200,000 levels deep"),
    (_nested_episode, "episodes.jsonl.gz line 1 nests JSON 100,000 levels deep"),
    (_newline_bomb, "holds more than 16 lines, the track's planned episodes"),
    (_long_line_bomb, "episodes.jsonl.gz line 1 is over 1,048,576 bytes"),
    (_extra_records, "holds more than 16 lines, the track's planned episodes"),
    (_fat_records, "inflates to more than 1,048,576 bytes"),
    (_big_readme, "README.md is 71,680 bytes, over the 65,536-byte cap"),
    (_not_gzip, "is not a valid gzip file"),
]


@pytest.mark.parametrize("attack, message", HOSTILE, ids=[a.__name__.strip("_") for a, _ in HOSTILE])
def test_a_hostile_bundle_stops_early_in_bounded_memory_with_one_line(bundle, attack, message):
    """Each is refused before the rest is read; tracemalloc's peak is what Python allocated while
    verifying (benchmarks/verify_hostile.py measures the process's peak RSS and time)."""
    import tracemalloc

    attack(bundle)
    tracemalloc.start()
    try:
        with pytest.raises(BundleRefused) as refused:
            verify_bundle(bundle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    reason = str(refused.value)
    assert message in reason and "\n" not in reason, reason
    assert peak < 300 * MB, f"{peak / MB:.0f} MB"


def test_hostile_bundles_beside_a_good_one_never_break_the_build(bundle, board_root):
    submissions = bundle.parent
    for attack, _ in HOSTILE:
        copy = submissions / f"z{attack.__name__}"
        shutil.copytree(bundle, copy)
        attack(copy)
    board = build_board(load_track("dealnodeal/tiny"))
    assert [e.bundle for e in board.entries] == [bundle.name]
    reasons = {r.bundle: r.reason for r in board.rejected}
    for attack, message in HOSTILE:
        assert message in reasons[f"z{attack.__name__}"]


# ------------------------------------------------------------------------------ ranking and clock

def test_a_pushover_cannot_top_a_board_ranked_on_points(bundle, board_root):
    """The pushover gives the whole pool away: it agrees more often than boulware and scores 0."""
    submit(board_root, name="Pushover", policy="scripted:dealnodeal/pushover")
    board = build_board(load_track("dealnodeal/tiny"))
    by_name = {e.name: e for e in board.entries}
    push, boulware = by_name["Pushover"], by_name["Boulware"]
    assert push.metrics["agreement"].overall.estimate > boulware.metrics["agreement"].overall.estimate
    assert push.estimate.estimate == 0 and boulware.estimate.estimate > 0
    assert [e.name for e in board.entries] == ["Boulware", "Pushover"] and push.rank > boulware.rank


def test_latest_comes_from_the_ledger_not_the_bundles_own_date(bundle, board_root, monkeypatch):
    import ibrl_bench.leaderboard.board as board_module

    sub = json.loads((bundle / files.SUBMISSION).read_text())
    sub["submitted_at"] = "2099-01-01T00:00:00+00:00"  # claims to be the newest forever
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))
    track = load_track("dealnodeal/tiny")
    monkeypatch.setattr(board_module, "now_iso", lambda: "2026-12-03T10:00:00+00:00")
    write_board(build_board(track), track)
    ledger = json.loads((board_root / "leaderboards" / "dealnodeal" / "tiny" / "ledger.json").read_text())
    assert [(e["bundle"], e["first_seen"]) for e in ledger["bundles"].values()] == \
        [(bundle.name, "2026-12-03T10:00:00+00:00")]
    later = submit(board_root, name="Boulware", policy="scripted:dealnodeal/boulware?beta=0.5")
    later = later.rename(later.with_name("a-later-bundle"))  # sorts before the first one by name
    monkeypatch.setattr(board_module, "now_iso", lambda: "2026-12-03T11:00:00+00:00")
    board = build_board(track)
    (entry,) = board.entries
    assert entry.bundle == later.name and entry.submissions == 2  # the one the board saw last
    assert entry.first_seen == "2026-12-03T11:00:00+00:00"


def test_a_column_that_is_the_same_for_every_entry_refuses_the_track(board_root):
    from ibrl_bench.leaderboard.board import constant_column

    track = load_track("dealnodeal/tiny")
    zero = Interval(estimate=0.0, low=0.0, high=0.0, method="test", confidence=0.95, n=8, n_clusters=4)
    a, b = _entry("a", 0.5, 0.6, 0.7), _entry("b", 0.1, 0.2, 0.3)
    a.per_counterpart = {"scripted:dealnodeal/random": a.estimate, "card:tough": zero}
    b.per_counterpart = {"scripted:dealnodeal/random": b.estimate, "card:tough": zero}
    assert "counterpart card:tough gives every entry the same policy_score" in constant_column(track, [a, b])
    b.per_counterpart["card:tough"] = b.estimate
    assert constant_column(track, [a, b]) is None
    assert constant_column(track, [a]) is None  # one entry tells nothing yet


# ------------------------------------------------------------------------------ local model seats

@pytest.mark.slow
def test_a_greedy_local_seat_is_re_asked_and_a_forged_one_refused(bundle, board_root, tiny_model):
    """A greedy hf: policy with a weights checksum verifies by asking the model again; its games
    swapped for a scripted agent's (keys, scores and checksums all redone) do not."""
    from ibrl_bench.leaderboard.submit import rescore

    policy = f"hf:{tiny_model}?max_new_tokens=16"
    honest = submit(board_root, name="Tiny", policy=policy)
    verdict = verify_bundle(honest)
    assert verdict.ok, verdict.problems
    assert verdict.seats[policy] == "re-asked" and verdict.submission.model["weights_sha256"]
    # Where the weights are not here, the seat cannot be asked again: marked, not failed.
    away = tiny_model.rename(tiny_model.with_name(tiny_model.name + "-away"))
    try:
        verdict = verify_bundle(honest)
    finally:
        away.rename(tiny_model)
    assert verdict.ok and verdict.seats[policy] == "not re-asked: the weights are not here"

    # The forger keeps the model's identity but plays boulware's games under its name.
    records = []
    for r in episodes(bundle):
        r["policy"], r["agents"][r["policy_role"]] = policy, policy
        r["key"] = episode_key(policy, r["counterpart"], r["policy_role"], r["scenario_id"], r["seed"])
        records.append(r)
    rewrite(honest, records)
    rescore(honest)
    found = problems(honest)
    assert all("the agent says" in p for p in found) and len(found) == len(records), found[:3]

    # Sampled decoding cannot be asked again: the seat is marked, not failed.
    from ibrl_bench.leaderboard.verify import seat_plan

    assert seat_plan(f"hf:{tiny_model}?temperature=0.7") == (False, "not re-asked: sampled decoding")
    assert seat_plan("openai:gpt-4.1-mini") == (False, "not re-asked: openai API model")


@pytest.mark.slow
def test_a_model_card_must_pass_the_fidelity_gate_before_a_track_pins_it(board_root, tiny_model, monkeypatch):
    from ibrl_bench.leaderboard import fidelity

    card = {"version": 1, "id": "babbler", "backend": "hf", "model": str(tiny_model), "revision": "random weights",
            "params": {"temperature": 0.0, "max_new_tokens": 16}, "domains": ["dealnodeal"]}
    (board_root / "counterparts" / "babbler.yaml").write_text("# a random tiny model\n" + yaml.safe_dump(card))
    before = load_card("babbler").hash
    with pytest.raises(UserError, match="card babbler has no fidelity measurement for dealnodeal"):
        fidelity.check_gate(load_card("babbler"), "dealnodeal")

    monkeypatch.setitem(fidelity.GATES, "dealnodeal", fidelity.GATES["dealnodeal"].model_copy(update={"scenarios": 3}))
    result = fidelity.measure(load_card("babbler"), "dealnodeal", board_root / "gate-run", concurrency=6)
    assert result.episodes == 6 and not result.passed and result.invalid > 0.2  # random weights cannot play
    fidelity.store(load_card("babbler"), "dealnodeal", result)
    stored = load_card("babbler")
    assert stored.fidelity["dealnodeal"]["invalid"] == result.invalid and stored.hash == before
    assert (board_root / "counterparts" / "babbler.yaml").read_text().startswith("# a random tiny model\n")
    with pytest.raises(UserError, match=r"card babbler fails the fidelity gate for dealnodeal \(agreement"):
        fidelity.check_gate(stored, "dealnodeal")
    # A track pinning it cannot be played, submitted to or verified.
    root = board_root / "leaderboards"
    path = root / "dealnodeal" / "tiny" / "track.yaml"
    data = yaml.safe_load(path.read_text())
    data["panel"].append({"spec": "card:babbler", "card_hash": before})
    data["prompt"] = current_pins(Track.model_validate(data))["prompt"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="card babbler fails the fidelity gate"):
        check_pins(load_track("dealnodeal/tiny"))


def test_a_bundle_scored_under_another_version_is_rejected_until_rescored(bundle, monkeypatch):
    import ibrl_bench.leaderboard.scoring as scoring
    import ibrl_bench.leaderboard.verify as verify
    from ibrl_bench.leaderboard.submit import rescore

    episodes_before = (bundle / files.EPISODES).read_bytes()
    monkeypatch.setattr(verify, "SCORING_VERSION", SCORING_VERSION + 1)
    monkeypatch.setattr(scoring, "SCORING_VERSION", SCORING_VERSION + 1)
    (only,) = problems(bundle)
    assert f"scored under scoring version {SCORING_VERSION}" in only and "leaderboard rescore" in only
    assert rescore(bundle).scoring == SCORING_VERSION + 1
    assert verify_bundle(bundle).ok and (bundle / files.EPISODES).read_bytes() == episodes_before


def test_the_gate_is_for_model_cards(ibrl, board_root):
    proc = ibrl("counterparts", "check", "tough", "--gate", cwd=board_root)
    assert_one_line_error(proc, "card tough is a scripted agent", "the fidelity gate is for model counterparts")
