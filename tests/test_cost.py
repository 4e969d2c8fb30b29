"""The response cache, the budget and the dry-run estimate, against the fake endpoint on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

pytest.importorskip("openai")
pytest.importorskip("fastapi")

from ibrl_bench.agents.spec import build_agent
from ibrl_bench.domains import get_domain
from ibrl_bench.errors import UserError
from ibrl_bench.runner.cache import Cached, ResponseCache, request_key, seat_identity
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig, RunAborted
from ibrl_bench.runner.store import episode_row
from ibrl_bench.stats.matrix import episodes_table, summarize
from ibrl_bench.testing.fake_openai import make_app, serve

RANDOM = "scripted:dealnodeal/random"  # behind the endpoint: its moves depend on the draw
CONCEDER = "scripted:dealnodeal/conceder"
# $1000 / $2000 per million tokens: a call of a few hundred words costs about half a dollar.
PAID = "timeout=5&backoff=0.01&max_backoff=0.05&price_in=1000&price_out=2000"


def remote(url: str, inner: str = RANDOM, extra: str = "") -> str:
    return f"openai:{inner}@{url}?key_env=none&observation=true&{PAID}{extra}"


def play(folder, policy: str, cache_dir, **kw) -> Crossplay:
    kw.setdefault("counterparts", [CONCEDER])
    kw.setdefault("scenarios", 4)
    runner = Crossplay(CrossplayConfig(policies=[policy], cache_dir=str(cache_dir), **kw), folder)
    asyncio.run(runner.run())
    return runner


def policy_usage(runner: Crossplay):
    return [r.usage[r.policy_role] for r in runner.store.records()]


def test_a_rerun_against_the_cache_makes_no_request_costs_nothing_and_counts_its_hits(tmp_path):
    app = make_app()
    with serve(app) as url:
        first = play(tmp_path / "first", remote(url), tmp_path / "cache", seeds=2)
        paid = app.state.requests
        second = play(tmp_path / "second", remote(url), tmp_path / "cache", seeds=2)
        assert app.state.requests == paid > 0  # not one request the second time
        third = play(tmp_path / "third", remote(url), tmp_path / "cache", seeds=2, cache=False)
    assert app.state.requests == 2 * paid  # --no-cache pays again, for every move
    a, b = ({r.key: r for r in run.store.records()} for run in (first, second))
    assert a.keys() == b.keys() and len(a) == 16
    for key, rec in a.items():  # sampled moves replayed: the same games, move for move
        assert [t.text for t in b[key].transcript] == [t.text for t in rec.transcript]
    moves = sum(1 for r in a.values() for t in r.transcript if t.role == r.policy_role)
    before, after = policy_usage(first), policy_usage(second)
    assert sum(u.calls for u in before) == paid == moves and sum(u.cache_hits for u in before) == 0
    assert sum(u.cost_usd for u in before) > 0
    assert sum(u.calls for u in after) == 0 and sum(u.cost_usd for u in after) == 0
    assert sum(u.prompt_tokens + u.completion_tokens for u in after) == 0
    assert sum(u.cache_hits for u in after) == moves
    assert sum(u.cached_tokens for u in after) == sum(u.prompt_tokens + u.completion_tokens for u in before)
    assert sum(u.saved_usd for u in after) == pytest.approx(sum(u.cost_usd for u in before))
    assert sum(u.calls for u in policy_usage(third)) == moves
    # Per cell, as results.json and cells.csv report it.
    cells = summarize(episodes_table([episode_row(r) for r in b.values()]), domain="dealnodeal", scenario_set={},
                      n_planned=16).cells
    assert sum(c.usage["policy"].cache_hits for c in cells) == moves
    assert all(c.usage["policy"].cost_usd == 0 and c.usage["policy"].calls == 0 for c in cells)


def test_without_cache_the_replies_go_to_the_one_cache_folder(tmp_path, monkeypatch):
    """$IBRL_BENCH_CACHE, else $XDG_CACHE_HOME/ibrl-bench: the folder GGUF conversions use too."""
    from ibrl_bench.cache_home import cache_home

    def play_one(folder):
        asyncio.run(Crossplay(CrossplayConfig(policies=[remote(url)], counterparts=[CONCEDER], scenarios=1),
                              folder).run())

    with serve(make_app()) as url:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        play_one(tmp_path / "a")
        assert (tmp_path / "xdg" / "ibrl-bench" / "responses.sqlite").is_file()
        monkeypatch.setenv("IBRL_BENCH_CACHE", str(tmp_path / "mine"))
        play_one(tmp_path / "b")
    assert (tmp_path / "mine" / "responses.sqlite").is_file() and cache_home() == tmp_path / "mine"


def test_a_reply_paid_twice_at_once_is_the_first_writers_in_both_processes(tmp_path):
    first, second = ResponseCache(tmp_path), ResponseCache(tmp_path)  # two processes' connections
    assert first.put("k", Cached("first", 1, 2, 0.5), "m") == Cached("first", 1, 2, 0.5)
    assert second.put("k", Cached("second", 3, 4, 0.7), "m") == Cached("first", 1, 2, 0.5)
    assert second.get("k") == first.get("k") == Cached("first", 1, 2, 0.5)
    first.close()
    second.close()


def test_the_key_follows_snapshot_sampling_and_prompt_version_not_transport(tmp_path, monkeypatch):
    game = get_domain("dealnodeal")
    messages = game.chat_messages(game.observe(game.start(game.scenario_set("test", 1).scenarios[0], 0), "a"))
    url = "http://127.0.0.1:9/v1?key_env=none"

    def key(spec: str, sample: int | None = 1) -> str:
        return request_key(seat_identity(build_agent(spec, "dealnodeal"), game), messages, sample)

    base = key(f"openai:some-model@{url}&temperature=0.7")
    assert key(f"openai:some-model@{url}") == base  # the default spelled out or not: one identity
    assert key("openai:some-model@http://127.0.0.2:8/v1?key_env=none&timeout=9&concurrency=3") == base
    assert key(f"openai:some-model@{url}&temperature=0.8") != base
    assert key(f"openai:some-model@{url}&top_p=0.9") != base
    assert key(f"openai:some-model@{url}&max_tokens=100") != base
    assert key(f"openai:other-model@{url}") != base
    assert key(f"openai:some-model@{url}", sample=2) != base  # another draw of the same request

    # The snapshot a card pins.
    cards = tmp_path / "counterparts"
    cards.mkdir()
    monkeypatch.setenv("IBRL_BENCH_COUNTERPARTS", str(cards))
    for name, revision in (("snap-a", "2025-01-01"), ("snap-b", "2025-02-01")):
        (cards / f"{name}.yaml").write_text(
            f"version: 1\nid: {name}\nbackend: openai\nmodel: m\nrevision: '{revision}'\n"
            "base_url: http://127.0.0.1:9/v1\ndomains: [dealnodeal]\n")
    assert key("card:snap-a") != key("card:snap-b")

    # The prompt version (a reworded prompt is a new version, even with the same words here).
    prompt = game.role_prompt()
    monkeypatch.setitem(game.prompts, prompt.name, dataclasses.replace(prompt, version=prompt.version + "-next"))
    assert key(f"openai:some-model@{url}") != base


def test_the_budget_stops_before_spending_more_and_the_run_resumes(tmp_path):
    app = make_app()
    with serve(app) as url:
        spec = remote(url, extra="&max_tokens=64")
        first = Crossplay(CrossplayConfig(policies=[spec], counterparts=[CONCEDER], scenarios=6,
                                          cache_dir=str(tmp_path / "cache"), budget_usd=3.0, concurrency=1),
                          tmp_path / "run")
        with pytest.raises(RunAborted) as stop:
            asyncio.run(first.run())
        spent = first.budget.spent
        assert 0 < spent <= 3.0
        assert f"spent ${spent:.4f} of --budget-usd 3" in str(stop.value) and "left" in str(stop.value)
        kept = len(first.store.records())
        assert 0 < kept < 12
        assert sum(u.cost_usd for u in policy_usage(first)) <= spent + 1e-9  # the recorded ones among them
        paid_before = app.state.requests
        second = Crossplay(CrossplayConfig(policies=[spec], counterparts=[CONCEDER], scenarios=6,
                                           cache_dir=str(tmp_path / "cache")), tmp_path / "run")
        asyncio.run(second.run())
    records = second.store.records()
    assert len(records) == 12  # resumed to the end; the kept episodes not played again
    moves = sum(1 for r in records for t in r.transcript if t.role == r.policy_role)
    # Every move was paid for once over both commands: the moves of episodes cut short by the stop
    # came back from the cache.
    assert app.state.requests == moves
    # The calls the first command paid for beyond its recorded episodes (the episode the stop cut
    # short) were replayed from the cache by the second.
    kept_calls = sum(r.usage[r.policy_role].calls for r in records[:kept])
    hits = sum(r.usage[r.policy_role].cache_hits for r in records[kept:])
    assert hits == paid_before - kept_calls > 0

def test_a_cache_folder_that_cannot_be_made_is_one_clear_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    runner = Crossplay(CrossplayConfig(policies=[CONCEDER], counterparts=[CONCEDER], scenarios=1,
                                       cache_dir=str(blocker / "cache")), tmp_path / "run")
    with pytest.raises(UserError, match="--no-cache"):
        asyncio.run(runner.run())
    assert not (tmp_path / "run").exists()


def test_the_dry_run_estimate_is_within_20_percent_of_the_real_run(tmp_path):
    from ibrl_bench.runner.dryrun import estimate

    app = make_app()
    with serve(app) as url:
        # A pilot on other scenarios (the dev split), then the run it prices (the test split).
        play(tmp_path / "pilot", remote(url), tmp_path / "pilot-cache", split="dev", scenarios=4)
        config = {"policies": [remote(url)], "counterparts": [CONCEDER], "scenarios": 12, "seeds": 1,
                  "cache_dir": str(tmp_path / "cache")}
        planned = estimate(Crossplay(CrossplayConfig(**config), tmp_path / "run"), tmp_path / "pilot")
        bound = estimate(Crossplay(CrossplayConfig(**config), tmp_path / "run"))
        assert not (tmp_path / "run").exists()  # a dry run writes nothing
        asyncio.run(Crossplay(CrossplayConfig(**config), tmp_path / "run").run())
        replay = estimate(Crossplay(CrossplayConfig(**config), tmp_path / "again"), tmp_path / "pilot")
    used = policy_usage(Crossplay(CrossplayConfig(**config), tmp_path / "run"))
    real_tokens = sum(u.prompt_tokens + u.completion_tokens for u in used)
    real_cost = sum(u.cost_usd for u in used)
    real_calls = sum(u.calls for u in used)
    assert planned.pending == 24 and {s.role for s in planned.seats} == {"a", "b"}
    assert abs(planned.tokens - real_tokens) <= 0.2 * real_tokens, (planned.tokens, real_tokens)
    assert abs(planned.cost_usd - real_cost) <= 0.2 * real_cost
    assert sum(s.calls for s in bound.seats) >= real_calls  # without a pilot: the turn limit bounds the calls
    # Against a cache that holds the whole run: every call expected from it, nothing to pay.
    assert sum(s.cache_hits for s in replay.seats) == real_calls
    assert replay.cost_usd == 0 and replay.tokens == 0


def test_dry_run_writes_nothing_and_pilot_needs_it(tmp_path):
    from click.testing import CliRunner

    from ibrl_bench.cli import cli

    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["crossplay", "--policy", CONCEDER, "--counterpart", RANDOM, "--scenarios", "3",
                                      "--dry-run", "--out", str(out)])
    assert result.exit_code == 0 and "no model seat" in result.output and not out.exists()
    result = CliRunner().invoke(cli, ["crossplay", "--policy", CONCEDER, "--counterpart", RANDOM,
                                      "--pilot", str(tmp_path), "--out", str(out)])
    # (the `ibrl-bench` entry point prints a UserError as its one line)
    assert isinstance(result.exception, UserError) and "--pilot goes with --dry-run" in str(result.exception)
    assert not out.exists()



def test_a_dry_run_prices_keyed_seats_without_their_keys_and_a_real_run_still_asks(ibrl, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seat = ["crossplay", "--policy", CONCEDER, "--counterpart", "card:gpt-4.1-mini", "--scenarios", "2",
            "--out", str(tmp_path / "run")]
    planned = ibrl(*seat, "--dry-run", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "card:gpt-4.1-mini" in planned.stdout and "estimated cost $" in planned.stdout
    refused = ibrl(*seat, "--quiet", cwd=tmp_path)  # the key is checked before any episode
    assert refused.returncode == 2 and "needs a key in $OPENAI_API_KEY" in refused.stderr
    assert not (tmp_path / "run" / "episodes.jsonl").exists()

def test_a_local_checkpoint_written_again_in_place_is_another_seat(tmp_path):
    import os

    from ibrl_bench.runner.cache import files_fingerprint

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"first weights")
    before = files_fingerprint(str(folder))
    (folder / "model.safetensors").write_bytes(b"other weights")
    os.utime(folder / "model.safetensors", ns=(1, 1))
    assert files_fingerprint(str(folder)) != before
    assert files_fingerprint(str(tmp_path / "absent")) is None


def test_adaptive_rounds_stop_at_the_budget_and_resume(tmp_path):
    from ibrl_bench.runner.adaptive import run_adaptive

    with serve(make_app()) as url:
        config = {"policies": [remote(url, extra="&max_tokens=64")], "counterparts": [CONCEDER], "roles": ["a"],
                  "scenarios": 20, "target_halfwidth": 0.3, "cache_dir": str(tmp_path / "cache"), "concurrency": 1}
        first = Crossplay(CrossplayConfig(**config, budget_usd=4.0), tmp_path / "run")
        with pytest.raises(RunAborted, match="stopped at the budget"):
            asyncio.run(run_adaptive(first))
        stopped = json.loads((tmp_path / "run" / "adaptive.json").read_text())["cells"]
        assert [c["reason"] for c in stopped] == ["budget"] and stopped[0]["episodes"] < stopped[0]["planned"] == 10
        second = Crossplay(CrossplayConfig(**config), tmp_path / "run")
        report = asyncio.run(run_adaptive(second))
    assert report.cells[0].reason in ("reached H", "split exhausted") and report.cells[0].episodes >= 10
