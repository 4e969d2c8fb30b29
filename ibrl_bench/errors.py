"""Error classes that decide how a failure is reported.

- UserError: bad input from the user (spec, flag, card, config). The CLI prints its message as one
  line and exits non-zero, without a traceback.
- FatalAgentError: the infrastructure cannot work for this run (bad key, unknown model); it stops
  the run at once with one line.
Any other exception raised while an agent acts makes that episode an `error` episode: it is
retried, then recorded, and never scored as the policy's failure.
"""


class UserError(Exception):
    """Bad input; the message says what is wrong and how to fix it, in one line."""


class FatalAgentError(UserError):
    """An agent cannot work at all in this run; retrying other episodes would fail the same way."""
