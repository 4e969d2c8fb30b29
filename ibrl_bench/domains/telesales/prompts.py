"""Role prompts for language-model agents playing Vehicle TeleSales.

Each prompt states the protocol, the role's own brief (never the other's) and the exact tags. The
wording is versioned: a prompt's version changes whenever its text does, and its hash goes into
each run manifest. Two wordings: `full` (the default) and `compact`, the same brief and tags with
the prose cut, for small models. Scripted agents do not read prompts.
"""

from __future__ import annotations

from ibrl_bench.domains.base import DEFAULT_PROMPT, Observation, RolePrompt, chat_from_dialogue, content_hash
from ibrl_bench.domains.telesales.catalog import load_catalog

PROMPT_VERSION = "ts-prompt-v1"

SELLER = """You are a car salesperson at {dealership}, calling a prospective buyer you have never met. \
Your goal is a valid sale at a good price.

Vehicles in stock (list price; your floor, the lowest price you may sell for, is private):
{inventory}
Extras you may add to an offer (their cost to the dealership): {incentives}

Rules:
- You and the buyer take turns; the call ends after {max_turns} messages in total, or when the buyer accepts or leaves.
- Make a formal offer with the tag <offer>vehicle=ID price=N extras=ID,ID</offer> (extras optional), \
using the vehicle ids above. The buyer can accept only your latest offer.
- An offer below the floor, of a vehicle not in stock, or with an extra you do not have makes the sale fall through; \
a sale also falls through if the vehicle misses something the buyer must have or the price is over the buyer's budget.
Write only your next message: short, as on the phone."""

BUYER = """You are a {temperament} customer taking a call from a car dealership. You are looking for a vehicle.

Your private situation (never reveal your budget or your limit outright):
- Must have: {must_haves}.
- Nice to have: {nice}.
- Budget: at most ${budget}; you would rather not pay more than ${reservation} for a vehicle \
that just meets your needs (each nice-to-have it has is worth about ${nice_bonus} more to you).
- Extras you would value: {extras}.
- Patience: you will leave after about {patience} of your own messages if the call goes nowhere.

Rules:
- You and the seller take turns; the call ends after {max_turns} messages in total.
- To accept the seller's latest formal offer, write <accept>. To end the call without buying, write <leave>.
- Accept only an offer whose vehicle has everything you must have and whose price is within your budget.
Write only your next message: short, as on the phone."""

OPEN = "The call starts now. Open it."
TEMPLATES = {"seller": SELLER, "buyer": BUYER, "open": OPEN}
PROMPT_HASH = content_hash([PROMPT_VERSION, TEMPLATES])

COMPACT = {
    "seller": "Sell a car by phone, {max_turns} messages. Stock (floors private):\n{inventory}\n"
              "Extras (cost): {incentives}. Offer: <offer>vehicle=ID price=N extras=ID,ID</offer>. "
              "Below floor, not in stock or missing a must-have: no sale. Be brief.",
    "buyer": "You are a {temperament} car buyer, {max_turns} messages. Must have: {must_haves}. Nice: {nice}. "
             "Budget ${budget}; fair price ${reservation} (+${nice_bonus} per nice-to-have). "
             "Extras you value: {extras}. "
             "Patience: {patience} messages. <accept> takes the latest offer; <leave> ends the call. Be brief.",
    "open": "The call starts.",
}

PROMPTS = {
    DEFAULT_PROMPT: RolePrompt(DEFAULT_PROMPT, PROMPT_VERSION, TEMPLATES),
    "compact": RolePrompt("compact", "ts-compact-v1", COMPACT),
}


def _seller(obs: Observation, template: str) -> str:
    catalog = load_catalog()
    brief = obs.private["brief"]
    lines = []
    for item in brief["inventory"]:
        v = catalog.vehicle(item["vehicle"])
        features = ", ".join(catalog.feature_name(f) for f in v.features) if v else ""
        lines.append(f"- {item['vehicle']}: {v.summary() if v else ''}; features: {features or 'none'}; "
                     f"list ${v.list_price if v else '?'}; floor ${item['floor']}")
    incentives = ", ".join(f"{i['id']} (${i['cost']})" for i in brief["incentives"]) or "none"
    return template.format(dealership=brief["dealership"], inventory="\n".join(lines), incentives=incentives,
                         max_turns=obs.max_turns)


def _buyer(obs: Observation, template: str) -> str:
    catalog = load_catalog()
    p = obs.private["persona"]
    need = p["must_haves"]
    parts = []
    if need["bodies"]:
        parts.append("body " + " or ".join(need["bodies"]))
    if need["fuels"]:
        parts.append("fuel " + " or ".join(f.replace("_", "-") for f in need["fuels"]))
    if need["min_seats"]:
        parts.append(f"at least {need['min_seats']} seats")
    parts += [catalog.feature_name(f) for f in need["features"]]
    extras = ", ".join(f"{k} (worth ${v})" for k, v in p["incentive_values"].items()) or "none in particular"
    return template.format(
        temperament=p["temperament"], must_haves="; ".join(parts) or "nothing specific",
        nice=", ".join(catalog.feature_name(f) for f in p["nice_to_haves"]) or "nothing in particular",
        budget=p["budget"], reservation=p["reservation"], nice_bonus=p["nice_bonus"], extras=extras,
        patience=p["patience"], max_turns=obs.max_turns,
    )


def chat_messages(obs: Observation, prompt: str = DEFAULT_PROMPT) -> list[dict[str, str]]:
    templates = PROMPTS[prompt].templates
    system = _seller(obs, templates["seller"]) if obs.role == "seller" else _buyer(obs, templates["buyer"])
    return chat_from_dialogue(system, obs, templates["open"])
