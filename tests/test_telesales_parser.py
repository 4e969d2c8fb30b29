"""TeleSales parser: one test group per rule in the parser's module docstring, then hostile text."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibrl_bench.agents.scripted.telesales import hear
from ibrl_bench.domains.telesales.catalog import load_catalog
from ibrl_bench.domains.telesales.models import Offer
from ibrl_bench.domains.telesales.parser import (
    MAX_PRICE,
    ParsedOffer,
    buyer_act,
    find_incentives,
    format_offer,
    money_amounts,
    parse_offer,
    resolve_vehicle,
)

CATALOG = load_catalog()
TERRA = Offer(vehicle="arden-terra-le", price=31_500.0)


def read(text: str) -> Offer:
    parsed = parse_offer(text)
    assert parsed is not None and parsed.kind == "offer", parsed
    return parsed.offer


def malformed(text: str) -> str:
    parsed = parse_offer(text)
    assert parsed is not None and parsed.kind == "malformed" and parsed.offer is None, parsed
    return parsed.reason


# --- canonical form -----------------------------------------------------------------------------


def test_every_vehicle_round_trips_through_the_canonical_tag():
    extras = [(), ("extended_warranty",), ("low_apr", "winter_tyres")]
    for i, v in enumerate(CATALOG.vehicles):
        for price in (v.list_price, v.list_price - 1234, 19_999.5):
            o = Offer(vehicle=v.id, price=float(price), incentives=extras[i % 3])
            assert parse_offer(f"Here you go: {format_offer(o)} Thanks!") == ParsedOffer(kind="offer", offer=o)


def test_canonical_format():
    assert format_offer(TERRA) == "<offer>vehicle=arden-terra-le price=31500</offer>"
    assert format_offer(Offer("arden-pico-s", 19_999.5, ("extended_warranty",))) == (
        "<offer>vehicle=arden-pico-s price=19999.50 extras=extended_warranty</offer>")


# --- which tag is read --------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "no tag at all, though I offer you the arden terra le for $31,500",
    "</offer>",
    "<offers>vehicle=arden-terra-le price=1</offers>",
    "<offer_price>31500</offer_price>",
    "",
])
def test_no_opening_offer_tag_is_no_offer(text):
    assert parse_offer(text) is None


@pytest.mark.parametrize("text", [
    "<offer>vehicle=arden-terra-le price=31500</offer>",
    "<OFFER>Vehicle = Arden-Terra-LE ; Price = 31500</OFFER>",
    "< offer >vehicle: arden terra le\nprice: 31500",  # unclosed: the body runs to the end
    '<offer vehicle="arden-terra-le" price="31500"/> and some prose with price: 1',
    "<offer vehicle='Arden Terra LE' price='$31,500'>the body is ignored: price=5</offer>",
    '<offer>{"vehicle": "arden-terra-le", "price": 31500}</offer>',
    '<offer>{"make": "Arden", "model": "Terra", "trim": "LE", "price": "31.5k"}</offer>',
    "<offer>car: Arden Terra LE | price: USD 31500</offer>",
    "<offer>Arden Terra LE for $31,500</offer>",
    "\uff1coffer\uff1evehicle=arden-terra-le price=31500\uff1c/offer\uff1e",  # fullwidth brackets
    "<offer>vehicle=\u201carden terra le\u201d price=31\u2009500</offer>".replace("\u2009", ""),
    "<offer>vehicle=the Terra LE from Arden price=31500.00 dollars</offer>",
])
def test_many_spellings_read_the_same_offer(text):
    assert read(text) == TERRA


def test_the_last_offer_tag_counts():
    text = ("<offer>vehicle=arden-pico-s price=19000</offer> or better: "
            "<offer>vehicle=arden-terra-le price=31500</offer>")
    assert read(text) == TERRA
    assert malformed("<offer>vehicle=arden-terra-le price=31500</offer> <offer>oops</offer>")


def test_only_the_last_20000_characters_are_read():
    far = "<offer>vehicle=arden-terra-le price=31500</offer>" + "x" * 20_001
    assert parse_offer(far) is None


# --- fields -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("arden-terra-le", "arden-terra-le"),
    ("ARDEN_TERRA_LE", "arden-terra-le"),
    ("Arden Terra Hybrid Limited", "arden-terra-hybrid-limited"),  # the longest name wins
    ("terra hybrid limited", "arden-terra-hybrid-limited"),  # model and trim
    ("LE Terra", "arden-terra-le"),  # word order beyond ids does not matter
    ("the Grandis", "arden-grandis-xle"),  # a model with one trim
    ("Norvik E3 Long Range AWD", "norvik-e3-long-range-awd"),
    ("kestrel ridge-e lightline", "kestrel-ridge-e-lightline"),
])
def test_vehicles_resolve_by_id_or_name(value, expected):
    assert resolve_vehicle(value) == (expected, "")


@pytest.mark.parametrize("value, reason", [
    ("arden terra", "ambiguous"),
    ("ridge", "ambiguous"),
    ("a spaceship", "unknown vehicle"),
    ("", "no vehicle"),
])
def test_vehicles_that_do_not_resolve(value, reason):
    vid, why = resolve_vehicle(value)
    assert vid is None and reason in why


@pytest.mark.parametrize("price, value", [
    ("31500", 31_500), ("$31,500", 31_500), ("31,500.00", 31_500), ("31.5k", 31_500), ("31.5 K", 31_500),
    ("USD 31500", 31_500), ("31500 dollars", 31_500), ("31 thousand", 31_000), ("31499.99", 31_499.99),
    ("$ 31,500 (negotiable)", 31_500), ("0031500", 31_500),
])
def test_prices(price, value):
    assert read(f"<offer>vehicle=arden-terra-le price={price}</offer>").price == value


@pytest.mark.parametrize("text, reason", [
    ("<offer>vehicle=arden-terra-le</offer>", "no price"),
    ("<offer>price=31500</offer>", "no vehicle"),
    ("<offer>vehicle=arden-terra-le price=cheap</offer>", "no price"),
    ("<offer>vehicle=arden-terra-le price=-31500</offer>", "negative price"),
    ("<offer>vehicle=arden-terra-le price=0</offer>", "price must be above 0"),
    (f"<offer>vehicle=arden-terra-le price={MAX_PRICE + 1}</offer>", "out of range"),
    ("<offer>vehicle=arden-terra-le price=" + "9" * 5000 + "</offer>", "out of range"),
    ("<offer>vehicle=arden-terra-le price=31500 price=32000</offer>", "two prices"),
    ("<offer>vehicle=arden-terra-le vehicle=arden-pico-s price=1</offer>", "two vehicles"),
    ("<offer>vehicle=arden terra price=31500</offer>", "ambiguous"),
    ("<offer>vehicle=batmobile price=31500</offer>", "unknown vehicle"),
    ("<offer>Arden Terra LE for $31,500, or $30,000 cash</offer>", "two prices"),
    ("<offer>the best car you ever saw</offer>", "no price"),
    ("<offer></offer>", "empty offer"),
    ("<offer/>", "empty offer"),
])
def test_malformed_offers_say_why(text, reason):
    assert reason in malformed(text)


def test_the_same_field_twice_with_the_same_value_is_fine():
    assert read("<offer>vehicle=arden-terra-le price=31500 price=$31,500 vehicle=Arden Terra LE</offer>") == TERRA


@pytest.mark.parametrize("extras, ids", [
    ("extended_warranty", ("extended_warranty",)),
    ("warranty, winter tires and a home charger", ("extended_warranty", "home_charger", "winter_tyres")),
    ("none", ()),
    ("a free unicorn", ()),
    ("low apr; free service", ("low_apr",)),  # `;` ends the value
])
def test_extras(extras, ids):
    assert read(f"<offer>vehicle=arden-terra-le price=31500 extras={extras}</offer>").incentives == ids


def test_find_incentives_by_alias():
    assert find_incentives("a WARRANTY and some floor mats") == ["accessory_pack", "extended_warranty"]
    assert find_incentives("warrantyless") == []


# --- buyer acts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, act", [
    ("Deal! <accept>", "accept"), ("<ACCEPT/>", "accept"), ("< accept >", "accept"), ("<accepted>", "accept"),
    ("<accept offer='latest'>", "accept"), ("\uff1caccept\uff1e", "accept"),
    ("Bye <leave>", "leave"), ("<walk away>", "leave"), ("<WALK_AWAY/>", "leave"), ("<walkaway>", "leave"),
    ("<accept> wait, no. <leave>", "leave"), ("<leave> just kidding <accept>", "accept"),
    ("I accept", None), ("I'll leave", None), ("</accept>", None), ("<acceptable>", None), ("", None),
])
def test_buyer_acts(text, act):
    assert buyer_act(text) == act


# --- money in prose -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, amounts", [
    ("My budget is $38,000, could you do 36k?", [38_000, 36_000]),
    ("I can pay 35500 dollars", [35_500]),
    ("The 2024 model with 7 seats and 1.9% APR", []),
    ("$2,024 exactly", [2_024]),
    ("12,5 or 12.5", []),
    ("between 30,000 and 32,500", [30_000, 32_500]),
    ("-500 bucks", []),
])
def test_money_amounts(text, amounts):
    assert money_amounts(text) == amounts


# --- hostile text -------------------------------------------------------------------------------

FRAGMENTS = st.sampled_from([
    "<offer>", "</offer>", "<offer ", "/>", ">", "<", "vehicle=", "price=", "extras=", "car:", "model:", "make:",
    "trim:", "id=", "$", "31,500", "-", "9" * 40, "k", ".", ",", " ", "\n", "arden", "terra", "le", "hybrid",
    "arden-terra-le", "norvik e3", "warranty", "none", "<accept>", "<leave>", "accept", '"', "'", "{", "}", ";",
    "\uff1c", "\u2009", "\x00", "\u0301", "\U0001f697",
])


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.text(), st.lists(FRAGMENTS, max_size=40).map("".join)))
def test_arbitrary_text_never_raises_and_reads_to_valid_values(text):
    parsed = parse_offer(text)
    if parsed is not None:
        assert parsed.kind in ("offer", "malformed")
        if parsed.kind == "offer":
            assert CATALOG.vehicle(parsed.offer.vehicle) is not None
            assert 0 < parsed.offer.price <= MAX_PRICE
            assert all(CATALOG.incentive(i) for i in parsed.offer.incentives)
        else:
            assert parsed.reason
    assert buyer_act(text) in ("accept", "leave", None)
    assert all(a >= 0 for a in money_amounts(text))
    resolve_vehicle(text)
    hear(text)  # the scripted sellers' reading of free text


@pytest.mark.parametrize("value", [None, 42, b"<accept>", ["<offer>"], {"price": 1}])
def test_non_strings_read_as_empty(value):
    assert parse_offer(value) is None and buyer_act(value) is None
    assert money_amounts(value) == [] and find_incentives(value) == []
    assert resolve_vehicle(value) == (None, "no vehicle")


ADVERSARIAL = [
    "<offer " * 60_000,
    "<offer>" + "vehicle=" * 60_000,
    "<offer>" + "price=" * 60_000,
    "<offer>price=" + "9" * 300_000,
    "<offer>price=$" + "1," * 150_000,
    "<offer>vehicle=" + "arden terra " * 40_000,
    "<offer>extras=" + "warranty " * 40_000,
    "<" * 300_000,
    "<accept" * 60_000,
    "1.1.1.1" * 50_000,
    "$" * 300_000,
    " " * 300_000 + "<offer>vehicle=arden-terra-le price=31500</offer>",
    "\uff1c" * 100_000,
    "-" * 300_000 + "5",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_large_adversarial_inputs_stay_fast(text):
    start = time.perf_counter()
    parse_offer(text + " ")  # a fresh string: no help from the cache
    buyer_act(text + " ")
    money_amounts(text)
    hear(text + " ")
    assert time.perf_counter() - start < 2.0
