"""Scripted Deal-or-NoDeal negotiators: offline counterparts with classic negotiation tactics.

Every negotiator speaks the same protocol (class `Negotiator`); a strategy only decides three things:
- `propose`: what to take next (a split of the pool, own share);
- `accepts`: whether the opponent's latest proposal is good enough to end the talk with
  "Deal. <selection>";
- `ratify`: in the select phase, whether to go along with an opponent proposal that was left on the
  table without being accepted (the talk ran out, or the opponent proposed and selected at once).
  A negotiator that does not ratify states `<split>no deal</split>`.

`terse=true` (any negotiator) drops the words and keeps the moves: a proposal is the tag alone and
an acceptance is `<selection>`; the decisions are the same. Short transcripts, for teaching small
models the protocol by imitation (training/miniature/).

In the select phase a negotiator states the deal on the table: the last proposal in the dialogue,
from either side. Its own proposals and proposals it accepted are always honoured, so an accepted
proposal leads to complementary splits. With no proposal at all it states its ideal split.

Agents are stateless: everything is read from the observation (own values, the public dialogue),
and randomness comes from an RNG seeded with the episode seed, scenario, role, turn and phase.
The opponent's values are unknown; `estimate_opponent` infers them from its proposals.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated

from pydantic import Field, model_validator

from ibrl_bench.agents.base import Reply
from ibrl_bench.agents.params import Params
from ibrl_bench.agents.scripted import ScriptedAgent
from ibrl_bench.domains.base import Observation
from ibrl_bench.domains.dealnodeal.parser import format_proposal, format_split, has_selection, parse_proposal
from ibrl_bench.domains.dealnodeal.rules import ITEMS, TOTAL_VALUE, Vec, all_splits, complement, dot

ACCEPT = "Deal. <selection>"
TERSE_ACCEPT = "<selection>"
NO_DEAL = "<split>no deal</split>"
EPS = 1e-9


def estimate_opponent(counts: Vec, their_takes: list[Vec]) -> tuple[float, float, float]:
    """Frequency model of the opponent's values: the share of each item type it keeps asking for,
    smoothed toward one half, scaled so the whole pool is worth 10 to it. With no proposals every
    item is worth 10 / (number of items)."""
    n = len(their_takes)
    weights = [(0.5 + sum(t[i] / counts[i] for t in their_takes)) / (1 + n) for i in range(3)]
    scale = TOTAL_VALUE / sum(c * w for c, w in zip(counts, weights, strict=True))
    return (weights[0] * scale, weights[1] * scale, weights[2] * scale)


def describe(take: Vec, counts: Vec) -> str:
    """Words for a share of the pool, e.g. "2 books and the ball"."""
    parts = []
    for item, n, c in zip(ITEMS, take, counts, strict=True):
        if n == 0:
            continue
        noun = item if n == 1 else item + "s"
        parts.append(f"the {noun}" if n == c else f"{n} {noun}")
    if not parts:
        return "nothing"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


@dataclass(frozen=True)
class View:
    """What a negotiator knows at one call, all derived from the observation."""

    obs: Observation
    counts: Vec
    values: Vec
    mine: list[Vec]  # own proposals, oldest first (what it takes)
    theirs: list[Vec]  # opponent proposals, oldest first (what the opponent takes)
    offer: Vec | None  # own share under the opponent's latest message, if that message proposed
    table: tuple[bool, Vec] | None  # the last proposal: (made by me, own share under it)
    accepted: bool  # this side ended the talk with <selection>
    opp_values: tuple[float, float, float]  # estimated opponent values

    def utility(self, own: Vec) -> int:
        return dot(self.values, own)

    def opp_utility(self, own: Vec) -> float:
        give = complement(self.counts, own)
        return sum(v * n for v, n in zip(self.opp_values, give, strict=True))

    @property
    def ideal(self) -> Vec:
        """Everything this side values; items worth 0 to it go to the opponent."""
        return tuple(c if v > 0 else 0 for c, v in zip(self.counts, self.values, strict=True))  # type: ignore[return-value]

    @property
    def tau(self) -> float:
        """Time used, 0 at the first message, 1 at the last message of the talk."""
        return min(1.0, self.obs.turn / max(1, self.obs.max_turns - 1))

    @property
    def final_message(self) -> bool:
        """This is the last message this side will send in the talk."""
        return self.obs.turn >= self.obs.max_turns - 2

    def concede_to(self, target: float) -> Vec:
        """Among splits worth at least `target` to this side, the best for the opponent (by the
        opponent model); ties go to the higher own utility. Falls back to the ideal split."""
        ok = [s for s in all_splits(self.counts) if self.utility(s) >= target - EPS]
        if not ok:
            return self.ideal
        return max(ok, key=lambda s: (round(self.opp_utility(s), 6), self.utility(s), s))


@lru_cache(maxsize=8192)  # each call re-reads the whole dialogue; parse every message once
def _proposal(text: str, counts: Vec) -> Vec | None:
    take = parse_proposal(text, counts)
    if take is None or len(take) != 3 or any(not 0 <= n <= c for n, c in zip(take, counts, strict=True)):
        return None
    return tuple(int(n) for n in take)  # type: ignore[return-value]


def read(obs: Observation) -> View:
    counts: Vec = tuple(int(c) for c in obs.private["counts"])  # type: ignore[assignment]
    values: Vec = tuple(int(v) for v in obs.private["values"])  # type: ignore[assignment]
    mine: list[Vec] = []
    theirs: list[Vec] = []
    table: tuple[bool, Vec] | None = None
    offer: Vec | None = None
    for i, msg in enumerate(obs.dialogue):
        take = _proposal(msg.text, counts)
        if take is None:
            continue
        if msg.role == obs.role:
            mine.append(take)
            table = (True, take)
        else:
            theirs.append(take)
            table = (False, complement(counts, take))
            if i == len(obs.dialogue) - 1:
                offer = complement(counts, take)
    last = obs.dialogue[-1] if obs.dialogue else None
    accepted = last is not None and last.role == obs.role and has_selection(last.text)
    return View(
        obs=obs, counts=counts, values=values, mine=mine, theirs=theirs, offer=offer, table=table,
        accepted=accepted, opp_values=estimate_opponent(counts, theirs),
    )


Utility = Annotated[float, Field(ge=0, le=10)]  # of a split, out of TOTAL_VALUE
Terse = Annotated[bool, Field(strict=True)]
Beta = Annotated[float, Field(ge=0.01, le=100)]


class TimeDependentParams(Params):
    beta: Beta = 1.0
    reservation: Utility = 5.0
    u_max: Utility = 10.0
    terse: Terse = False

    @model_validator(mode="after")
    def _above_reservation(self) -> TimeDependentParams:
        if self.u_max < self.reservation:
            raise ValueError(f"u_max={self.u_max:g} is below reservation={self.reservation:g}")
        return self


class BoulwareParams(TimeDependentParams):
    beta: Beta = 0.2
    reservation: Utility = 6.0


class ConcederParams(TimeDependentParams):
    beta: Beta = 3.0
    reservation: Utility = 4.0


class TitForTatParams(Params):
    floor: Utility = 5.0
    terse: Terse = False


class FairParams(Params):
    accept: Utility = 5.0
    terse: Terse = False


class HardlinerParams(Params):
    accept: Utility = 9.0
    final: Utility = 7.0
    terse: Terse = False


class RandomParams(Params):
    greed: Annotated[float, Field(ge=0, le=100)] = 1.0
    terse: Terse = False


class PushoverParams(Params):
    terse: Terse = False


class Negotiator(ScriptedAgent):
    """The shared protocol; subclasses implement `propose`, `accepts` and `ratify`."""

    name = ""
    sentence = "I would like {mine}; you get {theirs}."
    terse = False

    async def act(self, obs: Observation) -> Reply:
        view = read(obs)
        if obs.phase == "select":
            return Reply(text=self.select(view))
        if view.offer is not None and self.accepts(view, view.offer):
            return Reply(text=TERSE_ACCEPT if self.terse else ACCEPT)
        take = self.propose(view)
        if self.terse:
            return Reply(text=format_proposal(take))
        words = self.sentence.format(
            mine=describe(take, view.counts), theirs=describe(complement(view.counts, take), view.counts)
        )
        return Reply(text=f"{words} {format_proposal(take)}")

    def select(self, view: View) -> str:
        if view.table is None:
            return format_split(view.ideal)
        by_me, own = view.table
        if by_me or view.accepted or self.ratify(view, own):
            return format_split(own)
        return NO_DEAL

    def rng(self, view: View, purpose: str) -> random.Random:
        """A per-decision RNG: deterministic given the episode, independent of call order."""
        o = view.obs
        return random.Random(f"{o.seed}|{o.scenario_id}|{o.role}|{o.turn}|{o.phase}|{self.name}|{purpose}")

    def propose(self, view: View) -> Vec:
        raise NotImplementedError

    def accepts(self, view: View, own: Vec) -> bool:
        raise NotImplementedError

    def ratify(self, view: View, own: Vec) -> bool:
        return self.accepts(view, own)


class TimeDependent(Negotiator):
    """Faratin et al. time-dependent tactic: own-utility target
    u(tau) = u_max - (u_max - reservation) * tau^(1/beta), tau = share of the talk used. Proposes the
    split best for the opponent that meets the target; accepts offers worth its next target."""

    params_model = TimeDependentParams

    def target(self, view: View) -> float:
        return self.u_max - (self.u_max - self.reservation) * view.tau ** (1 / self.beta)

    def propose(self, view: View) -> Vec:
        return view.concede_to(self.target(view))

    def accepts(self, view: View, own: Vec) -> bool:
        return view.utility(own) >= self.target(view) - EPS


class Boulware(TimeDependent):
    """Time-dependent tactic with small beta (default 0.2): holds out near its maximum and concedes
    only close to the deadline, down to `reservation` (default 6)."""

    name = "boulware"
    params_model = BoulwareParams


class Conceder(TimeDependent):
    """Time-dependent tactic with beta > 1 (default 3.0): concedes quickly toward `reservation`
    (default 4) early in the talk."""

    name = "conceder"
    sentence = "How about this: I take {mine} and you take {theirs}."
    params_model = ConcederParams


class TitForTat(Negotiator):
    """Relative tit-for-tat: opens at its ideal, then concedes as much own utility as the opponent's
    latest proposal conceded relative to its previous one (in the opponent's values, estimated by
    the opponent model), and hardens when the opponent does; never below `floor` (default 5).
    On its final message it accepts anything worth `floor`."""

    name = "tit_for_tat"
    sentence = "I will match your moves: I get {mine}, you get {theirs}."
    params_model = TitForTatParams

    def target(self, view: View) -> float:
        if not view.mine:
            return float(TOTAL_VALUE)
        previous = float(view.utility(view.mine[-1]))
        if len(view.theirs) < 2 or view.offer is None:
            return max(self.floor, previous)
        # Concession of the opponent: what its latest claim is worth to it less than its previous one.
        last, before = view.theirs[-1], view.theirs[-2]
        conceded = sum(v * (b - a) for v, a, b in zip(view.opp_values, last, before, strict=True))
        return min(float(TOTAL_VALUE), max(self.floor, previous - conceded))

    def propose(self, view: View) -> Vec:
        return view.concede_to(self.target(view))

    def accepts(self, view: View, own: Vec) -> bool:
        u = view.utility(own)
        return u >= self.target(view) - EPS or (view.final_message and u >= self.floor)

    def ratify(self, view: View, own: Vec) -> bool:
        return view.utility(own) >= self.floor


class Fair(Negotiator):
    """Proposes the split closest to an even division of value (own value against the opponent's
    estimated value, preferring efficient splits) that gives it at least `accept` (default 5 of 10);
    accepts any offer worth at least `accept`."""

    name = "fair"
    sentence = "A fair split: {mine} for me and {theirs} for you."
    params_model = FairParams

    def propose(self, view: View) -> Vec:
        ok = [s for s in all_splits(view.counts) if view.utility(s) >= self.accept - EPS] or [view.ideal]

        def key(s: Vec) -> tuple:
            mine, theirs = view.utility(s), view.opp_utility(s)
            return (-round(abs(mine - theirs), 6), round(mine + theirs, 6), mine, s)

        return max(ok, key=key)

    def accepts(self, view: View, own: Vec) -> bool:
        return view.utility(own) >= self.accept - EPS


class Hardliner(Negotiator):
    """Demands everything it values (gives away only items worth 0 to it) and never moves, except on
    its final message, where it offers the split best for the opponent worth `final` (default 7).
    Accepts offers worth `accept` (default 9), or `final` on its final message; in the select phase
    it declares no deal to an unaccepted opponent proposal worth less than `final`."""

    name = "hardliner"
    sentence = "I need {mine}. You can have {theirs}. That is my offer."
    params_model = HardlinerParams

    def propose(self, view: View) -> Vec:
        return view.concede_to(self.final) if view.final_message else view.ideal

    def accepts(self, view: View, own: Vec) -> bool:
        u = view.utility(own)
        return u >= self.accept - EPS or (view.final_message and u >= self.final - EPS)

    def ratify(self, view: View, own: Vec) -> bool:
        return view.utility(own) >= self.final - EPS


class RandomNegotiator(Negotiator):
    """Proposes a uniformly random split of the pool each turn; accepts an offer worth u with
    probability (u / 10) ** `greed` (default 1.0; larger is pickier). Seeded by the episode."""

    name = "random"
    sentence = "Maybe {mine} for me and {theirs} for you?"
    params_model = RandomParams

    def propose(self, view: View) -> Vec:
        return self.rng(view, "propose").choice(all_splits(view.counts))

    def accepts(self, view: View, own: Vec) -> bool:
        p = (view.utility(own) / TOTAL_VALUE) ** self.greed
        return self.rng(view, "accept").random() < p


class Pushover(Negotiator):
    """Offers the opponent the whole pool every turn and goes along with whatever is on the table:
    it reaches agreement with nearly anyone and keeps nothing. Not a counterpart: a reference
    policy showing that a board ranked on agreement alone can be topped by giving everything away."""

    name = "pushover"
    sentence = "You can have everything: {theirs}. I keep {mine}."
    params_model = PushoverParams

    def propose(self, view: View) -> Vec:
        return tuple(0 for _ in view.counts)

    def accepts(self, view: View, own: Vec) -> bool:
        return view.utility(own) == 0

    def ratify(self, view: View, own: Vec) -> bool:
        return True


NEGOTIATORS: dict[str, type[Negotiator]] = {
    cls.name: cls for cls in (Boulware, Conceder, TitForTat, Fair, Hardliner, RandomNegotiator, Pushover)
}
