# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""JSON values as jsonschema compares them: its equality (``1 == 1.0``, ``true != 1``, key order irrelevant), a
hashable key per equality class (``vkey``), the equality of two schemas read as JSON (``same_json``), an instance's
type (``json_type``, draft by draft), and a numeric bound as an exact decimal (``dec``: a float as its shortest
repr, carrying its binary value).

Owns: those functions. Imports nothing of the package but the C-stack check (they recurse into the value).
"""

from __future__ import annotations

import math
from decimal import Decimal

from bankml.schema._cstack import check_stack as _check_stack


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def equal(a, b):
    """jsonschema's ``_utils.equal``: 1 == 1.0, True != 1, key order irrelevant."""
    _check_stack()
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    return a == b


def vkey(v):
    """A hashable key that two JSON values share exactly when ``equal`` says they are equal, or None for a value
    holding a NaN (json.loads reads ``NaN``), which ``equal`` finds equal to nothing, itself included."""
    _check_stack()
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return None if v != v else ("n", v)  # 1 and 1.0 (and 0.0, -0.0) are equal with equal hashes
    if v is None:
        return ("z",)
    if isinstance(v, list):
        keys = tuple(vkey(x) for x in v)
        return None if None in keys else ("l", keys)
    if isinstance(v, dict):
        items = []
        for k, x in v.items():
            kx = vkey(x)
            if kx is None:
                return None
            items.append((k, kx))
        return ("d", frozenset(items))
    return None


def same_json(x, y):
    """x == y, but a boolean equals only a boolean (Python finds 0 == False and 1 == True): the values of two
    schemas, compared as jsonschema reads them."""
    _check_stack()
    if x is y:
        return True
    if isinstance(x, bool) or isinstance(y, bool):
        return x.__class__ is y.__class__ and x == y
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(same_json(v, y[k]) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return x.__class__ is y.__class__ and len(x) == len(y) and all(same_json(a, b) for a, b in zip(x, y))
    return x == y


def vkeys(values):
    """The keys of values (those that have one: a NaN-holding value equals nothing)."""
    out = set()
    for v in values:
        k = vkey(v)
        if k is not None:
            out.add(k)
    return out


def spellings(x):
    """The parsed values jsonschema-equal to the enum value x that an instance may hold: an integral number as
    an int and as a float (their types differ: draft 4 counts 1.0 as no integer)."""
    if is_num(x) and math.isfinite(x) and float(x).is_integer() and abs(x) < 2**63:
        return [int(x), float(x)]
    return [x]


def json_type(v, draft):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        # draft 6+ counts 1.0 as an integer; strict mode's integer texts never spell it so (module docstring)
        return "int" if (draft >= 6 and v.is_integer()) else "frac"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "?"


class Dec(Decimal):
    """A float bound's shortest repr, carrying the float's exact binary value (``exact``): Python compares an
    int instance with the exact value, a float instance (its text the shortest repr) as the repr."""

    exact = None


def dec(v):
    """A numeric schema value as a Decimal (a float as its shortest repr: module docstring)."""
    if isinstance(v, bool):
        return Decimal(int(v))
    if isinstance(v, int):
        return Decimal(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        d = Dec(repr(v))
        exact = Decimal(v)
        if exact != d:
            d.exact = exact
        return d
    return None
