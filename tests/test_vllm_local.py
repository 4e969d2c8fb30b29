"""`vllm:` agents. vLLM needs an NVIDIA GPU, so here: the one-line error without it, and the
agent's own code (prompts, per-request seeds, batching, usage, adapters) driven through a stand-in
for the small part of vLLM's API it uses (`LLM`, `SamplingParams`, `LoRARequest`)."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ibrl_bench.agents.spec import build_agent
from ibrl_bench.domains import get_domain
from ibrl_bench.errors import UserError
from ibrl_bench.runner.episode import play_episode

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
GAME = get_domain("dealnodeal")


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_without_vllm_the_spec_fails_with_one_line_that_says_how_to_install_it():
    with pytest.raises(UserError) as e:
        build_agent("vllm:Qwen/Qwen2.5-7B-Instruct", "dealnodeal")
    message = str(e.value)
    assert "\n" not in message and "pip install 'ibrl-bench[vllm]'" in message and "GPU" in message

    proc = subprocess.run(
        [sys.executable, "-m", "ibrl_bench", "play", "--policy", "vllm:/models/x",
         "--counterpart", "scripted:dealnodeal/fair"],
        capture_output=True, text=True, timeout=120,
    )
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and "ibrl-bench[vllm]" in lines[0], proc.stderr


@dataclass
class StandInLLM:
    """Records what the agent asks of vLLM and answers with a fixed split."""

    model: str
    kwargs: dict
    tokenizer: object
    calls: list = field(default_factory=list)

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params, *, use_tqdm=True, lora_request=None):
        self.calls.append((prompts, sampling_params, lora_request))
        reply = "<split>book=1 hat=0 ball=0</split>"
        token_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f" {reply}\n", token_ids=token_ids)])
                for _ in prompts]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not HAS_TORCH:
        pytest.skip("the [hf] extra is not installed (the stand-in borrows a tiny model's tokenizer)")
    from ibrl_bench.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def stand_in_vllm(monkeypatch, tiny):
    from transformers import AutoTokenizer

    folder = tiny
    engines: list[StandInLLM] = []

    def make_llm(model, **kwargs):
        engines.append(StandInLLM(model, kwargs, AutoTokenizer.from_pretrained(model)))
        return engines[-1]

    vllm = types.ModuleType("vllm")
    vllm.LLM = make_llm
    vllm.SamplingParams = lambda **kw: dict(kw)
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda name, int_id, path: ("lora", name, int_id, path)
    for name, module in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, module)
    return folder, engines


def play(agent, seeds=(0, 1)):
    other = build_agent("scripted:dealnodeal/conceder", "dealnodeal")
    scenarios = GAME.scenario_set("dev", 3).scenarios

    async def main():
        try:
            return await asyncio.gather(*(play_episode(GAME, s, {"a": agent, "b": other}, seed, 4)
                                          for s in scenarios for seed in seeds))
        finally:
            await agent.aclose()

    return asyncio.run(main())


def test_the_vllm_agent_batches_seeds_and_counts_like_hf(stand_in_vllm):
    folder, engines = stand_in_vllm
    agent = build_agent(f"vllm:{folder}?temperature=0.7&top_p=0.9&max_new_tokens=20&window_ms=50", "dealnodeal")
    (engine,) = engines
    assert engine.model == str(folder) and engine.kwargs["enable_lora"] is False
    results = play(agent)
    assert all(r.outcome.status in ("ok", "invalid", "max_turns") for r in results)
    assert len(engine.calls) < agent.batcher.stats.requests, "concurrent episodes share generate calls"

    params = [p for _, sampling, _ in engine.calls for p in sampling]
    assert all((p["temperature"], p["top_p"], p["max_tokens"]) == (0.7, 0.9, 20) for p in params)
    seeds = [p["seed"] for p in params]
    assert len(set(seeds)) == len(seeds), "every move has its own seed"

    for prompts, _, _ in engine.calls:  # token ids from the chat template, as hf: builds them
        for prompt in prompts:
            text = engine.tokenizer.decode(prompt["prompt_token_ids"])
            assert text.startswith("<|im_start|>system\nYou are negotiating")
            assert text.endswith("<|im_start|>assistant\n")
    reply_tokens = len(engine.tokenizer("<split>book=1 hat=0 ball=0</split>", add_special_tokens=False)["input_ids"])
    for r in results:
        assert r.usage()["a"].completion_tokens == reply_tokens * len(r.replies["a"])
        assert [t.text for t in r.state.transcript if t.role == "a"][-1] == "<split>book=1 hat=0 ball=0</split>"


def test_greedy_vllm_requests_carry_no_seed_and_an_adapter_is_a_lora_request(stand_in_vllm, tmp_path):
    folder, engines = stand_in_vllm
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    agent = build_agent(f"vllm:{folder}?adapter={adapter}", "dealnodeal")
    play(agent, seeds=(0,))
    (engine,) = engines
    assert engine.kwargs["enable_lora"] is True
    assert all(p["seed"] is None and p["temperature"] == 0.0 for _, sampling, _ in engine.calls for p in sampling)
    assert {lora for _, _, lora in engine.calls} == {("lora", "adapter", 1, str(adapter))}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("vllm:{folder}?adapter=/nope", "no PEFT adapter at '/nope'"),
        ("vllm:{folder}?gpu_memory_utilization=2", "bad parameter gpu_memory_utilization=2"),
        ("vllm:{folder}?device=cuda", "unknown parameter 'device'"),
        ("vllm:/no/such/model", "no model at"),
    ],
)
def test_bad_vllm_specs_are_one_line_user_errors(stand_in_vllm, spec, message):
    folder, _ = stand_in_vllm
    with pytest.raises(UserError) as e:
        build_agent(spec.format(folder=Path(folder)), "dealnodeal")
    assert message in str(e.value) and "\n" not in str(e.value)
