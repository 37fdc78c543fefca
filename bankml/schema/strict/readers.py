# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""Keyword readers shared by the merge, the validator and the emitters: a schema object's keywords read as the
values strict mode works with (types, counts, bounds, required keys, the schemas a property or an item must
satisfy, dependencies, propertyNames), each malformed keyword refused where it is read.

Owns: reading one schema object's keywords, and the compiled regexes of ``pattern``/``patternProperties``.
Builds on the document; must not import the algebra or the emitters.
"""

from __future__ import annotations

import functools
import re
import warnings

from bankml.schema.strict.document import escape
from bankml.schema.strict.values import dec, is_num
from bankml.schema.strict.vocabulary import ALL_TYPES, TYPE_NAMES, check_schema, refuse


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern):
    """re.compile(pattern) without Python's FutureWarnings on its syntax ("possible nested set"): notes on
    future syntax, not the schema's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile(pattern)


def member(exclude=frozenset(), patterns=(), notpatterns=(), names=None, value=True):
    """A $strict-some member constraint: a key not in exclude, matching every regex of patterns and none of
    notpatterns ((regex, pointer) pairs) and satisfying the term names (or None), whose value satisfies the schema
    value (_Compiler.key_ok, extra_kv)."""
    return {"exclude": exclude, "patterns": patterns, "notpatterns": notpatterns, "names": names, "value": value}


class Readers:
    """The keyword readers of one conversion's document ``doc``."""

    def __init__(self, doc):
        self.doc = doc

    def types_of(self, val, pointer):
        names = [val] if isinstance(val, str) else val
        if not isinstance(names, list):
            refuse("type", pointer, "type must be a string or an array")
        out = set()
        for n in names:
            if n == "any" and self.doc.draft <= 3:
                out |= ALL_TYPES
            elif n not in TYPE_NAMES:
                refuse("type", pointer, "unknown type %r" % (n,))
            else:
                out |= TYPE_NAMES[n]
        return frozenset(out)

    def count(self, s, k, pointer):
        v = s[k]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            refuse(k, pointer, "%s must be a non-negative integer" % k)
        return v

    def bounds_of(self, s, k, val, pointer):
        """[(is_lower, Decimal, exclusive)] of one bound keyword of s."""
        if k == "$strict-bound":
            return list(val)
        if self.doc.draft <= 4 and k in ("exclusiveMinimum", "exclusiveMaximum"):
            return []  # draft 4: a modifier of minimum/maximum, read with them
        if not is_num(val) and not (isinstance(val, bool) and self.doc.draft >= 6 and k.startswith("exclusive")):
            refuse(k, pointer, "%s must be a number" % k)
        b = dec(val)
        if b is None:
            refuse(k, pointer, "a non-finite bound")
        lower = k in ("minimum", "exclusiveMinimum")
        excl = k.startswith("exclusive")
        if self.doc.draft <= 4:
            excl = bool(s.get("exclusiveMinimum" if lower else "exclusiveMaximum", False))
        return [(lower, b, excl)]

    def required_of(self, term):
        out = set()
        for d in term:
            r = d.get("required")
            if isinstance(r, list) and ("required" in self.doc.vocab or self.doc.synthetic(d)):
                out |= {x for x in r if isinstance(x, str)}
        return out

    def value_conj(self, term, key):
        """The schemas a property named key must satisfy in the term (properties, patternProperties,
        additionalProperties of each dict, each relative to its own dict)."""
        conj = []
        for d in term:
            v = self.doc.vocab_of(d)
            ptr = self.doc.p(d)
            props = d.get("properties") if "properties" in v else None
            pats = d.get("patternProperties") if "patternProperties" in v else None
            matched = False
            if isinstance(props, dict) and key in props:
                check_schema(props[key], ptr + "/properties/" + escape(key))
                conj.append(props[key])
                matched = True
            if isinstance(pats, dict):
                for pat, sub in pats.items():
                    if self.search(pat, key, ptr + "/patternProperties/" + escape(pat)):
                        check_schema(sub, ptr + "/patternProperties/" + escape(pat))
                        conj.append(sub)
                        matched = True
            if not matched and "additionalProperties" in d and "additionalProperties" in v:
                check_schema(d["additionalProperties"], ptr + "/additionalProperties")
                conj.append(d["additionalProperties"])
        return conj

    def search(self, pattern, s, pointer):
        try:
            return re.search(pattern, s) is not None
        except re.error as e:
            refuse("patternProperties", pointer, "a pattern Python's re refuses: %s" % e)

    def deps_of(self, term):
        out = {}
        for d in term:
            v = self.doc.vocab_of(d)
            for k in ("dependentRequired", "dependencies"):
                if k in d and k in v:
                    val = d[k]
                    if not isinstance(val, dict):
                        refuse(k, self.doc.p(d) + "/" + k, "%s must be an object" % k)
                    for a, bs in val.items():
                        if isinstance(bs, list):
                            out.setdefault(a, [])
                            out[a].extend(b for b in bs if b not in out[a])
        return out

    def prop_names(self, term):
        out = []
        for d in term:
            v = self.doc.vocab_of(d)
            if "propertyNames" in d and "propertyNames" in v:
                check_schema(d["propertyNames"], self.doc.p(d) + "/propertyNames")
                out.append(d["propertyNames"])
        return out

    def item_conj(self, term, i):
        """The schemas item i of an array must satisfy in the term."""
        conj = []
        for d in term:
            prefix, rest = self.items_of(d)
            if i < len(prefix):
                conj.append(prefix[i])
            elif rest is not None:
                conj.append(rest)
        return conj

    def items_of(self, d):
        """(prefix schemas, schema of the items after them or None) of one dict."""
        v = self.doc.vocab_of(d)
        ptr = self.doc.p(d)
        prefix, rest = [], None
        items = d.get("items") if "items" in v else None
        if "prefixItems" in v and "prefixItems" in d:
            prefix = d["prefixItems"]
            if not isinstance(prefix, list):
                refuse("prefixItems", ptr + "/prefixItems", "prefixItems must be an array")
        if isinstance(items, list):
            if self.doc.draft >= 2020 and not self.doc.synthetic(d):
                refuse("items", ptr + "/items", "an array-form items in draft 2020-12")
            prefix = items
            if "additionalItems" in v and "additionalItems" in d:
                rest = d["additionalItems"]
                check_schema(rest, ptr + "/additionalItems")
        elif items is not None:
            check_schema(items, ptr + "/items")
            rest = items
        for i, x in enumerate(prefix):
            check_schema(x, "%s/%s/%d" % (ptr, "items" if isinstance(items, list) else "prefixItems", i))
        return prefix, rest

    def regex(self, pat, keyword, pointer):
        """The compiled regex pat (the validator searches with it: valid_atomic, key_ok), or a refusal naming
        keyword when Python's re refuses it (a syntax error, a repetition count past its limit)."""
        try:
            return compile_pattern(pat)
        except (re.error, RecursionError, OverflowError) as e:
            refuse(keyword, pointer, "a pattern Python's re refuses: %s" % e)
