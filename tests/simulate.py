"""Episode tables with a known truth, for the statistics tests.

`frame(rows)` builds a table shaped like `matrix.episodes_frame` from a few columns; the simulators
draw clustered outcomes: every scenario has its own level (shared by all its seeds, and by the
policies and counterparts that play it), so that naive, unclustered intervals would be too narrow.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ["key", "policy", "counterpart", "policy_role", "scenario_id", "seed", "status", "agreement", "success",
           "policy_score", "counterpart_score", "policy_violated", "turns", "attempts"]


def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows need policy, counterpart, scenario_id and success or policy_score; the rest defaults."""
    out = []
    for i, r in enumerate(rows):
        success = bool(r.get("success", False))
        out.append({
            "key": r.get("key", f"k{i}"), "policy": r["policy"], "counterpart": r["counterpart"],
            "policy_role": r.get("policy_role", "a"), "scenario_id": r["scenario_id"], "seed": r.get("seed", 0),
            "status": r.get("status", "ok"), "agreement": r.get("agreement", success), "success": success,
            "policy_score": float(r.get("policy_score", float(success))),
            "counterpart_score": float(r.get("counterpart_score", 0.0)),
            "policy_violated": bool(r.get("policy_violated", False)), "turns": 4, "attempts": 1,
            **{k: v for k, v in r.items() if k.startswith("m_")},
        })
    return pd.DataFrame(out, columns=COLUMNS + sorted({k for r in rows for k in r if k.startswith("m_")}))


def matrix_scores(rng: np.random.Generator, means: dict[tuple[str, str], float], n_scenarios: int, n_seeds: int,
                  sd_scenario: float = 1.0, sd_noise: float = 1.0, roles: tuple[str, ...] = ("a",)) -> pd.DataFrame:
    """Continuous scores y = means[policy, counterpart] + u[scenario] + noise, u shared by every cell."""
    u = rng.normal(0.0, sd_scenario, n_scenarios)
    rows = []
    for (p, c), mu in means.items():
        for role in roles:
            noise = rng.normal(0.0, sd_noise, (n_scenarios, n_seeds))
            for s in range(n_scenarios):
                for k in range(n_seeds):
                    rows.append({"policy": p, "counterpart": c, "policy_role": role, "scenario_id": f"s{s:03d}",
                                 "seed": k, "policy_score": mu + u[s] + noise[s, k]})
    return frame(rows)
