"""Read Deal-or-NoDeal moves out of free text written by language models.

Rules (the docs cite them; tests/test_dnd_parser.py checks each one):

Selection marker. `has_selection(text)` is true when `<selection>` appears anywhere, in any case,
with spaces allowed inside the brackets (`< Selection >`) and a self-closing `<selection/>`.
The bare word `selection` does not count. Look-alike Unicode forms (fullwidth brackets) count in
the last 20,000 characters.

Which text is read. Text is normalized first: Unicode NFKC, lower case, markdown emphasis
(`* _ ~ \\``) and double quotes dropped, curly quotes and dashes made ASCII, whitespace runs
collapsed. Only the last 20,000 characters of a message are read (a final answer comes last;
the cap bounds the work). A split is read from the body of the LAST `<split>` tag (tags in any
case, spaces allowed inside the brackets); the body runs to the next `</split>` or, if the tag
is never closed, to the end. Text outside the tags is then ignored. With no opening `<split>`
tag the whole message is the body.

Body grammar. Per item type (book, hat, ball; singular or plural): `book=2`, `books: 2`,
`book - 2`, `hat x2`, `2 books`, `2x books`, `two books`, `2 of the 3 books`, `no books` (0),
`none of the hats` (0), `a`/`an`/`one`/`single` (1), `both` (2), `all` (the whole pool);
number words zero..ten; `"book": 1` (JSON) and `**2** books` (markdown) work through
normalization. Item-first needs a separator, so "hat 2 balls" is two balls. An item named
without a count ("the ball") states nothing about that item.

Perspective. A split states what the speaker takes. Markers name a side: first person ("I get",
"I take", "I'll keep", "give me", "my share", "me:") or the other side ("you get", "you can
have", "give you", "your share", "you:", "partner gets", "they take"). The body is cut into
chunks at punctuation, newlines, brackets and `and`/`but`/`plus`. A prefix marker gives the text
after it to its side; that side carries over to later chunks until another marker or a sentence
end (`. ! ?`), which falls back to the speaker. A postfix marker ("2 books for me", "1 hat for
you", "the balls are yours") gives its whole chunk to its side. For an item counted only on the
other side's share, own = pool - other; counted on both, the two must add up to the pool, else
the split is invalid ("inconsistent: ...").
Rest claims: "the rest" / "everything" (or "nothing") in a clause opened by a marker gives every
item counted on neither side to that side (or to the other side); both sides claiming the rest
is invalid. Outside a marked clause such words are prose ("Everything considered, ...").

Counts. An item with no count and no rest claim: the speaker takes 0 of it. Invalid: a negative
count, a non-integer count (`2.5`, `1/2`, `½`, `half`; `2.0` reads as 2, `-0` as 0), a count
above the pool (either side's), two different counts for one item on one side ("ambiguous: two
counts for book"; the same count twice is fine). The first error in text order is reported.

No deal. A body with no item count and a phrase like "no deal", "no agreement", "disagree",
"walk away", "reject" is kind `no_deal`, even beside a rest claim ("no deal rather than give you
everything"). A body with counts AND such a phrase is read as a split (a model writes "no deal
would be worse, so: book=1 ..."). Otherwise a body with nothing recognizable is invalid,
"unparseable split".

Proposals. `parse_proposal(text, counts)` reads the LAST `<propose>` (or `<proposal>`) block with
the same body rules and returns the speaker's take, or None when that block is invalid or
says no deal (text outside the tags is ignored). A message with no propose tag (opening or
closing) and no split tag may still propose in plain text:
it must contain an offer cue ("i propose", "how about", "i'll take", "i take", "i want",
"give me", "offer"), and the whole message must read as a valid split with at least one item
count. A `<split>` is never a proposal.

All functions are pure and deterministic, never raise on any str (non-str reads as empty), and
run in time linear in the input (no nested unbounded repeats in the patterns).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from ibrl_bench.domains.dealnodeal.rules import ITEMS, Vec

_SCAN_LIMIT = 20_000

_OWN, _OTHER = "own", "other"
_PLURAL = {"book": "books", "hat": "hats", "ball": "balls"}
_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}
# Words that stand for a count before an item ("no books", "a hat"); "all" and "half" are
# special-cased because their value depends on the pool or is not an integer.
_COUNT_WORDS = {**_NUMBER_WORDS, "no": 0, "none": 0, "a": 1, "an": 1, "single": 1, "both": 2}


@dataclass(frozen=True)
class ParsedSplit:
    kind: Literal["split", "no_deal", "invalid"]
    take: Vec | None = None
    reason: str | None = None


# --- patterns --------------------------------------------------------------------------------
# Text is normalized before matching (lower case, single spaces), so patterns use `\s?` for
# one optional whitespace char: nothing below can scan a long run twice.

# `(?:/\s*)?` rather than `/?\s*`: two adjacent `\s*` would backtrack quadratically on long runs.
_SELECTION = re.compile(r"<\s*selection\s*(?:/\s*)?>", re.IGNORECASE)
_SPLIT_TAG = re.compile(r"<\s?(/)?\s?split\s?>")
_PROPOSE_TAG = re.compile(r"<\s?(/)?\s?propos(?:e|al)\s?>")

_ITEM = r"(?:book|hat|ball)"
_WORDS_ALT = "|".join(_NUMBER_WORDS)
# Digits with an optional decimal or fraction part, read whole so "2.5" is never seen as "5".
_DIGITS = r"[0-9]+(?:\s?/\s?[0-9]+|\.[0-9]+)?"

_MENTION = re.compile(
    # Item first: "book=2", "books: -1", "hat x2", "balls - two". A separator is required so
    # "hat 2 balls" is not read as hat=2.
    rf"\b(?P<a_item>{_ITEM})s?\b'?\s?(?:->|=>|[=:|×→]|-|x(?=\s?[0-9]))\s?"
    rf"(?:(?P<a_neg>-)?(?P<a_dig>{_DIGITS})|(?P<a_word>{_WORDS_ALT}|none|all|half)\b)"
    # Count first: "2 books", "-1 hat", "2x balls", "two of the 3 books", "no hats".
    # The lookbehind makes a count start only where a number starts (linear scan).
    rf"|(?<![\w./-])(?:(?P<b_neg>-)?(?P<b_dig>{_DIGITS})\s?(?:[x×]\s?)?"
    rf"|(?P<b_word>{_WORDS_ALT}|no|none|a|an|single|both|all|half)\s)"
    rf"(?:of\s(?:(?:the|your|my|those|these)\s)?(?:(?:[0-9]+|{_WORDS_ALT})\s)?"
    rf"|(?:the|your|my|those|these)\s)?"
    rf"(?P<b_item>{_ITEM})s?\b"
)

_VERB_MODAL = r"(?:'ll|'d|'m\sgoing\sto|\sam\sgoing\sto|\swill|\swould|\scan|\scould|\sshall|\sshould)?"
_YOU_MODAL = r"(?:'ll|'d|'re\sgoing\sto|\sare\sgoing\sto|\swill|\swould|\scan|\scould|\sshall|\sshould|\smay|\smight)?"
_MARKER = re.compile(
    r"\b(?:"
    # First person, prefix: the text after it is the speaker's share.
    rf"(?P<own>(?:i{_VERB_MODAL}\s(?:get|take|keep|receive|have|want|need|claim|like)"
    r"|i(?:'m|\sam)\s(?:taking|getting|keeping)"
    r"|give\sme|giving\sme|leave\sme|let\sme\shave|send\sme)\b"
    r"|my\s(?:share|side|part|cut|items)\b(?:\s?:)?"
    r"|(?:for\sme|to\sme|mine|me|i)\s?:)"
    # Other side, prefix.
    rf"|(?P<other>(?:you{_YOU_MODAL}\s(?:get|take|keep|receive|have)"
    r"|you(?:'re|\sare)\s(?:taking|getting|keeping)"
    r"|give\syou|giving\syou|leave\syou|let\syou\shave|send\syou"
    r"|(?:the\s|my\s)?(?:partner|opponent|counterpart|other\sside|other\splayer|other\sparty|they)"
    r"(?:\s(?:will|would|can|could))?\s(?:gets?|takes?|keeps?|receives?))\b"
    r"|your\s(?:share|side|part|cut|items)\b(?:\s?:)?"
    r"|(?:for\syou|to\syou|yours|you|partner|opponent|counterpart|other\sside)\s?:)"
    # Postfix ("2 books for me"): the side of the chunk they end, text before them included.
    r"|(?P<own_post>for\sme|to\sme|mine)\b"
    r"|(?P<other_post>for\syou|to\syou|yours)\b"
    r")"
)

# Chunk boundaries; `.` only when not a decimal point. Sentence ends reset the side to the speaker.
_CHUNK_SEP = re.compile(r"[,;!?()\[\]{}\n&]|\.(?![0-9])|\b(?:and|but|plus|while|whereas)\b")
_SENTENCE_END = frozenset(".!?")

_REST = re.compile(
    r"\b(?:(?P<all>the\srest|everything|all\selse|the\sremainder|whatever\s(?:is\sleft|remains)"
    r"|what's\sleft|all\s(?:the\s)?(?:other\s)?items|all\sof\sit|it\sall)"
    r"|(?P<none>nothing|no\sitems))\b"
)
_NO_DEAL = re.compile(
    r"\b(?:no\s?-?\s?deal|no\sagreement|disagree|walk(?:ing)?\saway|reject|declin"
    r"|(?:do\snot|don't|cannot|can't|won't|will\snot)\sagree)"
)
_OFFER_CUE = re.compile(
    r"\b(?:i\spropose|how\sabout|i'll\stake|i\swill\stake|i\stake|i\swant|give\sme|offer)"
)

_TRANSLATE = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u02bc": "'", "\u2032": "'",
    "\u2044": "/", "\u2215": "/",  # NFKC writes "½" as "1\u20442"
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
    "*": " ", "_": " ", "~": " ", "`": " ", '"': " ", "\u201c": " ", "\u201d": " ",
    # Zero-width characters would split a word without showing.
    "\u200b": None, "\u200c": None, "\u200d": None, "\u2060": None, "\ufeff": None, "\u00ad": None,
})
_WHITESPACE = re.compile(r"\s+")


# --- public API ------------------------------------------------------------------------------


def has_selection(text: str) -> bool:
    if not isinstance(text, str):
        return False
    # The plain marker is searched in the whole message (linear; it may end a long message).
    # Look-alike forms ("＜selection＞") need NFKC, which can grow text 18-fold, so only the
    # last _SCAN_LIMIT characters get that treatment.
    if _SELECTION.search(text):
        return True
    tail = text[-_SCAN_LIMIT:]
    return not tail.isascii() and _SELECTION.search(unicodedata.normalize("NFKC", tail)) is not None


def parse_split(text: str, counts: Vec) -> ParsedSplit:
    norm = _normalize(text)
    body = _last_block(norm, _SPLIT_TAG)
    if body is None:
        body = _SPLIT_TAG.sub(" ", norm)  # only stray closing tags, if any
    return _read_body(body, counts)[0]


def parse_proposal(text: str, counts: Vec) -> Vec | None:
    norm = _normalize(text)
    body = _last_block(norm, _PROPOSE_TAG)
    if body is not None:
        parsed, _ = _read_body(body, counts)
        return parsed.take if parsed.kind == "split" else None
    # Plain-text fallback: only for messages with no tag of either kind and a clear offer cue.
    if _PROPOSE_TAG.search(norm) or _SPLIT_TAG.search(norm) or not _OFFER_CUE.search(norm):
        return None
    parsed, mentioned = _read_body(norm, counts)
    return parsed.take if parsed.kind == "split" and mentioned else None


def format_take(take: Vec) -> str:
    return " ".join(f"{item}={n}" for item, n in zip(ITEMS, take, strict=True))


def format_split(take: Vec) -> str:
    return f"<split>{format_take(take)}</split>"


def format_proposal(take: Vec) -> str:
    return f"<propose>{format_take(take)}</propose>"


# --- reading ---------------------------------------------------------------------------------


def _normalize(text: object) -> str:
    if not isinstance(text, str):
        return ""
    text = unicodedata.normalize("NFKC", text[-_SCAN_LIMIT:]).lower().translate(_TRANSLATE)
    text = text.replace("(s)", "s")  # "book(s): 2"
    # Keep a newline where a run had one: lines are chunk boundaries.
    return _WHITESPACE.sub(lambda m: "\n" if "\n" in m.group() else " ", text)


def _last_block(text: str, tag: re.Pattern[str]) -> str | None:
    """Body of the last opening tag: up to the next closing tag, else to the end. None if no opening tag."""
    start = end = None
    for m in tag.finditer(text):
        if not m.group(1):
            start, end = m.end(), None
        elif start is not None and end is None:
            end = m.start()
    if start is None:
        return None
    return text[start:] if end is None else text[start:end]


def _invalid(reason: str) -> ParsedSplit:
    return ParsedSplit(kind="invalid", reason=reason)


def _read_body(body: str, counts: Vec) -> tuple[ParsedSplit, bool]:
    """The split a body states, and whether it mentioned any item count."""
    stated: dict[tuple[str, int], int] = {}  # (side, item index) -> count
    rest_to: set[str] = set()  # sides claimed to get the items nobody counted
    mentioned = False
    for side, explicit, text in _clauses(body):
        for m in _MENTION.finditer(text):
            mentioned = True
            index, value = _read_count(m, counts)
            if isinstance(value, str):
                return _invalid(value), True
            if stated.setdefault((side, index), value) != value:
                return _invalid(f"ambiguous: two counts for {ITEMS[index]}"), True
        # A rest phrase only counts in a clause a marker opened: "Everything considered,
        # book=1" must not hand the speaker every hat and ball.
        if explicit:
            for r in _REST.finditer(text):
                gets_rest = side if r.group("all") else _other(side)
                rest_to.add(gets_rest)
    if not mentioned:
        # Counts outrank a no-deal phrase ("no deal is worse, so: book=1 ..."); a rest claim
        # does not ("no deal rather than give you everything").
        if _NO_DEAL.search(body):
            return ParsedSplit(kind="no_deal"), False
        if not rest_to:
            return _invalid("unparseable split"), False
    if len(rest_to) > 1:
        return _invalid("inconsistent: both sides claim the rest"), mentioned
    take = []
    for i, item in enumerate(ITEMS):
        own, other = stated.get((_OWN, i)), stated.get((_OTHER, i))
        if own is not None and other is not None and own + other != counts[i]:
            return _invalid(
                f"inconsistent: {own} {_name(item, own)} for me and {other} for you, "
                f"pool has {counts[i]}"
            ), mentioned
        if own is None:
            if other is not None:
                own = counts[i] - other
            else:
                own = counts[i] if rest_to == {_OWN} else 0
        take.append(own)
    return ParsedSplit(kind="split", take=(take[0], take[1], take[2])), mentioned


def _clauses(body: str) -> list[tuple[str, bool, str]]:
    """Cut a body into (side, opened by a marker, text) pieces; see the module docstring."""
    out: list[tuple[str, bool, str]] = []
    side, explicit = _OWN, False
    pos = 0
    for sep in [*_CHUNK_SEP.finditer(body), None]:
        chunk = body[pos:] if sep is None else body[pos:sep.start()]
        side, explicit = _split_chunk(chunk, side, explicit, out)
        if sep is None:
            break
        if sep.group() in _SENTENCE_END:
            side, explicit = _OWN, False
        pos = sep.end()
    return out


def _split_chunk(chunk: str, side: str, explicit: bool, out: list[tuple[str, bool, str]]) -> tuple[str, bool]:
    """Append the chunk's pieces to out; return the side carried to the next chunk."""
    markers = list(_MARKER.finditer(chunk))
    if not markers:
        out.append((side, explicit, chunk))
        return side, explicit
    first_side, first_postfix = _marker_side(markers[0])
    if first_postfix:  # "2 books for me": the text before the marker is the marker's
        out.append((first_side, True, chunk[:markers[0].start()]))
    else:
        out.append((side, explicit, chunk[:markers[0].start()]))
    for m, nxt in zip(markers, [*markers[1:], None], strict=True):
        out.append((_marker_side(m)[0], True, chunk[m.end():nxt.start() if nxt else len(chunk)]))
    return _marker_side(markers[-1])[0], True


def _marker_side(m: re.Match[str]) -> tuple[str, bool]:
    """(side, is postfix) of a marker match."""
    if m.group("own"):
        return _OWN, False
    if m.group("other"):
        return _OTHER, False
    return (_OWN, True) if m.group("own_post") else (_OTHER, True)


def _other(side: str) -> str:
    return _OTHER if side == _OWN else _OWN


def _read_count(m: re.Match[str], counts: Vec) -> tuple[int, int | str]:
    """(item index, count) of a mention; the count is an error string when it is not valid."""
    item = m.group("a_item") or m.group("b_item")
    index = ITEMS.index(item)
    pool = counts[index]
    neg = m.group("a_neg") or m.group("b_neg")
    digits = m.group("a_dig") or m.group("b_dig")
    word = m.group("a_word") or m.group("b_word")
    if word is not None:
        if word == "half":
            return index, f"non-integer count for {item} (half)"
        value = pool if word == "all" else _COUNT_WORDS[word]
        shown = str(value)
    else:
        assert digits is not None
        if "/" in digits:
            return index, f"non-integer count for {item} ({digits.replace(' ', '')})"
        whole, _, fraction = digits.partition(".")
        if fraction.strip("0"):
            return index, f"non-integer count for {item} ({digits})"
        # Compare as text before int(): int() refuses strings of over 4300 digits.
        shown = whole.lstrip("0") or "0"
        if neg and shown != "0":
            return index, f"negative count for {item}"
        value = int(shown) if len(shown) <= 6 else 10**6
        if len(shown) > 12:
            shown = shown[:12] + "..."
    if value > pool:
        return index, f"more {_PLURAL[item]} than the pool has ({shown} > {pool})"
    return index, value


def _name(item: str, n: int) -> str:
    return item if n == 1 else _PLURAL[item]
