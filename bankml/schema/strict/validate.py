# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""A small validator, jsonschema's verdict on a JSON value against a schema, for the values a grammar is built
from: const/enum values (only those the schema accepts are written), property names against propertyNames,
the keys a member constraint names, the strings of a finite set, oneOf's disjointness.

Owns: ``valid`` (memoized for scalars at depth 0), ``valid_term``, ``str_ok``, ``key_ok``. Builds on the
expansion and the merge (it reads ``Merger.merge_cache`` directly: the hot loop of big enums); must not import the
emitters.
"""

from __future__ import annotations

import re

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.merge import UNMERGED
from bankml.schema.strict.patterns import format_lang
from bankml.schema.strict.readers import compile_pattern
from bankml.schema.strict.values import dec, equal, json_type, vkey
from bankml.schema.strict.vocabulary import refuse

_SCALARS = (str, int, float, bool, type(None))  # values valid() remembers its verdicts on


class Validator:
    """The verdicts of one conversion's validator."""

    def __init__(self, doc):
        self.doc = doc
        self.valid_memo = {}  # (class, scalar value, id(schema)) -> valid(value, schema) at depth 0

    def link(self, c):
        """The parts it calls: the expansion, the merge (and its cache, read), the readers."""
        self.terms = c.terms
        self.merger = c.merger
        self.merge_cache = c.merger.merge_cache
        self.readers = c.readers

    def valid_term(self, x, term):
        return all(self.valid(x, d) for d in term)

    def valid(self, x, s, depth=0):
        _check_stack()
        if depth > 200:
            refuse("$ref", self.doc.p(s), "validating a const/enum value recursed too deeply")
        if s is True:
            return True
        if s is False:
            return False
        memo = None
        if depth == 0 and x.__class__ in _SCALARS:
            # an enum's values meet the same schema once per term of every node that holds it (a oneOf of many
            # branches: the same value against the same dict thousands of times); the class keeps 1, 1.0, True
            # apart (their JSON types differ)
            memo = (x.__class__, x, id(s))
            got = self.valid_memo.get(memo)
            if got is not None:
                return got
        terms = self.terms.expand(s)
        xt = json_type(x, self.doc.draft)  # once per value: a big enum meets every atom of every term
        out = any(all(self.valid_atomic(x, d, depth, xt) for d in t) for t in terms)
        if memo is not None:
            self.valid_memo[memo] = out
        return out

    def valid_atomic(self, x, d, depth, t):
        """x (of JSON type t, ``json_type``) against the leaf keywords of d (its combinators are already
        expanded into the term)."""
        m = self.merge_cache.get(id(d), UNMERGED)  # merge((d,))'s entry, looked up inline: the hot loop of enums
        if m is UNMERGED:
            m = self.merger.merge((d,))
        if m is None:
            return False
        if t not in m.types:
            return False
        if m.enum is not None and vkey(x) not in m.enum_keys:  # a NaN-holding x has no key: equals none
            return False
        if any(equal(x, y) for y in m.notvalues):
            return False
        if t in ("int", "frac"):
            return _number_ok(x, m)
        if t == "string":
            return self._string_ok(x, m)
        if t == "array":
            return self._array_ok(x, d, depth, m)
        if t == "object":
            return self._object_ok(x, d, depth, m)
        return True

    def _string_ok(self, x, m):
        st = m.string
        if len(x) < st.min or (st.max is not None and len(x) > st.max):
            return False
        for p, _ in st.patterns:
            if re.search(p, x) is None:
                return False
        for p, _ in st.notpatterns:
            if re.search(p, x) is not None:
                return False
        for f, kp in st.formats + st.notformats:
            ok = self.format_ok(f, x, kp)
            if ok != ((f, kp) in st.formats):
                return False
        return True

    def _array_ok(self, x, d, depth, m):
        if len(x) < m.min_items or (m.max_items is not None and len(x) > m.max_items):
            return False
        for i, item in enumerate(x):
            for s in self.readers.item_conj((d,), i):
                if not self.valid(item, s, depth + 1):
                    return False
        if m.unique is not None:
            for i in range(len(x)):
                for j in range(i):
                    if equal(x[i], x[j]):
                        return False
        for c, lo, hi, _ in m.contains:
            n = sum(1 for item in x if self.valid(item, c, depth + 1))
            if n < lo or (hi is not None and n > hi):
                return False
        return True

    def _object_ok(self, x, d, depth, m):
        if len(x) < m.min_props or (m.max_props is not None and len(x) > m.max_props):
            return False
        for some, _ in m.some:
            if not any(self.key_ok(some, k) and self.valid(val, some["value"], depth + 1) for k, val in x.items()):
                return False
        if not self.readers.required_of((d,)) <= set(x):
            return False
        for a, bs in self.readers.deps_of((d,)).items():
            if a in x and not set(bs) <= set(x):
                return False
        for k, val in x.items():
            for s in self.readers.value_conj((d,), k):
                if not self.valid(val, s, depth + 1):
                    return False
            for pn in self.readers.prop_names((d,)):
                if not self.valid(k, pn, depth + 1):
                    return False
        return True

    def format_ok(self, f, x, pointer):
        lang = format_lang(f, pointer)
        return lang.matches(x)

    def str_ok(self, s, st, pointer):
        """Whether the string s satisfies the StringConstraint st."""
        if len(s) < st.min or (st.max is not None and len(s) > st.max) or s in st.exclude:
            return False
        if any(re.search(p, s) is None for p, _ in st.patterns):
            return False
        if any(re.search(p, s) is not None for p, _ in st.notpatterns):
            return False
        if any(not self.format_ok(f, s, kp) for f, kp in st.formats):
            return False
        if any(self.format_ok(f, s, kp) for f, kp in st.notformats):
            return False
        return True

    def key_ok(self, some, k):
        """Whether the key k is one a $strict-some member constraint names (the value aside)."""
        return (
            k not in some["exclude"]
            and all(compile_pattern(p).search(k) is not None for p, _ in some["patterns"])
            and not any(compile_pattern(p).search(k) is not None for p, _ in some["notpatterns"])
            and (some["names"] is None or self.valid_term(k, some["names"]))
        )


def _number_ok(x, m):
    """The number x (an int or a float) against m's bounds and divisors."""
    dx = dec(x)
    if dx is None:
        return False
    for lower, b, excl in m.bounds:
        if lower and (dx < b or (excl and dx == b)):
            return False
        if not lower and (dx > b or (excl and dx == b)):
            return False
    for q in m.mult:
        if isinstance(x, float) and not x.is_integer():
            return False
        if int(x) % q:
            return False
    for q in m.notmult:
        if not (isinstance(x, float) and not x.is_integer()) and not int(x) % q:
            return False
    return True
