# cython: boundscheck=True, wraparound=True
"""What one schema conversion may cost, and the stack it may use.

``SchemaLimits`` bounds the nodes, grammar bytes, work bytes and seconds of one conversion (llama.cpp has no such
bounds); ``_Meter`` counts them while the schema is read (``jsontext``, ``reader``) and converted (``converter``);
``budget()`` adds a request's deadline and cancellation. The compiled modules recurse on the C stack, so they stop at
a nesting depth of ``_COMPILED_MAX_DEPTH`` with ``_TooDeep`` and the work is redone by their source run as plain
Python (``_plain_module``), within a raised recursion limit (``_raise_recursion_limit``), where RecursionError is the
reference.

setup.py compiles this file with Cython as it is (``limits.pxd`` makes ``_Meter`` a cdef class).
"""

import importlib.util
import math
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["SchemaLimits", "DEFAULT_LIMITS", "budget"]


@dataclass(frozen=True)
class SchemaLimits:
    """What one conversion may cost; past any of these it stops with a SchemaError naming the limit.

    llama.cpp's converter has no such bounds: a schema whose objects take their properties through
    ``allOf``/``$ref`` from the level below doubles the grammar per level (a 2 KB schema of 16 levels gives a
    19 MB grammar, 19 levels hundreds of MB), and a Python tree that shares sub-dicts (``x = {"anyOf": [x, x]}``
    40 times) expands to 2^40 nodes. Every count is checked while the tree is read and the rules are built,
    so the refusal comes before the cost. The defaults are far above any schema of the parity tables (the
    largest grammar there is well under 1 MB).

    * ``max_nodes``: JSON values in the schema tree (counted expanded, as llama.cpp's reader copies shared
      sub-trees), and schema nodes the reader builds from it (``"type": [...]`` lists copy the schema per type);
    * ``max_grammar_bytes``: the grammar text (rule names and bodies);
    * ``max_work_bytes``: rule text built, counting rules built again and found identical (a schema can make
      the converter redo the same rules exponentially often while the grammar stays small);
    * ``max_seconds``: wall-clock time of one conversion (None: no time limit).
    """

    max_nodes: int = 1_000_000
    max_grammar_bytes: int = 8 * 1024 * 1024
    max_work_bytes: int = 64 * 1024 * 1024
    max_seconds: float = 30.0


DEFAULT_LIMITS = SchemaLimits()

_BUDGET = threading.local()


@contextmanager
def budget(deadline=None, cancel=None):
    """Within the block, conversions on this thread also stop at ``deadline`` (a ``time.monotonic()`` value)
    or once ``cancel`` (a ``threading.Event``) is set, with a SchemaError. The server runs a request's
    preparation inside its time budget this way, and cancels it when the client goes away."""
    saved = getattr(_BUDGET, "value", None)
    _BUDGET.value = (deadline, cancel)
    try:
        yield
    finally:
        _BUDGET.value = saved


class _LimitExceeded(Exception):
    def __init__(self, message, pointer="#"):
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def _limit_message(what):
    return _PREFIX + what + "; bankml refuses it (llama.cpp has no such bound and would build it whole)"


def _count_bound(v):
    """A limit as the int a count is compared with: a count (an int) is above v exactly when it is above
    floor(v); a limit no count can reach (or NaN, which no count is above) becomes sys.maxsize."""
    if v != v or v >= sys.maxsize:
        return sys.maxsize
    return math.floor(v)


class _Meter:
    """The counts of one conversion against its SchemaLimits, and its deadline."""

    def __init__(self, limits):
        self.limits = limits = limits or DEFAULT_LIMITS
        self.max_nodes = _count_bound(limits.max_nodes)
        self.max_grammar_bytes = _count_bound(limits.max_grammar_bytes)
        self.max_work_bytes = _count_bound(limits.max_work_bytes)
        self.nodes = 0
        self.grammar_bytes = 0
        self.work_bytes = 0
        self.ticks = 0
        deadline = None if limits.max_seconds is None else time.monotonic() + limits.max_seconds
        outer, self.cancel = getattr(_BUDGET, "value", None) or (None, None)
        if outer is not None and (deadline is None or outer < deadline):
            deadline = outer
        self.deadline = deadline

    def node(self, pointer):
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _LimitExceeded(
                _limit_message(
                    "the schema expands to more than %d nodes (SchemaLimits.max_nodes)" % self.limits.max_nodes
                ),
                pointer,
            )
        self.ticks += 1
        if self.ticks & 255 == 0:
            self.clock(pointer)

    def work(self, n, pointer):
        self.work_bytes += n
        if self.work_bytes > self.max_work_bytes:
            raise _LimitExceeded(
                _limit_message(
                    "converting the schema builds more than %d bytes of rules and node paths (SchemaLimits.max_work_bytes)"
                    % self.limits.max_work_bytes
                ),
                pointer,
            )

    def output(self, n, pointer):
        self.grammar_bytes += n
        if self.grammar_bytes > self.max_grammar_bytes:
            raise _LimitExceeded(
                _limit_message(
                    "the grammar grows past %d bytes (SchemaLimits.max_grammar_bytes)" % self.limits.max_grammar_bytes
                ),
                pointer,
            )

    def clock(self, pointer):
        if self.cancel is not None and self.cancel.is_set():
            raise _LimitExceeded(_PREFIX + "the conversion was cancelled", pointer)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _LimitExceeded(
                _limit_message(
                    "the conversion takes longer than its time budget (SchemaLimits.max_seconds = %s, or the "
                    "request's)" % self.limits.max_seconds
                ),
                pointer,
            )


_PREFIX = "JSON schema conversion failed:\n"


# Nesting of schema nodes (building or visiting them) and of the key-exclusion trie past which the compiled
# modules hand the work to their plain-Python source. A level takes 1-2.5 KB of C stack compiled: 400 levels
# fit in a 1 MB thread stack (Linux gives threads 8 MB). Of the 11,305 MaskBench schemas, the deepest converted
# one nests 36 levels; only four that end past a SchemaLimits bound go deeper (646 to 3,665 levels)
_COMPILED_MAX_DEPTH = 400


class _TooDeep(Exception):
    """Raised by the compiled modules only, past _COMPILED_MAX_DEPTH."""


def _plain_module(name, filename, **shared):
    """``filename`` (a module of this package) run as plain Python under the name ``bankml.schema.<name>``, where
    deep recursion ends in RecursionError; the globals named in ``shared`` are then bound to the given objects
    (the compiled module's classes, so that nodes and errors of either are the same types)."""
    spec = importlib.util.spec_from_file_location(
        __package__ + "." + name, os.path.join(os.path.dirname(__file__), filename)
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for key, value in shared.items():
        setattr(module, key, value)
    return module


_RECURSION_HEADROOM = 20000

_RECURSION_LOCK = threading.Lock()
_RECURSION_USERS = 0
_RECURSION_SAVED = None


def _raise_recursion_limit():
    global _RECURSION_USERS, _RECURSION_SAVED
    with _RECURSION_LOCK:
        if _RECURSION_USERS == 0:
            _RECURSION_SAVED = sys.getrecursionlimit()
            if _RECURSION_SAVED < _RECURSION_HEADROOM:
                sys.setrecursionlimit(_RECURSION_HEADROOM)
        _RECURSION_USERS += 1


def _restore_recursion_limit():
    global _RECURSION_USERS
    with _RECURSION_LOCK:
        _RECURSION_USERS -= 1
        if _RECURSION_USERS == 0 and _RECURSION_SAVED < _RECURSION_HEADROOM:
            sys.setrecursionlimit(_RECURSION_SAVED)
