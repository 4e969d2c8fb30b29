"""`--budget-usd`: what a command may pay for model calls, and the clean stop when it would pay more.

Every paid call first reserves its worst cost (the request's prompt at `CHARS_PER_TOKEN_LOW`
characters a token, plus the seat's whole `max_tokens` of reply, at the seat's prices); a call
whose reservation does not fit in what is left, beside the reservations of the calls in flight,
is not made, and the run stops. So the money spent stays within the budget unless a prompt holds
more tokens than that bound allows. Episodes cut short by the stop are not recorded; the calls they
had paid for are in the response cache, so the resumed run replays them at no cost.
"""

from __future__ import annotations

from ibrl_bench.errors import FatalAgentError

# Tokenizers of chat models put about 4 characters of English in a token; 3 leaves a margin for
# prompts with digits and markup, so a reservation is rarely below the real cost.
CHARS_PER_TOKEN_LOW = 3.0


class BudgetReached(FatalAgentError):
    """The next model call would not fit in the budget; the run stops and can be resumed."""


class Budget:
    def __init__(self, limit_usd: float):
        self.limit = limit_usd
        self.spent = 0.0  # paid by this command, failed attempts' completed calls included
        self.reserved = 0.0  # worst cost of the calls in flight
        self.refused = 0  # calls not made for want of budget

    @property
    def left(self) -> float:
        return max(0.0, self.limit - self.spent)

    def reserve(self, worst: float) -> None:
        if self.spent + self.reserved + worst > self.limit:
            self.refused += 1
            raise BudgetReached(self.stop_line())
        self.reserved += worst

    def settle(self, worst: float, cost: float) -> None:
        self.reserved -= worst
        self.spent += cost

    def stop_line(self) -> str:
        return (f"stopped at the budget: spent ${self.spent:.4f} of --budget-usd {self.limit:g} "
                f"(${self.left:.4f} left, less than the next call may cost); finished episodes are kept: "
                "rerun the same command with a budget to resume (replies already paid for come from the cache)")


def worst_call_cost(chars: int, max_tokens: int, input_per_mtok: float, output_per_mtok: float) -> float:
    return (chars / CHARS_PER_TOKEN_LOW * input_per_mtok + max_tokens * output_per_mtok) / 1e6
