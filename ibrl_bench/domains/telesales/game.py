"""The Vehicle TeleSales protocol and scoring.

Protocol (stated once here and in docs/telesales.md):
1. The seller opens; seller and buyer alternate free-text messages.
2. A seller message may make a formal offer, `<offer>vehicle=ID price=31500 extras=...</offer>`
   (parser.py reads many other spellings). A readable offer goes on the table and replaces the
   one before, even when the seller may not make it (a vehicle not in stock, a price below the
   floor, an extra the brief does not hold): that is an invalid offer, counted, and a sale on it
   falls through. An offer tag that cannot be read (malformed) is an invalid offer too and
   clears the table: the seller withdrew the old offer for one nobody can read.
3. A buyer message with `<accept>` accepts the offer on the table and ends the dialogue; with
   `<leave>` it ends the dialogue without a sale. `<accept>` with nothing on the table is talk.
   Tags of the other role (a seller's `<accept>`, a buyer's `<offer>`) are talk too.
4. The dialogue also ends after `max_turns` messages (default 20: ten each), without a sale.
   An empty message is a protocol violation and ends the episode (status `invalid`).

Outcome: agreement = the buyer accepted an offer; success (Success@1) = that offer is a valid sale
(rules.judge); otherwise the sale fell through. Rewards are in rules.py. Status: `invalid` on a
violation, `max_turns` when the limit ended the talk, else `ok`.
"""

from __future__ import annotations

import json

from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, GameState, Observation, Outcome, Role, Scenario, Turn
from ibrl_bench.domains.telesales import parser, prompts, rules, scenarios
from ibrl_bench.domains.telesales.catalog import load_catalog
from ibrl_bench.domains.telesales.models import TIERS, Brief, Offer, Persona

DEFAULT_MAX_TURNS = 20
SELLER, BUYER = "seller", "buyer"


class SaleState(GameState):
    def __init__(self, scenario: Scenario, seed: int, max_turns: int):
        super().__init__(scenario, seed, max_turns, starter=SELLER)
        self.brief = Brief.model_validate(scenario.data["seller"])
        self.persona = Persona.model_validate(scenario.data["buyer"])
        self.speaker: Role = SELLER
        self.table: Offer | None = None
        self.offers = 0
        self.invalid_offers = 0
        self.accepted: Offer | None = None
        self.ended_by: str | None = None  # "accept" | "leave" | "max_turns" | "violation"
        self.violators: list[Role] = []
        # Each role's private view (its validated brief), serialised once; every observation gets a
        # fresh copy of it.
        catalog = scenario.data["catalog"]
        self.private_json = {
            SELLER: json.dumps({"brief": self.brief.model_dump(mode="json"), "catalog": catalog}),
            BUYER: json.dumps({"persona": self.persona.model_dump(mode="json"), "catalog": catalog}),
        }


def _offer_json(offer: Offer) -> dict:
    return {"vehicle": offer.vehicle, "price": offer.price, "extras": list(offer.incentives)}


class TeleSales(Domain):
    name = "telesales"
    roles = (SELLER, BUYER)
    default_max_turns = DEFAULT_MAX_TURNS
    metric_names = ("fell_through", "buyer_left", "offers", "invalid_offers", "turns", "price_share_of_list",
                    "seller_margin", "buyer_surplus", *(f"success_{t}" for t in TIERS))
    prompt_version = prompts.PROMPT_VERSION
    prompt_hash = prompts.PROMPT_HASH
    prompts = prompts.PROMPTS  # last: from here on the class body's `prompts` is the dict

    def chat_messages(self, obs: Observation, prompt: str = DEFAULT_PROMPT) -> list[dict[str, str]]:
        return prompts.chat_messages(obs, self.role_prompt(prompt).name)

    def scenario_set(self, split: str = "test", n: int | None = None):
        return scenarios.scenario_set(split, n)

    def start(self, scenario: Scenario, seed: int, max_turns: int | None = None) -> SaleState:
        return SaleState(scenario, seed, max_turns or self.default_max_turns)

    def to_move(self, state: SaleState) -> list[Role]:  # type: ignore[override]
        return [] if state.over else [state.speaker]

    def observe(self, state: SaleState, role: Role) -> Observation:  # type: ignore[override]
        # Each role sees its own brief and nothing of the other's, as a fresh copy, so an agent
        # that mutates its view cannot change the game.
        if role not in self.roles:
            raise ValueError(f"unknown role {role!r} for telesales")
        return Observation(
            domain=self.name,
            role=role,
            phase="talk",
            scenario_id=state.scenario.id,
            seed=state.seed,
            turn=len(state.transcript),
            max_turns=state.max_turns,
            private=json.loads(state.private_json[role]),
            dialogue=state.public_messages,
        )

    def apply(self, state: SaleState, role: Role, text: str) -> None:  # type: ignore[override]
        if role not in self.to_move(state):
            raise ValueError(f"role {role} cannot move now")
        if not isinstance(text, str) or not text.strip():
            state.transcript.append(Turn(role=role, phase="talk", text=text if isinstance(text, str) else "",
                                         violation="empty message"))
            state.violators.append(role)
            state.ended_by = "violation"
            state.over = True
            return
        parsed = self._seller_move(state, text) if role == SELLER else self._buyer_move(state, text)
        state.transcript.append(Turn(role=role, phase="talk", text=text, parsed=parsed or None))
        if state.over:
            return
        if len(state.transcript) >= state.max_turns:
            state.ended_by = "max_turns"
            state.over = True
        else:
            state.speaker = self.other(role)

    def _seller_move(self, state: SaleState, text: str) -> dict:
        read = parser.parse_offer(text)
        if read is None:
            return {}
        state.offers += 1
        if read.offer is None:
            state.invalid_offers += 1
            state.table = None
            return {"offer": None, "invalid": f"malformed offer: {read.reason}"}
        state.table = read.offer
        problems = rules.offer_problems(read.offer, state.brief)
        if problems:
            state.invalid_offers += 1
            return {"offer": _offer_json(read.offer), "invalid": "; ".join(problems)}
        return {"offer": _offer_json(read.offer)}

    def _buyer_move(self, state: SaleState, text: str) -> dict:
        act = parser.buyer_act(text)
        if act == "leave":
            state.ended_by = "leave"
            state.over = True
            return {"act": "leave"}
        if act == "accept":
            if state.table is None:
                return {"act": "accept", "ignored": "no offer on the table"}
            state.accepted = state.table
            state.ended_by = "accept"
            state.over = True
            return {"act": "accept", "offer": _offer_json(state.table)}
        return {}

    def outcome(self, state: SaleState) -> Outcome:  # type: ignore[override]
        turns = sum(1 for t in state.transcript if t.public)
        tier = state.persona.difficulty
        metrics: dict[str, float | bool | None] = {
            "fell_through": False,
            "buyer_left": state.ended_by == "leave",
            "offers": state.offers,
            "invalid_offers": state.invalid_offers,
            "turns": turns,
            "price_share_of_list": None,
            "seller_margin": None,
            "buyer_surplus": None,
            # Success@1 by difficulty tier: defined only on the scenario's own tier.
            **{f"success_{t}": (False if t == tier else None) for t in TIERS},
        }
        zero = {SELLER: 0.0, BUYER: 0.0}
        if state.violators:
            return Outcome(
                status="invalid", rewards=zero, agreement=False, success=False, turns=turns, metrics=metrics,
                violators=sorted(state.violators),
                detail="; ".join(f"{t.role}: {t.violation}" for t in state.transcript if t.violation),
            )
        status = "max_turns" if state.ended_by == "max_turns" else "ok"
        if state.accepted is None:
            detail = {"leave": "the buyer left", "max_turns": "no sale before the turn limit"}.get(state.ended_by or "")
            return Outcome(status=status, rewards=zero, agreement=False, success=False, turns=turns,
                           metrics=metrics, detail=detail)
        offer = state.accepted
        catalog = load_catalog()
        verdict = rules.judge(offer, state.brief, state.persona, catalog)
        if not verdict.success:
            metrics["fell_through"] = True
            return Outcome(status=status, rewards=zero, agreement=True, success=False, turns=turns, metrics=metrics,
                           detail="sale fell through: " + "; ".join(verdict.problems))
        terms = rules.sale_terms(offer, state.brief, state.persona, catalog)
        metrics.update(
            price_share_of_list=round(terms.price_share_of_list, 6),
            seller_margin=round(terms.seller_margin, 6),
            buyer_surplus=round(terms.buyer_surplus, 6),
            **{f"success_{tier}": True},
        )
        extras = f" with {', '.join(offer.incentives)}" if offer.incentives else ""
        return Outcome(
            status=status,
            rewards={SELLER: round(terms.seller_reward, 6), BUYER: round(terms.buyer_reward, 6)},
            agreement=True, success=True, turns=turns, metrics=metrics,
            detail=f"sold {offer.vehicle} at ${offer.price:,.0f}{extras}",
        )

    def describe(self, scenario: Scenario) -> str:
        return describe_scenario(scenario)


def _money(x: float) -> str:
    return f"${x:,.0f}"


def describe_scenario(scenario: Scenario) -> str:
    """Both briefs in a few readable lines (for `ibrl-bench play`; agents never see this)."""
    catalog = load_catalog()
    brief = Brief.model_validate(scenario.data["seller"])
    p = Persona.model_validate(scenario.data["buyer"])
    needs = p.must_haves
    must = []
    if needs.bodies:
        must.append(" or ".join(needs.bodies))
    if needs.fuels:
        must.append(" or ".join(f.replace("_", "-") for f in needs.fuels))
    if needs.min_seats:
        must.append(f"{needs.min_seats}+ seats")
    must += [catalog.feature_name(f) for f in needs.features]
    nice = ", ".join(catalog.feature_name(f) for f in p.nice_to_haves) or "none"
    values = ", ".join(f"{i.replace('_', ' ')} {_money(v)}" for i, v in sorted(p.incentive_values.items())) or "none"
    lines = [
        f"buyer persona ({p.temperament} temperament, {p.difficulty} tier, patience {p.patience} messages): "
        f"budget {_money(p.budget)}, reservation {_money(p.reservation)} (hidden), "
        f"price sensitivity {p.price_sensitivity:g}",
        f"  must-haves: {'; '.join(must)}",
        f"  nice-to-haves: {nice} (+{_money(p.nice_bonus)} each); extras it values: {values}",
        f"seller brief ({brief.dealership}), stock with floor / list price; * meets the buyer's must-haves:",
    ]
    for item in brief.inventory:
        v = catalog.vehicle(item.vehicle)
        assert v is not None
        mark = "*" if rules.meets_needs(v, needs) else " "
        lines.append(f"  {mark} {v.id:<28} {_money(item.floor):>8} / {_money(v.list_price):<8} {v.summary()}")
    extras = ", ".join(f"{i.id.replace('_', ' ')} (costs {_money(i.cost)})" for i in brief.incentives) or "none"
    lines.append(f"  extras it may give: {extras}")
    return "\n".join(lines)
