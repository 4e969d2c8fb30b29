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
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig  # noqa: E402
from ibrl_bench.train import ibrl, unilateral  # noqa: E402
from ibrl_bench.train.distributed import make_accelerator  # noqa: E402
from ibrl_bench.train.ibrl import IBRLConfig, update_all  # noqa: E402
from ibrl_bench.train.losses import group_advantages, grpo_loss  # noqa: E402
from ibrl_bench.train.policy import LoraOptions, ModelOptions, load_policies  # noqa: E402
from ibrl_bench.train.rollout import collect, policy_agents  # noqa: E402
from ibrl_bench.train.samples import Sample, collate, token_logprobs, token_logprobs_and_entropy  # noqa: E402
from train_helpers import config, hand_rewards  # noqa: E402

GAME = get_domain("dealnodeal")
SCENARIOS = list(GAME.scenario_set("train", 1).scenarios)


def rollouts(cfg, seed=0):
    policies = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=False)
    agents = policy_agents(policies, GAME, cfg.temperature, cfg.max_new_tokens, 16, cfg.max_length)
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
def test_changing_b_rewards_leaves_a_update_bit_identical(tiny_model_1layer, tmp_path, lora):
    cfg = config(tiny_model_1layer, tmp_path)
    if not lora:
        cfg = cfg.model_copy(update={"model": ModelOptions(model=str(tiny_model_1layer), device="cpu")})
    groups = hand_rewards(rollouts(cfg))
    other = hand_rewards(copy_groups(groups), b_offset=3.5)
    assert [g.rewards("b") for g in groups] != [g.rewards("b") for g in other]
    _, first = trained(cfg, groups)
    _, second = trained(cfg, other)
    _, reversed_order = trained(cfg, other, order=("b", "a"))  # b updated before a: no matter
    initial = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=False)["a"].parameters()
    assert any(not torch.equal(p, q) for p, q in zip(first["a"], initial, strict=True)), "a was updated"
    assert all(torch.equal(p, q) for p, q in zip(first["a"], second["a"], strict=True))
    assert all(torch.equal(p, q) for p, q in zip(first["a"], reversed_order["a"], strict=True))
    assert any(not torch.equal(p, q) for p, q in zip(first["b"], second["b"], strict=True))


@pytest.mark.slow
def test_a_long_dialogue_keeps_its_private_values_from_rollout_to_update(tiny_model_1layer, tmp_path):
    # Ten messages of up to 16 tokens after a ~300-token role prompt: the late prompts outgrow
    # max_length - max_new_tokens, so the rollout agent must cut them, and the trainer must train
    # on exactly what was sampled.
    cfg = config(tiny_model_1layer, tmp_path, max_new_tokens=16, max_turns=10, max_length=360)
    groups = hand_rewards(rollouts(cfg))
    policies = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=True)
    tok = policies["a"].tokenizer
    values = SCENARIOS[0].data["values"]
    dropped = 0
    for rollout in groups[0].rollouts:
        said = [t.text for t in rollout.transcript if t.public and t.text.strip()]
        for role in ("a", "b"):
            own = "Your private values per item: " + ", ".join(
                f"{item}={v}" for item, v in zip(("book", "hat", "ball"), values[role], strict=True))
            for sample in rollout.samples[role]:
                assert len(sample.prompt_ids) <= cfg.max_length - cfg.max_new_tokens
                batch = collate([sample], tok.pad_token_id, cfg.max_length)
                fed = tok.decode(batch.input_ids[0][batch.action_mask[0] == 0])
                assert own in fed  # the role's private values reach the update
            last = tok.decode(rollout.samples[role][-1].prompt_ids)
            dropped += sum(text not in last for text in said)
    assert dropped > 0, "no prompt was long enough to be cut; lengthen the dialogue"
    metrics = update_all(policies, groups, cfg, make_accelerator(cfg))
    for role in ("a", "b"):
        assert metrics["truncated"][role] == 0.0
        assert metrics["ratio"][role] == pytest.approx(1.0, abs=1e-5)  # pi_old is the sampler's, exactly


def test_kl_coef_zero_runs_no_reference_forward(tiny_model_1layer, tmp_path):
    cfg = config(tiny_model_1layer, tmp_path, kl_coef=0.0,
                 model=ModelOptions(model=str(tiny_model_1layer), device="cpu"))
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


@pytest.mark.parametrize("role", ["a", "b"], ids=["first-adapter", "added-adapter"])
def test_a_role_loss_has_no_gradient_at_the_other_role_tokens_nor_on_its_adapter(tiny_model_1layer, tmp_path, role):
    # a's adapter is PEFT's first (get_peft_model), b's is added to it (add_adapter): the two are
    # made by different calls, so each role's coverage is checked on its own.
    cfg = config(tiny_model_1layer, tmp_path)
    groups = rollouts(cfg)
    policies = load_policies(cfg.model, ["a", "b"], cfg.lr, reference=True)
    mine, other = policies[role], policies["b" if role == "a" else "a"]
    sample = groups[0].rollouts[0].samples[role][-1]  # its last move: the other side's messages are in its prompt
    batch = collate([sample], pad_id=mine.tokenizer.pad_token_id)
    p = len(sample.prompt_ids)
    with mine.reference() as reference:
        ref = token_logprobs(reference, batch, cfg.temperature)
    with mine.active() as model:
        spy = KeepLogits(model)
        logprobs, _ = token_logprobs_and_entropy(spy, batch, cfg.temperature)
        loss, _ = grpo_loss(logprobs, batch.old_logprobs, ref, torch.tensor([1.0]), batch.action_mask, cfg.grpo())
        loss.backward()
    grad = spy.logits.grad[0]  # [T, V]; row t predicts token t + 1
    # Rows 0 .. p-2 predict prompt tokens (system text, the other side's messages, template): no gradient.
    assert grad[: p - 1].abs().max().item() == 0.0
    assert grad[p - 1:].abs().max().item() > 0.0
    assert all(x.grad is None or not x.grad.any() for x in other.parameters())
    assert any(x.grad is not None and x.grad.any() for x in mine.parameters())


def test_a_role_batch_holds_its_own_moves_only(monkeypatch):
    """update_all hands each role's update exactly that role's moves, in episode order, with its
    own advantages; a batch that took the other role's moves (or every move) would fail here."""
    from ibrl_bench.domains.base import Outcome
    from ibrl_bench.train.rollout import Group, Rollout

    def move(role, episode, k):  # ids that name their role and place
        return Sample([1], [ord(role), episode, k], [-1.0] * 3)

    groups = []
    for s, scenario in enumerate(SCENARIOS[:1] * 2):
        rollouts_ = []
        for g in range(3):
            rewards = {"a": float(g), "b": float(2 - g) * 3}
            outcome = Outcome(status="ok", agreement=True, success=True, rewards=rewards, turns=4)
            samples = {r: [move(r, s * 3 + g, k) for k in range(2 + (r == "b"))] for r in ("a", "b")}
            rollouts_.append(Rollout(scenario.id, g, outcome, samples, []))
        groups.append(Group(scenario, rollouts_))
    seen = {}

    def spy(policy, samples, advantages, config, accelerator):
        seen[policy] = (samples, advantages)
        return {"tokens": 0}

    monkeypatch.setattr(ibrl, "update_role", spy)
    cfg = IBRLConfig(model=ModelOptions(model="unused"), out="unused")
    update_all({"a": "policy-a", "b": "policy-b"}, groups, cfg, accelerator=None)
    for role in ("a", "b"):
        samples, advantages = seen[f"policy-{role}"]
        expected = [x for g in groups for r in g.rollouts for x in r.samples[role]]
        assert samples == expected
        assert {x.completion_ids[0] for x in samples} == {ord(role)}
        # Every move carries its episode's advantage from its own role's rewards (a: 0, 1, 2 -> -1, 0, 1).
        per_episode = [a for g in groups
                       for r, a in zip(g.rollouts, group_advantages(g.rewards(role), True), strict=True)
                       for _ in r.samples[role]]
        assert advantages == pytest.approx(per_episode)
    assert seen["policy-a"][1][:2] == pytest.approx([-1.0, -1.0], abs=1e-3)


def test_gradients_do_not_accumulate_across_updates(tiny_model_1layer, tmp_path):
    """With the learning rate at 0 the weights never move, so every optimizer step must see the
    same gradient as the first: a missing zero_grad would double it at the second update, inside
    one step (updates_per_step=2) and across two steps."""
    cfg = config(tiny_model_1layer, tmp_path, updates_per_step=2, max_grad_norm=None, kl_coef=0.0)
    groups = hand_rewards(rollouts(cfg))
    policy = load_policies(cfg.model, ["a"], cfg.lr, reference=False)["a"]
    for group in policy.optimizer.param_groups:
        group["lr"] = 0.0
    seen = []
    step = policy.optimizer.step

    def spy(*args, **kwargs):
        seen.append([p.grad.clone() for p in policy.parameters()])
        return step(*args, **kwargs)

    policy.optimizer.step = spy
    samples, advantages = ibrl.role_batch(groups, "a", cfg.grpo())
    accelerator = make_accelerator(cfg)
    ibrl.update_role(policy, samples, advantages, cfg, accelerator)
    ibrl.update_role(policy, samples, advantages, cfg, accelerator)
    assert len(seen) == 4
    assert any(g.abs().sum() > 0 for g in seen[0])
    for later in seen[1:]:
        assert all(torch.allclose(g, h, rtol=1e-5, atol=1e-8) for g, h in zip(seen[0], later, strict=True))


def test_gradient_checkpointing_changes_memory_not_gradients_and_keeps_dropout_off(tiny_model_1layer):
    grads = []
    for checkpointing in (False, True):
        options = ModelOptions(model=str(tiny_model_1layer), lora=LoraOptions(r=4, dropout=0.5), device="cpu",
                               gradient_checkpointing=checkpointing)
        policy = load_policies(options, ["a", "b"], lr=1e-3, reference=False)["a"]
        batch = collate([Sample(list(range(5, 40)), [50, 51, 52], [-1.0] * 3)], pad_id=0)
        with policy.active() as model:
            first, second = token_logprobs(model, batch), token_logprobs(model, batch)
            assert torch.equal(first, second)  # no dropout, even in training mode with lora dropout 0.5
            (first * batch.action_mask).sum().backward()
        assert model.training == checkpointing  # transformers checkpoints only in training mode
        grads.append([p.grad.clone() for p in policy.parameters()])
    assert all(torch.allclose(g, h, atol=1e-6) for g, h in zip(*grads, strict=True))


@pytest.mark.parametrize("lora", [True, False], ids=["lora-on-top", "full"])
def test_training_from_a_warm_start_adapter_starts_and_saves_from_it_merged(tiny_model_1layer, tmp_path, lora):
    from peft import LoraConfig, get_peft_model

    from ibrl_bench.models.loading import load_model, resolve_source

    # A warm-start adapter with non-zero weights, as an SFT run with LoRA leaves.
    warm = get_peft_model(load_model(resolve_source(str(tiny_model_1layer)), device="cpu").model,
                          LoraConfig(r=2, init_lora_weights=False))
    warm.save_pretrained(tmp_path / "warm")
    warmed = load_model(resolve_source(str(tiny_model_1layer)), str(tmp_path / "warm"), "cpu").model
    options = ModelOptions(model=f"hf:{tiny_model_1layer}?adapter={tmp_path / 'warm'}", device="cpu",
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
        # merged on save: float32 rounding, as above
        assert torch.allclose(live, saved(input_ids=ids).logits, rtol=1e-5, atol=1e-4)
        assert not torch.allclose(live, warmed(input_ids=ids).logits, atol=1e-4)


def test_a_saved_adapter_is_the_trained_policy_and_plays_crossplay(tiny_model_1layer, tmp_path):
    cfg = config(tiny_model_1layer, tmp_path)
    policies, _ = trained(cfg, hand_rewards(rollouts(cfg)))
    spec = policies["a"].save(tmp_path / "ckpt-a")
    assert spec == f"hf:{tiny_model_1layer.resolve()}?adapter={(tmp_path / 'ckpt-a').resolve()}"
    loaded = load_model(resolve_source(str(tiny_model_1layer)), str(tmp_path / "ckpt-a"), "cpu")
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
def test_same_seed_same_rollouts_and_weights_and_both_trainers_share_the_rollout(tiny_model_1layer, tmp_path,
                                                                                 monkeypatch):
    calls = []

    def collect_with_rewards(*args, **kwargs):
        calls.append(kwargs.get("traced", args[6] if len(args) > 6 else None))
        return hand_rewards(collect(*args, **kwargs))

    monkeypatch.setattr(ibrl, "collect", collect_with_rewards)

    def weights(out_dir, **over):
        specs = ibrl.run(config(tiny_model_1layer, tmp_path, out=str(out_dir), **over))
        return {role: (out_dir / f"checkpoint-{role}" / "adapter_model.safetensors").read_bytes() for role in specs}

    first = weights(tmp_path / "one")
    assert weights(tmp_path / "two") == first
    assert weights(tmp_path / "three", seed=1) != first
    ucfg = unilateral.UnilateralConfig(**config(tiny_model_1layer, tmp_path, out=str(tmp_path / "uni")).model_dump(),
                                       role="b", counterpart="scripted:dealnodeal/boulware")
    assert list(unilateral.run(ucfg)) == ["b"]
    assert calls == [["a", "b"]] * 3 + [["b"]]  # IB-RL and unilateral: the same rollout function


# Two processes (DDP and FSDP on the CPU, started with the environment torchrun gives them):
# tests/test_train_distributed.py.


def test_signal_groups_counts_the_groups_whose_rewards_differ_per_role():
    """The logged share of groups that carry an advantage: a group of equal rewards teaches
    nothing; role b's rewards must not decide role a's share (a shared count would fail here)."""
    from ibrl_bench.domains.base import Outcome
    from ibrl_bench.train.rollout import Group, Rollout

    def group(rewards_a, rewards_b):
        rollouts_ = [Rollout(SCENARIOS[0].id, g, Outcome(status="ok", agreement=True, success=True,
                                                         rewards={"a": a, "b": b}, turns=2), {}, [])
                     for g, (a, b) in enumerate(zip(rewards_a, rewards_b, strict=True))]
        return Group(SCENARIOS[0], rollouts_)

    groups = [group([3.0, 3.0, 3.0], [1.0, 2.0, 1.0]), group([0.0, 5.0, 0.0], [4.0, 4.0, 4.0]),
              group([2.0, 2.0, 2.0], [0.0, 0.0, 0.0]), group([1.0, 0.0, 0.0], [6.0, 0.0, 6.0])]
    cfg = IBRLConfig(model=ModelOptions(model="unused"), out="unused")
    shares = ibrl.signal_groups(groups, ["a", "b"], make_accelerator(cfg))
    assert shares == {"a": 0.5, "b": 0.5}
    assert ibrl.signal_groups(groups[:1], ["a", "b"], make_accelerator(cfg)) == {"a": 0.0, "b": 1.0}
