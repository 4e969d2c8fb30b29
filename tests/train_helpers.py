"""What the RL trainers' tests share: a small IB-RL configuration and rewards given by hand.
Imported by test modules that have already skipped where torch is missing."""

from ibrl_bench.train.ibrl import IBRLConfig
from ibrl_bench.train.policy import LoraOptions, ModelOptions


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
