# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""What one construction of a string language may cost, and the error past it.

Every construction (subset, product, preimage, a regex's automaton) counts against these bounds, so none hangs or
grows without limit. They are module globals read at each construction: a caller (a test) may change them here,
``bankml.schema.strict.lang.bounds.MAX_STATES = ...``, and every module of the package sees it.

Owns: the bounds, the per-thread scale formats build under, ``LangError``. Imports nothing of bankml.
"""

from __future__ import annotations

import threading

#: Most DFA states any one construction may create (subset, product, preimage).
MAX_STATES = 8000
# Fixed format constructions may use this many times MAX_STATES in intermediate automata (their
# size is known: the largest, uuid, peaks near 10,000 states and ends at 6,938).
FORMAT_SCALE = 3
_LOCAL = threading.local()  # per thread: the scale in force (formats build under a larger one)

#: Most elementary steps (thread moves, range visits) one regex's subset construction may take.
MAX_WORK = 1_500_000
#: Most range transitions (summed over states) one regex's subset construction may create; a
#: Unicode class such as \\w is ~700 ranges, so a pattern that splits it in many states costs here.
MAX_EDGES = 600_000
#: Most NFA nodes (and repetition copies) one regex may expand to.
MAX_NFA_NODES = 60000


def state_limit() -> int:
    """The states a construction may create now: MAX_STATES times this thread's scale."""
    return MAX_STATES * getattr(_LOCAL, "scale", 1)


def set_scale(scale: int) -> None:
    """The scale of state_limit on this thread (1, or FORMAT_SCALE while a format is built)."""
    _LOCAL.scale = scale


class LangError(Exception):
    """A language bankml cannot build exactly (or within the state bounds)."""

    def __init__(self, keyword: str, reason: str):
        super().__init__(f"{keyword}: {reason}")
        self.keyword = keyword
        self.reason = reason
