"""Deal-or-NoDeal rules (Lewis et al. 2017): the item pool, valid value functions, scoring, Pareto.

Pure functions over tuples of three ints, ordered as ITEMS.
"""

from __future__ import annotations

from itertools import product

ITEMS: tuple[str, str, str] = ("book", "hat", "ball")
TOTAL_VALUE = 10
MIN_COUNT, MAX_COUNT = 1, 4
MIN_ITEMS, MAX_ITEMS = 5, 7

Vec = tuple[int, int, int]


def dot(a: Vec, b: Vec) -> int:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def valid_counts(counts: Vec) -> bool:
    return all(MIN_COUNT <= c <= MAX_COUNT for c in counts) and MIN_ITEMS <= sum(counts) <= MAX_ITEMS


def valid_values(counts: Vec, values: Vec) -> bool:
    """One side's private values: non-negative, total worth exactly 10, at most two types at 0."""
    return (
        all(v >= 0 for v in values)
        and dot(counts, values) == TOTAL_VALUE
        and sum(1 for v in values if v == 0) <= 2
    )


def valid_pair(counts: Vec, va: Vec, vb: Vec) -> bool:
    """Both sides' values: every type worth something to someone, one type worth something to both."""
    return (
        valid_counts(counts)
        and valid_values(counts, va)
        and valid_values(counts, vb)
        and all(x > 0 or y > 0 for x, y in zip(va, vb, strict=False))
        and any(x > 0 and y > 0 for x, y in zip(va, vb, strict=False))
    )


def all_counts() -> list[Vec]:
    return [c for c in product(range(MIN_COUNT, MAX_COUNT + 1), repeat=3) if valid_counts(c)]


def all_values(counts: Vec) -> list[Vec]:
    ranges = [range(TOTAL_VALUE // c + 1) for c in counts]
    return [v for v in product(*ranges) if valid_values(counts, v)]


def all_splits(counts: Vec) -> list[Vec]:
    """Every allocation of the pool to one side (the other side takes the rest)."""
    return list(product(*(range(c + 1) for c in counts)))


def complement(counts: Vec, take: Vec) -> Vec:
    return (counts[0] - take[0], counts[1] - take[1], counts[2] - take[2])


def is_agreement(counts: Vec, take_a: Vec, take_b: Vec) -> bool:
    return all(x + y == c for x, y, c in zip(take_a, take_b, counts, strict=False))


def is_pareto_optimal(counts: Vec, va: Vec, vb: Vec, take_a: Vec) -> bool:
    """No other split makes one side better off and the other no worse."""
    sa, sb = dot(va, take_a), dot(vb, complement(counts, take_a))
    for alt in all_splits(counts):
        ua, ub = dot(va, alt), dot(vb, complement(counts, alt))
        if ua >= sa and ub >= sb and (ua > sa or ub > sb):
            return False
    return True
