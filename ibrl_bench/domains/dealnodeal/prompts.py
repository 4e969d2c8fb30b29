"""Role prompts for language-model agents playing Deal-or-NoDeal.

A prompt states the rules, the role's own private values (never the other side's) and the exact
move format. Two wordings, each versioned (its version changes whenever its text does) and hashed
into every run manifest, so results from different prompts are never mixed up:
- `full` (the default): the rules in prose, about 300 tokens before any dialogue;
- `compact`: the same facts and tags in a few dozen tokens, for small models, whose training and
  rollout cost is mostly the prompt (benchmarks/train_step_cost.py --prompts measures it). Its
  select instruction also restates the deal on the table (the last proposal, from either side) as
  the items this role would take: public information, read off the dialogue the way a game's
  screen would show it, so that a small model need not do the subtraction itself. It comes last,
  on a line of its own, as the opening of the split it would be, without the closing tag
  (dnd-compact-v2): a tiny model copies by looking up the latest occurrence of the token it just
  wrote, so the latest `<split>` (and the latest `>`) before its answer must be the deal's, not
  the template's `book=X` or a closing tag followed by the end of the message.
"""

from __future__ import annotations

from ibrl_bench.domains.base import DEFAULT_PROMPT, Observation, RolePrompt, chat_from_dialogue, content_hash

PROMPT_VERSION = "dnd-prompt-v1"

SYSTEM = """You are negotiating in the game "Deal or No Deal" against another player.

The pool holds {pool}. You and the other player must agree how to divide it; each item goes to one of you.
Your private values per item: {values}. The whole pool is worth exactly 10 to you. \
The other player values the items differently, and you do not know how.
Your goal is the highest total value for yourself. If you do not agree, both of you score 0.

Rules:
- You take turns sending short messages; the talk ends after {max_turns} messages in total.
- To make an offer, include <propose>book=X hat=Y ball=Z</propose>, listing the items YOU would take.
- To accept the offer on the table and end the talk, include <selection>.
- After the talk each player privately states the items it takes: <split>book=X hat=Y ball=Z</split>. \
The deal holds only if the two splits add up exactly to the pool. <split>no deal</split> declines.
Write only your next message, one or two sentences."""

OPEN = "You speak first. Send your opening message."
SELECT = (
    "The talk is over. State the items you take, exactly in the form <split>book=X hat=Y ball=Z</split>, "
    "or <split>no deal</split>."
)
TEMPLATES = {"system": SYSTEM, "open": OPEN, "select": SELECT}
PROMPT_HASH = content_hash([PROMPT_VERSION, TEMPLATES])

COMPACT = {
    "system": "Deal or No Deal, {max_turns} messages. Pool: {pool_tags}. Your values: {value_tags}. "
              "Propose what you take: <propose>book=X hat=Y ball=Z</propose>; accept: <selection>.",
    "open": "You start.",
    "select": "Talk over. State what you take, <split>book=X hat=Y ball=Z</split> or <split>no deal</split>. {table}",
}

PROMPTS = {
    DEFAULT_PROMPT: RolePrompt(DEFAULT_PROMPT, PROMPT_VERSION, TEMPLATES),
    "compact": RolePrompt("compact", "dnd-compact-v2", COMPACT),
}


def _pool(counts: list[int], items: list[str]) -> str:
    return ", ".join(f"{n} {item}{'s' if n != 1 else ''}" for item, n in zip(items, counts, strict=True))


def _tags(numbers: list[int], items: list[str]) -> str:
    return " ".join(f"{item}={n}" for item, n in zip(items, numbers, strict=True))


def _table(obs: Observation) -> str:
    """The last proposal of the dialogue, as the items this role would take under it."""
    from ibrl_bench.domains.dealnodeal.parser import parse_proposal
    from ibrl_bench.domains.dealnodeal.rules import complement

    counts = tuple(obs.private["counts"])
    for message in reversed(obs.dialogue):
        take = parse_proposal(message.text, counts)
        if take is not None:
            mine = take if message.role == obs.role else complement(counts, take)
            return f"On the table, you take:\n<split>{_tags(list(mine), obs.private['items'])}"
    return "No offer is on the table."


def chat_messages(obs: Observation, prompt: str = DEFAULT_PROMPT) -> list[dict[str, str]]:
    """The conversation as this role sees it under the prompt called `prompt`: its own messages
    as the assistant's, the other side's as the user's."""
    templates = PROMPTS[prompt].templates
    p = obs.private
    system = templates["system"].format(
        pool=_pool(p["counts"], p["items"]),
        values=", ".join(f"{item}={v}" for item, v in zip(p["items"], p["values"], strict=True)),
        pool_tags=_tags(p["counts"], p["items"]),
        value_tags=_tags(p["values"], p["items"]),
        max_turns=obs.max_turns,
    )
    messages = chat_from_dialogue(system, obs, templates["open"])
    if obs.phase == "select":
        select = (templates["select"].format(table=_table(obs)) if "{table}" in templates["select"]
                  else templates["select"])
        if messages[-1]["role"] == "user":  # keep roles alternating for strict chat templates
            messages[-1] = {"role": "user", "content": messages[-1]["content"] + "\n\n" + select}
        else:
            messages.append({"role": "user", "content": select})
    return messages
