"""A finished (or partial) run folder, read back for analysis: `load_run` and what the commands share.

    >>> import ibrl_bench
    >>> episodes, cells = ibrl_bench.load_run("runs/mine")

`episodes` has one row per episode (the newest record of each; error episodes included, with
status "error"), from the policy's point of view; `cells` one row per cell and metric, with the
estimate, its interval, the interval's method, confidence level and sample sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from ibrl_bench.domains.base import Scenario
from ibrl_bench.errors import UserError
from ibrl_bench.runner.store import EpisodeRecord, Manifest, RunStore


class RunFrames(NamedTuple):
    episodes: pd.DataFrame
    cells: pd.DataFrame


class Run:
    """A run folder opened for reading; nothing here writes to it."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.store = RunStore(self.folder)
        if not self.store.manifest_path.exists():
            raise UserError(f"{folder} is not a run folder (no manifest.json); "
                            "give the --out folder of a crossplay run")
        self.manifest: Manifest = self.store.read_manifest()
        self.name = str(self.folder)  # how titles and notes name the run
        self.short_name = self.folder.name

    @cached_property
    def table(self) -> pd.DataFrame:
        """The newest row of every episode (`stats.matrix.episodes_table`: the frame's columns and
        what the cell results add up), in the order episodes were first written."""
        from ibrl_bench.stats.matrix import episodes_table

        return episodes_table(self.store.episodes())

    @cached_property
    def records(self) -> list[EpisodeRecord]:
        """The newest record of every episode, transcripts included, in the order they were first written."""
        return self.store.read_at(self.table["at"].tolist())

    def transcribed(self, keys: list[str]) -> list[EpisodeRecord]:
        """The whole records of these episodes, in the order given; only their lines are parsed."""
        at = dict(zip(self.table["key"].tolist(), self.table["at"].tolist(), strict=True))
        return self.store.read_at([at[k] for k in keys])

    @cached_property
    def frame(self) -> pd.DataFrame:
        from ibrl_bench.stats.matrix import frame_of

        return frame_of(self.table)

    def saved_results(self):
        """results.json when it covers exactly the episodes in the log (the same cells, episodes
        and errors), else None: a run resumed and killed again leaves an older results.json behind."""
        from collections import Counter

        from ibrl_bench.stats.matrix import Results

        path = self.folder / "results.json"
        try:
            saved = Results.model_validate_json(path.read_text())
        except (OSError, ValueError):
            return None
        counted = {(c.policy, c.counterpart, c.policy_role): (c.n_episodes, c.n_errors) for c in saved.cells}
        logged: Counter = Counter()
        errors: Counter = Counter()
        for *cell, status in self._cells_and_status():
            logged[tuple(cell)] += 1
            errors[tuple(cell)] += status == "error"
        return saved if counted == {cell: (n, errors[cell]) for cell, n in logged.items()} else None

    def _cells_and_status(self):
        """(policy, counterpart, policy_role, status) of every episode."""
        t = self.table
        return zip(*(t[c].tolist() for c in ("policy", "counterpart", "policy_role", "status")), strict=True)

    def missing_cells(self) -> list[tuple[str, str, str]]:
        """The cells of the planned matrix that hold no scored (non-error) episode yet."""
        identity = self.manifest.identity
        scored = {(p, c, role) for p, c, role, status in self._cells_and_status() if status != "error"}
        return [(p, c, role) for p in identity.get("policies", []) for c in identity.get("counterparts", [])
                for role in identity.get("roles", []) if (p, c, role) not in scored]

    def unfinished(self) -> str | None:
        """A line saying how much of the run is missing, or None when every planned episode is scored."""
        planned = self.n_planned
        scored = int((self.table["status"] != "error").sum())
        if scored >= planned:
            return None
        return (f"{self.folder} is unfinished: {scored} of {planned} planned episodes are scored; the numbers "
                "cover those only (rerun its crossplay command with the same --out to finish it)")

    @cached_property
    def results(self):
        """The cell results: results.json when it covers every episode in the log, else recomputed
        (in memory) from the episodes, as for a run that was killed before writing it."""
        from ibrl_bench.stats.matrix import summarize

        saved = self.saved_results()
        if saved is not None:
            return saved
        return summarize(self.table, domain=self.manifest.domain, scenario_set=self.manifest.scenario_set,
                         n_planned=self.n_planned, identity=self.manifest.identity)

    @property
    def n_planned(self) -> int:
        """The episodes the run's command planned (an adaptive run's: where its cells stopped)."""
        from ibrl_bench.runner.adaptive import planned_in

        return planned_in(self.folder, self.manifest.identity, self.manifest.config.get("target_halfwidth") is not None)

    @cached_property
    def scenarios(self) -> dict[str, Scenario]:
        """The run's scenarios by id, rebuilt from the manifest (its split, or the context file it
        read); records are matched to them by id and checked by their content hash."""
        from ibrl_bench.domains import get_domain

        config = self.manifest.config
        if config.get("contexts_file"):
            from ibrl_bench.domains.dealnodeal.scenarios import load_lewis_contexts

            scenario_set = load_lewis_contexts(config["contexts_file"]).head(config.get("scenarios"))
        else:
            scenario_set = get_domain(self.manifest.domain).scenario_set(
                self.manifest.scenario_set["split"], self.manifest.scenario_set.get("n"))
        return {s.id: s for s in scenario_set.scenarios}

    def select(self, *, policy: str | None = None, counterpart: str | None = None, role: str | None = None,
               status: str | None = None, scenario: str | None = None, seed: int | None = None,
               key: str | None = None) -> list[str]:
        """The keys of the episodes that match every filter given (names may be short; `key` may be a
        prefix), in the order they were first written."""
        policy = self.resolve(policy, "policy") if policy else None
        counterpart = self.resolve(counterpart, "counterpart") if counterpart else None
        t = self.table
        keep = pd.Series(True, index=t.index)
        for column, wanted in (("policy", policy), ("counterpart", counterpart), ("policy_role", role),
                               ("status", status), ("scenario_id", scenario), ("seed", seed)):
            if wanted is not None:
                keep &= t[column] == wanted
        if key is not None:
            keep &= t["key"].str.startswith(key)
        return t.loc[keep, "key"].tolist()

    @property
    def policies(self) -> list[str]:
        return list(self.manifest.identity.get("policies", [])) or list(dict.fromkeys(self.frame["policy"]))

    @property
    def counterparts(self) -> list[str]:
        return list(self.manifest.identity.get("counterparts", [])) or list(dict.fromkeys(self.frame["counterpart"]))

    def resolve(self, name: str, kind: str) -> str:
        """The full spec of a policy or counterpart, given as written or by its short name
        ("boulware" for "scripted:dealnodeal/boulware")."""
        choices = self.policies if kind == "policy" else self.counterparts
        return resolve(name, choices, kind)

    def kind_of(self, a: str, b: str) -> str:
        """"policy" or "counterpart": what both names are in this run (refused when neither)."""
        for kind, choices in (("policy", self.policies), ("counterpart", self.counterparts)):
            if all(_resolves(x, choices) for x in (a, b)):
                return kind
        raise UserError(f"{a} and {b} are not both policies nor both counterparts of the run; "
                        f"policies: {', '.join(self.policies)}; counterparts: {', '.join(self.counterparts)}")

    def analysed(self, roles: Sequence[str] = (), every_cell: str | None = None) -> pd.DataFrame:
        """The episode table an analysis reads, narrowed to `roles`. Refused in one line when the
        run holds no finished episode or lacks a role, and, with `every_cell` (the name of the
        asking command), when some cell of its matrix has no scored episode yet rather than being
        analysed without it."""
        frame = self.frame
        if frame.empty:
            raise UserError(f"{self.name} holds no finished episode yet; run crossplay first")
        for role in roles:
            if role not in set(frame["policy_role"]):
                raise UserError(f"role {role!r} is not in the run; roles: "
                                f"{', '.join(sorted(set(frame['policy_role'])))}")
        missing = [cell for cell in self.missing_cells() if not roles or cell[2] in roles] if every_cell else []
        if missing:
            p, c, role = missing[0]
            raise UserError(f"{every_cell} needs a score in every cell of the matrix, and {len(missing)} cell(s) have "
                            f"none yet (the first: {p} vs {c}, policy as {role}); finish the run (rerun its crossplay "
                            "command with the same --out), or pass --role for the roles that are complete")
        return frame[frame["policy_role"].isin(roles)] if roles else frame


# What makes two run folders play the same games: the same domain, the split's scenario set (its
# scenario ids and contents, by content hash, and how many of them), the same seeds and turn limit.
SAME_GAMES = ("domain", "split", "n_scenarios", "scenario_set", "seeds", "max_turns")


class CombinedRun(Run):
    """Several run folders of the same games read as one run: the matrix is the union of their
    seats, and every episode (policy, counterpart, role, scenario, seed) may come from one folder only."""

    def __init__(self, runs: Sequence[Run]):
        self.parts = list(runs)
        first = self.parts[0]
        for other in self.parts[1:]:
            for key in SAME_GAMES:
                mine, theirs = first.manifest.identity.get(key), other.manifest.identity.get(key)
                if mine != theirs:
                    raise UserError(
                        f"{first.folder} and {other.folder} do not play the same games ({key}: {mine!r} there, "
                        f"{theirs!r} here); runs combine only with the same domain, split scenario set (ids and "
                        "contents), seeds and turn limit")
        cards: dict[str, str] = {}
        for run in self.parts:
            for spec, card_hash in run.manifest.identity.get("cards", {}).items():
                if cards.setdefault(spec, card_hash) != card_hash:
                    raise UserError(f"{spec} stands for different cards in these runs (hash {cards[spec]} and "
                                    f"{card_hash}); combine only runs that pinned the same card")
        prompts = {run.manifest.identity["prompt"] for run in self.parts if "prompt" in run.manifest.identity}
        if len(prompts) > 1:
            raise UserError(f"these runs prompted their models differently ({', '.join(sorted(prompts))}); "
                            "combine only runs of the same prompt version")

        def union(key: str) -> list:
            return list(dict.fromkeys(x for run in self.parts for x in run.manifest.identity.get(key, [])))

        identity = {**first.manifest.identity, "policies": union("policies"), "counterparts": union("counterparts"),
                    "roles": union("roles")}
        if cards:
            identity["cards"] = cards
        self.folder = first.folder  # where a combined report goes by default
        self.store = first.store
        self.manifest = first.manifest.model_copy(update={
            "identity": identity, "extended": [],
            "agents": {spec: a for run in self.parts for spec, a in run.manifest.agents.items()}})
        self.name = " + ".join(str(run.folder) for run in self.parts)
        self.short_name = " + ".join(run.folder.name for run in self.parts)

    @cached_property
    def _owner(self) -> dict[str, Run]:
        """Each episode's key -> the folder that holds it; an episode in two folders is refused."""
        owner: dict[str, Run] = {}
        for run in self.parts:
            for key in run.table["key"].tolist():
                if key in owner:
                    s = run.table.loc[run.table["key"] == key].iloc[0]
                    raise UserError(
                        f"{owner[key].folder} and {run.folder} both hold the episode {s.policy} vs {s.counterpart} "
                        f"(policy as {s.policy_role}), scenario {s.scenario_id}, seed {s.seed}; combine runs whose "
                        "cells differ, or grow one folder instead (crossplay --out with more seats)")
                owner[key] = run
        return owner

    @cached_property
    def table(self) -> pd.DataFrame:
        """The parts' tables one after the other (`at` is an offset in the part's own log)."""
        from ibrl_bench.stats.matrix import episodes_table

        owner = self._owner
        return episodes_table([row for run in self.parts for row in run.table.to_dict("records")
                               if owner[row["key"]] is run])

    @cached_property
    def records(self) -> list[EpisodeRecord]:
        return self.transcribed(self.table["key"].tolist())

    def transcribed(self, keys: list[str]) -> list[EpisodeRecord]:
        by_run: dict[int, list[str]] = {}
        for k in keys:
            by_run.setdefault(id(self._owner[k]), []).append(k)
        found = {r.key: r for run in self.parts for r in run.transcribed(by_run.get(id(run), []))}
        return [found[k] for k in keys]

    def saved_results(self):
        return None  # each folder's results.json counts its own cells only

    def unfinished(self) -> str | None:
        notes = [note for run in self.parts if (note := run.unfinished())]
        return "; ".join(notes) or None

    @cached_property
    def results(self):
        from ibrl_bench.stats.matrix import summarize

        return summarize(self.table, domain=self.manifest.domain, scenario_set=self.manifest.scenario_set,
                         n_planned=sum(run.n_planned for run in self.parts),
                         identity=self.manifest.identity)


def open_runs(folders: Sequence[str | Path]) -> Run:
    """One run folder, or several of the same games combined as one run."""
    if not folders:
        raise UserError("give at least one run folder")
    unique = {Path(f).resolve(): f for f in reversed(folders)}  # a folder named twice counts once
    runs = [Run(unique[key]) for key in dict.fromkeys(Path(f).resolve() for f in folders)]
    return runs[0] if len(runs) == 1 else CombinedRun(runs)


def _resolves(name: str, choices: list[str]) -> bool:
    try:
        resolve(name, choices, "")
        return True
    except UserError:
        return False


def resolve(name: str, choices: list[str], kind: str) -> str:
    if name in choices:
        return name
    matches = [c for c in choices if c.rsplit("/", 1)[-1] == name or c.rsplit(":", 1)[-1] == name]
    if len(matches) == 1:
        return matches[0]
    listing = ", ".join(choices) or "none"
    if matches:
        raise UserError(f"{kind} {name!r} is ambiguous ({', '.join(matches)}); give the full spec")
    raise UserError(f"{kind} {name!r} is not in the run; {kind}s: {listing}")


def cells_long(results) -> pd.DataFrame:
    """One row per cell and metric: estimate, interval, method, confidence level, sample sizes."""
    rows = []
    for cell in results.cells:
        for metric, iv in cell.metrics.items():
            rows.append({"policy": cell.policy, "counterpart": cell.counterpart, "policy_role": cell.policy_role,
                         "metric": metric, **iv.model_dump(), "n_episodes": cell.n_episodes,
                         "n_errors": cell.n_errors})
    columns = ["policy", "counterpart", "policy_role", "metric", "estimate", "low", "high", "method", "confidence",
               "n", "n_clusters", "n_episodes", "n_errors"]
    return pd.DataFrame(rows, columns=columns)


def load_run(path: str | Path, *, transcripts: bool = False) -> RunFrames:
    """The episodes and cells of a run folder as pandas DataFrames.

    `transcripts=True` adds a `transcript` column (the list of turns of each episode, as dicts).
    """
    run = Run(path)
    episodes = run.frame.copy()
    if transcripts:
        by_key = {r.key: [t.model_dump() for t in r.transcript] for r in run.records}
        episodes["transcript"] = episodes["key"].map(by_key)
    return RunFrames(episodes=episodes, cells=cells_long(run.results))
