"""The cross-play matrix: policies x counterparts x roles of the policy x scenarios x seeds.

Episodes run concurrently under one asyncio semaphore-sized worker pool, or, with `workers` (see
runner/workers.py), in worker processes that this process feeds in chunks. Either way this process
alone appends each finished episode to the run log at once, so a killed run resumes without
repeating or losing any.
An exception from an agent is an infrastructure failure: the episode is retried from scratch
(same seed) up to `retries` times, then recorded with status `error`, which no metric counts.
A fatal error (a rejected key, a broken agent) or too many errors stop the run: the episodes in
flight are cancelled at once, and a run stopped before its first episode removes the folder it
created. An agent that blocks the event loop is caught by runner/watchdog.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, field_validator

from ibrl_bench import __version__
from ibrl_bench.agents.base import Agent
from ibrl_bench.agents.remote import current_retries
from ibrl_bench.agents.spec import MODEL_KINDS, Seat, build_agent, parse_spec
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import (
    DEFAULT_PROMPT,
    Domain,
    Outcome,
    Role,
    RolePrompt,
    Scenario,
    ScenarioSet,
    content_hash,
)
from ibrl_bench.errors import FatalAgentError, UserError
from ibrl_bench.runner.budget import Budget, BudgetReached
from ibrl_bench.runner.episode import play_episode
from ibrl_bench.runner.metering import Metering
from ibrl_bench.runner.store import EpisodeRecord, Manifest, RunStore, now_iso

if TYPE_CHECKING:
    from ibrl_bench.runner.workers import WorkerPlan


class CrossplayConfig(BaseModel):
    domain: str = "dealnodeal"
    policies: list[str]
    counterparts: list[str]
    roles: list[str] | None = None  # roles the policy plays; None = every role of the domain
    split: str = "test"
    scenarios: int | None = 50  # the first N of the split; None = all
    contexts_file: str | None = None  # Deal-or-NoDeal: a Lewis-format context file instead of a split
    seeds: int = Field(1, ge=1)
    max_turns: int | None = Field(None, ge=2)
    concurrency: int = Field(16, ge=1)
    retries: int = Field(2, ge=0)
    move_timeout: float | None = Field(120.0, gt=0)
    fail_on_error: float = Field(0.2, ge=0, le=1)  # stop when this share of episodes errs
    min_episodes_for_fail: int = Field(10, ge=1)
    cache: bool = True  # replies of model seats from/to the response cache (runner/cache.py)
    cache_dir: str | None = None  # None: the user's cache folder
    budget_usd: float | None = Field(None, gt=0)  # what this command may pay for model calls
    target_halfwidth: float | None = Field(None, gt=0)  # adaptive sampling (runner/adaptive.py)
    target_metric: str | None = None  # the metric whose interval it narrows (default success_at_1)

    @field_validator("policies", "counterparts")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one spec is needed")
        return v


@dataclass(frozen=True)
class Job:
    policy: str
    counterpart: str
    policy_role: Role
    scenario: Scenario
    seed: int

    @property
    def key(self) -> str:
        return episode_key(self.policy, self.counterpart, self.policy_role, self.scenario.id, self.seed)


def planned_episodes(identity: dict) -> int:
    """How many episodes a run of this identity (see `Crossplay.manifest`) plays in all."""
    i = identity
    return len(i["policies"]) * len(i["counterparts"]) * len(i["roles"]) * i["n_scenarios"] * len(i["seeds"])


def episode_key(policy: str, counterpart: str, policy_role: str, scenario_id: str, seed: int) -> str:
    return content_hash([policy, counterpart, policy_role, scenario_id, seed], 20)


class RunAborted(UserError):
    """The run stopped early; what finished is kept and the same command resumes it."""


@dataclass
class Progress:
    """Counts the runner reports to whoever displays progress."""

    total: int
    done: int = 0  # finished this run or earlier (not errors)
    errors: int = 0  # episodes recorded as error in this run
    resumed: int = 0  # done before this run started
    playing_since: float | None = None  # time.perf_counter() when episodes began (after any worker start-up)


def grown(config: CrossplayConfig, out: str | Path) -> CrossplayConfig:
    """The configuration of the matrix a run folder will hold: the seats it has already, then this
    command's new ones. Rerunning with fewer seats resumes the whole matrix; with more, it grows."""
    store = RunStore(out)
    if not store.manifest_path.is_file():
        return config
    old = store.read_manifest().identity
    if old.get("domain") != config.domain:
        return config  # refused by the store's identity check, with the difference named
    merge = lambda before, now: [*before, *(x for x in now if x not in before)]  # noqa: E731
    return config.model_copy(update={
        "policies": merge(old.get("policies", []), config.policies),
        "counterparts": merge(old.get("counterparts", []), config.counterparts),
        "roles": merge(old.get("roles", []), config.roles or list(get_domain(config.domain).roles)),
    })


class Crossplay:
    """The matrix of a run folder `out`. A worker process builds one with `out=None`: the same
    domain, scenarios and agents, for playing jobs, without a store."""

    def __init__(self, config: CrossplayConfig, out: str | Path | None, workers: WorkerPlan | None = None):
        config = grown(config, out) if out is not None else config
        self.config = config
        self.domain: Domain = get_domain(config.domain)
        for spec in [*config.policies, *config.counterparts]:
            parse_spec(spec)  # fail on a malformed spec before anything is built or written
        roles = config.roles or list(self.domain.roles)
        for role in roles:
            if role not in self.domain.roles:
                raise UserError(
                    f"unknown role {role!r} for {config.domain}; roles are {', '.join(self.domain.roles)}"
                )
        self.roles = roles
        if config.target_metric is not None:
            from ibrl_bench.stats.cells import BUILTIN_METRICS

            known = [*BUILTIN_METRICS, *self.domain.metric_names]
            if config.target_metric not in known:
                raise UserError(f"--target-metric {config.target_metric} is not a metric of {config.domain}; "
                                f"choose one of {', '.join(known)}")
        self.scenario_set = self._scenarios()
        self.store = RunStore(out) if out is not None else None
        self.workers = workers
        self.max_turns = config.max_turns or self.domain.default_max_turns
        # Built before the run folder is touched, so a bad spec or plugin leaves nothing behind.
        self.seats = self._build_seats()
        self._check_card_roles()
        if workers is not None and config.budget_usd is not None:
            raise UserError("--budget-usd is kept by one process; drop --workers/--ray to run with a budget")
        # One budget for the whole command, however many rounds of episodes it plays.
        self.budget = Budget(config.budget_usd) if config.budget_usd is not None else None

    def _scenarios(self) -> ScenarioSet:
        if self.config.contexts_file:
            if self.config.domain != "dealnodeal":
                raise UserError("--contexts is a Deal-or-NoDeal option (Lewis-format context files)")
            from ibrl_bench.domains.dealnodeal.scenarios import load_lewis_contexts

            full = load_lewis_contexts(self.config.contexts_file)
            where = f"{self.config.contexts_file} holds"
        else:
            full = self.domain.scenario_set(self.config.split)
            where = f"the {self.config.split} split of {self.config.domain} has"
        # Never run fewer scenarios than asked for without saying so.
        if self.config.scenarios and self.config.scenarios > len(full.scenarios):
            raise UserError(f"--scenarios {self.config.scenarios} is more than {where} ({len(full.scenarios)}); "
                            f"give --scenarios {len(full.scenarios)} or fewer")
        return full.head(self.config.scenarios)

    def _check_card_roles(self) -> None:
        seats = [(spec, self.roles) for spec in self.config.policies]
        seats += [(spec, [self.domain.other(r) for r in self.roles]) for spec in self.config.counterparts]
        for spec, roles in seats:
            card = self.seats[spec].card
            allowed = card.roles.get(self.config.domain) if card else None
            bad = sorted(set(roles) - set(allowed)) if allowed else []
            if bad:
                raise UserError(f"card {card.id} may play {', '.join(allowed)} in {self.config.domain}, "
                                f"but this run seats it as {', '.join(bad)}; choose --role accordingly")

    def agents_record(self) -> dict[str, dict]:
        """What each spec resolved to: the card and its hash where a card was used, and the role
        prompt (name, version, hash) of a local model that reads another than the default."""
        out = {}
        for spec, seat in self.seats.items():
            card = seat.card
            out[spec] = {"card": card.id, "card_hash": card.hash, "resolved": card.spec()} if card else {}
            prompt = self.other_prompt(seat.agent)
            if prompt is not None:
                out[spec]["prompt"] = {"name": prompt.name, "version": prompt.version, "hash": prompt.hash}
        return out

    def other_prompt(self, agent: Agent) -> RolePrompt | None:
        """The RolePrompt an agent reads when it is not the domain's default, else None."""
        name = getattr(agent, "prompt", DEFAULT_PROMPT)
        return None if name == DEFAULT_PROMPT else self.domain.role_prompt(name)

    def manifest(self) -> Manifest:
        ss = self.scenario_set
        agents = self.agents_record()
        identity = {
            "domain": self.config.domain,
            "split": ss.split,
            "n_scenarios": len(ss.scenarios),
            "scenario_set": ss.hash,
            "policies": self.config.policies,
            "counterparts": self.config.counterparts,
            "roles": self.roles,
            "seeds": list(range(self.config.seeds)),
            "max_turns": self.max_turns,
        }
        cards = {spec: a["card_hash"] for spec, a in agents.items() if "card_hash" in a}
        if cards:
            identity["cards"] = cards
        if any(parse_spec(spec).kind in MODEL_KINDS for spec in agents):
            identity["prompt"] = f"{self.domain.prompt_version}:{self.domain.prompt_hash}"
        # Agents on another prompt than the default: a reworded prompt is another configuration.
        others = {spec: a["prompt"] for spec, a in agents.items() if "prompt" in a}
        if others:
            identity["prompts"] = {spec: f"{p['version']}:{p['hash']}" for spec, p in others.items()}
        return Manifest(
            harness_version=__version__,
            created_at=now_iso(),
            domain=self.config.domain,
            scenario_set={"version": ss.version, "split": ss.split, "hash": ss.hash, "n": len(ss.scenarios)},
            identity=identity,
            config=self.config.model_dump(),
            agents=agents,
            prompt={"version": self.domain.prompt_version, "hash": self.domain.prompt_hash},
        )

    def jobs(self) -> Iterator[Job]:
        c = self.config
        for policy, counterpart, role in itertools.product(c.policies, c.counterparts, self.roles):
            for scenario in self.scenario_set.scenarios:
                for seed in range(c.seeds):
                    yield Job(policy, counterpart, role, scenario, seed)

    def total(self) -> int:
        return planned_episodes(self.manifest().identity)

    def results(self, n_planned: int | None = None):
        """The cell results of what the run folder holds now (stats.matrix.Results), against
        `n_planned` episodes (default: the whole matrix; an adaptive run plans fewer)."""
        from ibrl_bench.stats.matrix import episodes_table, summarize

        m = self.manifest()
        return summarize(episodes_table(self.store.episodes()), domain=m.domain, scenario_set=m.scenario_set,
                         n_planned=planned_episodes(m.identity) if n_planned is None else n_planned,
                         identity=m.identity)

    async def run(self, on_progress: Callable[[Progress], None] | None = None,
                  jobs: list[Job] | None = None, close_agents: bool = True) -> Progress:
        """Play the matrix's missing episodes, or of `jobs` (a part of it) the missing ones. A caller
        that plays several parts in turn keeps the agents open (`close_agents=False`) and closes
        them after the last (`aclose_agents`)."""
        # a cache that cannot open stops before the folder is made
        metering = Metering.open(self.config, self.domain, self.budget)
        try:
            done = self.store.open(self.manifest())
        except BaseException:
            metering.close()
            raise
        pending = [job for job in (self.jobs() if jobs is None else jobs) if job.key not in done]
        progress = Progress(total=self.total(), done=len(done), resumed=len(done))
        report = on_progress or (lambda p: None)
        report(progress)
        attempted = 0
        abort: list[BaseException] = []

        def tally(key: str, status: str, last_error: str | None, line: str) -> BaseException | None:
            """Record one finished episode (its JSON line); the reason to stop the run, if any."""
            nonlocal attempted
            self.store.append_line(line)
            attempted += 1
            if status == "error":
                progress.errors += 1
            else:
                progress.done += 1
            report(progress)
            if (
                attempted >= min(self.config.min_episodes_for_fail, len(pending))
                and progress.errors > self.config.fail_on_error * attempted
            ):
                return RunAborted(
                    f"stopped: {progress.errors} of the {attempted} episodes this command recorded failed "
                    f"with infrastructure errors (last: {last_error}); fix the backend and "
                    "rerun the same command to resume, or raise --fail-on-error"
                )
            return None

        try:
            if self.workers is not None and pending:
                from ibrl_bench.runner.workers import play_on_workers

                await play_on_workers(self, pending, tally, abort, progress)
            else:
                progress.playing_since = time.perf_counter()
                await self._play_here(pending, tally, abort, metering.seats(self.seats))
        except BaseException:
            self.store.discard_if_unused()  # a run that failed before its first episode leaves nothing
            raise
        finally:
            self.store.close()
            if close_agents:
                await self.aclose_agents()
            metering.close()
            if abort:
                self.store.discard_if_unused()
        if abort:
            if isinstance(abort[0], BudgetReached):  # said with what was spent once the cut episodes settled
                raise RunAborted(self.budget.stop_line())
            raise abort[0]
        return progress

    async def aclose_agents(self) -> None:
        await asyncio.gather(*(s.agent.aclose() for s in self.seats.values()), return_exceptions=True)

    async def _play_here(self, pending: list[Job], tally, abort: list[BaseException], seats: dict[str, Seat]) -> None:
        """Play `pending` in this process's event loop, `concurrency` at a time, on `seats` (metered)."""
        queue: asyncio.Queue[Job] = asyncio.Queue()
        for job in pending:
            queue.put_nowait(job)
        workers: list[asyncio.Task] = []

        def stop(reason: BaseException) -> None:
            # Episodes still in flight are cancelled, not waited for: a stopped run ends in
            # moments, and what the stop line counts is exactly what the folder holds.
            abort.append(reason)
            for w in workers:
                if w is not asyncio.current_task():
                    w.cancel()

        async def worker() -> None:
            while not abort:
                try:
                    job = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                try:
                    record = await self._play(job, seats)
                except FatalAgentError as e:
                    stop(e)
                    return
                last = record.errors[-1] if record.errors else None
                reason = tally(record.key, record.outcome.status, last, record.model_dump_json())
                if reason is not None:
                    stop(reason)
                    return

        from ibrl_bench.runner import watchdog

        def blocked(message: str) -> None:
            # The loop's thread is held by the agent and touches nothing else meanwhile.
            self.store.discard_if_unused()
            kept = f"finished episodes are kept in {self.store.folder}; " if self.store.manifest_path.exists() else ""
            watchdog.stop_process(f"{message}; {kept}rerun the same command once the agent is fixed")

        try:
            async with watchdog.LoopWatchdog(self.config.move_timeout if pending else None, on_block=blocked):
                workers.extend(asyncio.create_task(worker())
                               for _ in range(min(self.config.concurrency, len(pending))))
                ended = await asyncio.gather(*workers, return_exceptions=True)  # stopped ones end cancelled
            failed = [e for e in ended if isinstance(e, BaseException) and not isinstance(e, asyncio.CancelledError)]
            if failed:
                raise failed[0]
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    def _build_seats(self) -> dict[str, Seat]:
        specs = dict.fromkeys([*self.config.policies, *self.config.counterparts])
        build = build_agent
        if self.workers is not None:  # the workers play; local models are loaded there only
            from ibrl_bench.runner.workers import seat_for_driver as build
        return {spec: build(spec, self.config.domain) for spec in specs}

    async def _play(self, job: Job, seats: dict[str, Seat]) -> EpisodeRecord:
        other = self.domain.other(job.policy_role)
        specs = {job.policy_role: job.policy, other: job.counterpart}
        errors: list[str] = []
        started = time.perf_counter()
        retries: Counter[str] = Counter()  # faults the remote layer absorbed, by kind
        current_retries.set(retries)  # this worker task's context: every move of the episode sees it
        for attempt in range(1, self.config.retries + 2):
            try:
                result = await play_episode(
                    self.domain,
                    job.scenario,
                    {role: seats[spec].agent for role, spec in specs.items()},
                    job.seed,
                    self.max_turns,
                    self.config.move_timeout,
                    names=specs,
                )
            except FatalAgentError:
                raise
            except Exception as e:  # noqa: BLE001 - any agent failure is infrastructure, by design
                errors.append(describe_failure(e, self.config.move_timeout))
                continue
            return self._record(job, specs, result.state.transcript, result.outcome, attempt, errors,
                                result.usage(), result.state.starter, started, retries)
        outcome = Outcome(status="error", rewards={r: 0.0 for r in self.domain.roles}, agreement=False,
                          success=False, turns=0, detail=errors[-1])
        return self._record(job, specs, [], outcome, self.config.retries + 1, errors, {}, None, started, retries)

    def _record(self, job: Job, specs: dict[Role, str], transcript: list, outcome: Outcome, attempts: int,
                errors: list[str], usage: dict, starter: Role | None, started: float,
                retries: Counter[str]) -> EpisodeRecord:
        return EpisodeRecord(
            key=job.key,
            domain=self.config.domain,
            policy=job.policy,
            counterpart=job.counterpart,
            policy_role=job.policy_role,
            agents=specs,
            cards={role: card.hash for role, spec in specs.items() if (card := self.seats[spec].card) is not None},
            scenario_id=job.scenario.id,
            scenario_hash=job.scenario.hash,
            seed=job.seed,
            starter=starter,
            transcript=transcript,
            outcome=outcome,
            attempts=attempts,
            errors=errors,
            retries=dict(sorted(retries.items())),
            usage=usage,
            finished_at=now_iso(),
            duration_s=round(time.perf_counter() - started, 6),
        )


def describe_failure(e: BaseException, timeout: float | None) -> str:
    """An agent's failure in one line, as episodes record it."""
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return f"TimeoutError: a move took longer than {timeout} s (not counting time queued behind other moves)"
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}"[:500]

