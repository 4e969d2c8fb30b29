"""IB-RL (train/ibrl.py): isolation of the two roles, determinism, and checkpoints that play
cross-play. Two LoRA adapters on one tiny random model, as the GPU recipe runs them.

A random model never reaches a deal, so every reward would be 0 and every advantage 0. The
tests therefore give rollouts rewards by hand, a fixed function of what each role generated,
so that updates are real and reproducible."""

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("accelerate")

from ibrl_bench.domains import get_domain  # noqa: E402
from ibrl_bench.models.loading import load_model, resolve_source  # noqa: E402
from ibrl_bench.models.tiny import build_tiny_model  # noqa: E402
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig  # noqa: E402
from ibrl_bench.train import ibrl, unilateral  # noqa: E402
from ibrl_bench.train.ibrl import IBRLConfig, make_accelerator, update_all  # noqa: E402
from ibrl_bench.train.losses import grpo_loss  # noqa: E402
from ibrl_bench.train.policy import LoraOptions, ModelOptions, load_policies  # noqa: E402
from ibrl_bench.train.rollout import collect, policy_agents  # noqa: E402
from ibrl_bench.train.samples import Sample, collate, token_logprobs, token_logprobs_and_entropy  # noqa: E402

GAME = get_domain("dealnodeal")
SCENARIOS = list(GAME.scenario_set("train", 1).scenarios)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0, num_hidden_layers=1)


def config(base, tmp_path, **over):
    fields = dict(model=ModelOptions(model=str(base), lora=LoraOptions(r=4), device="cpu"), out=str(tmp_path / "out"),
                  steps=1, scenarios_per_step=1, group_size=2, max_new_tokens=8, max_turns=2, lr=1e-2,
                  kl_coef=0.1, micro_batch_size=4, max_length=96)  # keeps a CPU step to about a second
    fields.update(over)
    return IBRLConfig(**fields)


def hand_rewards(groups, b_offset=0.0):
    """a's reward: how many ids a generated in the episode, mod 5; b's: a different function, plus
    `b_offset` per rollout index (to change b's rewards and nothing else)."""
    for group in groups:
        for i, r in enumerate(group.rollouts):
            a = float(sum(len(s.completion_ids) for s in r.samples.get("a", [])) % 5) + i
            b = float(sum(s.completion_ids[0] for s in r.samples.get("b", [])) % 7) + b_offset * (i + 1) + i
            r.outcome = r.outcome.model_copy(update={"rewards": {"a": a, "b": b}})
    return groups


def rollouts(cfg, seed=0):
    policies = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=False)
    agents = policy_agents(policies, GAME, cfg.temperature, cfg.max_new_tokens, 16)
    return collect(GAME, SCENARIOS, agents, cfg.group_size, seed, 1, ["a", "b"], cfg.max_turns)


def trained(cfg, groups, order=("a", "b")):
    """Fresh policies after one IB-RL update on `groups`; the LoRA weights of each role."""
    policies = load_policies(cfg.model, list(order), cfg.lr, reference=True)
    update_all(policies, groups, cfg, make_accelerator(cfg))
    return policies, {role: [p.detach().clone() for p in pol.parameters()] for role, pol in policies.items()}


def copy_groups(groups):
    import copy

    return copy.deepcopy(groups)


@pytest.mark.slow
@pytest.mark.parametrize("lora", [True, False], ids=["two-adapters-one-base", "two-models"])
def test_changing_b_rewards_leaves_a_update_bit_identical(base, tmp_path, lora):
    cfg = config(base, tmp_path)
    if not lora:
        cfg = cfg.model_copy(update={"model": ModelOptions(model=str(base), device="cpu")})
    groups = hand_rewards(rollouts(cfg))
    other = hand_rewards(copy_groups(groups), b_offset=3.5)
    assert [g.rewards("b") for g in groups] != [g.rewards("b") for g in other]
    _, first = trained(cfg, groups)
    _, second = trained(cfg, other)
    _, reversed_order = trained(cfg, other, order=("b", "a"))  # b updated before a: no matter
    initial = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=False)["a"].parameters()
    assert any(not torch.equal(p, q) for p, q in zip(first["a"], initial)), "a was updated"
    assert all(torch.equal(p, q) for p, q in zip(first["a"], second["a"]))
    assert all(torch.equal(p, q) for p, q in zip(first["a"], reversed_order["a"]))
    assert any(not torch.equal(p, q) for p, q in zip(first["b"], second["b"]))


def test_samples_cut_by_max_length_get_pi_old_on_the_cut_input(base, tmp_path):
    cfg = config(base, tmp_path, max_length=64)  # every prompt here is longer
    groups = hand_rewards(rollouts(cfg))
    policies = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=True)
    sample = groups[0].rollouts[0].samples["a"][0]
    with policies["a"].active() as model, torch.no_grad():
        cut = collate([sample], pad_id=0, max_length=64)
        on_cut_input = token_logprobs(model, cut, cfg.temperature)[cut.action_mask.bool()]
    # The sampler saw the whole prompt: its values differ from the policy's on the cut input.
    assert not torch.allclose(on_cut_input, cut.old_logprobs[cut.action_mask.bool()], atol=1e-2)
    metrics = update_all(policies, groups, cfg, make_accelerator(cfg))
    for role in ("a", "b"):
        assert metrics["truncated"][role] == 1.0
        assert metrics["ratio"][role] == pytest.approx(1.0, abs=1e-5)  # the update compares like with like


def test_kl_coef_zero_runs_no_reference_forward(base, tmp_path):
    cfg = config(base, tmp_path, kl_coef=0.0, model=ModelOptions(model=str(base), device="cpu"))
    groups = hand_rewards(rollouts(cfg))
    # Full fine-tuning loaded without a reference model: any reference forward would raise.
    policies = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=False)
    metrics = update_all(policies, groups, cfg, make_accelerator(cfg))
    assert metrics["kl"] == {"a": 0.0, "b": 0.0}
    with pytest.raises(RuntimeError, match="without a reference model"):
        update_all(policies, groups, cfg.model_copy(update={"kl_coef": 0.1}), make_accelerator(cfg))


class KeepLogits:
    """Calls the model and keeps its logits' gradient, to see where a loss reaches."""

    def __init__(self, model):
        self.model = model

    def __call__(self, **inputs):
        out = self.model(**inputs)
        out.logits.retain_grad()
        self.logits = out.logits
        return out


def test_a_loss_has_no_gradient_at_b_tokens_nor_on_b_adapter(base, tmp_path):
    cfg = config(base, tmp_path)
    groups = rollouts(cfg)
    policies = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=True)
    a, b = policies["a"], policies["b"]
    sample = groups[0].rollouts[0].samples["a"][-1]  # a's last move: b's messages are in its prompt
    batch = collate([sample], pad_id=a.tokenizer.pad_token_id)
    p = len(sample.prompt_ids)
    with a.reference() as reference:
        ref = token_logprobs(reference, batch, cfg.temperature)
    with a.active() as model:
        spy = KeepLogits(model)
        logprobs, _ = token_logprobs_and_entropy(spy, batch, cfg.temperature)
        loss, _ = grpo_loss(logprobs, batch.old_logprobs, ref, torch.tensor([1.0]), batch.action_mask, cfg.grpo())
        loss.backward()
    grad = spy.logits.grad[0]  # [T, V]; row t predicts token t + 1
    # Rows 0 .. p-2 predict prompt tokens (system text, b's messages, template): no gradient.
    assert grad[: p - 1].abs().max().item() == 0.0
    assert grad[p - 1:].abs().max().item() > 0.0
    assert all(x.grad is None or not x.grad.any() for x in b.parameters())
    assert any(x.grad is not None and x.grad.any() for x in a.parameters())


def test_gradient_checkpointing_changes_memory_not_gradients_and_keeps_dropout_off(base):
    grads = []
    for checkpointing in (False, True):
        options = ModelOptions(model=str(base), lora=LoraOptions(r=4, dropout=0.5), device="cpu",
                               gradient_checkpointing=checkpointing)
        policy = load_policies(options, ["a", "b"], lr=1e-3, reference=False)["a"]
        batch = collate([Sample(list(range(5, 40)), [50, 51, 52], [-1.0] * 3)], pad_id=0)
        with policy.active() as model:
            first, second = token_logprobs(model, batch), token_logprobs(model, batch)
            assert torch.equal(first, second)  # no dropout, even in training mode with lora dropout 0.5
            (first * batch.action_mask).sum().backward()
        assert model.training == checkpointing  # transformers checkpoints only in training mode
        grads.append([p.grad.clone() for p in policy.parameters()])
    assert all(torch.allclose(g, h, atol=1e-6) for g, h in zip(*grads))


@pytest.mark.parametrize("lora", [True, False], ids=["lora-on-top", "full"])
def test_training_from_a_warm_start_adapter_starts_and_saves_from_it_merged(base, tmp_path, lora):
    from peft import LoraConfig, get_peft_model

    from ibrl_bench.models.loading import load_model, resolve_source

    # A warm-start adapter with non-zero weights, as an SFT run with LoRA leaves.
    warm = get_peft_model(load_model(resolve_source(str(base)), device="cpu").model, LoraConfig(r=2, init_lora_weights=False))
    warm.save_pretrained(tmp_path / "warm")
    warmed = load_model(resolve_source(str(base)), str(tmp_path / "warm"), "cpu").model
    options = ModelOptions(model=f"hf:{base}?adapter={tmp_path / 'warm'}", device="cpu",
                           lora=LoraOptions(r=4) if lora else None)
    policy = load_policies(options, ["a"], lr=1e-2, reference=True)["a"]
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    with torch.no_grad(), policy.reference() as ref:
        # Merged vs unmerged adapter: the same function up to float32 rounding of logits near 10
        # (differences of 5e-6 to 1e-5 seen), so the tolerance is relative to that size.
        assert torch.allclose(ref(input_ids=ids).logits, warmed(input_ids=ids).logits, rtol=1e-5, atol=1e-4)
    with policy.active() as model:  # one step on some loss, so the trained policy moves away
        model(input_ids=ids).logits[0, -1, :8].sum().backward()
        policy.optimizer.step()
        policy.optimizer.step()
    spec = policy.save(tmp_path / "ckpt")
    assert spec == f"hf:{(tmp_path / 'ckpt').resolve()}"  # a whole model: the base it trained on is on no disk
    saved = load_model(resolve_source(str(tmp_path / "ckpt")), device="cpu").model
    with torch.no_grad(), policy.active() as model:
        live = model(input_ids=ids).logits
        assert torch.allclose(live, saved(input_ids=ids).logits, rtol=1e-5, atol=1e-4)  # merged on save: float32 rounding, as above
        assert not torch.allclose(live, warmed(input_ids=ids).logits, atol=1e-4)


def test_a_saved_adapter_is_the_trained_policy_and_plays_crossplay(base, tmp_path):
    cfg = config(base, tmp_path)
    policies, _ = trained(cfg, hand_rewards(rollouts(cfg)))
    spec = policies["a"].save(tmp_path / "ckpt-a")
    assert spec == f"hf:{base.resolve()}?adapter={(tmp_path / 'ckpt-a').resolve()}"
    loaded = load_model(resolve_source(str(base)), str(tmp_path / "ckpt-a"), "cpu")
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    with policies["a"].active() as live, torch.no_grad():
        assert torch.allclose(live(input_ids=ids).logits, loaded.model(input_ids=ids).logits, atol=1e-6)
    # b's adapter is another policy.
    with policies["b"].active() as live_b, torch.no_grad():
        assert not torch.allclose(live_b(input_ids=ids).logits, loaded.model(input_ids=ids).logits, atol=1e-4)
    run_spec = f"{spec}&max_new_tokens=8"
    runner = Crossplay(CrossplayConfig(policies=[run_spec], counterparts=["scripted:dealnodeal/conceder"],
                                       scenarios=1, concurrency=2, retries=0), tmp_path / "run")
    progress = asyncio.run(runner.run())
    assert progress.done == 2 and progress.errors == 0  # both roles against the counterpart


@pytest.mark.slow
def test_same_seed_same_rollouts_and_weights_and_both_trainers_share_the_rollout(base, tmp_path, monkeypatch):
    calls = []

    def collect_with_rewards(*args, **kwargs):
        calls.append(kwargs.get("traced", args[6] if len(args) > 6 else None))
        return hand_rewards(collect(*args, **kwargs))

    monkeypatch.setattr(ibrl, "collect", collect_with_rewards)

    def weights(out_dir, **over):
        specs = ibrl.run(config(base, tmp_path, out=str(out_dir), **over))
        return {role: (out_dir / f"checkpoint-{role}" / "adapter_model.safetensors").read_bytes() for role in specs}

    first = weights(tmp_path / "one")
    assert weights(tmp_path / "two") == first
    assert weights(tmp_path / "three", seed=1) != first
    ucfg = unilateral.UnilateralConfig(**config(base, tmp_path, out=str(tmp_path / "uni")).model_dump(),
                                       role="b", counterpart="scripted:dealnodeal/boulware")
    assert list(unilateral.run(ucfg)) == ["b"]
    assert calls == [["a", "b"]] * 3 + [["b"]]  # IB-RL and unilateral: the same rollout function


# Two processes (DDP and FSDP, torchrun on the CPU): tests/test_train_distributed.py.
