"""The miniature's report (train/miniature.py): learning curves, the learning gate, the table.

Learning curves: per trained role and step, the mean reward against the training partner (the
mean over the step's groups, one per scenario) with a 95% t interval over those groups, and the
role's KL to the SFT reference and token entropy, from each run's train_log.jsonl.

Learning gate (`paired_gates`, played by the pipeline's `learning` stage): per trained role, the
final checkpoint's mean reward per scenario minus the SFT start's on the same scenarios against the
same partner, paired t over scenarios (stats.intervals.paired_interval), Holm over the trained
roles of the run; a role learned if the Holm-adjusted p-value is below ALPHA and the gain positive.

Window difference (`window_differences`, descriptive): the groups of the last `learning_window`
steps against those of the first (each group a scenario's mean over its G episodes; scenarios
differ between steps, so the two sets are independent samples), Welch's t interval for last -
first (scipy.stats.ttest_ind). It decides nothing: the draw of the two windows' scenarios alone
moves it by about two points at four scenarios a step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RUNS = {"ibrl": "IB-RL", "unilateral-sft": "unilateral vs SFT", "unilateral-boulware": "unilateral vs boulware"}
ALPHA = 0.05  # the learning gate's family-wise level (Holm over the trained roles)


def trained_roles(out: Path) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(run label, role, its log records) for every trained role of the three RL runs."""
    from ibrl_bench.train.steplog import read_log

    found = []
    for folder, label in RUNS.items():
        records = read_log(out / folder)
        for role in records[0]["reward_groups"]:
            found.append((label, role, records))
    return found


def _t_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2 or float(x.std(ddof=1)) == 0.0:
        return mean, mean, mean
    low, high = stats.t.interval(confidence, len(x) - 1, loc=mean, scale=stats.sem(x))
    return mean, float(low), float(high)


def curves(out: Path, config: Any) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for label, role, records in trained_roles(out):
        steps = [r["step"] for r in records]
        reward = [_t_interval(r["reward_groups"][role]) for r in records]
        name = f"{label}, role {role}"
        line = axes[0].plot(steps, [m for m, _, _ in reward], marker="o", ms=3, label=name)[0]
        axes[0].fill_between(steps, [lo for _, lo, _ in reward], [hi for _, _, hi in reward], alpha=0.15,
                             color=line.get_color())
        axes[1].plot(steps, [r["kl"][role] for r in records], marker="o", ms=3, label=name)
        axes[2].plot(steps, [r["entropy"][role] for r in records], marker="o", ms=3, label=name)
    axes[0].set_ylabel("reward vs training partner\n(mean of groups, 95% t)")
    axes[1].set_ylabel("KL to SFT reference")
    axes[2].set_ylabel("token entropy")
    axes[2].set_xlabel("RL step")
    axes[0].legend(fontsize=8)
    fig.suptitle("Miniature: learning curves per trained role")
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def paired_gates(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The learning gate from each trained role's rewards: `cases` holds per role `run`, `role` and
    `trained` / `sft`, each {scenario id: [rewards of its episodes]}. The two sides are paired by
    scenario id (each scenario's mean), never by position; Holm runs over all the cases given."""
    import numpy as np

    from ibrl_bench.stats.intervals import holm, paired_interval

    gates = []
    for case in cases:
        ids = sorted(set(case["trained"]) & set(case["sft"]))
        trained = np.array([np.mean(case["trained"][i]) for i in ids])
        start = np.array([np.mean(case["sft"][i]) for i in ids])
        paired = paired_interval(trained, start, np.array(ids), binary=False, confidence=1 - ALPHA)
        iv = paired.difference
        gates.append({"run": case["run"], "role": case["role"], "partner": case.get("partner"), "scenarios": len(ids),
                      "trained": float(trained.mean()), "sft": float(start.mean()), "estimate": iv.estimate,
                      "low": iv.low, "high": iv.high, "p": paired.test.p_value, "method": iv.method})
    for gate, p_holm in zip(gates, holm([g["p"] for g in gates]), strict=True):
        gate["p_holm"] = p_holm
        gate["learned"] = p_holm is not None and p_holm < ALPHA and gate["estimate"] > 0
    return gates


def window_differences(out: Path, config: Any) -> list[dict[str, Any]]:
    """Per trained role, the reward over the last `learning_window` RL steps minus the first (the
    module docstring: descriptive, not the gate)."""
    from scipy import stats

    rows = []
    for label, role, records in trained_roles(out):
        window = min(config.learning_window, len(records) // 2) or 1
        first = [x for r in records[:window] for x in r["reward_groups"][role]]
        last = [x for r in records[-window:] for x in r["reward_groups"][role]]
        entry: dict[str, Any] = {"run": label, "role": role, "window": window, "first": sum(first) / len(first),
                                 "last": sum(last) / len(last), "n_first": len(first), "n_last": len(last)}
        entry["difference"] = entry["last"] - entry["first"]
        # The share of groups whose rewards differ (the only ones with an advantage), per window;
        # None in logs written before the trainer logged it.
        for key, part in (("signal_first", records[:window]), ("signal_last", records[-window:])):
            shares = [r["signal_groups"][role] for r in part if "signal_groups" in r]
            entry[key] = sum(shares) / len(shares) if shares else None
        low = high = None
        if len(first) >= 2 and len(last) >= 2 and len(set(first + last)) > 1:
            ci = stats.ttest_ind(last, first, equal_var=False).confidence_interval(0.95)
            low, high = float(ci.low), float(ci.high)
        entry.update(low=low, high=high, method="Welch t, 95%, groups (scenarios) of the first and last steps")
        rows.append(entry)
    return rows


def table(run: str, methods: dict[str, dict[str, str]], config: Any) -> list[dict[str, Any]]:
    """Per method: own score, agreement and invalid rate against the held-out panel and against its
    own training counterpart, each with the interval engine's interval over scenarios."""
    from ibrl_bench.runs import load_run
    from ibrl_bench.stats.intervals import interval_of

    episodes = load_run(run).episodes
    episodes = episodes[episodes["status"] != "error"]
    rows = []
    for name, m in methods.items():
        mine = episodes[episodes["policy"] == m["policy"]]
        row: dict[str, Any] = {"method": name}
        for column, counterparts in (("heldout", config.heldout), ("train", [m["train_counterpart"]])):
            cells = mine[mine["counterpart"].isin(counterparts)]
            scenarios = cells["scenario_id"].astype(str).to_numpy()
            values = {"score": ("mean", cells["policy_score"]), "agreement": ("rate", cells["agreement"]),
                      "invalid": ("rate", cells["status"] == "invalid")}
            for metric, (kind, series) in values.items():
                iv = interval_of(kind, series.to_numpy(dtype=float), scenarios)
                row[f"{column}_{metric}"] = {"estimate": iv.estimate, "low": iv.low, "high": iv.high,
                                             "method": iv.method}
        rows.append(row)
    return rows


def paired_gains(episodes: Any, methods: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """A check beside the learning gate, on the cross-play's test games: per trained method, its
    own score against its training partner minus the SFT reference's against that same partner,
    paired by scenario (each scenario's mean over its games), with a paired t interval. The gate
    compares different scenarios at the two ends of training; here both policies meet the same ones."""
    from ibrl_bench.stats.intervals import paired_interval

    episodes = episodes[episodes["status"] != "error"]
    reference = methods["SFT reference"]["policy"]
    rows = []
    for name, m in methods.items():
        if name == "SFT reference":
            continue
        cells = episodes[episodes["counterpart"] == m["train_counterpart"]]
        per = {policy: cells[cells["policy"] == policy].groupby(cells["scenario_id"].astype(str))["policy_score"].mean()
               for policy in (m["policy"], reference)}
        both = per[m["policy"]].index.intersection(per[reference].index)
        iv = paired_interval(per[m["policy"]][both].to_numpy(float), per[reference][both].to_numpy(float),
                             both.to_numpy(), binary=False, with_test=False).difference
        rows.append({"method": name, "scenarios": len(both), "estimate": iv.estimate, "low": iv.low, "high": iv.high})
    return rows


def _iv(x: dict[str, Any] | None, fmt: str = "{:.2f}") -> str:
    if not x or x.get("estimate") is None:
        return "n/a"
    if x.get("low") is None:
        return fmt.format(x["estimate"])
    return f"{fmt.format(x['estimate'])} [{fmt.format(x['low'])}, {fmt.format(x['high'])}]"


def _p(p: float | None) -> str:
    return "n/a" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}"


def gate_table(gate: dict[str, Any]) -> list[str]:
    """The warm-start gate's numbers per partner, as markdown table lines."""
    lines = ["| partner | episodes | invalid | own reward > 0 | agreement | mean own reward |",
             "|---|---|---|---|---|---|"]
    for name in ("self_play", "boulware"):
        n = gate[name]
        lines.append(f"| {name} | {n['episodes']} | {n['invalid']:.1%} | {n['paying']:.1%} | {n['agreement']:.1%} | "
                     f"{n['policy_score']:.2f} |")
    return lines


def markdown(state: dict[str, Any], windows: list[dict[str, Any]], rows: list[dict[str, Any]],
             mismatch: dict[str, Any], curves_path: Path, config: Any,
             paired: list[dict[str, Any]] | None = None) -> str:
    g = state["gate"]
    learning = state["learning"]
    gates = learning["gates"]
    learned = {(e["run"], e["role"]): e["learned"] for e in gates}
    role = config.unilateral_role
    lines = ["# Miniature: results", "",
             "## Warm-start gate (before any RL)", "",
             f"SFT policy at temperature {g['temperature']:g}; gate: invalid <= {g['max_invalid']:.0%} "
             "and own reward > 0 "
             f"in >= {g['min_paying']:.0%} of self-play episodes: **{'passed' if g['passed'] else 'failed'}**.", "",
             *gate_table(g)]
    from ibrl_bench.train.miniature import rl_temperature

    rollouts = (f"Rollouts (both roles, and the frozen SFT partner) at temperature {rl_temperature(config):g}."
                if config.partner_temperature is None else
                f"Rollouts (both roles) at temperature {rl_temperature(config):g}; the frozen SFT partner of "
                f"unilateral vs SFT at {config.partner_temperature:g}.")
    lines += ["", "## Learning gate (decides what is claimed): final checkpoint vs the SFT start", "",
              f"Each trained role's final checkpoint and the SFT start, in that role, against the run's training "
              f"partner (as it sampled in the rollouts), on the same {learning['scenarios']} fresh train scenarios "
              f"that no RL step drew, {learning['episodes_per_scenario']} episodes each, at temperature "
              f"{learning['temperature']:g}; paired t over the scenarios' means, 95%; Holm over the "
              f"{len(gates)} trained roles. Learned: Holm-adjusted p < {ALPHA:g} and a positive gain.", "",
              "| run | role | trained | SFT start | gain [95% CI] | p | p (Holm) | learned |",
              "|---|---|---|---|---|---|---|---|"]
    for e in gates:
        lines.append(f"| {e['run']} | {e['role']} | {e['trained']:.2f} | {e['sft']:.2f} | {_iv(e, '{:+.2f}')} | "
                     f"{_p(e['p'])} | {_p(e['p_holm'])} | {'yes' if e['learned'] else '**did not learn**'} |")
    lines += ["", "## Reward during training, last steps minus first (descriptive; does not decide)", "",
              rollouts, "",
              "| run | role | first | last | last - first [95% CI] | groups with signal, first -> last |",
              "|---|---|---|---|---|---|"]
    for e in windows:
        ci = "n/a" if e["low"] is None else f"{e['difference']:+.2f} [{e['low']:+.2f}, {e['high']:+.2f}]"
        signal = ("n/a" if e.get("signal_first") is None
                  else f"{e['signal_first']:.0%} -> {e['signal_last']:.0%}")
        lines.append(f"| {e['run']} | {e['role']} | {e['first']:.2f} | {e['last']:.2f} | {ci} | {signal} |")
    method, window = (windows[0]["method"], windows[0]["window"]) if windows else ("", "")
    lines += ["", f"Interval: {method}; window {window} steps. The two windows hold different scenarios, whose draw "
              "alone moves this difference, so it describes the curves and decides nothing. Groups with signal: the "
              "share of a step's groups whose rewards are not all equal (the others have no advantage), mean over "
              "the window.",
              "", f"![learning curves]({curves_path.name})", "",
              f"## Cross-play (test split, role {role}, temperature {config.temperature:g})", "",
              "Own score (0-10) and agreement; held-out = mean over the held-out panel per game; intervals: "
              "cluster bootstrap over scenarios, 95%.", "",
              "| method | learned | score vs held-out | score vs own partner | agreement vs held-out "
              "| invalid vs held-out |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        key = {"IB-RL": ("IB-RL", role), "unilateral vs SFT": ("unilateral vs SFT", role),
               "unilateral vs boulware": ("unilateral vs boulware", role)}.get(r["method"])
        status = "reference" if key is None else ("yes" if learned.get(key) else "no")
        lines.append(f"| {r['method']} | {status} | {_iv(r['heldout_score'])} | {_iv(r['train_score'])} | "
                     f"{_iv(r['heldout_agreement'], '{:.0%}')} | {_iv(r['heldout_invalid'], '{:.0%}')} |")
    paired = paired or []
    lines += ["", "### Gain over the SFT start at the evaluation temperature (descriptive)", "",
              "Own score against the method's training partner minus the SFT reference's against that same "
              f"partner, on the same test scenarios of the cross-play (temperature {config.temperature:g}; each "
              "scenario's mean over its games; paired t, 95%). The learning gate above decides what is claimed.", "",
              "| method | scenarios | gain over the SFT start vs the training partner [95% CI] |", "|---|---|---|"]
    for p in paired:
        lines.append(f"| {p['method']} | {p['scenarios']} | {_iv(p)} |")
    lines += ["", "## Mismatch against the SFT reference (own score)", "",
              "gap = score vs own training partner - mean vs held-out panel; DiD = gap minus the SFT reference's gap "
              "on the same partners (positive: gained more against its own partner than against the panel).", "",
              "| method | gap [95% CI] | DiD vs SFT [95% CI] | DiD p (Holm over methods) |", "|---|---|---|---|"]
    for name, m in mismatch["methods"].items():
        did = m.get("did")
        p = m.get("p_holm") if m.get("p_holm") is not None else (m.get("did_test") or {}).get("p_value")
        lines.append(f"| {name} | {_iv(m['gap']['difference'])} | {_iv(did)} | {'n/a' if p is None else f'{p:.3f}'} |")
    ibrl_learned = learned.get(("IB-RL", role), False)
    lines += ["", f"IB-RL minus unilateral, paired by game (difference of DiDs; negative: IB-RL overfit its "
              f"partner less). A comparison is read only if both IB-RL's role {role} and the unilateral run "
              "learned (the learning gate above):", ""]
    for name, d in mismatch["versus"].items():
        p = "n/a" if d.get("p_holm") is None else f"{d['p_holm']:.3f}"
        missing = [n for n, ok in (("IB-RL", ibrl_learned), (name, learned.get((name, role), False))) if not ok]
        read = "read" if not missing else f"not read: {' and '.join(missing)} did not learn"
        lines.append(f"- vs {name}: {_iv(d)} ({d['method']}; p after Holm over the method pairs {p}; "
                     f"{d['n']} games over {d['n_clusters']} scenarios; **{read}**)")
    lines += [f"- {note}" for note in mismatch.get("notes", [])]
    summary = json.loads((curves_path.parent / "summary.json").read_text())
    lines += ["", "## Cost (stages before this report)", "",
              "| stage | status | wall s | CPU s |", "|---|---|---|---|"]
    for st in summary["stages"]:
        lines.append(f"| {st['name']} | {st['status']} | {st['wall_s']:.0f} | {st['cpu_s']:.0f} |")
    lines.append(f"| total | | {summary['wall_s']:.0f} | {summary['cpu_s']:.0f} |")
    claims = [k for k, v in learned.items() if v]
    lines += ["", "## What this shows", ""]
    if not claims:
        lines.append("No trained role passed the learning gate (paired, Holm): **did not learn**. The cross-play and "
                     "mismatch numbers above compare policies that did not beat the SFT start; nothing is claimed "
                     "from them.")
    else:
        lines.append("Roles that passed the learning gate (paired, Holm): "
                     + ", ".join(f"{r} role {ro}" for r, ro in claims) + ". "
                     "Only comparisons between methods whose trained role learned are read; the others did not learn.")
    return "\n".join(lines) + "\n"
