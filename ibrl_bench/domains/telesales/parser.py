"""Read TeleSales moves out of free text written by language models.

Rules (docs/telesales.md cites them; tests/test_telesales_parser.py checks each one):

Normalization. Unicode NFKC (fullwidth brackets become ASCII), lower case, curly quotes and
dashes made ASCII, runs of spaces collapsed. Only the last 20,000 characters of a message are read
(a final answer comes last; the cap bounds the work).

Offer. `parse_offer(text)` reads the LAST opening `<offer ...>` tag of a message (any case, a
space allowed after `<`, up to 400 characters of attributes, self-closing allowed); `</offer>`
alone is not an offer, nor is `<offers>`. No opening tag: None, the message makes no offer. The fields are read
from the tag's attributes when they name a field (`<offer vehicle="ID" price="31500"/>`),
otherwise from the body, up to the next `</offer>` or the end of the message.
Fields are `key=value` or `key: value` (so JSON works): vehicle (keys `vehicle`, `vehicle_id`,
`car`, `model`, `id`), price (`price`, `amount`, `total`), extras (`extras`, `extra`,
`incentives`, `incentive`, `includes`, `including`). A value runs to the next key or to a line
end, `;`, `|` or brace (a vehicle value also stops at a comma); quotes around it are dropped.
With no key at all, the body itself is read: it must name exactly one vehicle and hold exactly one
money amount ("<offer>Arden Terra LE for $30,500</offer>").
- Vehicle: a catalog id or name, matched by words: an id or full name anywhere in the value
  (the longest wins: "arden terra hybrid limited" over "arden terra"), else model and trim
  ("terra le"), else a model with a single trim in the catalog. Case, `-`, `_` and word order
  beyond that do not matter. A value that names no vehicle, or two equally well, is malformed.
- Price: the first number of the value: `31500`, `$31,500`, `31,500.00`, `31.5k`,
  `USD 31500`. Dots are decimal points, commas group thousands. Malformed: no number, a minus
  sign, zero, above 10,000,000, or two different prices in one tag.
- Extras: every catalog incentive named in the value by id or alias ("warranty",
  "winter tires"); other words are ignored; `none` names nothing. Ids are returned sorted.
A malformed offer is returned as kind "malformed" with a reason; it is never an exception.

Buyer acts. `buyer_act(text)` is "accept", "leave" or None. Tags: `<accept>` (`<accepted>`,
self-closing and attributes allowed) and `<leave>` (`<walk away>`, `<walk_away>`, `<walkaway>`).
When a message holds several, the last one counts. Words without a tag ("I accept") are talk.

Money in free text. `money_amounts(text)` lists the amounts in prose, in order: a number with a
currency sign or word (`$31,500`, `31500 dollars`, `USD 31k`), with `k`/`thousand`/`grand`, with
grouped thousands (`31,500`), or a bare number of 1,000 or more that is not a year (1900-2100).

Every function is pure, never raises on any str (a non-str reads as empty), and runs in time
linear in the input.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from ibrl_bench.domains.telesales.catalog import Catalog, load_catalog
from ibrl_bench.domains.telesales.models import Offer

_SCAN_LIMIT = 20_000
MAX_PRICE = 10_000_000

_TRANSLATE = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-", "\u2212": "-",
})
_SPACES = re.compile(r"[^\S\n]+")

_OFFER_OPEN = re.compile(r"<\s?offer\b([^<>]{0,400})>")
_OFFER_CLOSE = re.compile(r"<\s?/\s?offer\s?>")
_ACT = re.compile(r"<\s?(?P<act>accept(?:ed)?|leave|walk[ _-]?away)\b[^<>]{0,80}>")

_KEY = re.compile(
    r"(?<![a-z0-9_])(?:"
    r"(?P<vehicle>vehicle(?:[ _-]?id)?|car|id)|(?P<part>make|model|trim)"
    r"|(?P<price>price(?:[ _-]?(?:usd|\$))?|amount|total)"
    r"|(?P<extras>extras?|incentives?|includes?|including)"
    r")\s?[=:]"
)
_VALUE_END = {"vehicle": re.compile(r"[,;\n{}|]"), "part": re.compile(r"[,;\n{}|]"),
              "price": re.compile(r"[;\n{}|]"), "extras": re.compile(r"[;\n{}|]")}
_STRIP = " \"'`*.!?()[]"

# A number: grouped thousands or a plain run of digits, an optional decimal part, an optional
# multiplier. The lookbehind keeps a match from starting inside another number or word.
_NUMBER = (r"(?P<neg>-\s?)?(?P<cur>\$|usd\s?|us\$\s?)?"
           r"(?<![\w.,])(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?"
           r"(?:\s?(?P<mult>k|thousand|grand)\b)?(?P<cur2>\s?(?:usd|dollars?|bucks)\b)?")
_NUMBER_RE = re.compile(_NUMBER)


@dataclass(frozen=True)
class ParsedOffer:
    kind: Literal["offer", "malformed"]
    offer: Offer | None = None
    reason: str | None = None


def normalize(text: object) -> str:
    if not isinstance(text, str):
        return ""
    text = unicodedata.normalize("NFKC", text[-_SCAN_LIMIT:]).lower().translate(_TRANSLATE)
    return _SPACES.sub(" ", text)


# --- offers ------------------------------------------------------------------------------------


def parse_offer(text: str) -> ParsedOffer | None:
    """The offer a message makes (see the module docstring), or None when it has no offer tag."""
    return _parse_offer(text) if isinstance(text, str) else None


@lru_cache(maxsize=16384)  # agents re-read the whole dialogue on every move
def _parse_offer(text: str) -> ParsedOffer | None:
    norm = normalize(text)
    last = None
    for m in _OFFER_OPEN.finditer(norm):
        last = m
    if last is None:
        return None
    attrs = last.group(1).rstrip(" /")
    if _KEY.search(attrs):
        region = attrs
    else:
        close = _OFFER_CLOSE.search(norm, last.end())
        region = norm[last.end():close.start() if close else len(norm)]
    return _read_offer(region, load_catalog())


def _read_offer(region: str, catalog: Catalog) -> ParsedOffer:
    fields: dict[str, list[str]] = {"vehicle": [], "part": [], "price": [], "extras": []}
    keys = list(_KEY.finditer(region))
    for m, nxt in zip(keys, [*keys[1:], None]):  # noqa: B905 - each key with the next (None after the last)
        name = next(k for k in fields if m.group(k))
        value = region[m.end():nxt.start() if nxt else len(region)]
        end = _VALUE_END[name].search(value)
        fields[name].append((value[:end.start()] if end else value).strip(_STRIP))
    if not keys:  # "<offer>Arden Terra LE for $30,500</offer>"
        if not region.strip(" /"):
            return _malformed("empty offer")
        amounts = set(money_amounts(region))
        if len(amounts) != 1:
            return _malformed("no price" if not amounts else "two prices in one offer")
        fields = {"vehicle": [region], "part": [], "price": [_format_price(amounts.pop())], "extras": [region]}
    if fields["part"]:  # {"make": "Arden", "model": "Terra", "trim": "LE"} names one vehicle
        fields["vehicle"].append(" ".join(fields["part"]))

    vehicles = set()
    for value in fields["vehicle"]:
        vid, problem = resolve_vehicle(value, catalog)
        if vid is None:
            return _malformed(problem)
        vehicles.add(vid)
    if not vehicles:
        return _malformed("no vehicle")
    if len(vehicles) > 1:
        return _malformed("two vehicles in one offer")

    prices = set()
    for value in fields["price"]:
        price, problem = read_price(value)
        if price is None:
            return _malformed(problem)
        prices.add(price)
    if not prices:
        return _malformed("no price")
    if len(prices) > 1:
        return _malformed("two prices in one offer")

    extras = sorted({i for value in fields["extras"] for i in find_incentives(value, catalog)})
    return ParsedOffer(kind="offer", offer=Offer(vehicle=vehicles.pop(), price=prices.pop(), incentives=tuple(extras)))


def _malformed(reason: str) -> ParsedOffer:
    return ParsedOffer(kind="malformed", reason=reason)


def read_price(value: str) -> tuple[float | None, str]:
    """(price, "") from the first number of a price value, or (None, why not)."""
    m = _NUMBER_RE.search(value)
    if m is None:
        return None, "no price"
    amount = _amount(m)
    if m.group("neg"):
        return None, "negative price"
    if amount is None or amount > MAX_PRICE:
        return None, "price out of range"
    if amount <= 0:
        return None, "price must be above 0"
    return amount, ""


def _amount(m: re.Match[str]) -> float | None:
    """The value of a number match, rounded to cents; None when it is absurdly long."""
    digits = m.group("int").replace(",", "")
    if len(digits.lstrip("0")) > 9:  # int() of a huge digit run is slow; no price is that large
        return None
    value = float(int(digits))
    frac = m.group("frac")
    if frac:
        value += float("0." + frac[:6])
    if m.group("mult"):
        value *= 1000
    return round(value, 2)


def money_amounts(text: str) -> list[float]:
    """Money amounts in prose, in order (see the module docstring)."""
    norm = normalize(text)
    out = []
    for m in _NUMBER_RE.finditer(norm):
        amount = _amount(m)
        if amount is None or m.group("neg"):
            continue
        cue = m.group("cur") or m.group("cur2") or m.group("mult") or "," in m.group("int")
        if cue or (amount >= 1000 and not (1900 <= amount <= 2100 and not m.group("frac"))):
            out.append(amount)
    return out


def _format_price(price: float) -> str:
    return f"{price:.0f}" if price == int(price) else f"{price:.2f}"


# --- vehicles and extras -------------------------------------------------------------------


_INDEXES: dict[str, list] = {}  # by catalog ref: hashing a whole catalog per lookup would be slow


_Entry = tuple[str, tuple[str, ...], frozenset[str], frozenset[str], frozenset[str]]


def _vehicle_index(catalog: Catalog) -> list[_Entry]:
    """Per vehicle: id, id words, name words, model+trim words, model words."""
    key = "vehicles|" + catalog.ref
    if key not in _INDEXES:
        words = lambda s: tuple(re.findall(r"[a-z0-9]+", s.lower()))  # noqa: E731
        _INDEXES[key] = [
            (v.id, words(v.id), frozenset(words(v.name)), frozenset(words(f"{v.model} {v.trim}")),
             frozenset(words(v.model)))
            for v in catalog.vehicles
        ]
    return _INDEXES[key]


def resolve_vehicle(value: str, catalog: Catalog | None = None) -> tuple[str | None, str]:
    """(catalog id, "") for the vehicle a value names, or (None, why not)."""
    catalog = catalog or load_catalog()
    tokens = re.findall(r"[a-z0-9]+", normalize(value)[:400])
    if not tokens:
        return None, "no vehicle"
    token_set = set(tokens)
    index = _vehicle_index(catalog)
    joined = " " + " ".join(tokens) + " "
    # An id (= the full name, as words) anywhere in the value; the longest wins.
    hits = [(len(id_words), vid) for vid, id_words, *_ in index if f" {' '.join(id_words)} " in joined]
    if not hits:
        hits = [(len(name), vid) for vid, _, name, _, _ in index if name <= token_set]
    if not hits:
        hits = [(len(mt), vid) for vid, _, _, mt, _ in index if mt <= token_set]
    if hits:
        best = max(n for n, _ in hits)
        top = sorted(vid for n, vid in hits if n == best)
        if len(top) == 1:
            return top[0], ""
        return None, f"ambiguous vehicle {value[:40]!r}"
    models = [vid for vid, _, _, _, model in index if model <= token_set]
    if len(models) == 1:
        return models[0], ""
    if models:
        return None, f"ambiguous vehicle {value[:40]!r} (name the trim)"
    return None, f"unknown vehicle {value[:40]!r}"


def _incentive_patterns(catalog: Catalog) -> list[tuple[str, re.Pattern[str]]]:
    key = "incentives|" + catalog.ref
    if key not in _INDEXES:
        out = []
        for inc in catalog.incentives:
            names = sorted({inc.id, inc.id.replace("_", " "), *inc.aliases}, key=len, reverse=True)
            alternatives = "|".join(re.escape(n) for n in names)
            out.append((inc.id, re.compile(rf"(?<![a-z0-9])(?:{alternatives})(?![a-z0-9])")))
        _INDEXES[key] = out
    return _INDEXES[key]


def find_incentives(text: str, catalog: Catalog | None = None) -> list[str]:
    """Catalog incentive ids named in a text (by id or alias), sorted; `none` alone names nothing."""
    catalog = catalog or load_catalog()
    text = normalize(text)
    return sorted(iid for iid, pattern in _incentive_patterns(catalog) if pattern.search(text))


# --- buyer acts and formatting -------------------------------------------------------------


def buyer_act(text: str) -> Literal["accept", "leave"] | None:
    """"accept" or "leave" for the last such tag in a message, else None."""
    return _buyer_act(text) if isinstance(text, str) else None


@lru_cache(maxsize=16384)
def _buyer_act(text: str) -> Literal["accept", "leave"] | None:
    last = None
    for m in _ACT.finditer(normalize(text)):
        last = m
    if last is None:
        return None
    return "accept" if last.group("act").startswith("accept") else "leave"


def format_offer(offer: Offer) -> str:
    """The canonical tag: `<offer>vehicle=ID price=31500 extras=a,b</offer>`."""
    extras = f" extras={','.join(offer.incentives)}" if offer.incentives else ""
    return f"<offer>vehicle={offer.vehicle} price={_format_price(offer.price)}{extras}</offer>"


ACCEPT = "<accept>"
LEAVE = "<leave>"
