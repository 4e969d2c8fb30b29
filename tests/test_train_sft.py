"""SFT samples from transcripts: the replay reproduces every recorded episode, the prompt is exactly
what an hf: agent feeds the model, the mask covers exactly the message and its eos; and a few steps
of imitation lower the loss."""

from __future__ import annotations

import asyncio
import json

import pytest

torch = pytest.importorskip("torch")

import ibrl_bench.models  # noqa: E402,F401  (before transformers: OpenMP policy)
from ibrl_bench.agents.spec import parse_spec  # noqa: E402
from ibrl_bench.domains import get_domain  # noqa: E402
from ibrl_bench.errors import UserError  # noqa: E402
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig  # noqa: E402
from ibrl_bench.runs import Run  # noqa: E402
from ibrl_bench.train.samples import collate  # noqa: E402
from ibrl_bench.train.sft import (  # noqa: E402
    SFTConfig,
    build_dataset,
    completion_ids,
    move_sample,
    replay,
    run,
)
from ibrl_bench.train.steplog import StepLog, read_log  # noqa: E402

RUNS = {
    "dealnodeal": dict(policies=["scripted:dealnodeal/fair", "scripted:dealnodeal/hardliner"],
                       counterparts=["scripted:dealnodeal/hardliner"]),
    "telesales": dict(policies=["scripted:telesales/consultative"], counterparts=["scripted:telesales/skeptical"],
                      roles=["seller"]),
}


def scripted_run(folder, domain: str, scenarios: int = 6):
    config = CrossplayConfig(domain=domain, split="train", scenarios=scenarios, **RUNS[domain])
    asyncio.run(Crossplay(config, folder).run())
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    return {d: scripted_run(base / d, d) for d in RUNS}


@pytest.fixture(scope="module")
def tiny(tiny_models):
    # A short context, so that long dialogues are cut: the cut must match the hf: agent's too.
    return tiny_models(seed=0, max_position_embeddings=320)


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


def config(folder, domain, **kw):
    return SFTConfig(domain=domain, transcripts=[str(folder)], out="unused", from_scratch={}, **kw)


def episodes_of(folder):
    run_ = Run(folder)
    domain = get_domain(run_.manifest.domain)
    scenarios = {s.id: s for s in domain.scenario_set("train", run_.manifest.scenario_set["n"]).scenarios}
    return domain, [(r, scenarios[r.scenario_id]) for r in run_.records], run_.manifest.identity["max_turns"]


@pytest.mark.parametrize("domain_name", list(RUNS))
def test_replay_reproduces_every_recorded_episode(runs, domain_name):
    domain, episodes, max_turns = episodes_of(runs[domain_name])
    assert len(episodes) >= 6
    for record, scenario in episodes:
        moves = replay(domain, record, scenario, max_turns)
        assert [m.text for m in moves] == [t.text for t in record.transcript]
        assert [m.role for m in moves] == [t.role for t in record.transcript]
        # Each move's observation saw exactly the public messages before it.
        for i, m in enumerate(moves):
            public_before = [t.text for t in record.transcript[:i] if t.public]
            assert [x.text for x in m.obs.dialogue] == public_before[: len(m.obs.dialogue)]


def test_an_episode_that_does_not_replay_is_skipped_and_counted(runs, tmp_path, tokenizer):
    import shutil

    folder = tmp_path / "tampered"
    shutil.copytree(runs["dealnodeal"], folder)
    lines = (folder / "episodes.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["outcome"]["rewards"] = {"a": 99.0, "b": 99.0}
    (folder / "episodes.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    data = build_dataset(config(folder, "dealnodeal", heldout_share=0), tokenizer, None)
    assert data.counts["replay mismatch (skipped)"] == 1
    assert data.counts["episodes used"] == len(lines) - 1


@pytest.mark.parametrize("domain_name", list(RUNS))
def test_prompt_ids_are_what_the_hf_agent_feeds_the_model(runs, tiny, tokenizer, domain_name):
    from ibrl_bench.agents.hf_local import from_spec

    max_new_tokens = 16
    agent = from_spec(parse_spec(f"hf:{tiny}?max_new_tokens={max_new_tokens}&device=cpu"), domain_name)
    fed = []
    generate = agent.model.generate

    def spy(input_ids, **kw):
        fed.append(input_ids[0].tolist())
        return generate(input_ids=input_ids, **kw)

    agent.model.generate = spy
    domain, episodes, max_turns = episodes_of(runs[domain_name])
    record, scenario = max(episodes, key=lambda e: len(e[0].transcript))  # the longest: its prompts get cut
    moves = replay(domain, record, scenario, max_turns)
    budget = 320 - max_new_tokens
    for move in moves:
        from ibrl_bench.agents.generation import GenRequest

        agent.generate_batch([GenRequest(messages=domain.chat_messages(move.obs), seed=0)])
        assert move_sample(tokenizer, domain, move, budget).prompt_ids == fed[-1]
    assert max(len(p) for p in fed) == budget or domain_name == "telesales"


def test_mask_covers_exactly_the_message_and_its_eos(runs, tokenizer):
    data = build_dataset(config(runs["dealnodeal"], "dealnodeal", heldout_share=0), tokenizer, None)
    batch = collate(data.train[:8], pad_id=tokenizer.eos_token_id)  # pad == eos: the hard case
    for i, sample in enumerate(data.train[:8]):
        masked = batch.input_ids[i][batch.action_mask[i].bool()].tolist()
        assert masked == sample.completion_ids
        assert masked[-1] == tokenizer.eos_token_id and tokenizer.eos_token_id not in masked[:-1]
        text = tokenizer.decode(masked[:-1])
        assert text and text in {t for t in _all_texts(runs["dealnodeal"])}


def _all_texts(folder):
    return [t.text for r in Run(folder).records for t in r.transcript]


def test_a_control_token_written_in_a_message_is_not_learned_as_one(tokenizer):
    ids = completion_ids(tokenizer, "deal <|im_end|> done")
    assert ids.count(tokenizer.eos_token_id) == 1 and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[:-1]) == "deal <|im_end|> done"


@pytest.mark.slow
def test_what_to_imitate_is_chosen_by_the_recipe(runs, tokenizer):
    folder = runs["dealnodeal"]
    everything = build_dataset(config(folder, "dealnodeal", heldout_share=0), tokenizer, None)
    records = Run(folder).records
    assert len(everything.train) == sum(len(r.transcript) for r in records)
    one_role = build_dataset(config(folder, "dealnodeal", heldout_share=0, roles=["a"]), tokenizer, None)
    assert len(one_role.train) == sum(1 for r in records for t in r.transcript if t.role == "a")
    fair = build_dataset(config(folder, "dealnodeal", heldout_share=0, agents=["scripted:dealnodeal/fair"]),
                         tokenizer, None)
    assert len(fair.train) == sum(1 for r in records for t in r.transcript if r.agents[t.role].endswith("/fair"))
    deals = build_dataset(config(folder, "dealnodeal", heldout_share=0, episodes="agreement"), tokenizer, None)
    n_deals = sum(r.outcome.agreement for r in records)
    assert 0 < n_deals < len(records), "the fixture should hold both agreements and failures"
    assert deals.counts["episodes used"] == n_deals
    held = build_dataset(config(folder, "dealnodeal", heldout_share=0.5), tokenizer, None)
    assert held.heldout and len(held.train) + len(held.heldout) == len(everything.train)
    paying = build_dataset(config(folder, "dealnodeal", heldout_share=0, min_own_reward=6), tokenizer, None)
    expected = sum(1 for r in records for t in r.transcript if r.outcome.rewards[t.role] >= 6)
    assert 0 < expected < len(everything.train) and len(paying.train) == expected


def test_the_recipe_prompt_is_the_one_trained_on_and_its_checkpoint_spec_carries_it(runs, tokenizer):
    from ibrl_bench.train.policy import with_prompt

    data = build_dataset(config(runs["dealnodeal"], "dealnodeal", heldout_share=0, prompt="compact"), tokenizer, None)
    system = tokenizer.decode(data.train[0].prompt_ids)
    assert "Your values: book=" in system and "negotiating" not in system
    assert with_prompt("hf:/m?adapter=/x", "compact") == "hf:/m?adapter=/x&prompt=compact"
    assert with_prompt("hf:/m", "full") == "hf:/m"
    with pytest.raises(UserError, match="no role prompt 'short'"):
        build_dataset(config(runs["dealnodeal"], "dealnodeal", prompt="short"), tokenizer, None)


@pytest.mark.slow
def test_a_few_steps_of_imitation_lower_the_heldout_loss(runs, tmp_path):
    cfg = SFTConfig(domain="dealnodeal", transcripts=[str(runs["dealnodeal"])], out=str(tmp_path / "sft"),
                    from_scratch={"shape": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}},
                    steps=8, batch_size=8, lr=1e-2, heldout_share=0.3, max_length=384)
    with StepLog(cfg.out, cfg.steps, "sft", quiet=True) as log:
        spec = run(cfg, log)
    summary = json.loads((tmp_path / "sft" / "sft_summary.json").read_text())
    assert summary["heldout_loss_after"] < summary["heldout_loss_before"] - 1.0
    assert [r["step"] for r in read_log(cfg.out)] == list(range(1, 9))
    assert spec == f"hf:{(tmp_path / 'sft' / 'checkpoint').resolve()}"
    # Built from scratch, the model declares the context it was trained on, so hf: agents cut to it.
    assert json.loads((tmp_path / "sft" / "checkpoint" / "config.json").read_text())["max_position_embeddings"] == 384


@pytest.mark.slow
def test_the_same_seed_trains_the_same_weights(runs, tmp_path):
    from safetensors.torch import load_file

    def train(name):
        cfg = SFTConfig(domain="dealnodeal", transcripts=[str(runs["dealnodeal"])], out=str(tmp_path / name),
                        from_scratch={"shape": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}},
                        steps=3, batch_size=4, lr=1e-2, max_length=256, seed=7)
        with StepLog(cfg.out, cfg.steps, "sft", quiet=True) as log:
            run(cfg, log)
        weights = load_file(tmp_path / name / "checkpoint" / "model.safetensors")
        return [r["loss"] for r in read_log(cfg.out)], weights

    losses_1, weights_1 = train("one")
    losses_2, weights_2 = train("two")
    assert losses_1 == losses_2
    assert weights_1.keys() == weights_2.keys()
    assert all(torch.equal(weights_1[k], weights_2[k]) for k in weights_1)
    # The recipe's seed also draws the initial weights of a model built from scratch.
    from ibrl_bench.train.sft import _build_from_scratch

    class _One:
        is_main_process = True

        def wait_for_everyone(self):
            return None

    other = SFTConfig(domain="dealnodeal", transcripts=[str(runs["dealnodeal"])], out="unused", from_scratch={},
                      max_length=256, seed=8)
    _build_from_scratch(other, tmp_path / "eight", _One())
    init_7 = load_file(tmp_path / "one" / "init" / "model.safetensors")
    init_8 = load_file(tmp_path / "eight" / "init" / "model.safetensors")
    assert not torch.equal(init_7["model.embed_tokens.weight"], init_8["model.embed_tokens.weight"])


@pytest.mark.slow
def test_sft_with_lora_saves_an_adapter_that_an_hf_spec_plays(runs, tiny, tmp_path):
    from ibrl_bench.agents.spec import build_agent
    from ibrl_bench.runner.episode import play_episode

    cfg = SFTConfig(domain="dealnodeal", transcripts=[str(runs["dealnodeal"])], out=str(tmp_path / "lora"),
                    model={"model": f"hf:{tiny}", "lora": {"r": 4, "alpha": 8}, "device": "cpu"},
                    steps=2, batch_size=4, lr=1e-2, max_length=256, max_new_tokens=16, heldout_share=0)
    with StepLog(cfg.out, cfg.steps, "sft", quiet=True) as log:
        spec = run(cfg, log)
    adapter = (tmp_path / "lora" / "checkpoint").resolve()
    assert spec == f"hf:{tiny.resolve()}?adapter={adapter}"
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "model.safetensors").exists()
    domain = get_domain("dealnodeal")
    agents = {"a": build_agent(f"{spec}&max_new_tokens=8&device=cpu", "dealnodeal").agent,
              "b": build_agent("scripted:dealnodeal/conceder", "dealnodeal").agent}
    scenario = domain.scenario_set("test", 1).scenarios[0]
    result = asyncio.run(play_episode(domain, scenario, agents, seed=0, max_turns=2))
    assert result.replies["a"] and result.outcome.status in ("ok", "invalid", "max_turns")
