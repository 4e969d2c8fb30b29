"""The openai: and litellm: backends against a real OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("openai")
pytest.importorskip("fastapi")

from ibrl_bench.agents.spec import build_agent  # noqa: E402
from ibrl_bench.domains import get_domain  # noqa: E402
from ibrl_bench.errors import FatalAgentError, UserError  # noqa: E402
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig  # noqa: E402
from ibrl_bench.testing.fake_openai import Faults, make_app, serve  # noqa: E402

BOULWARE = "scripted:dealnodeal/boulware"
CONCEDER = "scripted:dealnodeal/conceder"
FAST = "timeout=2&backoff=0.01&max_backoff=0.05"


def remote(url: str, inner: str = BOULWARE, backend: str = "openai", extra: str = "") -> str:
    model = inner if backend == "openai" else f"openai/{inner}"
    return f"{backend}:{model}@{url}?key_env=none&observation=true&{FAST}{extra}"


def run(folder, policy: str, **kw):
    kw.setdefault("counterparts", [CONCEDER])
    kw.setdefault("scenarios", 6)
    runner = Crossplay(CrossplayConfig(policies=[policy], **kw), folder)
    progress = asyncio.run(runner.run())
    return runner, progress


def by_game(records):
    return {(r.policy_role, r.scenario_id, r.seed): r for r in records}


def test_openai_backend_plays_the_same_games_as_the_agent_behind_it(tmp_path):
    direct, _ = run(tmp_path / "direct", BOULWARE)
    app = make_app(Faults(latency_ms=2))
    with serve(app) as url:
        http, progress = run(tmp_path / "http", remote(url))
    assert progress.done == 12 and progress.errors == 0
    a, b = by_game(direct.store.records()), by_game(http.store.records())
    for key, rec in a.items():
        assert [t.text for t in b[key].transcript] == [t.text for t in rec.transcript]
        assert b[key].outcome == rec.outcome
        assert b[key].usage[b[key].policy_role].prompt_tokens > 0  # accounted per episode and role
    assert app.state.requests == sum(
        1 for r in b.values() for t in r.transcript if t.role == r.policy_role
    )
    from ibrl_bench.runner.store import episode_row
    from ibrl_bench.stats.matrix import episodes_table, summarize

    results = summarize(episodes_table([episode_row(r) for r in b.values()]), domain="dealnodeal", scenario_set={},
                        n_planned=12)
    for cell in results.cells:
        expected = sum(r.usage[r.policy_role].prompt_tokens for r in b.values() if r.policy_role == cell.policy_role)
        assert cell.usage["policy"].prompt_tokens == expected > 0
        assert cell.usage["counterpart"].prompt_tokens == 0  # the scripted side calls no model


@pytest.mark.slow
def test_litellm_backend_plays_complete_games(tmp_path):
    with serve(make_app(Faults(p_429=0.1, p_500=0.1, retry_after_s=0.01))) as url:
        runner, progress = run(tmp_path / "lite", remote(url, backend="litellm"), scenarios=4)
    assert progress.done == 8 and progress.errors == 0
    for r in runner.store.records():
        assert r.outcome.status in ("ok", "max_turns")
        assert r.usage[r.policy_role].completion_tokens > 0


def test_thirty_percent_faults_are_retried_or_recorded_never_scored(tmp_path):
    clean, _ = run(tmp_path / "clean", BOULWARE, scenarios=10)
    faults = Faults(p_429=0.08, p_500=0.08, p_hang=0.04, hang_s=1.0, p_malformed=0.06, p_empty=0.04,
                    retry_after_s=0.01, seed=7)
    app = make_app(faults)
    with serve(app) as url:
        spec = remote(url, extra="&timeout=0.3&max_attempts=3")
        faulty, progress = run(tmp_path / "faulty", spec, scenarios=10, concurrency=8, retries=2, fail_on_error=1.0)
    assert app.state.faults_served > 0.2 * app.state.requests
    assert progress.done + progress.errors == 20
    reference = by_game(clean.store.records())
    for key, rec in by_game(faulty.store.records()).items():
        if rec.outcome.status == "error":
            assert rec.errors and rec.outcome.rewards == {"a": 0.0, "b": 0.0}
            continue
        # Every scored episode is the very game the scripted agent plays without HTTP: faults were
        # retried away, never turned into moves.
        assert rec.outcome == reference[key].outcome
    results = faulty.store.latest()
    assert all(r.outcome.status != "invalid" for r in results.values())


def test_retry_after_is_honoured(tmp_path):
    game = get_domain("dealnodeal")
    state = game.start(game.scenario_set("dev", 1).scenarios[0], 0)
    obs = game.observe(state, game.to_move(state)[0])
    app = make_app(Faults(first_429=2, retry_after_s=0.25))
    with serve(app) as url:
        agent = build_agent(remote(url), "dealnodeal").agent
        start = time.perf_counter()
        reply = asyncio.run(agent.act(obs))
        elapsed = time.perf_counter() - start
    assert reply.text and app.state.requests == 3
    assert elapsed >= 0.5, "two Retry-After waits of 0.25 s"


def test_the_fake_endpoints_latency_runs_from_arrival_with_the_agent_behind_it_inside():
    """The benchmarks read ratios to the injected latency, so the endpoint's own work (here an
    agent behind it that takes 0.3 s) must fall inside that latency, not add to it."""
    import urllib.request

    game = get_domain("dealnodeal")
    state = game.start(game.scenario_set("test", 1).scenarios[0], 0)
    body = json.dumps({"model": "python:plugins:make_slow?delay=0.3", "messages": [],
                       "ibrl_observation": game.observe(state, game.to_move(state)[0]).model_dump(mode="json")})
    with serve(make_app(Faults(latency_ms=400))) as url:
        def post() -> tuple[float, dict]:
            request = urllib.request.Request(f"{url}/chat/completions", data=body.encode(),
                                             headers={"Content-Type": "application/json"})
            start = time.perf_counter()
            with urllib.request.urlopen(request, timeout=10) as response:
                return time.perf_counter() - start, json.load(response)

        post()  # the first request builds the agent behind the endpoint
        elapsed, reply = post()
    assert reply["choices"][0]["message"]["content"]  # the agent behind it moved
    assert 0.4 <= elapsed < 0.65, f"{elapsed:.3f} s: 0.4 s expected, 0.7 s if the agent's time were added"


def test_concurrency_limit_is_per_endpoint_and_shared_by_all_episodes(tmp_path):
    app = make_app(Faults(latency_ms=20))
    with serve(app) as url:
        run(tmp_path / "x", remote(url, extra="&concurrency=2"),
            counterparts=[remote(url, CONCEDER, extra="&concurrency=2")], scenarios=4, concurrency=8)
    assert app.state.max_inflight == 2


def test_a_hanging_endpoint_times_out_into_error_episodes(tmp_path):
    with serve(make_app(Faults(p_hang=1.0, hang_s=2.0))) as url:
        runner, progress = run(tmp_path / "x", remote(url, extra="&timeout=0.1&max_attempts=2"), scenarios=2,
                               retries=0, fail_on_error=1.0)
    assert progress.errors == 4
    for r in runner.store.records():  # the request timeout is named, not the move timeout
        assert "within the request timeout of 0.1 s on all 2 attempts" in r.errors[0], r.errors[0]
        assert sum(r.retries.values()) == 1 and all("Timeout" in kind for kind in r.retries), r.retries


def test_empty_replies_are_retried_then_an_infrastructure_error(tmp_path):
    with serve(make_app(Faults(p_empty=1.0))) as url:
        runner, progress = run(tmp_path / "x", remote(url, extra="&max_attempts=2"), scenarios=2, retries=0,
                               fail_on_error=1.0)
    assert progress.errors == 4 and progress.done == 0
    for r in runner.store.records():
        assert r.outcome.status == "error" and "returned no text on all 2 attempts" in r.errors[0]
        assert "allow_empty" in r.errors[0] and r.retries == {"EmptyReply": 1}


def test_empty_replies_of_a_model_allowed_to_be_silent_are_judged_by_the_rules(tmp_path):
    with serve(make_app(Faults(p_empty=1.0))) as url:
        runner, progress = run(tmp_path / "x", remote(url, extra="&max_attempts=2&allow_empty=true"), scenarios=2)
    assert progress.errors == 0
    for r in runner.store.records():
        assert r.outcome.status == "invalid" and r.policy_role in r.outcome.violators


def test_a_rejected_key_stops_the_run_with_one_line_and_no_key_on_disk(tmp_path, monkeypatch):
    sentinel = "sk-SENTINEL-0123456789abcdef"
    monkeypatch.setenv("FAKE_PROVIDER_KEY", sentinel)
    with serve(make_app(Faults(required_key="the-right-key-0000"))) as url:
        spec = f"openai:{BOULWARE}@{url}?key_env=FAKE_PROVIDER_KEY&observation=true&{FAST}"
        with pytest.raises(FatalAgentError) as e:
            run(tmp_path / "x", spec, scenarios=3)
    message = str(e.value)
    assert "rejected the key" in message and "\n" not in message and sentinel not in message
    assert not (tmp_path / "x").exists()  # stopped before its first episode: the run left nothing behind


def test_a_key_echoed_by_the_endpoint_never_reaches_the_run_folder(tmp_path, monkeypatch):
    sentinel = "sk-SENTINEL-fedcba9876543210"
    monkeypatch.setenv("FAKE_PROVIDER_KEY", sentinel)
    with serve(make_app(Faults(echo_key=True))) as url:
        spec = f"openai:{BOULWARE}@{url}?key_env=FAKE_PROVIDER_KEY&observation=true&{FAST}"
        runner, progress = run(tmp_path / "x", spec, scenarios=2)
    assert progress.done == 4
    texts = [t.text for r in runner.store.records() for t in r.transcript if t.role == r.policy_role]
    assert any("(key ***)" in t for t in texts), "the echo reached the transcript, masked"
    runner.store.write_results(runner.results())
    files = list((tmp_path / "x").iterdir())
    assert {"episodes.jsonl", "manifest.json", "results.json"} <= {p.name for p in files}
    assert all(sentinel not in p.read_text() for p in files)
    assert "FAKE_PROVIDER_KEY" in (tmp_path / "x" / "manifest.json").read_text()  # the name is kept


def test_a_missing_key_variable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(UserError, match=r"needs a key in \$NOPE_KEY, which is not set"):
        build_agent("openai:gpt@http://127.0.0.1:9/v1?key_env=NOPE_KEY", "dealnodeal")
    with pytest.raises(UserError, match="unknown parameter 'temprature'"):
        build_agent("openai:gpt@http://127.0.0.1:9/v1?key_env=none&temprature=1", "dealnodeal")
    with pytest.raises(UserError, match="malformed spec"):
        build_agent("openai:gpt@ftp://x", "dealnodeal")
    with pytest.raises(UserError, match="bad parameter temperature"):
        build_agent("openai:gpt@http://127.0.0.1:9/v1?key_env=none&temperature=-1", "dealnodeal")


def test_prompts_hold_only_the_roles_own_values():
    game = get_domain("dealnodeal")
    scenario = game.scenario_set("dev", 5).scenarios[4]
    state = game.start(scenario, 0)
    for role in ("a", "b"):
        obs = game.observe(state, role)
        text = json.dumps(game.chat_messages(obs))
        own = scenario.data["values"][role]
        assert ", ".join(f"{i}={v}" for i, v in zip(("book", "hat", "ball"), own, strict=True)) in text
        other = scenario.data["values"][game.other(role)]
        if other != own:
            assert ", ".join(f"{i}={v}" for i, v in zip(("book", "hat", "ball"), other, strict=True)) not in text


def test_telesales_prompts_hold_only_the_roles_own_brief():
    game = get_domain("telesales")
    for scenario in game.scenario_set("dev", 10).scenarios:
        state = game.start(scenario, 0)
        seller = json.dumps(game.chat_messages(game.observe(state, "seller")))
        buyer = json.dumps(game.chat_messages(game.observe(state, "buyer")))
        persona, brief = scenario.data["buyer"], scenario.data["seller"]
        assert f"${persona['budget']}" in buyer and f"${persona['budget']}" not in seller
        assert f"${persona['reservation']}" not in seller
        for item in brief["inventory"]:
            assert f"floor ${item['floor']}" in seller and f"${item['floor']}" not in buyer


def test_telesales_plays_over_http_like_in_process(tmp_path):
    seller, buyer = "scripted:telesales/consultative", "scripted:telesales/skeptical"
    direct = Crossplay(CrossplayConfig(domain="telesales", policies=[seller], counterparts=[buyer], roles=["seller"],
                                       scenarios=4), tmp_path / "direct")
    asyncio.run(direct.run())
    with serve(make_app()) as url:
        http = Crossplay(CrossplayConfig(domain="telesales", policies=[remote(url, seller)], counterparts=[buyer],
                                         roles=["seller"], scenarios=4), tmp_path / "http")
        asyncio.run(http.run())
    a, b = by_game(direct.store.records()), by_game(http.store.records())
    assert a.keys() == b.keys()
    assert all(b[k].outcome == a[k].outcome for k in a)
    manifest = json.loads((tmp_path / "http" / "manifest.json").read_text())
    assert manifest["identity"]["prompt"].startswith("ts-prompt-v1")


def test_a_litellm_model_without_a_key_is_not_said_to_have_its_key_rejected(monkeypatch):
    pytest.importorskip("litellm")
    monkeypatch.setenv("OPENAI_API_KEY", "not-the-right-one-0000")  # what litellm finds by itself
    game = get_domain("dealnodeal")
    obs = game.observe(game.start(game.scenario_set("test", 1).scenarios[0], 0), "a")
    with serve(make_app(Faults(required_key="the-right-key-0000"))) as url:
        without = build_agent(f"litellm:openai/m@{url}?max_attempts=1", "dealnodeal").agent
        monkeypatch.setenv("IBRL_TEST_LITELLM_KEY", "also-wrong-key-0000")
        named = build_agent(f"litellm:openai/m@{url}?max_attempts=1&key_env=IBRL_TEST_LITELLM_KEY", "dealnodeal").agent
        with pytest.raises(FatalAgentError) as e:
            asyncio.run(without.act(obs))
        assert "rejected the key" not in str(e.value) and "no key_env is named" in str(e.value)
        with pytest.raises(FatalAgentError, match="rejected the key"):
            asyncio.run(named.act(obs))


def test_the_endpoint_limits_do_not_grow_with_each_event_loop():
    """The trainers run a new event loop per step: the per-loop semaphores of closed loops must go.
    Fails if `limiter` keeps one entry per loop ever run (30 here), or shares one semaphore across loops."""
    from ibrl_bench.agents import remote

    async def take():
        return remote.limiter("http://127.0.0.1:9/v1", 4), remote.limiter("http://127.0.0.1:9/v1", 4)

    seen = []
    for _ in range(30):
        first, again = asyncio.run(take())
        assert first is again  # one semaphore per endpoint within a loop
        seen.append(first)
        assert len(remote._LIMITS) <= 2  # this loop's, and at most the previous closed loop's until the next call
    assert len({id(s) for s in seen}) == 30  # a fresh semaphore per loop (`seen` keeps them alive: ids differ)
