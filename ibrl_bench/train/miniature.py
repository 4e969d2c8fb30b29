"""The paper's experiment in miniature, end to end on a CPU: one command from scripted transcripts
to a table of cross-play results, with the evidence that each baseline learned (or did not).

    ibrl-bench miniature --recipe training/miniature/miniature.yaml [KEY=VALUE ...]

Stages, in order; each writes OUT/<stage>/ and its line of OUT/summary.json (wall and CPU seconds):

  transcripts          terse scripted negotiators (none of the held-out panel) play each other on
                       the train split                                             runner.crossplay
  sft                  a tiny model built from scratch imitates the moves that paid their speaker
                       (`min_own_reward`), with the compact role prompt                  train.sft
  gate                 the SFT policy at the rollout temperature against itself (the partner both
                       RL methods start with) and against boulware: if invalid > max_invalid or
                       own reward > 0 in fewer than min_paying of the self-play episodes, the run
                       stops here, with the numbers
  ibrl                 both roles from the SFT checkpoint, rollouts at `rl_temperature` (default:
                       `temperature`, which the gate and cross-play use)              train.ibrl
  unilateral-sft       role `unilateral_role` against the frozen SFT copy (primary)
  unilateral-boulware  the same role against scripted boulware (secondary)        train.unilateral
                       (the same steps, scenarios and group size as IB-RL: the same episodes per
                       trained role)
  learning             the learning gate: every trained role's final checkpoint and the SFT start,
                       in that role, against the run's training partner, on `eval_scenarios` fresh
                       train scenarios that no RL step drew, `group_size` episodes each, at the RL
                       temperature; paired t over scenario means, Holm over the trained roles
  crossplay            every checkpoint and the SFT reference, in that role, against the held-out
                       panel and against every training counterpart (the test split)
  mismatch             per method: the gap and the difference-in-differences against the SFT
                       reference (stats.mismatch); IB-RL against each unilateral run: the paired
                       difference of their DiDs, a cluster bootstrap over scenarios
  report               learning curves (OUT/curves.png), the learning gate per trained role, the
                       table: OUT/report.md (rewritten by every command: it only reads the stages
                       before it)

Learning gate (declared after seeds 0 and 1 were seen, before seed 2; RESULTS.md): a role learned
if its final checkpoint beats the SFT start against the same partner on the same scenarios, the
Holm-adjusted p-value of the paired t (over the trained roles of the run) below 0.05 and the gain
positive. A role that did not learn is reported as "did not learn", and the report claims nothing
about it. The reward over the last `learning_window` RL steps minus the first (Welch t over the
steps' groups) stays in the report as a descriptive line: its two windows hold different
scenarios, whose draw alone moves it by about two points.

Every model speaks the compact prompt and every scripted agent is terse (the miniature's policies
learned the protocol from terse transcripts; the scripted strategies are the same as the verbose
ones, turn for turn). A finished stage (its done.json written for the same recipe) is not run
again when the command is repeated with the same settings for it and the stages before it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ibrl_bench.domains.base import content_hash
from ibrl_bench.errors import UserError

DOMAIN = "dealnodeal"
STAGES = ("transcripts", "sft", "gate", "ibrl", "unilateral-sft", "unilateral-boulware", "learning", "crossplay",
          "mismatch", "report")
# The recipe fields each stage reads, on top of those of the stages before it: a stage is reused
# when these are unchanged (so a new RL setting does not rebuild the transcripts and the SFT model).
READS = {"transcripts": ["negotiators", "transcript_scenarios", "max_turns", "heldout"],
         "sft": ["sft", "prompt", "max_new_tokens", "max_length", "seed"], "gate": ["gate", "temperature"],
         "ibrl": ["rl", "rl_temperature"], "unilateral-sft": ["unilateral_role", "partner_temperature"],
         "unilateral-boulware": [], "learning": ["eval_scenarios"],
         "crossplay": [], "mismatch": [], "report": ["learning_window"]}
RERUN = {"report"}  # cheap, and reads only the stages before it: rewritten by every command
SEED_OFFSET = 2000  # the learning gate's episode seeds, apart from the RL rollouts' (rollout.episode_seed)
BOULWARE = "scripted:dealnodeal/boulware?terse=true"
HELDOUT = ["scripted:dealnodeal/conceder?terse=true", "scripted:dealnodeal/hardliner?terse=true",
           "scripted:dealnodeal/random?terse=true"]


class GateOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenarios: int = Field(40, ge=1)  # train-split scenarios, each played in both roles
    max_invalid: float = Field(0.2, ge=0, le=1)
    min_paying: float = Field(0.3, ge=0, le=1)  # share of episodes with own reward > 0


class MiniatureConfig(BaseModel):
    """A recipe of the miniature. `sft` and `rl` are passed to SFTConfig and IBRLConfig (the RL
    block is shared by IB-RL and both unilateral runs); the fields set here fill in the rest."""

    model_config = ConfigDict(extra="forbid")

    out: str
    seed: int = 0
    prompt: str = "compact"
    negotiators: list[str] = Field(default_factory=lambda: ["boulware", "fair", "tit_for_tat"])
    transcript_scenarios: int = Field(200, ge=1)
    max_turns: int = Field(6, ge=2)
    max_new_tokens: int = Field(24, ge=1)
    max_length: int = Field(256, ge=16)
    temperature: float = Field(1.0, gt=0)  # the gate and the cross-play evaluation (and the rollouts, by default)
    # The RL rollouts' own temperature (both roles and the frozen SFT partner), so that the groups
    # explore while the gate and the evaluation play as the model is meant to; None: `temperature`.
    rl_temperature: float | None = Field(None, gt=0)
    # The frozen SFT partner's own temperature in unilateral vs SFT's rollouts, so that the trained
    # role explores against the partner as it is evaluated; None: the rollouts' (`rl_temperature`).
    partner_temperature: float | None = Field(None, gt=0)
    sft: dict[str, Any] = Field(default_factory=dict)
    gate: GateOptions = Field(default_factory=GateOptions)
    rl: dict[str, Any] = Field(default_factory=dict)
    unilateral_role: str = "a"
    heldout: list[str] = Field(default_factory=lambda: list(HELDOUT))
    eval_scenarios: int = Field(40, ge=2)  # test split
    learning_window: int = Field(5, ge=1)


class Stage(BaseModel):
    name: str
    status: str  # ran | reused | stopped
    wall_s: float
    cpu_s: float
    result: dict[str, Any] = Field(default_factory=dict)


def run(config: MiniatureConfig, progress: Callable[[str], None] = lambda line: None) -> list[Stage]:
    """Every stage in order (see the module docstring); stops after the warm-start gate if it fails."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    from ibrl_bench.domains import get_domain

    fields = config.model_dump(mode="json")
    fields["prompt"] = get_domain(DOMAIN).role_prompt(config.prompt).id  # a reworded prompt reruns SFT and on
    stages: list[Stage] = []
    state: dict[str, Any] = {}
    read: list[str] = []
    for name in STAGES:
        read += READS[name]
        recipe_hash = content_hash({key: fields[key] for key in read})
        stage = _run_stage(name, config, out, recipe_hash, state, progress)
        stages.append(stage)
        _write_summary(out, stages)
        if stage.status == "stopped":
            break
    return stages


def _run_stage(name: str, config: MiniatureConfig, out: Path, recipe_hash: str, state: dict[str, Any],
               progress: Callable[[str], None]) -> Stage:
    folder = out / name
    done = folder / "done.json"
    if done.is_file() and name not in RERUN:
        saved = json.loads(done.read_text())
        if saved.get("recipe") == recipe_hash:
            stage = Stage(**saved["stage"])
            if stage.status != "stopped":  # a gate that stopped the run stops it again
                stage = stage.model_copy(update={"status": "reused"})
            state[name] = stage.result
            progress(f"{name}: reused {folder}")
            return stage
    if done.is_file():
        # Finished under other settings: its run folders would refuse the new ones (or resume
        # them from the old), so the stage starts over. A stage interrupted midway (no done.json)
        # keeps its folder and resumes.
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    progress(f"{name}: running")
    wall, cpu = time.perf_counter(), time.process_time()
    result = STAGE_FUNCTIONS[name](config, folder, state)
    status = "stopped" if result.pop("stop", False) else "ran"
    stage = Stage(name=name, status=status, wall_s=round(time.perf_counter() - wall, 1),
                  cpu_s=round(time.process_time() - cpu, 1), result=result)
    state[name] = result
    done.write_text(json.dumps({"recipe": recipe_hash, "stage": stage.model_dump()}, indent=2) + "\n")
    progress(f"{name}: {status} in {stage.wall_s:.0f} s wall, {stage.cpu_s:.0f} s CPU")
    return stage


def _write_summary(out: Path, stages: list[Stage]) -> None:
    body = {"stages": [s.model_dump() for s in stages],
            "wall_s": round(sum(s.wall_s for s in stages), 1), "cpu_s": round(sum(s.cpu_s for s in stages), 1)}
    (out / "summary.json").write_text(json.dumps(body, indent=2) + "\n")


# -- specs ---------------------------------------------------------------------------------------


def model_spec(folder: str, config: MiniatureConfig, temperature: float | None = None) -> str:
    """How a miniature checkpoint plays: its prompt, the temperature (the evaluation's unless
    given), the move length."""
    return (f"hf:{Path(folder).resolve()}?prompt={config.prompt}&temperature={temperature or config.temperature:g}"
            f"&max_new_tokens={config.max_new_tokens}&batch_size=64&device=cpu")


def _folder(spec: str) -> str:
    """The checkpoint folder of a trainer's hf: spec (the miniature trains whole models, no adapters)."""
    return spec.removeprefix("hf:").split("?")[0]


def _crossplay(folder: Path, **fields: Any) -> Any:
    import asyncio

    from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig
    from ibrl_bench.runs import load_run

    runner = Crossplay(CrossplayConfig(domain=DOMAIN, retries=0, concurrency=64, **fields), folder)
    progress = asyncio.run(runner.run())
    if progress.errors:
        raise UserError(f"{progress.errors} episodes of {folder} failed (infrastructure errors); "
                        "see its episodes.jsonl")
    return load_run(folder).episodes


# -- stages --------------------------------------------------------------------------------------


def transcripts(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    specs = [f"scripted:{DOMAIN}/{name}?terse=true" for name in config.negotiators]
    overlap = set(specs) & set(config.heldout)
    if overlap:
        raise UserError(f"{', '.join(sorted(overlap))} is in the held-out panel; SFT must not imitate it")
    episodes = _crossplay(folder / "run", policies=specs, counterparts=specs, split="train",
                          scenarios=config.transcript_scenarios, max_turns=config.max_turns)
    return {"run": str(folder / "run"), "episodes": len(episodes), "agreement": float(episodes["agreement"].mean())}


def sft(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    from ibrl_bench.train import sft as trainer
    from ibrl_bench.train.steplog import StepLog

    fields = {"from_scratch": {"seed": config.seed}, "episodes": "agreement", "min_own_reward": 5, **config.sft,
              "domain": DOMAIN, "transcripts": [state["transcripts"]["run"]], "out": str(folder),
              "prompt": config.prompt, "max_new_tokens": config.max_new_tokens, "max_length": config.max_length,
              "seed": config.seed}
    sft_config = trainer.SFTConfig(**fields)
    with StepLog(folder, sft_config.steps, "sft", quiet=True) as log:
        spec = trainer.run(sft_config, log)
    summary = json.loads((folder / "sft_summary.json").read_text())
    return {"checkpoint": _folder(spec), "train_samples": summary["train_samples"],
            "heldout_loss_before": summary["heldout_loss_before"], "heldout_loss_after": summary["heldout_loss_after"]}


def gate(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    policy = model_spec(state["sft"]["checkpoint"], config)
    episodes = _crossplay(folder / "run", policies=[policy], counterparts=[policy, BOULWARE], split="train",
                          scenarios=config.gate.scenarios, max_turns=config.max_turns)
    numbers = {}
    for name, counterpart in (("self_play", policy), ("boulware", BOULWARE)):
        cell = episodes[episodes["counterpart"] == counterpart]
        numbers[name] = {"episodes": len(cell), "invalid": float((cell["status"] == "invalid").mean()),
                         "paying": float((cell["policy_score"] > 0).mean()),
                         "agreement": float(cell["agreement"].mean()),
                         "policy_score": float(cell["policy_score"].mean())}
    mine = numbers["self_play"]
    passed = mine["invalid"] <= config.gate.max_invalid and mine["paying"] >= config.gate.min_paying
    result = {"passed": passed, "max_invalid": config.gate.max_invalid, "min_paying": config.gate.min_paying,
              "temperature": config.temperature, **numbers}
    if not passed:
        result["stop"] = True
        (folder.parent / "report.md").write_text(_gate_report(result))
    return result


def rl_temperature(config: MiniatureConfig) -> float:
    return config.rl_temperature or config.temperature


def sft_partner(config: MiniatureConfig, state: dict[str, Any]) -> str:
    """The frozen SFT copy as unilateral vs SFT's training partner: at `partner_temperature` if set,
    else as IB-RL's partner samples in training (the RL temperature). Cross-play plays it at the
    evaluation temperature."""
    return model_spec(state["sft"]["checkpoint"], config, config.partner_temperature or rl_temperature(config))


def _rl_fields(config: MiniatureConfig, state: dict[str, Any], out: Path) -> dict[str, Any]:
    return {"kl_coef": 0.04, "lr": 1e-4, "micro_batch_size": 32, "rollout_batch_size": 64, **config.rl,
            "model": {"model": f"hf:{state['sft']['checkpoint']}", "device": "cpu"}, "domain": DOMAIN,
            "split": "train", "out": str(out), "prompt": config.prompt, "temperature": rl_temperature(config),
            "max_new_tokens": config.max_new_tokens, "max_length": config.max_length, "max_turns": config.max_turns,
            "seed": config.seed}


def ibrl(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    from ibrl_bench.train import ibrl as trainer
    from ibrl_bench.train.steplog import StepLog

    rl = trainer.IBRLConfig(**_rl_fields(config, state, folder))
    with StepLog(folder, rl.steps, "ibrl", quiet=True) as log:
        specs = trainer.run(rl, log)
    return {"checkpoints": {role: _folder(spec) for role, spec in specs.items()}, "temperature": rl.temperature}


def _unilateral(counterpart: str) -> Callable[[MiniatureConfig, Path, dict[str, Any]], dict[str, Any]]:
    def stage(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
        from ibrl_bench.train import unilateral as trainer
        from ibrl_bench.train.steplog import StepLog

        partner = sft_partner(config, state) if counterpart == "sft" else counterpart
        rl = trainer.UnilateralConfig(**_rl_fields(config, state, folder), role=config.unilateral_role,
                                      counterpart=partner)
        with StepLog(folder, rl.steps, "unilateral", quiet=True) as log:
            specs = trainer.run(rl, log)
        return {"checkpoint": _folder(specs[config.unilateral_role]), "counterpart": partner,
                "temperature": rl.temperature}

    return stage


def trained_roles(config: MiniatureConfig, state: dict[str, Any]) -> list[dict[str, str]]:
    """Every trained role of the three RL runs: its run, role, final checkpoint and the training
    partner as it sampled in the rollouts (the other IB-RL role, the frozen SFT copy, boulware)."""
    t = rl_temperature(config)
    a, b = state["ibrl"]["checkpoints"]["a"], state["ibrl"]["checkpoints"]["b"]
    role = config.unilateral_role
    return [{"run": "IB-RL", "role": "a", "checkpoint": a, "partner": model_spec(b, config, t)},
            {"run": "IB-RL", "role": "b", "checkpoint": b, "partner": model_spec(a, config, t)},
            *({"run": label, "role": role, "checkpoint": state[stage]["checkpoint"],
               "partner": state[stage]["counterpart"]}
              for stage, label in (("unilateral-sft", "unilateral vs SFT"),
                                   ("unilateral-boulware", "unilateral vs boulware")))]


def fresh_scenarios(scenarios: Any, steps: int, per_step: int, count: int, seed: int) -> list[Any]:
    """`count` train scenarios that no RL step drew: the runs' seeded order (rollout.step_scenarios)
    walked on from the position after the last step's, skipping any scenario a step drew."""
    from ibrl_bench.train.rollout import step_scenarios

    drawn = {s.id for step in range(1, steps + 1) for s in step_scenarios(scenarios, step, per_step, seed)}
    if len(scenarios.scenarios) - len(drawn) < count:
        raise UserError(f"the train split holds {len(scenarios.scenarios) - len(drawn)} scenarios that no RL step "
                        f"drew, fewer than eval_scenarios={count}; lower eval_scenarios or the RL steps")
    fresh: dict[str, Any] = {}  # by id, in the order found
    position = (steps + 1) * per_step
    while len(fresh) < count:
        (s,) = step_scenarios(scenarios, position, 1, seed)  # one scenario a "step": the order's position
        if s.id not in drawn:
            fresh.setdefault(s.id, s)
        position += 1
    return list(fresh.values())


def learning(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    """The learning gate (module docstring): each trained role's final checkpoint and the SFT start
    play the same fresh scenarios against the same partner, with the same episode seeds."""
    from ibrl_bench.agents.spec import build_agent
    from ibrl_bench.domains import get_domain
    from ibrl_bench.train import miniature_report
    from ibrl_bench.train.ibrl import IBRLConfig
    from ibrl_bench.train.rollout import close_agents, collect

    rl = IBRLConfig(**_rl_fields(config, state, folder))
    domain = get_domain(DOMAIN)
    scenarios = fresh_scenarios(domain.scenario_set("train", None), rl.steps, rl.scenarios_per_step,
                                config.eval_scenarios, config.seed)
    t = rl_temperature(config)
    cases = []
    for case in trained_roles(config, state):
        other = "b" if case["role"] == "a" else "a"
        played = {}
        for side, checkpoint in (("trained", case["checkpoint"]), ("sft", state["sft"]["checkpoint"])):
            agents = {case["role"]: build_agent(model_spec(checkpoint, config, t), DOMAIN).agent,
                      other: build_agent(case["partner"], DOMAIN).agent}
            try:
                groups = collect(domain, scenarios, agents, rl.group_size, config.seed + SEED_OFFSET, rl.steps + 1, [],
                                 config.max_turns)
            finally:
                close_agents(agents)
            played[side] = {g.scenario.id: g.rewards(case["role"]) for g in groups}
        cases.append({**case, **played})
    gates = miniature_report.paired_gates(cases)
    (folder / "episodes.json").write_text(json.dumps(cases, indent=1) + "\n")  # every reward, for a reader to redo
    return {"gates": gates, "temperature": t, "scenarios": len(scenarios), "episodes_per_scenario": rl.group_size,
            "file": str(folder / "episodes.json")}


def methods(config: MiniatureConfig, state: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each evaluated policy (in the unilateral role): its spec and its training counterpart's."""
    role = config.unilateral_role
    other = "b" if role == "a" else "a"
    sft_spec = model_spec(state["sft"]["checkpoint"], config)
    return {
        "SFT reference": {"policy": sft_spec, "train_counterpart": sft_spec},
        "IB-RL": {"policy": model_spec(state["ibrl"]["checkpoints"][role], config),
                  "train_counterpart": model_spec(state["ibrl"]["checkpoints"][other], config)},
        "unilateral vs SFT": {"policy": model_spec(state["unilateral-sft"]["checkpoint"], config),
                              "train_counterpart": sft_spec},
        "unilateral vs boulware": {"policy": model_spec(state["unilateral-boulware"]["checkpoint"], config),
                                   "train_counterpart": BOULWARE},
    }


def crossplay(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    runs = methods(config, state)
    policies = [m["policy"] for m in runs.values()]
    counterparts = list(dict.fromkeys([*config.heldout, *(m["train_counterpart"] for m in runs.values())]))
    episodes = _crossplay(folder / "run", policies=policies, counterparts=counterparts, roles=[config.unilateral_role],
                          split="test", scenarios=config.eval_scenarios, max_turns=config.max_turns)
    return {"run": str(folder / "run"), "episodes": len(episodes), "methods": runs}


def mismatch(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    """Each method's gap and difference-in-differences against the SFT reference, and IB-RL's DiD
    minus each unilateral run's, paired by game, the held-out panel as a sample of counterparts
    (`stats.mismatch.mismatch_many`, as `ibrl-bench mismatch --method ... --reference ...`)."""
    from ibrl_bench.runs import load_run
    from ibrl_bench.stats.mismatch import mismatch_many

    frame = load_run(state["crossplay"]["run"]).episodes
    runs = state["crossplay"]["methods"]
    reference = runs["SFT reference"]["policy"]
    trained = {name: m for name, m in runs.items() if name != "SFT reference"}
    result = mismatch_many(frame, methods=[(m["policy"], m["train_counterpart"]) for m in trained.values()],
                           reference=reference, heldout=config.heldout, metric="policy_score")
    names = {(m["policy"], m["train_counterpart"]): name for name, m in trained.items()}
    out: dict[str, Any] = {"metric": "policy_score", "heldout": config.heldout, "view": result.view,
                           "notes": result.notes, "methods": {}, "versus": {}}
    # The reference's own gap, against the SFT copy it is (the partner the unilateral run trains with).
    (own,) = mismatch_many(frame, methods=[(reference, runs["SFT reference"]["train_counterpart"])],
                           heldout=config.heldout, metric="policy_score").results
    out["methods"]["SFT reference"] = json.loads(own.model_dump_json())
    for r in result.results:
        out["methods"][names[(r.policy, r.train_counterpart)]] = json.loads(r.model_dump_json())
    by_policy = {m["policy"]: name for name, m in trained.items()}
    for c in result.comparisons:  # each read as IB-RL minus the other method
        first, second = by_policy[c.a], by_policy[c.b]
        d = json.loads(c.did_difference.model_dump_json())
        if second == "IB-RL":
            first, second = second, first
            d = {**d, "estimate": -d["estimate"], "low": -d["high"], "high": -d["low"]}
        if first == "IB-RL":
            out["versus"][second] = {**d, "p": c.test.p_value, "p_holm": c.p_holm}
    (folder / "mismatch.json").write_text(json.dumps(out, indent=2) + "\n")
    return {"file": str(folder / "mismatch.json")}


def report(config: MiniatureConfig, folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    from ibrl_bench.train import miniature_report

    out = folder.parent
    curves = miniature_report.curves(out, config)
    windows = miniature_report.window_differences(out, config)
    table = miniature_report.table(state["crossplay"]["run"], state["crossplay"]["methods"], config)
    mismatch_data = json.loads(Path(state["mismatch"]["file"]).read_text())
    from ibrl_bench.runs import load_run

    paired = miniature_report.paired_gains(load_run(state["crossplay"]["run"]).episodes, state["crossplay"]["methods"])
    text = miniature_report.markdown(state, windows, table, mismatch_data, curves, config, paired)
    (out / "report.md").write_text(text)
    return {"report": str(out / "report.md"), "curves": str(curves), "windows": windows, "paired": paired}


STAGE_FUNCTIONS: dict[str, Callable[[MiniatureConfig, Path, dict[str, Any]], dict[str, Any]]] = {
    "transcripts": transcripts, "sft": sft, "gate": gate, "ibrl": ibrl,
    "unilateral-sft": _unilateral("sft"), "unilateral-boulware": _unilateral(BOULWARE), "learning": learning,
    "crossplay": crossplay, "mismatch": mismatch, "report": report,
}


def _gate_report(result: dict[str, Any]) -> str:
    from ibrl_bench.train import miniature_report

    lines = ["# Miniature: stopped at the warm-start gate", "",
             f"The SFT policy at temperature {result['temperature']:g} does not play well enough for RL to have "
             f"a signal (gate: invalid <= {result['max_invalid']:.0%} and own reward > 0 in >= "
             f"{result['min_paying']:.0%} of self-play episodes). No RL was run; nothing is claimed.", "",
             *miniature_report.gate_table(result)]
    return "\n".join(lines) + "\n"
