"""Deal-or-NoDeal parser: one test group per rule in the parser's module docstring."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibrl_bench.domains.dealnodeal.parser import (
    ParsedSplit,
    format_proposal,
    format_split,
    has_selection,
    parse_proposal,
    parse_split,
)
from ibrl_bench.domains.dealnodeal.rules import ITEMS, all_counts, all_splits

POOL = (3, 2, 1)  # books, hats, balls


def take(text: str, counts=POOL):
    """The take of a split that must parse; fails the test with the parser's reason otherwise."""
    parsed = parse_split(text, counts)
    assert parsed.kind == "split", parsed
    assert parsed.reason is None
    return parsed.take


def reason(text: str, counts=POOL) -> str:
    parsed = parse_split(text, counts)
    assert parsed.kind == "invalid", parsed
    assert parsed.take is None
    return parsed.reason


# --- canonical forms round-trip -------------------------------------------------------------


@pytest.mark.parametrize("counts", all_counts())
def test_every_split_of_every_pool_round_trips(counts):
    for t in all_splits(counts):
        assert parse_split(format_split(t), counts) == ParsedSplit(kind="split", take=t)
        assert parse_proposal(format_proposal(t), counts) == t


def test_format_is_canonical():
    assert format_split((1, 2, 0)) == "<split>book=1 hat=2 ball=0</split>"
    assert format_proposal((0, 0, 3)) == "<propose>book=0 hat=0 ball=3</propose>"


# --- selection marker -----------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "<selection>",
    "Deal. <selection>",
    "<SELECTION>",
    "< Selection >",
    "<\tselection\n>",
    "<selection/>",
    "ok `<Selection>` done",
    "\uff1cselection\uff1e",  # fullwidth brackets
    "x" * 50_000 + "<selection>",  # past the scan limit of the split parser
])
def test_selection_marker_found(text):
    assert has_selection(text) is True


@pytest.mark.parametrize("text", [
    "",
    "selection",
    "I am ready for selection now",
    "[selection]",
    "</selection>",
    "<selected>",
    "<select ion>",
    "<split>book=1 hat=1 ball=1</split>",
])
def test_selection_marker_not_found(text):
    assert has_selection(text) is False


# --- which text is read ---------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "<split>book=1 hat=2 ball=0</split>",
    "<SPLIT>book=1 hat=2 ball=0</SPLIT>",
    "< Split >book=1 hat=2 ball=0< / split >",
    "Here is my final answer:\n\n<split>\nbook=1\nhat=2\nball=0\n</split>\nThanks!",
    "`<split>book=1 hat=2 ball=0</split>`",
    "\uff1csplit\uff1ebook\uff1d1 hat\uff1d2\uff1c\uff0fsplit\uff1e",  # fullwidth
])
def test_split_tag_tolerance(text):
    assert take(text) == (1, 2, 0)


def test_text_outside_the_tags_is_ignored():
    text = "I wanted 3 books and 1 ball, but fine. <split>book=1 hat=2 ball=0</split> You get 2 books."
    assert take(text) == (1, 2, 0)


def test_last_tagged_block_counts():
    text = "<split>book=3 hat=0 ball=0</split> wait, I misread. <split>book=1 hat=2 ball=0</split>"
    assert take(text) == (1, 2, 0)


def test_last_block_counts_even_when_invalid():
    # The final answer governs; an earlier valid block does not rescue it.
    text = "<split>book=1 hat=2 ball=0</split> <split>book=7</split>"
    assert reason(text).startswith("more books")


def test_unclosed_tag_runs_to_the_end():
    assert take("blah <split> book=2 hat=1") == (2, 1, 0)


def test_nested_opening_tags_read_the_innermost():
    assert take("<split>book=3 <split>book=1 hat=1 ball=1</split></split>") == (1, 1, 1)


def test_untagged_message_is_the_body():
    assert take("I take 2 books and 1 ball.") == (2, 0, 1)


def test_stray_closing_tag_only_is_read_as_untagged():
    assert take("book=2 hat=1 ball=0</split>") == (2, 1, 0)


def test_empty_tag_is_unparseable():
    assert reason("<split></split>") == "unparseable split"


def test_propose_tag_is_not_a_split_tag_boundary():
    # A split message quoting a proposal: the split tag governs.
    assert take("<propose>book=3 hat=0 ball=0</propose> <split>book=0 hat=2 ball=1</split>") == (0, 2, 1)


# --- body grammar ---------------------------------------------------------------------------


@pytest.mark.parametrize("body, expected", [
    ("book=1 hat=2 ball=0", (1, 2, 0)),
    ("Book=1 HAT=2 Ball=0", (1, 2, 0)),
    ("books: 3, hats: 1, balls: 1", (3, 1, 1)),
    ("book - 2, hat - 0", (2, 0, 0)),
    ("book = 2 ; hat = 1", (2, 1, 0)),
    ("2 books, 1 hat, 1 ball", (2, 1, 1)),
    ("2books 1hat", (2, 1, 0)),
    ("two books and one hat", (2, 1, 0)),
    ("Three Books, Zero Hats, One Ball", (3, 0, 1)),
    ("no books, both hats, a ball", (0, 2, 1)),
    ("an hat and a book", (1, 1, 0)),  # grammar is not checked
    ("all the books", (3, 0, 0)),
    ("books: all, hats: none", (3, 0, 0)),
    ("none of the hats, one ball", (0, 0, 1)),
    ("2 of the 3 books", (2, 0, 0)),
    ("one of your 2 hats", (0, 1, 0)),
    ("hat x2, book x1", (1, 2, 0)),
    ("2x books, 1 x ball", (2, 0, 1)),
    ("**2** books and **1** hat", (2, 1, 0)),
    ("**Books:** 2\n**Hats:** 1", (2, 1, 0)),
    ("- Books - 2\n- Hats - 1\n- Balls - 0", (2, 1, 0)),
    ("- 2 books\n- 1 hat", (2, 1, 0)),
    ("| Book | 2 |\n| Hat | 1 |", (2, 1, 0)),
    ('{"book": 1, "hat": 2, "ball": 0}', (1, 2, 0)),
    ("{'books': 3, 'hats': 0}", (3, 0, 0)),
    ("book(s): 2", (2, 0, 0)),
    ("book=2.0 hat=1.00", (2, 1, 0)),
    ("book=02", (2, 0, 0)),
    ("book\u200b=2", (2, 0, 0)),  # zero-width space
    ("book\u2014 2", (2, 0, 0)),  # em dash as separator
    ("\uff42\uff4f\uff4f\uff4b\uff1d\uff12", (2, 0, 0)),  # fullwidth "book=2"
    ("book=1\nhat=2\nball=1", (1, 2, 1)),
])
def test_body_grammar(body, expected):
    assert take(f"<split>{body}</split>") == expected
    assert take(body) == expected


def test_item_words_inside_other_words_are_not_items():
    # "notebook", "basketball", "hatred", "booking" mention no item.
    assert reason("<split>notebook=2 basketball=1 hatred: 1 booking - 3</split>") == "unparseable split"


def test_item_then_bare_number_needs_a_separator():
    # "hat 2 balls" means two balls, not two hats.
    assert take("I take the hat 1 ball") == (0, 0, 1)


def test_missing_items_take_zero():
    assert take("<split>hat=1</split>") == (0, 1, 0)
    assert take("<split>book=0 hat=0 ball=0</split>") == (0, 0, 0)


def test_point_values_without_item_words_are_ignored():
    assert take("<split>book=1 hat=2 ball=0 (total 7 points)</split>") == (1, 2, 0)


# --- invalid counts -------------------------------------------------------------------------


@pytest.mark.parametrize("body, expected", [
    ("book=-1", "negative count for book"),
    ("hat: -2", "negative count for hat"),
    ("-1 ball", "negative count for ball"),
    ("book=1 hat=\u22121", "negative count for hat"),  # Unicode minus sign
    ("book=2.5", "non-integer count for book (2.5)"),
    ("book=1/2", "non-integer count for book (1/2)"),
    ("1/2 hat", "non-integer count for hat (1/2)"),
    ("half the books", "non-integer count for book (half)"),
    ("books: half", "non-integer count for book (half)"),
    ("book=\u00bd", "non-integer count for book (1/2)"),  # the glyph one-half
    ("book=4", "more books than the pool has (4 > 3)"),
    ("3 hats", "more hats than the pool has (3 > 2)"),
    ("ball=2", "more balls than the pool has (2 > 1)"),
    ("five books", "more books than the pool has (5 > 3)"),
    ("book=1 book=2", "ambiguous: two counts for book"),
    ("books: 1 and 2 books", "ambiguous: two counts for book"),
    ("hat=1, hat=0", "ambiguous: two counts for hat"),
])
def test_invalid_counts(body, expected):
    assert reason(f"<split>{body}</split>") == expected


def test_minus_zero_is_zero_not_negative():
    assert take("<split>book=-0 hat=1</split>") == (0, 1, 0)


def test_huge_number_is_over_the_pool_without_blowing_up():
    # 5000 digits: int() of a str refuses more than 4300 digits by default.
    why = reason("<split>book=" + "9" * 5000 + "</split>")
    assert why.startswith("more books than the pool has (999999999999...")
    assert len(why) < 80


def test_same_count_repeated_is_fine():
    assert take("<split>book=1 hat=2 ball=0. So: 1 book, 2 hats.</split>") == (1, 2, 0)


def test_first_error_in_text_order_is_reported():
    assert reason("<split>book=-1 hat=9</split>") == "negative count for book"
    assert reason("<split>hat=9 book=-1</split>") == "more hats than the pool has (9 > 2)"


# --- perspective ----------------------------------------------------------------------------


@pytest.mark.parametrize("body, expected", [
    # Other-side share: own = pool - other.
    ("you get 1 book", (2, 0, 0)),
    ("You get 1 book and 2 hats", (2, 0, 0)),
    ("You get: book=1 hat=2 ball=1", (2, 0, 0)),
    ("For you: 2 books, 1 hat", (1, 1, 0)),
    ("Your share: book=3", (0, 0, 0)),
    ("Partner gets 1 ball", (0, 0, 0)),
    ("I'll give you 2 hats", (0, 0, 0)),
    # Mixed, prefix markers; the first person marker switches back.
    ("I take 2 books, you get 2 hats, I keep the ball... ball=1", (2, 0, 1)),
    ("You get 1 book. I take 2 hats", (2, 2, 0)),
    ("Me: 2 books, 1 ball; you: 1 book, 2 hats", (2, 0, 1)),
    ("I get book=1 hat=0 ball=1 and you get book=2 hat=2 ball=0", (1, 0, 1)),
    ("I get 2 books you get 1 hat", (2, 1, 0)),  # no punctuation between clauses
    # Postfix markers.
    ("2 books for me, 1 hat for you", (2, 1, 0)),
    ("1 hat for you, 2 books for me", (2, 1, 0)),
    ("the 2 hats are yours, 1 ball is mine", (0, 0, 1)),
    # Side carries over commas, "and" and newlines until a marker or a sentence end.
    ("You get:\n- 2 books\n- 1 hat\nI get:\n- 1 ball", (1, 1, 1)),
    ("You get 2 books, 1 hat and 1 ball", (1, 1, 0)),
    ("You get 2 books. 1 hat", (1, 1, 0)),  # sentence end: back to the speaker
    # A parenthetical other-side restatement that agrees.
    ("book=1 hat=2 ball=0 (you get book=2 hat=0 ball=1)", (1, 2, 0)),
    # "Thank you" etc. are not markers.
    ("Thank you! book=1 hat=1 ball=1", (1, 1, 1)),
])
def test_perspective(body, expected):
    assert take(f"<split>{body}</split>") == expected


@pytest.mark.parametrize("body, expected", [
    ("I take 2 books, you get the rest", (2, 0, 0)),
    ("You get 1 book, I take the rest", (2, 2, 1)),
    ("You can have the hats; I'll keep everything else", (3, 2, 1)),  # hats have no count
    ("I take everything", (3, 2, 1)),
    ("you get nothing", (3, 2, 1)),
    ("you get 2 hats and nothing else", (3, 0, 1)),
    ("I get nothing", (0, 0, 0)),
    ("you get everything", (0, 0, 0)),
    ("I take 1 book and the rest", (1, 2, 1)),
])
def test_rest_claims_in_marked_clauses(body, expected):
    assert take(f"<split>{body}</split>") == expected


def test_rest_phrase_without_a_marker_is_not_a_claim():
    assert take("<split>Everything considered, book=1</split>") == (1, 0, 0)


def test_both_sides_claiming_the_rest_is_invalid():
    assert reason("<split>I take the rest, you get everything</split>") == "inconsistent: both sides claim the rest"
    assert reason("<split>I get nothing, you get nothing</split>") == "inconsistent: both sides claim the rest"


@pytest.mark.parametrize("body, item", [
    ("I take 2 books, you get 2 books", "book"),
    ("book=1 hat=2 ball=0 (you get book=1 hat=0 ball=1)", "book"),
    ("me: hat=1, you: hat=0", "hat"),
])
def test_own_and_other_counts_must_add_up_to_the_pool(body, item):
    why = reason(f"<split>{body}</split>")
    assert why.startswith("inconsistent:") and item in why


def test_inconsistency_reason_names_the_counts():
    assert reason("<split>I take 2 books, you get 2 books</split>") == (
        "inconsistent: 2 books for me and 2 for you, pool has 3"
    )


def test_two_counts_for_one_item_on_one_side_across_clauses_is_ambiguous():
    assert reason("<split>You get 1 book, and 2 books</split>") == "ambiguous: two counts for book"


def test_over_pool_on_the_other_side_is_invalid():
    assert reason("<split>you get 4 books</split>") == "more books than the pool has (4 > 3)"


# --- no deal --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "<split>no deal</split>",
    "<split>NO DEAL</split>",
    "<split>no_deal</split>",
    "<split>No-deal.</split>",
    "<split>We have no agreement.</split>",
    "<split>I disagree with everything you said.</split>",
    "<split>I walk away.</split>",
    "I reject this.",
    "I cannot agree to that, so no deal.",
    "<split>no deal rather than give you everything</split>",  # a rest claim is not a count
])
def test_no_deal(text):
    assert parse_split(text, POOL) == ParsedSplit(kind="no_deal")


def test_counts_outrank_a_no_deal_phrase():
    assert take("<split>No deal would be worse for both of us, so: book=1 hat=1 ball=1</split>") == (1, 1, 1)


def test_last_block_no_deal_governs():
    assert parse_split("<split>book=1</split> <split>no deal</split>", POOL).kind == "no_deal"


def test_no_deal_outside_the_tags_is_ignored():
    assert take("no deal... just kidding <split>book=1</split>") == (1, 0, 0)


@pytest.mark.parametrize("text", ["", "   ", "hello there", "<split>?</split>", "Deal!", "I agree."])
def test_nothing_recognizable_is_unparseable(text):
    assert parse_split(text, POOL) == ParsedSplit(kind="invalid", reason="unparseable split")


@pytest.mark.parametrize("garbage", [None, 3, b"<split>book=1</split>", ["book=1"]])
def test_non_str_input_does_not_raise(garbage):
    assert parse_split(garbage, POOL).kind == "invalid"  # type: ignore[arg-type]
    assert parse_proposal(garbage, POOL) is None  # type: ignore[arg-type]
    assert has_selection(garbage) is False  # type: ignore[arg-type]


# --- proposals ------------------------------------------------------------------------------


def test_tagged_proposal():
    assert parse_proposal("How about this: <propose>book=2 hat=0 ball=1</propose>?", POOL) == (2, 0, 1)
    assert parse_proposal("<PROPOSE> 2 books and a ball </Propose>", POOL) == (2, 0, 1)
    assert parse_proposal("<proposal>hat=2</proposal>", POOL) == (0, 2, 0)
    assert parse_proposal("<propose>you get 1 book", POOL) == (2, 0, 0)  # unclosed, other side


def test_text_outside_a_propose_tag_is_ignored():
    assert parse_proposal("<propose>book=1</propose> and I'll take 2 books", POOL) == (1, 0, 0)


def test_an_item_named_without_a_count_is_not_taken():
    # "the ball" states no count: the rule is missing item -> 0, even in a proposal.
    assert parse_proposal("I'll take the ball and 2 hats.", POOL) == (0, 2, 0)


def test_last_tagged_proposal_counts():
    text = "<propose>book=3 hat=2 ball=1</propose> too greedy? <propose>book=2 hat=0 ball=1</propose>"
    assert parse_proposal(text, POOL) == (2, 0, 1)


@pytest.mark.parametrize("text", [
    "<propose>book=1</propose><propose>book=9</propose>",  # last one over the pool
    "<propose>book=1 book=2</propose>",  # ambiguous
    "<propose>no deal</propose>",
    "<propose>nothing here</propose>",
])
def test_invalid_last_proposal_is_none(text):
    assert parse_proposal(text, POOL) is None


@pytest.mark.parametrize("text, expected", [
    ("I propose 2 books and 1 ball for me.", (2, 0, 1)),
    ("How about I take 2 books and you get the rest?", (2, 0, 0)),
    ("I'll take a ball and 2 hats.", (0, 2, 1)),
    ("I will take 3 books", (3, 0, 0)),
    ("I want 1 book, you get 2 books and the hats.", (1, 0, 0)),
    ("Give me 2 hats.", (0, 2, 0)),
    ("My offer: you get 1 book, I take the rest", (2, 2, 1)),
])
def test_untagged_proposal_with_an_offer_cue(text, expected):
    assert parse_proposal(text, POOL) == expected


@pytest.mark.parametrize("text", [
    "2 books for me, 1 hat for you",  # no offer cue
    "book=2 hat=0 ball=1",  # no offer cue
    "I want everything",  # cue, but no item count
    "I want a fair deal.",  # cue, no item
    "I want 2 books, or rather 3 books",  # ambiguous
    "I want 5 books",  # over the pool
    "I take 2 books <split>book=2 hat=0 ball=0</split>",  # a split is not a proposal
    "<split>book=2 hat=0 ball=0</split>",
    "I propose no deal.",
    "",
])
def test_not_a_proposal(text):
    assert parse_proposal(text, POOL) is None


# --- robustness (property tests) ------------------------------------------------------------

POOLS = st.sampled_from(all_counts())

# Pieces of the language the parser reads, so random messages hit its branches, not just prose.
TOKENS = st.sampled_from([
    "<split>", "</split>", "<Split >", "<propose>", "</propose>", "<selection>",
    "book", "books", "hat", "hats", "ball", "balls", "Book", "BALLS",
    "=", ":", "-", "x", "|", "**", "(", ")", ",", ".", "\n", " ", "'", '"',
    "0", "1", "2", "3", "4", "9", "-1", "2.5", "2.0", "1/2", "½", "99999999999999",
    "one", "two", "a", "an", "no", "none", "all", "both", "half", "of the",
    "I take", "I get", "you get", "you:", "me:", "for me", "for you", "yours", "mine",
    "the rest", "everything", "nothing", "and", "no deal", "walk away", "I propose", "how about",
])
MESSAGES = st.one_of(
    st.text(max_size=300),
    st.lists(TOKENS, max_size=40).map(" ".join),
    st.lists(TOKENS, max_size=40).map("".join),
)


def check_well_formed(parsed: ParsedSplit, counts) -> None:
    assert isinstance(parsed, ParsedSplit)
    if parsed.kind == "split":
        assert parsed.reason is None
        assert parsed.take is not None and len(parsed.take) == 3
        assert all(isinstance(n, int) and 0 <= n <= c for n, c in zip(parsed.take, counts, strict=True))
    elif parsed.kind == "no_deal":
        assert parsed.take is None and parsed.reason is None
    else:
        assert parsed.kind == "invalid"
        assert parsed.take is None
        assert isinstance(parsed.reason, str) and parsed.reason


@settings(max_examples=400, deadline=None)
@given(MESSAGES, POOLS)
def test_any_text_gives_a_well_formed_result(text, counts):
    parsed = parse_split(text, counts)
    check_well_formed(parsed, counts)
    assert parse_split(text, counts) == parsed  # deterministic
    check_well_formed(parse_split(f"<split>{text}</split>", counts), counts)

    proposal = parse_proposal(text, counts)
    assert proposal is None or all(0 <= n <= c for n, c in zip(proposal, counts, strict=True))
    assert parse_proposal(text, counts) == proposal
    assert isinstance(has_selection(text), bool)


@st.composite
def decorated_splits(draw):
    """A split of a random pool, written with random case, order, separators and number style."""
    counts = draw(POOLS)
    t = tuple(draw(st.integers(0, c)) for c in counts)
    words = ["zero", "one", "two", "three", "four"]
    parts = []
    for item, n in zip(ITEMS, t, strict=True):
        name = draw(st.sampled_from([item, item + "s"]))
        name = draw(st.sampled_from([name, name.upper(), name.capitalize()]))
        num = draw(st.sampled_from([str(n), f"**{n}**", words[n]]))
        style = draw(st.sampled_from(["{name}={num}", "{name}: {num}", "{name} - {num}", "{num} {name}"]))
        parts.append(style.format(name=name, num=num))
    order = draw(st.permutations(parts))
    joiner = draw(st.sampled_from([" ", ", ", "\n", "; ", " and "]))
    tag = draw(st.sampled_from(["<split>{}</split>", "<SPLIT> {} </split>", "<split>\n{}\n", "{}"]))
    return counts, t, tag.format(joiner.join(order))


@settings(max_examples=300, deadline=None)
@given(decorated_splits())
def test_decorated_splits_parse_back(case):
    counts, t, text = case
    assert parse_split(text, counts) == ParsedSplit(kind="split", take=t)


@settings(max_examples=200, deadline=None)
@given(POOLS, st.data())
def test_other_side_statement_gives_the_complement(counts, data):
    other = tuple(data.draw(st.integers(0, c)) for c in counts)
    text = "<split>You get " + " ".join(f"{i}={n}" for i, n in zip(ITEMS, other, strict=True)) + "</split>"
    assert take(text, counts) == tuple(c - n for c, n in zip(counts, other, strict=True))


# --- speed: no catastrophic backtracking -----------------------------------------------------

ADVERSARIAL = {
    "book= repeated": "book=" * 40_000,
    "nested split tags": "<split>" * 30_000,
    "long whitespace in a tag": "<split" + " " * 200_000,
    "long whitespace in selection": "<selection" + " " * 200_000 + "x",
    "open brackets": "< " * 100_000,
    "one long number": "1" * 200_000 + " books",
    "many numbers": "2 " * 100_000,
    "many articles": "a " * 100_000,
    "many markers": "you get " * 30_000,
    "many clauses": "I take 2 books, you get 1 hat. " * 8_000,
    "decimal points": "1." * 100_000,
    "empty blocks": "<split></split>" * 15_000,
    "NFKC expansion": "\ufdfa" * 200_000,  # each expands to 18 characters
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_input_is_fast(name):
    text = ADVERSARIAL[name]
    start = time.perf_counter()
    check_well_formed(parse_split(text, POOL), POOL)
    parse_proposal(text, POOL)
    has_selection(text)
    assert time.perf_counter() - start < 2.0
