"""JSON text parsed with its nesting bounded before the parser sees it.

Python's ``json`` decoder recurses once per array or object and counts those levels toward the interpreter's
recursion limit. A request body nested 100,000 deep used to be refused by catching the RecursionError it
raised at the limit, but parsing right up to the limit is not safe: a garbage collection that starts there
runs other objects' finalizers with no recursion headroom left, and CPython 3.11 then aborts the whole
process ("Fatal Python error: _Py_CheckRecursiveCall: Cannot recover from stack overflow", seen once in
about 20 load-test runs of ``bankml serve``). So the depth is measured first, in C-speed passes over the
text (strings removed by one regular expression, the brackets counted with numpy), and text nested deeper
than the bound is refused without being parsed.
"""

import json
import re

import numpy as np

__all__ = ["MAX_DEPTH", "NestingError", "loads", "nested_deeper_than"]

# Far below the recursion limit (1,000) less a worker thread's own frames; the schema reader's bound
# (schema.MAX_JSON_DEPTH) is the same.
MAX_DEPTH = 512

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENERS = np.zeros(256, dtype=np.int8) - 1
_OPENERS[ord("[")] = _OPENERS[ord("{")] = 1


class NestingError(RecursionError):
    """JSON text nested deeper than the bound (a RecursionError, as the decoder's own would be)."""


def nested_deeper_than(text, bound=MAX_DEPTH):
    """Whether JSON ``text`` (str or bytes) nests arrays and objects more than ``bound`` deep. Brackets inside
    strings do not count; in text that is not JSON an unterminated string's brackets do, which only ever
    errs toward refusing text the decoder would refuse anyway."""
    if isinstance(text, str):
        if text.count("[") + text.count("{") <= bound:
            return False
        data = text.encode("utf-8", "surrogatepass")
    else:
        data = bytes(text)
        if data.count(b"[") + data.count(b"{") <= bound:
            return False
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return False
    steps = _OPENERS[np.frombuffer(brackets, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max()) > bound


def loads(text, max_depth=MAX_DEPTH, **kwargs):
    """``json.loads(text, **kwargs)``, refusing with NestingError text nested deeper than ``max_depth``."""
    if nested_deeper_than(text, max_depth):
        raise NestingError(f"JSON nested deeper than {max_depth} levels")
    return json.loads(text, **kwargs)
