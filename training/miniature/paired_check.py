"""Two checks beside the miniature's learning gate, at the RL rollout temperature (RESULTS.md).

1. Paired gain: each trained role's final checkpoint and the SFT start, in that role, against the
   run's training partner, on the same train scenarios (those of steps steps+1 .. steps+10, which
   the run did not draw), `group_size` episodes each; paired t over scenarios.
2. Scenario draw: the SFT start alone on the scenarios of the gate's first and last windows (the
   ones the run drew) against each partner; its "last - first" is what the draw gives without any
   training.

    python training/miniature/paired_check.py [--recipe training/miniature/miniature.yaml] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scipy import stats

from ibrl_bench.agents.spec import build_agent
from ibrl_bench.domains import get_domain
from ibrl_bench.train import miniature as m
from ibrl_bench.train.recipes import load_recipe
from ibrl_bench.train.rollout import close_agents, collect, step_scenarios

SEED_OFFSET = 2000  # episode seeds apart from the training rollouts'


def role_means(domain, scenarios, steps, agents, role, config) -> list[float]:
    """The role's mean reward per scenario (one group each) over the scenarios of `steps`."""
    rl = config.rl
    means = []
    for step in steps:
        chosen = step_scenarios(scenarios, step, rl["scenarios_per_step"], config.seed)
        for g in collect(domain, chosen, agents, rl["group_size"], config.seed + SEED_OFFSET, step, [],
                         config.max_turns):
            means.append(sum(g.rewards(role)) / len(g.rollouts))
    return means


def play(domain, spec_a: str, spec_b: str):
    return {"a": build_agent(spec_a, domain.name).agent, "b": build_agent(spec_b, domain.name).agent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="training/miniature/miniature.yaml")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_recipe(args.recipe, m.MiniatureConfig, args.overrides, method="miniature")
    out = Path(config.out).resolve()
    domain = get_domain(m.DOMAIN)
    scenarios = domain.scenario_set("train", None)
    temperature = m.rl_temperature(config)
    sft = str(out / "sft/checkpoint")

    def spec(folder: str, t: float | None = None) -> str:
        return m.model_spec(folder, config, t or temperature)

    steps, window = config.rl["steps"], config.learning_window
    sft_partner = spec(sft, config.partner_temperature)
    cases = [("IB-RL", "a", out / "ibrl/checkpoint-a", spec(str(out / "ibrl/checkpoint-b"))),
             ("IB-RL", "b", out / "ibrl/checkpoint-b", spec(str(out / "ibrl/checkpoint-a"))),
             ("unilateral vs SFT", "a", out / "unilateral-sft/checkpoint-a", sft_partner),
             ("unilateral vs boulware", "a", out / "unilateral-boulware/checkpoint-a", m.BOULWARE)]
    fresh = range(steps + 1, steps + 11)
    print(f"Paired gain at temperature {temperature:g} (trained minus SFT start, same scenarios):")
    for run, role, checkpoint, partner in cases:
        per = {}
        for who, folder in (("trained", str(checkpoint)), ("sft", sft)):
            agents = play(domain, spec(folder), partner) if role == "a" else play(domain, partner, spec(folder))
            per[who] = role_means(domain, scenarios, fresh, agents, role, config)
            close_agents(agents)
        diff = [a - b for a, b in zip(per["trained"], per["sft"], strict=True)]
        ci = stats.ttest_rel(per["trained"], per["sft"]).confidence_interval(0.95)
        print(f"  {run}, role {role}: trained {sum(per['trained']) / len(diff):.2f}, SFT start "
              f"{sum(per['sft']) / len(diff):.2f}, gain {sum(diff) / len(diff):+.2f} [{ci.low:+.2f}, {ci.high:+.2f}] "
              f"over {len(diff)} scenarios")
    print(f"Scenario draw: the SFT start on the gate's windows (role {config.unilateral_role}), last - first:")
    for name, partner in (("boulware", m.BOULWARE), ("the SFT partner", sft_partner), ("the SFT start", spec(sft))):
        agents = play(domain, spec(sft), partner)
        first = role_means(domain, scenarios, range(1, window + 1), agents, "a", config)
        last = role_means(domain, scenarios, range(steps - window + 1, steps + 1), agents, "a", config)
        close_agents(agents)
        ci = stats.ttest_ind(last, first, equal_var=False).confidence_interval(0.95)
        d = sum(last) / len(last) - sum(first) / len(first)
        print(f"  vs {name}: {sum(first) / len(first):.2f} -> {sum(last) / len(last):.2f}, {d:+.2f} "
              f"[{ci.low:+.2f}, {ci.high:+.2f}]")


if __name__ == "__main__":
    main()
