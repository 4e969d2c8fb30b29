"""Leaderboards: a bundle round trip on a small offline track, tampering caught, hostile bundles
refused safely, and the board's rank rule."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from pathlib import Path

import pytest
import yaml

from ibrl_bench.agents.cards import load_card
from ibrl_bench.domains import get_domain
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.board import Entry, build_board, rank_entries, render_md, write_board
from ibrl_bench.leaderboard.files import BundleRefused
from ibrl_bench.leaderboard.submit import default_run_folder, make_bundle, suite_config
from ibrl_bench.leaderboard.track import Track, check_pins, current_pins, load_track
from ibrl_bench.leaderboard.verify import verify_bundle
from ibrl_bench.runner.crossplay import Crossplay, episode_key
from ibrl_bench.runner.store import RunStore
from ibrl_bench.stats.intervals import Interval
from test_cli import assert_one_line_error, ibrl

POLICY = "scripted:dealnodeal/boulware"
CARD = {"version": 1, "id": "tough", "description": "the hardliner, as a pinned card", "backend": "scripted",
        "model": "dealnodeal/hardliner", "domains": ["dealnodeal"]}


def write_track(root: Path, version: int = 1, n: int = 4) -> Track:
    """A small offline track: a scripted counterpart and a card (of a scripted agent), 4 scenarios."""
    draft = Track(version=version, domain="dealnodeal", name="tiny", kind="offline", split="test",
                  scenarios={"version": "-", "n": n, "hash": "-"},
                  panel=[{"spec": "scripted:dealnodeal/random"}, {"spec": "card:tough"}],
                  roles=["a", "b"], max_turns=10, metrics=["success_at_1", "policy_score"], min_episodes_per_cell=n)
    pins = current_pins(draft)
    track = draft.model_copy(update={
        "scenarios": draft.scenarios.model_copy(update=pins["scenarios"]),
        "panel": [m.model_copy(update={"card_hash": pins["cards"][m.spec]}) for m in draft.panel],
        "prompt": pins["prompt"],
    })
    folder = root / "dealnodeal" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "track.yaml").write_text(yaml.safe_dump(track.model_dump(mode="json")))
    return track


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A leaderboards root with the tiny track, and a counterparts folder with its card."""
    root, cards = tmp_path / "leaderboards", tmp_path / "counterparts"
    cards.mkdir()
    (cards / "tough.yaml").write_text(yaml.safe_dump(CARD))
    monkeypatch.setenv("IBRL_BENCH_COUNTERPARTS", str(cards))
    monkeypatch.setenv("IBRL_BENCH_LEADERBOARDS", str(root))
    write_track(root)
    return tmp_path


def submit(tmp: Path, name: str = "Boulware", policy: str = POLICY, train: str | None = None) -> Path:
    """What `ibrl-bench submit` does, in process: the track's suite, then the bundle."""
    track = load_track("dealnodeal/tiny")
    check_pins(track)
    config = suite_config(track, policy, train, concurrency=8)
    n = len(list(tmp.glob("run-*")))
    out = tmp / f"run-{n}"
    asyncio.run(Crossplay(config, out).run())
    bundle = tmp / "leaderboards" / "dealnodeal" / "tiny" / "submissions" / f"{name.lower()}-{n}"
    make_bundle(track, RunStore(out), bundle, policy=policy, name=name, org="tests", train_counterpart=train)
    return bundle


@pytest.fixture
def bundle(env) -> Path:
    return submit(env)


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

def test_a_submitted_bundle_verifies_and_reaches_the_board(bundle, env):
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.problems
    assert verdict.n_episodes == 2 * 2 * 4  # counterparts x roles x scenarios
    sub = verdict.submission
    assert sub.track.id == "dealnodeal/tiny" and sub.model["kind"] == "scripted"
    assert sub.counts.cells == 4 and sub.earlier_submissions == 0
    assert set(sub.scores.metrics) == {"success_at_1", "policy_score"}
    assert "one attempt per scenario" in (bundle / files.README).read_text()
    # Every episode records the hash of the card it faced.
    tough = load_card("tough").hash
    assert {e["cards"].get("b" if e["policy_role"] == "a" else "a") for e in episodes(bundle)} == {tough, None}

    track = load_track("dealnodeal/tiny")
    board = build_board(track)
    assert [e.name for e in board.entries] == ["Boulware"] and not board.rejected
    (entry,) = board.entries
    assert entry.rank == 1 and entry.submissions == 1
    assert entry.estimate == sub.scores.metrics["success_at_1"].overall
    assert set(entry.per_counterpart) == {"scripted:dealnodeal/random", "card:tough"}
    md, js = write_board(board, track)
    assert json.loads(js.read_text())["entries"][0]["name"] == "Boulware"
    assert "| 1 | Boulware (tests) |" in md.read_text()
    # The build is reproducible: the same bundles give the same board, byte for byte.
    before = js.read_bytes()
    write_board(build_board(track), track)
    assert js.read_bytes() == before


def test_the_second_submission_under_a_name_is_counted_and_replaces_the_first(bundle, env):
    second = submit(env, name="Boulware", policy="scripted:dealnodeal/boulware?beta=0.5")
    assert verify_bundle(second).submission.earlier_submissions == 1
    board = build_board(load_track("dealnodeal/tiny"))
    (entry,) = board.entries  # one row per name: the latest bundle, not the best
    assert entry.policy == "scripted:dealnodeal/boulware?beta=0.5" and entry.submissions == 2


def test_a_declared_training_counterpart_gives_the_mismatch_column(env):
    bundle = submit(env, name="Trained", train="scripted:dealnodeal/conceder")
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.problems
    gap = verdict.submission.scores.mismatch
    assert gap is not None and gap.estimate is not None
    (entry,) = build_board(load_track("dealnodeal/tiny")).entries
    assert entry.mismatch == gap and entry.train_counterpart == "scripted:dealnodeal/conceder"
    # The training counterpart is not part of the held-out estimate.
    assert "scripted:dealnodeal/conceder" not in entry.per_counterpart


@pytest.mark.slow
def test_submit_defaults_keep_tracks_apart_and_pass_the_move_timeout(env):
    # Track `tiny` + name "x y" and a track `tiny-x` + name "y" must not share a run folder.
    track = load_track("dealnodeal/tiny")
    other = track.model_copy(update={"name": "tiny-x"})
    assert default_run_folder(track, "x y") != default_run_folder(other, "y")
    proc = ibrl("submit", "--track", "dealnodeal/tiny", "--policy", POLICY, "--name", "Boulware CLI",
                "--move-timeout", "7.5", "--bundle", "bundle", "--quiet", cwd=env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((env / default_run_folder(track, "Boulware CLI") / "manifest.json").read_text())
    assert manifest["config"]["move_timeout"] == 7.5


@pytest.mark.slow
def test_submit_verify_build_show_on_the_command_line(env):
    bundle = env / "bundle"
    # A relative bundle path, as `submit` makes by default.
    proc = ibrl("submit", "--track", "dealnodeal/tiny", "--policy", POLICY, "--name", "Boulware CLI",
                "--out", str(env / "run"), "--bundle", "bundle", "--quiet", cwd=env)
    assert proc.returncode == 0, proc.stderr
    assert "bundle: bundle (16 episodes" in proc.stdout
    again = ibrl("submit", "--track", "dealnodeal/tiny", "--policy", POLICY, "--name", "Boulware CLI",
                 "--out", str(env / "run"), "--bundle", str(bundle), "--quiet", cwd=env)
    assert_one_line_error(again, "is not empty")  # a bundle is never overwritten
    proc = ibrl("leaderboard", "verify", str(bundle), cwd=env)
    assert proc.returncode == 0, proc.stderr
    assert "16 episodes replayed on dealnodeal/tiny" in proc.stdout
    submissions = env / "leaderboards" / "dealnodeal" / "tiny" / "submissions"
    submissions.mkdir()
    bundle.rename(submissions / "boulware-cli")
    proc = ibrl("leaderboard", "build", cwd=env)
    assert proc.returncode == 0, proc.stderr
    assert "1 entries, 0 bundles rejected" in proc.stdout
    proc = ibrl("leaderboard", "show", "--track", "dealnodeal/tiny", cwd=env)
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
    rewrite(bundle, records + [records[0]])
    assert any("one attempt per scenario and seed" in p for p in problems(bundle))


def test_a_changed_counterpart_card_is_caught(bundle):
    records = episodes(bundle)
    target = next(r for r in records if r["cards"])
    role = next(iter(target["cards"]))
    target["cards"][role] = "0123456789abcdef"
    rewrite(bundle, records)
    found = problems(bundle)
    assert any(target["key"] in p and "card hashes" in p and "0123456789abcdef" in p for p in found), found


def test_a_counterpart_swapped_behind_its_card_is_caught(env, bundle):
    """Episodes played against another counterpart (the random one), relabelled as the pinned card:
    every hash and key is right, but the card's agent does not say what the transcript says."""
    easy = submit(env, name="Easy-run", policy=POLICY)
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


def test_a_bundle_from_an_older_track_version_is_caught(bundle, env):
    write_track(env / "leaderboards", version=2)
    (only,) = problems(bundle)
    assert "version 1" in only and "now version 2" in only


def test_a_restated_metric_is_caught(bundle):
    sub = json.loads((bundle / files.SUBMISSION).read_text())
    overall = sub["scores"]["metrics"]["success_at_1"]["overall"]
    overall["estimate"] = min(1.0, overall["estimate"] + 0.1)
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))
    found = problems(bundle)
    assert any(p.startswith("metric success_at_1 overall: submission.json states") for p in found), found


def test_a_bundle_scored_with_another_recipe_is_refused_until_rescored(bundle):
    from ibrl_bench.leaderboard.bundle import rescore_bundle
    from ibrl_bench.leaderboard.scoring import SCORING

    sub = json.loads((bundle / files.SUBMISSION).read_text())
    assert sub["scores"]["scoring"] == SCORING
    del sub["scores"]["scoring"]  # a bundle from before scoring versions: version 1
    (bundle / files.SUBMISSION).write_text(json.dumps(sub))
    found = problems(bundle)
    assert any("scoring version 1" in p and "rescore_bundles.py" in p for p in found), found
    rescore_bundle(bundle)
    assert verify_bundle(bundle).ok


def test_a_track_whose_card_changed_cannot_be_played(env):
    (env / "counterparts" / "tough.yaml").write_text(yaml.safe_dump({**CARD, "description": "softer now"}))
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
def test_a_hostile_bundle_is_refused_in_one_line_and_nothing_is_written(bundle, env, attack, message):
    attack(bundle)
    before = tree(env)
    proc = ibrl("leaderboard", "verify", str(bundle), cwd=env)
    assert_one_line_error(proc, "refused", message)
    assert tree(env) == before
    # The board builder lists it as rejected and writes only the board files.
    track = load_track("dealnodeal/tiny")
    board = build_board(track)
    assert board.entries == [] and message in board.rejected[0].reason
    assert str(env) not in board.rejected[0].reason  # no absolute path of the machine that built it
    write_board(board, track)
    assert set(tree(env)) - set(before) == {"leaderboards/dealnodeal/tiny/board.json",
                                           "leaderboards/dealnodeal/tiny/board.md"}


def test_a_hard_link_is_refused(bundle, env):
    outside = env / "elsewhere.md"
    outside.write_text("not part of the bundle")
    (bundle / files.README).unlink()
    os.link(outside, bundle / files.README)
    with pytest.raises(BundleRefused, match="README.md is a hard link"):
        verify_bundle(bundle)


def test_a_training_counterpart_from_the_panel_is_refused(env):
    with pytest.raises(Exception, match="is in the track's held-out panel"):
        suite_config(load_track("dealnodeal/tiny"), POLICY, "card:tough", concurrency=1)


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
    monkeypatch.delenv("IBRL_BENCH_LEADERBOARDS", raising=False)
    monkeypatch.delenv("IBRL_BENCH_COUNTERPARTS", raising=False)
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    seeded = 0
    for track_id in ("dealnodeal/offline", "dealnodeal/offline-scripted", "telesales/offline"):
        track = load_track(track_id)
        board = build_board(track)
        assert not board.rejected, board.rejected
        assert all(e.org == "ibrl-bench reference" for e in board.entries)
        committed = (repo / "leaderboards" / track_id / "board.json").read_text()
        assert board.model_dump_json(indent=2) + "\n" == committed
        seeded += len(board.entries)
    assert seeded >= 10


def _entry(name: str, low: float, est: float, high: float) -> Entry:
    iv = Interval(estimate=est, low=low, high=high, method="test", confidence=0.95, n=10, n_clusters=10)
    return Entry(rank=None, name=name, org=None, policy=f"scripted:dealnodeal/{name}", model={}, estimate=iv,
                 per_counterpart={}, submitted_at="2026-12-01T00:00:00+00:00", submissions=1, bundle=name)


def test_ranks_follow_the_rule_on_a_constructed_board():
    # A [.80,.90]  B [.70,.85]  D [.55,.75]  C [.50,.60]
    ranked = rank_entries([_entry("c", 0.50, 0.55, 0.60), _entry("a", 0.80, 0.85, 0.90),
                           _entry("d", 0.55, 0.65, 0.75), _entry("b", 0.70, 0.78, 0.85)])
    assert [(e.name, e.rank) for e in ranked] == [("a", 1), ("b", 1), ("d", 2), ("c", 3)]


def test_the_board_markdown_has_a_column_per_counterpart(bundle):
    track = load_track("dealnodeal/tiny")
    md = render_md(build_board(track), track)
    header = next(line for line in md.splitlines() if line.startswith("| rank"))
    assert "random" in header and "card:tough" in header and "mismatch" in header and "submitted" in header


# ------------------------------------------------------------------------------ tracks

def test_the_track_hash_covers_what_changes_a_number_and_not_the_prose(env):
    track = load_track("dealnodeal/tiny")
    assert track.model_copy(update={"description": "other words"}).hash == track.hash
    for change in ({"seeds": 2}, {"max_turns": 12}, {"roles": ["a"]}, {"metrics": ["policy_score"]},
                   {"min_episodes_per_cell": 2}, {"panel": track.panel[:1]}, {"version": 2}):
        assert track.model_copy(update=change).hash != track.hash, change


def test_a_malformed_track_is_one_clear_line(env):
    path = env / "leaderboards" / "dealnodeal" / "tiny" / "track.yaml"
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "seeds": 0}))
    with pytest.raises(Exception, match=r"track.yaml: seeds: .*see leaderboards/README.md"):
        load_track("dealnodeal/tiny")
    path.write_text(yaml.safe_dump({**data, "min_episodes_per_cell": 99}))
    with pytest.raises(Exception, match="fewer episodes per cell than min_episodes_per_cell"):
        load_track("dealnodeal/tiny")
    proc = ibrl("submit", "--track", "dealnodeal/nope", "--policy", POLICY, "--name", "x", cwd=env)
    assert_one_line_error(proc, "unknown track 'dealnodeal/nope'", "dealnodeal/tiny")
