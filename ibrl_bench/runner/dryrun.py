"""`crossplay --dry-run`: the plan of a run and what its model seats will cost, before any call.

For every model seat and role it plays: the episodes it sits in (those the run folder does not
hold yet), the calls it makes, their tokens and their cost at the seat's prices (the card's, with
their date), and the calls the response cache already holds.

- Calls and tokens come from a pilot run folder when one is given (`--pilot RUN`): the mean number
  of moves the seat made per episode in that role, and the mean prompt and completion tokens of
  its paid calls. A seat is matched by what it is (model and sampling parameters, not the URL).
- Without a pilot, from the turn limit and the prompt sizes: every episode is taken to run to the
  turn limit (each side moves ceil(max_turns / 2) times, plus one closing move), each prompt is the
  rendered role prompt of that scenario and role (`CHARS_PER_TOKEN` characters a token) plus the
  dialogue so far at `MESSAGE_TOKENS` a message, and each reply `MESSAGE_TOKENS`. An upper bound on
  calls, and a rough figure for tokens: give a pilot for a measured one.
- Expected cache hits: each pending episode is replayed with every model seat answering from the
  cache alone (the other seats play as usual); the moves it replays before the first reply the
  cache lacks are hits. An episode that replays to its end costs nothing.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

from ibrl_bench.agents.base import Agent, Reply
from ibrl_bench.agents.spec import parse_spec
from ibrl_bench.cache_home import cache_home
from ibrl_bench.domains.base import Observation
from ibrl_bench.errors import UserError
from ibrl_bench.runner.cache import (
    CACHE_FILE,
    TRANSPORT,
    ResponseCache,
)
from ibrl_bench.runner.episode import play_episode
from ibrl_bench.runner.metering import MeteredSeat
from ibrl_bench.runner.store import RunStore

CHARS_PER_TOKEN = 4.0
MESSAGE_TOKENS = 30


class SeatEstimate(BaseModel):
    spec: str
    role: str
    episodes: int
    calls: float  # expected model calls, cache hits included
    cache_hits: float
    prompt_tokens: float  # of the paid calls
    completion_tokens: float
    cost_usd: float | None  # None: the seat has no prices
    prices: str  # where the prices come from, with their date
    source: str  # "pilot RUN" or "turn limit and prompt sizes"


class Plan(BaseModel):
    cells: int
    episodes_per_cell: int
    pending: int  # episodes the run folder does not hold yet
    seats: list[SeatEstimate]

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd or 0.0 for s in self.seats)

    @property
    def tokens(self) -> float:
        return sum(s.prompt_tokens + s.completion_tokens for s in self.seats)


def seat_name(spec: str) -> str:
    """What a seat is, for matching a pilot's seats: backend, model and the parameters that change
    replies (not the URL, the key or transport settings)."""
    parsed = parse_spec(spec)
    params = "&".join(f"{k}={v}" for k, v in sorted(parsed.params.items()) if k not in TRANSPORT)
    return f"{parsed.kind}:{parsed.target.partition('@')[0]}?{params}"


class _Measured(BaseModel):
    calls_per_episode: float
    prompt_per_call: float
    completion_per_call: float


def pilot_measurements(folder: str | Path) -> dict[tuple[str, str], _Measured]:
    """(seat name, role) -> moves per episode and tokens per paid call, from a finished run folder."""
    store = RunStore(folder)
    if not store.manifest_path.is_file():
        raise UserError(f"--pilot {folder} is not a run folder (no manifest.json); give a folder crossplay wrote")
    # episodes, moves, paid, prompt, completion
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for r in store.latest().values():
        if r.outcome.status == "error":
            continue
        for role, spec in r.agents.items():
            u = r.usage.get(role)
            moves = sum(1 for t in r.transcript if t.role == role)
            s = sums[(seat_name(spec), role)]
            s[0] += 1
            s[1] += moves
            if u is not None:
                # Runs before calls were counted: every move of a seat with tokens was a paid call.
                paid = u.calls or (moves if not u.cache_hits and u.prompt_tokens else 0)
                s[2] += paid
                s[3] += u.prompt_tokens
                s[4] += u.completion_tokens
    return {k: _Measured(calls_per_episode=s[1] / s[0], prompt_per_call=s[3] / s[2], completion_per_call=s[4] / s[2])
            for k, s in sums.items() if s[0] and s[2]}


class _Miss(Exception):
    pass


class _FromCache(Agent):
    """A model seat that answers from the cache alone; counts the moves it replayed."""

    def __init__(self, seat: MeteredSeat, cache: ResponseCache):
        self.seat, self.cache, self.hits = seat, cache, 0

    async def act(self, obs: Observation) -> Reply:
        hit = self.cache.get(self.seat.key(obs)[0])
        if hit is None:
            raise _Miss
        self.hits += 1
        return Reply(text=hit.text)


async def _replayed(runner, job, model_specs: set[str], cache: ResponseCache,
                    seats: dict) -> tuple[dict[str, int], bool]:
    """Moves each model role replays from the cache in this job's episode, and whether it reached the end."""
    other = runner.domain.other(job.policy_role)
    by_role = {job.policy_role: job.policy, other: job.counterpart}
    agents = {role: _FromCache(seats[spec], cache) if spec in model_specs else runner.seats[spec].agent
              for role, spec in by_role.items()}
    try:
        await play_episode(runner.domain, job.scenario, agents, job.seed, runner.max_turns, None)
        whole = True
    except _Miss:
        whole = False
    return {role: a.hits for role, a in agents.items() if isinstance(a, _FromCache)}, whole


def estimate(runner, pilot: str | Path | None = None) -> Plan:
    """The plan of `runner` (a Crossplay, nothing played or written) and its estimated cost."""
    from ibrl_bench.runner.cache import is_model_seat

    config = runner.config
    done = set()
    if runner.store.manifest_path.is_file():
        done = {k for k, r in runner.store.latest().items() if r.outcome.status != "error"}
    jobs = [job for job in runner.jobs() if job.key not in done]
    model_specs = {spec for spec, seat in runner.seats.items() if is_model_seat(seat)}
    seats = {spec: MeteredSeat(runner.seats[spec], runner.domain, None, None) for spec in model_specs}
    measured = pilot_measurements(pilot) if pilot else {}
    cache = None
    folder = Path(config.cache_dir or cache_home()).expanduser()
    if config.cache and model_specs and (folder / CACHE_FILE).is_file():
        cache = ResponseCache(folder)
    calls_at_limit = math.ceil(runner.max_turns / 2) + 1
    rows: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    try:
        for job in jobs:
            other = runner.domain.other(job.policy_role)
            by_role = {job.policy_role: job.policy, other: job.counterpart}
            if not model_specs & set(by_role.values()):
                continue
            hits, whole = (({}, False) if cache is None
                           else asyncio.run(_replayed(runner, job, model_specs, cache, seats)))
            for role, spec in by_role.items():
                if spec not in model_specs:
                    continue
                row = rows[(spec, role)]
                row["episodes"] += 1
                m = measured.get((seat_name(spec), role))
                if m is not None:
                    calls, prompt, completion = m.calls_per_episode, m.prompt_per_call, m.completion_per_call
                else:
                    state = runner.domain.start(job.scenario, job.seed, runner.max_turns)
                    obs = runner.domain.observe(state, role)
                    chars = sum(len(msg["content"]) for msg in runner.domain.chat_messages(obs, seats[spec].prompt))
                    calls = calls_at_limit
                    # The prompt grows by two messages a move: the mean prompt of `calls` moves.
                    prompt = chars / CHARS_PER_TOKEN + (calls - 1) * MESSAGE_TOKENS
                    completion = MESSAGE_TOKENS
                hit = hits.get(role, 0)
                paid = 0.0 if whole else max(calls - hit, 0.0)
                row["calls"] += hit if whole else max(calls, hit)
                row["hits"] += hit
                row["prompt"] += paid * prompt
                row["completion"] += paid * completion
                row["measured"] += m is not None
    finally:
        if cache is not None:
            cache.close()
    out = []
    for (spec, role), row in rows.items():
        seat = seats[spec]
        prices_in, prices_out = seat.prices
        card = runner.seats[spec].card
        dated = card.prices.as_of if card is not None and card.prices is not None else None
        if not (prices_in or prices_out):
            cost, where = ((None, "no prices") if parse_spec(spec).kind in ("openai", "litellm") or card
                           else (0.0, "local"))
        else:
            cost = (row["prompt"] * prices_in + row["completion"] * prices_out) / 1e6
            where = (f"card {card.id}, as of {dated}" if dated else f"card {card.id}") if card else "spec"
            where = f"${prices_in:g}/${prices_out:g} per Mtok ({where})"
        out.append(SeatEstimate(
            spec=spec, role=role, episodes=int(row["episodes"]), calls=round(row["calls"], 1),
            cache_hits=row["hits"], prompt_tokens=round(row["prompt"]), completion_tokens=round(row["completion"]),
            cost_usd=cost, prices=where,
            source=f"pilot {pilot}" if row["measured"] == row["episodes"] else "turn limit and prompt sizes",
        ))
    n_cells = len(config.policies) * len(config.counterparts) * len(runner.roles)
    return Plan(cells=n_cells, episodes_per_cell=len(runner.scenario_set.scenarios) * config.seeds,
                pending=len(jobs), seats=out)


def plan_table(plan: Plan, budget_usd: float | None = None):
    """The plan as a rich table, and the lines to print under it."""
    from rich.table import Table

    table = Table(title=f"dry run: {plan.cells} cells x {plan.episodes_per_cell} episodes, "
                        f"{plan.pending} to play")
    for name in ("seat", "role", "episodes", "calls", "cache hits", "tokens in", "tokens out", "cost", "prices",
                 "calls and tokens from"):
        table.add_column(name,
                         justify="left" if name in ("seat", "role", "prices", "calls and tokens from") else "right")
    for s in plan.seats:
        table.add_row(s.spec, s.role, str(s.episodes), f"{s.calls:,.0f}", f"{s.cache_hits:,.0f}",
                      f"{s.prompt_tokens:,.0f}", f"{s.completion_tokens:,.0f}",
                      "?" if s.cost_usd is None else f"${s.cost_usd:,.4f}", s.prices, s.source)
    lines = [f"estimated cost ${plan.cost_usd:,.4f} for {plan.tokens:,.0f} tokens"
             + (" (seats without prices not counted)" if any(s.cost_usd is None for s in plan.seats) else "")]
    if not plan.seats:
        lines = ["no model seat: the run makes no model call and costs nothing"]
    if budget_usd is not None:
        verdict = "fits in" if plan.cost_usd <= budget_usd else "exceeds"
        lines.append(f"the estimate {verdict} --budget-usd {budget_usd:g}")
    if any(s.source != "pilot" and not s.source.startswith("pilot") for s in plan.seats):
        lines.append("without a pilot, calls assume every episode runs to the turn limit (an upper bound); "
                     "give --pilot RUN (a small run of the same seats) for measured calls and tokens")
    return table, lines


def dry_run_report(config, out: str | Path, pilot: str | Path | None = None):
    """`crossplay --dry-run`: the plan of this configuration and folder as a table and lines to print."""
    from ibrl_bench.agents.remote_chat import seats_that_never_call
    from ibrl_bench.runner.crossplay import Crossplay

    with seats_that_never_call():
        runner = Crossplay(config, out)
    return plan_table(estimate(runner, pilot), config.budget_usd)
