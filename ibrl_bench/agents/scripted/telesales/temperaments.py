"""The scripted TeleSales buyers' temperaments, as data read by the one buyer logic (buyers.py): how
each haggles (its knobs) and what it says (its wording).

A message is a list of parts said in order. A part is a template, or a list of templates of which
the episode's RNG picks one; `when` names the condition under which the part is said (absent:
always). Templates fill these fields:

    {needs}       the must-haves as a phrase: "an SUV or a wagon, hybrid, with at least 7 seats and AWD"
    {needs_list}  the must-haves as a list: "an SUV or a wagon; hybrid; at least 7 seats; AWD"
    {nice}        the nice-to-haves, "a and b";  {nice_list}: "a, b"
    {extras_or}   the two extras worth the most to it, "a or b"
    {budget}      its budget;  {counter}: its counter-offer;  {over_by}: the offer above its budget
    {missing}     the first must-have an offered vehicle lacks
    {vehicle}, {price}  the vehicle and price of an earlier, better quote
    {leave}       the tag that ends the talk

Conditions: `nice` (it has nice-to-haves), `extras` (it values some extra), `no_table` (no offer
yet), `over` / `within` (the offer is above / within its budget), `no_extras_offered` (it values
extras and the offer includes none).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Part(BaseModel):
    model_config = ConfigDict(frozen=True)

    say: str | tuple[str, ...]  # a template, or templates the RNG picks one of
    when: str | None = None


def parts(*items: str | tuple[str, ...] | Part) -> tuple[Part, ...]:
    return tuple(p if isinstance(p, Part) else Part(say=p) for p in items)


class Wording(BaseModel):
    model_config = ConfigDict(frozen=True)

    introduce: tuple[Part, ...]
    haggle: tuple[Part, ...]  # a counter-offer
    agree: tuple[Part, ...]
    nudge: tuple[Part, ...] = parts("I need {needs}. What can you offer me, and at what price?")  # no offer yet
    mismatch_first: tuple[Part, ...] = parts("That one doesn't work for me: {missing}.")  # with its introduction
    mismatch: tuple[Part, ...] = parts("That doesn't work for me: I need {needs}.")
    goodbye: tuple[Part, ...] = parts("I'll look elsewhere, thanks.")
    better_earlier: tuple[Part, ...] = ()  # for a buyer that holds out for an earlier, better quote


class Temperament(BaseModel):
    model_config = ConfigDict(frozen=True)

    depth: float  # first limit: this share below its willingness to pay
    curve: float = 1.0  # exponent of the limit's rise over its patience (<1 early, >1 late)
    patience_delta: int = 0  # added to the persona's patience
    leave_after_mismatches: int = 3  # leave once this many offers missed a must-have
    holds_to_earlier_quote: bool = False  # declines an offer worse for it than an earlier one
    wording: Wording


PROFILES: dict[str, Temperament] = {
    "hurried": Temperament(depth=0.04, curve=0.5, patience_delta=-2, wording=Wording(
        introduce=parts("Quick one: need {needs}. Max {budget}."),
        nudge=parts("No time for chat. I'm leaving unless you name a car and a price. {leave}"),
        haggle=parts(Part(say="Over my budget. ", when="over"), "{counter} and we're done."),
        agree=parts("Fine, done."),
        goodbye=parts("Out of time, bye."),
    )),
    "skeptical": Temperament(depth=0.12, curve=2.0, leave_after_mismatches=2, wording=Wording(
        introduce=parts("I need {needs}. I'm not discussing my budget.",
                        Part(say=" What do you actually have?", when="no_table")),
        mismatch_first=parts("And that one doesn't work: {missing}."),
        mismatch=parts("That doesn't work: {missing}. I told you: I need {needs}."),
        haggle=parts("That's too much. {counter} is what it's worth to me.",
                     Part(say=" And I'd want {extras_or} thrown in.", when="no_extras_offered")),
        agree=parts("All right. I'll take it."),
        goodbye=parts("I've heard enough. Goodbye."),
    )),
    "friendly": Temperament(depth=0.05, patience_delta=1, wording=Wording(
        introduce=parts(("Hi there, thanks for calling!", "Hello! Good timing, I'm shopping for a car."),
                        " I'm looking for {needs}.",
                        Part(say=" It would be lovely to have {nice}.", when="nice"),
                        Part(say=" Something like {extras_or} would be a nice bonus.", when="extras"),
                        " My budget is about {budget}."),
        haggle=parts(Part(say="That's a bit over my budget. ", when="over"), Part(say="I like it! ", when="within"),
                     ("Could you do {counter}?", "Would {counter} work for you?")),
        agree=parts("Wonderful, you've got a deal!"),
    )),
    "analytical": Temperament(depth=0.08, holds_to_earlier_quote=True, wording=Wording(
        introduce=parts("Requirements: {needs_list}.", Part(say=" Nice to have: {nice_list}.", when="nice"),
                        " Budget: {budget}.", Part(say=" Please quote a specific vehicle and price.", when="no_table")),
        haggle=parts(Part(say="That is {over_by} over my budget of {budget}. ", when="over"),
                     "By my numbers {counter} is a fair price for it."),
        agree=parts("The numbers work. Accepted."),
        goodbye=parts("The numbers don't work for me. I'll pass."),
        better_earlier=parts("Your earlier quote for the {vehicle} at {price} was better value for me. "
                             "Can you do at least that?"),
    )),
}
