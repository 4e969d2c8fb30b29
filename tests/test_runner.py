"""The cross-play runner and its run log: counts, errors, retries, resume, determinism."""

from __future__ import annotations

import asyncio
import json

import pytest

from ibrl_bench.errors import FatalAgentError, UserError
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig, RunAborted
from ibrl_bench.runner.store import RunStore, episode_row
from ibrl_bench.stats.matrix import episodes_table, summarize

BOULWARE = "scripted:dealnodeal/boulware"
CONCEDER = "scripted:dealnodeal/conceder"
HARDLINER = "scripted:dealnodeal/hardliner"


def run(tmp_path, name="run", **kw):
    kw.setdefault("policies", [BOULWARE])
    kw.setdefault("counterparts", [CONCEDER])
    kw.setdefault("scenarios", 6)
    config = CrossplayConfig(**kw)
    runner = Crossplay(config, tmp_path / name)
    progress = asyncio.run(runner.run())
    return runner, progress


def results_of(runner):
    return summarize(episodes_table(runner.store.episodes()), domain="dealnodeal", scenario_set={},
                     n_planned=runner.total())


def test_matrix_runs_every_planned_episode_once(tmp_path):
    runner, progress = run(tmp_path, policies=[BOULWARE, HARDLINER], counterparts=[CONCEDER, BOULWARE],
                           scenarios=5, seeds=2)
    records = runner.store.records()
    assert progress.total == runner.total() == 2 * 2 * 2 * 5 * 2 == len(records)
    assert len({r.key for r in records}) == len(records)
    cells = {(r.policy, r.counterpart, r.policy_role) for r in records}
    assert len(cells) == 8
    for r in records:
        assert r.agents[r.policy_role] == r.policy
        assert r.outcome.status in ("ok", "max_turns")
        assert r.transcript and r.scenario_hash
    res = results_of(runner)
    assert len(res.cells) == 8 and res.complete
    assert all(c.n_episodes == 10 and c.metrics["agreement"].n == 10 for c in res.cells)


def test_retried_infrastructure_errors_do_not_change_the_outcome(tmp_path):
    clean, _ = run(tmp_path, "clean", counterparts=[CONCEDER])
    flaky, _ = run(tmp_path, "flaky", counterparts=["python:plugins:Flaky?fail=2&tag=retry"], retries=2)
    by_game = lambda rs: sorted(rs, key=lambda r: (r.policy_role, r.scenario_id, r.seed))  # noqa: E731
    for a, b in zip(by_game(clean.store.records()), by_game(flaky.store.records()), strict=True):
        assert b.attempts == 3 and len(b.errors) == 2 and "ConnectionError" in b.errors[0]
        assert b.outcome == a.outcome
        assert [t.text for t in b.transcript] == [t.text for t in a.transcript]


def test_error_episodes_are_recorded_but_never_scored_as_losses(tmp_path):
    runner, progress = run(tmp_path, counterparts=[CONCEDER, "python:plugins:Broken"], retries=1,
                           fail_on_error=1.0)
    assert progress.errors == 12 and progress.done == 12
    res = results_of(runner)
    broken = [c for c in res.cells if c.counterpart == "python:plugins:Broken"]
    fine = [c for c in res.cells if c.counterpart == CONCEDER]
    for cell in broken:
        assert cell.n_errors == 6 and cell.n_scored == 0
        assert cell.metrics["agreement"].estimate is None, "an error must not count as a failed negotiation"
        assert cell.metrics["policy_score"].estimate is None
    for cell in fine:
        assert cell.n_errors == 0 and cell.metrics["agreement"].estimate is not None
    errors = [r for r in runner.store.records() if r.outcome.status == "error"]
    assert all(r.attempts == 2 and "endpoint down" in r.outcome.detail for r in errors)
    assert not res.complete


def test_a_hanging_agent_times_out_into_an_error_episode(tmp_path):
    runner, progress = run(tmp_path, counterparts=["python:plugins:Hang"], scenarios=2, retries=0,
                           move_timeout=0.05, fail_on_error=1.0)
    records = runner.store.records()
    assert progress.errors == 4
    assert all(r.outcome.status == "error" and "TimeoutError" in r.errors[0] for r in records)


def test_broken_infrastructure_stops_the_run_with_a_clear_message(tmp_path):
    with pytest.raises(RunAborted, match=r"infrastructure errors.*rerun the same command"):
        run(tmp_path, counterparts=["python:plugins:Broken"], scenarios=20, retries=0, concurrency=2)
    records = RunStore(tmp_path / "run").records()
    assert 10 <= len(records) < 40, "stopped early, and what ran is kept"


def test_a_fatal_agent_error_stops_the_run_at_once(tmp_path):
    with pytest.raises(FatalAgentError, match="rejected the key"):
        run(tmp_path, counterparts=["python:plugins:BadKey"], scenarios=20, concurrency=1)
    assert RunStore(tmp_path / "run").records() == []


def test_rerun_of_a_finished_run_plays_nothing(tmp_path):
    runner, _ = run(tmp_path)
    before = runner.store.episodes_path.read_bytes()
    again, progress = run(tmp_path)
    assert progress.resumed == progress.total == 12
    assert again.store.episodes_path.read_bytes() == before


def test_resume_retries_only_error_episodes(tmp_path):
    spec = "python:plugins:Flaky?fail=1&tag=resume"
    first, p1 = run(tmp_path, counterparts=[spec], retries=0, fail_on_error=1.0)
    assert p1.errors == 12
    second, p2 = run(tmp_path, counterparts=[spec], retries=0, fail_on_error=1.0)
    assert p2.resumed == 0 and p2.errors == 0 and p2.done == 12
    records = second.store.records()
    assert len(records) == 24  # append-only: 12 error records, then 12 successes
    latest = second.store.latest()
    assert len(latest) == 12 and all(r.outcome.status != "error" for r in latest.values())


def test_a_folder_with_another_configuration_is_refused(tmp_path):
    run(tmp_path)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    with pytest.raises(UserError, match=r"different configuration \(n_scenarios: 6 there, 7 now.*can only gain"):
        run(tmp_path, scenarios=7)
    with pytest.raises(UserError, match=r"different configuration \(seeds: \[0\] there, \[0, 1\] now"):
        run(tmp_path, seeds=2, policies=[HARDLINER])
    with pytest.raises(UserError, match=r"different configuration \(max_turns"):
        run(tmp_path, max_turns=4)
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before  # refused: nothing written
    # Settings that do not change the episodes do not block a resume.
    run(tmp_path, concurrency=3, retries=5)


def test_a_run_grows_by_policies_counterparts_and_roles_and_keeps_every_finished_episode(tmp_path):
    first, _ = run(tmp_path, roles=["a"])
    log = first.store.episodes_path
    played = log.read_bytes()
    grown, progress = run(tmp_path, policies=[HARDLINER], counterparts=[CONCEDER, BOULWARE], roles=["b"])
    # The matrix is the union, old seats first: 2 policies x 2 counterparts x 2 roles x 6 scenarios.
    identity = grown.manifest().identity
    assert identity["policies"] == [BOULWARE, HARDLINER] and identity["counterparts"] == [CONCEDER, BOULWARE]
    assert identity["roles"] == ["a", "b"]
    assert (progress.total, progress.resumed, progress.done) == (48, 6, 48)
    assert log.read_bytes()[: len(played)] == played  # the episodes of the first run, byte for byte
    records = grown.store.records()
    assert len(records) == 48 == len({r.key for r in records})  # none played twice
    manifest = grown.store.read_manifest()
    assert manifest.created_at == first.store.read_manifest().created_at
    assert manifest.extended[-1]["added"] == {"policies": [HARDLINER], "counterparts": [BOULWARE], "roles": ["b"]}
    # Each episode is the one a single run of the whole matrix plays: same keys, same games.
    whole, _ = run(tmp_path, "whole", policies=[BOULWARE, HARDLINER], counterparts=[CONCEDER, BOULWARE])
    strip = lambda rs: sorted(json.dumps(r.model_dump(exclude={"finished_at", "duration_s"}), sort_keys=True)  # noqa: E731
                              for r in rs)
    assert strip(records) == strip(whole.store.records())
    # A command naming only some of the seats resumes the whole matrix: here, nothing is left.
    _, again = run(tmp_path, policies=[BOULWARE])
    assert again.resumed == again.done == 48


def test_a_growth_that_plays_nothing_leaves_the_manifest_as_it_was(tmp_path):
    first, _ = run(tmp_path)
    manifest = first.store.manifest_path.read_bytes()
    with pytest.raises(FatalAgentError):
        run(tmp_path, policies=["python:plugins:BadKey"])
    assert first.store.manifest_path.read_bytes() == manifest


def test_a_torn_last_line_is_dropped_and_that_episode_runs_again(tmp_path):
    runner, _ = run(tmp_path)
    path = runner.store.episodes_path
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    again, progress = run(tmp_path)
    assert progress.resumed == 11 and progress.done == 12
    new = path.read_bytes().splitlines(keepends=True)
    assert new[:11] == lines[:11] and len(new) == 12
    assert json.loads(new[-1])["key"] == json.loads(lines[-1])["key"]


def test_a_corrupt_line_in_the_middle_is_a_clear_error(tmp_path):
    runner, _ = run(tmp_path)
    path = runner.store.episodes_path
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = b'{"not": "a record"}\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(UserError, match=r"episodes.jsonl:4 is not a valid episode record"):
        run(tmp_path)


def test_scripted_runs_are_deterministic(tmp_path):
    a, _ = run(tmp_path, "a", counterparts=["scripted:dealnodeal/random"], concurrency=1, seeds=2)
    b, _ = run(tmp_path, "b", counterparts=["scripted:dealnodeal/random"], concurrency=8, seeds=2)
    dump = lambda rs: sorted(  # noqa: E731
        json.dumps(r.model_dump(exclude={"finished_at", "duration_s"}), sort_keys=True) for r in rs
    )
    assert dump(a.store.records()) == dump(b.store.records())


def test_bad_configuration_is_refused_before_the_disk_is_touched(tmp_path):
    with pytest.raises(UserError, match="unknown role"):
        Crossplay(CrossplayConfig(policies=[BOULWARE], counterparts=[CONCEDER], roles=["seller"]), tmp_path / "x")
    with pytest.raises(UserError, match="malformed agent spec"):
        Crossplay(CrossplayConfig(policies=["boulware"], counterparts=[CONCEDER]), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_agents_see_only_their_own_private_information(tmp_path):
    from plugins import Spy

    Spy.seen.clear()
    runner, _ = run(tmp_path, policies=["python:plugins:Spy"], counterparts=[HARDLINER], scenarios=10)
    scenarios = {s.id: s for s in runner.scenario_set.scenarios}
    assert len(Spy.seen) > 40
    for obs in Spy.seen:
        values = scenarios[obs.scenario_id].data["values"]
        assert obs.private["values"] == values[obs.role]
        assert set(obs.private) == {"items", "counts", "values"}
        assert all("<split" not in m.text.lower() for m in obs.dialogue), "a private split leaked"
    assert {o.phase for o in Spy.seen} == {"talk", "select"}


def test_a_move_that_hangs_in_the_simultaneous_phase_is_an_error_not_a_leak(tmp_path):
    runner, progress = run(tmp_path, counterparts=["python:plugins:HangInSelect"], scenarios=2, retries=0,
                           move_timeout=0.2, fail_on_error=1.0)
    assert progress.errors == 4
    assert all("TimeoutError" in r.errors[0] for r in runner.store.records())


def test_the_episode_rows_lead_back_to_the_newest_records(tmp_path):
    runner, _ = run(tmp_path)
    path = runner.store.episodes_path
    lines = path.read_bytes().splitlines(keepends=True)
    changed = json.loads(lines[2])
    changed["transcript"][0]["text"] = "a newer record of the same episode"
    changed["outcome"]["turns"] = 99
    path.write_bytes(b"".join(lines) + (json.dumps(changed) + "\n").encode())
    rows = runner.store.episodes()
    latest = runner.store.latest()
    assert [row["key"] for row in rows] == list(latest)  # keys in first-written order, the newest record of each
    records = runner.store.read_at([row["at"] for row in rows])
    assert records == list(latest.values())
    assert records[2].transcript[0].text == "a newer record of the same episode"
    assert rows[2]["turns"] == 99
    for row, record in zip(rows, records, strict=True):
        assert {**row, "at": None} == {**episode_row(record), "at": None}


def test_the_summaries_sidecar_is_used_only_where_the_log_confirms_it(tmp_path):
    runner, _ = run(tmp_path, counterparts=[CONCEDER, HARDLINER])
    store = runner.store
    sidecar = store.summaries_path.read_bytes()
    fresh = [{**row, "at": None} for row in store.episodes()]
    assert len(sidecar.splitlines()) == len(fresh) == 24

    # An edit that keeps every line's length: only the CRC can tell the sidecar is stale.
    log = store.episodes_path.read_bytes()
    first = json.loads(log.splitlines()[0])
    before = first["outcome"]["rewards"][first["policy_role"]]
    after = before + 1 if len(repr(before + 1)) == len(repr(before)) else before - 1
    role = first["policy_role"].encode()
    edited = log.replace(b'"%s":%r' % (role, before), b'"%s":%r' % (role, after), 1)
    assert len(edited) == len(log) and edited != log
    store.episodes_path.write_bytes(edited)
    assert store.episodes()[0]["policy_score"] != before  # read from the log, not the stale sidecar
    store.episodes_path.write_bytes(log)

    # A torn last entry, a sidecar cut in the middle, an unreadable entry: the same rows, the rest from the log.
    for broken in (sidecar[:-5], sidecar[: len(sidecar) // 2], sidecar.replace(b'{"key"', b'{"kex"', 1), b"junk\n"):
        store.summaries_path.write_bytes(broken)
        assert [{**row, "at": None} for row in store.episodes()] == fresh
    # The writer repairs it when it opens the run (a resume), byte for byte what the run wrote.
    store.open(store.read_manifest())
    store.close()
    assert store.summaries_path.read_bytes() == sidecar
