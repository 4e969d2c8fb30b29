"""The games. `get_domain(name)` is the one way to get a domain from its name."""

from __future__ import annotations

from ibrl_bench.domains.base import Domain
from ibrl_bench.errors import UserError


def _dealnodeal() -> Domain:
    from ibrl_bench.domains.dealnodeal.game import DealOrNoDeal

    return DealOrNoDeal()


def _telesales() -> Domain:
    from ibrl_bench.domains.telesales.game import TeleSales

    return TeleSales()


_FACTORIES = {"dealnodeal": _dealnodeal, "telesales": _telesales}
DOMAINS = tuple(_FACTORIES)


def get_domain(name: str) -> Domain:
    try:
        return _FACTORIES[name]()
    except KeyError:
        raise UserError(f"unknown domain {name!r}; available: {', '.join(DOMAINS)}") from None
