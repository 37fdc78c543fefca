# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The disjunctive normal form of "not s": an instance fails s when it fails one of its keywords, so the negation
is the union, keyword by keyword, of the instances that fail it, each written as a synthetic schema (the document
keeps it under the keyword's pointer): ``not (x >= b)`` is a number below b, ``not required`` an object without
the key, ``not properties`` an object whose value fails the property's schema... A keyword whose failing
instances strict mode cannot write (a negated ``oneOf``, ``prefixItems``, ``uniqueItems``...) is refused.

Owns: ``negate`` (cached by the schema object, a negated reference cycle refused through ``terms.once``) and one
reader per keyword (``_NEGATE``). Must not import the emitters.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.document import escape
from bankml.schema.strict.readers import member
from bankml.schema.strict.values import is_num
from bankml.schema.strict.vocabulary import (
    ALL_TYPES,
    CHECKED_FORMATS,
    UNEVALUATED,
    check_schema,
    refuse,
)

_OBJECT = frozenset({"object"})
_NUMBER = frozenset({"int", "frac"})
_STRING = frozenset({"string"})
_ARRAY = frozenset({"array"})
# the type a count keyword counts in
_COUNTED = {
    "minLength": "string",
    "maxLength": "string",
    "minItems": "array",
    "maxItems": "array",
    "minProperties": "object",
    "maxProperties": "object",
}


class Negation:
    """The negations of one conversion's schemas (``negate``), cached by the schema object."""

    def __init__(self, doc, budget, lenient):
        self.doc = doc
        self.budget = budget
        self.lenient = lenient
        self.negate_cache = {}  # id(schema object) -> the terms of its negation

    def link(self, c):
        """The parts it calls: the expansion, the keyword readers, the merge."""
        self.terms = c.terms
        self.readers = c.readers
        self.merger = c.merger

    def negate(self, s):
        if s is True:
            return []
        if s is False:
            return [()]
        return self.terms.once(self.negate_cache, id(s), self._negate, s, "not", "a negated reference cycle")

    def _negate(self, s):
        _check_stack()
        ptr = self.doc.p(s)
        self.budget.tick(ptr)
        synthetic = self.doc.synthetic(s)
        if "$strict-not" in s:
            return self.terms.expand(s["$strict-not"])
        if "$strict-any" in s:
            return self.terms.product([self.negate(x) for x in s["$strict-any"]], ptr)
        if "$ref" in s and not synthetic and self.doc.draft <= 7:
            return self.negate(self.doc.resolve(s["$ref"], s))
        v = self.doc.vocab_of(s)
        alts = []
        for k, val in s.items():
            if not k.startswith("$strict-") and k not in v:
                continue
            kp = ptr + "/" + escape(k)
            if k in UNEVALUATED:
                refuse(k, kp, "the negation of %s (the instances that fail it are not written)" % k)
            read = _NEGATE.get(k)
            if read is None:
                refuse("not", kp, "the negation of %s" % k)
            alts.extend(read(self, s, k, val, kp, ptr, v))
        for k, a, x, kp in self.terms.schema_deps(s, v):
            # failing a schema dependency: an object that holds the key and fails its schema
            alts.extend(self.terms.product([[(self.terms.has_key(a, kp),)], self.negate(x)], kp))
        return self.terms.union([alts])

    def not_of(self, sub, pointer):
        """The synthetic schema of the values that fail sub."""
        return self.doc.synth({"$strict-not": sub}, pointer)

    def _term(self, d, kp):
        """The one-object term of the synthetic schema d, kept under the keyword's pointer kp."""
        return (self.doc.synth(d, kp),)

    # --- the instances that fail one keyword k (its value val, at kp) of the schema object s (at ptr) ---
    def _ref(self, s, k, val, kp, ptr, v):
        return self.negate(self.doc.resolve(val, s))

    def _dynamic_ref(self, s, k, val, kp, ptr, v):
        return self.negate(self.doc.resolve_dynamic(s))

    def _recursive_ref(self, s, k, val, kp, ptr, v):
        return self.negate(self.doc.resolve_recursive(s))

    def _all_of(self, s, k, val, kp, ptr, v):
        out = []
        for x in self.terms.sublist(s, "allOf"):
            out.extend(self.negate(x))
        return out

    def _any_of(self, s, k, val, kp, ptr, v):
        return self.terms.product([self.negate(x) for x in self.terms.sublist(s, "anyOf")], kp)

    def _one_of(self, s, k, val, kp, ptr, v):
        refuse("oneOf", kp, "a negated oneOf")

    def _not(self, s, k, val, kp, ptr, v):
        check_schema(val, kp)
        return self.terms.expand(val)

    def _if(self, s, k, val, kp, ptr, v):
        if "then" not in s and "else" not in s:
            return []
        then = s.get("then", True)
        els = s.get("else", True)
        out = self.terms.product([self.terms.expand(val), self.negate(then)], kp)
        return out + self.terms.product([self.negate(val), self.negate(els)], kp)

    def _type(self, s, k, val, kp, ptr, v):
        types = self.readers.types_of(val, kp) if k == "type" else val
        return [self._term({"$strict-types": ALL_TYPES - types}, kp)]

    def _enum(self, s, k, val, kp, ptr, v):
        vals = val if k == "enum" else [val]
        if k == "enum" and not isinstance(val, list):
            refuse("enum", kp, "enum must be an array")
        return [self._term({"$strict-notvalues": list(vals)}, kp)]

    def _notvalues(self, s, k, val, kp, ptr, v):
        return [self._term({"enum": list(val)}, kp)]

    def _bound(self, s, k, val, kp, ptr, v):
        # the instances that fail a keyword are of the keyword's type (it passes every other type):
        # not (x >= b) is a number x < b; not (x > b) a number x <= b
        return [
            self._term({"$strict-types": _NUMBER, "$strict-bound": [(not lo, b, not excl)]}, kp)
            for lo, b, excl in self.readers.bounds_of(s, k, val, kp)
        ]

    def _count(self, s, k, val, kp, ptr, v):
        n = self.readers.count(s, k, kp)
        t = _COUNTED[k]
        if k.startswith("min"):
            return [self._term({"$strict-types": frozenset({t}), "max" + k[3:]: n - 1}, kp)] if n > 0 else []
        return [self._term({"$strict-types": frozenset({t}), "min" + k[3:]: n + 1}, kp)]

    def _pattern(self, s, k, val, kp, ptr, v):
        if "pattern" in self.lenient:
            return []
        if not isinstance(val, str):
            refuse("pattern", kp, "pattern must be a string")
        self.readers.regex(val, "pattern", kp)  # the validator searches with it (valid_atomic)
        return [self._term({"$strict-types": _STRING, "$strict-notpattern": val}, kp)]

    def _notpattern(self, s, k, val, kp, ptr, v):
        return [self._term({"$strict-types": _STRING, "pattern": val}, kp)]

    def _format(self, s, k, val, kp, ptr, v):
        if not isinstance(val, str) or val not in CHECKED_FORMATS or "format" in self.lenient:
            return []
        return [self._term({"$strict-types": _STRING, "$strict-notformat": val}, kp)]

    def _required(self, s, k, val, kp, ptr, v):
        if not isinstance(val, list):
            refuse("required", kp, "required must be an array")
        return [self._term({"$strict-types": _OBJECT, "properties": {name: False}}, kp) for name in val]

    def _properties(self, s, k, val, kp, ptr, v):
        if not isinstance(val, dict):
            refuse("properties", kp, "properties must be an object")
        out = []
        for name, sub in val.items():
            check_schema(sub, kp + "/" + escape(name))
            if sub is True:
                continue
            neg = self.doc.synth({"$strict-not": sub}, kp + "/" + escape(name))
            out.append(self._term({"$strict-types": _OBJECT, "required": [name], "properties": {name: neg}}, kp))
        return out

    def _dependencies(self, s, k, val, kp, ptr, v):
        if not isinstance(val, dict):
            refuse(k, kp, "%s must be an object" % k)
        out = []
        for a, bs in val.items():
            if not isinstance(bs, list):
                continue  # a schema dependency: _negate's schema_deps
            for b in bs:
                out.append(self._term({"$strict-types": _OBJECT, "required": [a], "properties": {b: False}}, kp))
        return out

    def _dependent_schemas(self, s, k, val, kp, ptr, v):
        return []  # _negate's schema_deps

    def _property_names(self, s, k, val, kp, ptr, v):
        # a key that fails the names' schema: one member constraint per term of its negation
        check_schema(val, kp)
        out = []
        for t in self.negate(val):
            nm = self.merger.merge(t)
            if nm is None or "string" not in nm.types:
                continue  # keys are strings
            out.append(self._term({"$strict-types": _OBJECT, "$strict-some": member(names=t)}, kp))
        return out

    def _pattern_properties(self, s, k, val, kp, ptr, v):
        # a key matching a regex whose value fails the regex's schema (listed keys too)
        if not isinstance(val, dict):
            refuse("patternProperties", kp, "patternProperties must be an object")
        out = []
        for pat, sub in val.items():
            pp = kp + "/" + escape(pat)
            check_schema(sub, pp)
            self.readers.regex(pat, "patternProperties", pp)
            if sub is True:
                continue
            some = member(patterns=((pat, pp),), value=self.not_of(sub, pp))
            out.append(self._term({"$strict-types": _OBJECT, "$strict-some": some}, kp))
        return out

    def _additional_properties(self, s, k, val, kp, ptr, v):
        # a key neither listed nor matching a patternProperties regex whose value fails it
        check_schema(val, kp)
        if val is True or val == {}:
            return []
        listed = s.get("properties") if "properties" in v else None
        pats = s.get("patternProperties") if "patternProperties" in v else None
        notpatterns = []
        for pat in pats if isinstance(pats, dict) else ():
            pp = ptr + "/patternProperties/" + escape(pat)
            self.readers.regex(pat, "patternProperties", pp)
            notpatterns.append((pat, pp))
        some = member(
            exclude=frozenset(listed) if isinstance(listed, dict) else frozenset(),
            notpatterns=tuple(notpatterns),
            value=True if val is False else self.not_of(val, kp),
        )
        return [self._term({"$strict-types": _OBJECT, "$strict-some": some}, kp)]

    def _unique_items(self, s, k, val, kp, ptr, v):
        if val is not False:
            refuse("not", kp, "the negation of %s" % k)
        return []

    def _items(self, s, k, val, kp, ptr, v):
        if not isinstance(val, (dict, bool)) or ("prefixItems" in s and "prefixItems" in v):
            refuse("not", kp, "the negation of %s" % k)
        # an item that fails the items schema: an array that contains one
        if val is True:
            return []
        check_schema(val, kp)
        neg = self.doc.synth({"$strict-not": val}, kp)
        return [self._term({"$strict-types": _ARRAY, "contains": neg}, kp)]

    def _prefix_items(self, s, k, val, kp, ptr, v):
        # an item at position i that fails the i-th schema: an array of more than i items, that item failing it
        if not isinstance(val, list):
            refuse("prefixItems", kp, "prefixItems must be an array")
        out = []
        for i, x in enumerate(val):
            ip = "%s/%d" % (kp, i)
            check_schema(x, ip)
            if x is True:
                continue
            prefix = [True] * i + [self.not_of(x, ip)]
            out.append(self._term({"$strict-types": _ARRAY, "minItems": i + 1, "prefixItems": prefix}, ip))
        return out

    def _contains(self, s, k, val, kp, ptr, v):
        if "minContains" in s or "maxContains" in s:
            refuse("not", kp, "the negation of %s" % k)
        # no item passes contains: every item fails it
        check_schema(val, kp)
        neg = self.doc.synth({"$strict-not": val}, kp)
        return [self._term({"$strict-types": _ARRAY, "items": neg}, kp)]

    def _multiple_of(self, s, k, val, kp, ptr, v):
        if "multipleOf" in self.lenient:
            refuse("not", kp, "the negation of %s" % k)
        # a number that is no multiple: an integer of a nonzero remainder, or a value with a fraction
        if not is_num(val) or val <= 0:
            refuse(k, kp, "multipleOf must be a positive number")
        if isinstance(val, float) and not val.is_integer():
            refuse("not", kp, "the negation of a multipleOf that is not an integer")
        return [self._term({"$strict-types": _NUMBER, "$strict-notmult": int(val)}, kp)]

    def _notmult(self, s, k, val, kp, ptr, v):
        return [self._term({"$strict-types": _NUMBER, "multipleOf": val}, kp)]


# the negation of each keyword strict mode can negate; any other is refused (prefixItems, additionalItems, a
# negated format's negation...)
_NEGATE = {
    "$ref": Negation._ref,
    "$dynamicRef": Negation._dynamic_ref,
    "$recursiveRef": Negation._recursive_ref,
    "allOf": Negation._all_of,
    "anyOf": Negation._any_of,
    "oneOf": Negation._one_of,
    "not": Negation._not,
    "if": Negation._if,
    "type": Negation._type,
    "$strict-types": Negation._type,
    "enum": Negation._enum,
    "const": Negation._enum,
    "$strict-notvalues": Negation._notvalues,
    "minimum": Negation._bound,
    "maximum": Negation._bound,
    "exclusiveMinimum": Negation._bound,
    "exclusiveMaximum": Negation._bound,
    "$strict-bound": Negation._bound,
    "minLength": Negation._count,
    "maxLength": Negation._count,
    "minItems": Negation._count,
    "maxItems": Negation._count,
    "minProperties": Negation._count,
    "maxProperties": Negation._count,
    "pattern": Negation._pattern,
    "$strict-notpattern": Negation._notpattern,
    "format": Negation._format,
    "required": Negation._required,
    "properties": Negation._properties,
    "dependentRequired": Negation._dependencies,
    "dependencies": Negation._dependencies,
    "dependentSchemas": Negation._dependent_schemas,
    "propertyNames": Negation._property_names,
    "patternProperties": Negation._pattern_properties,
    "additionalProperties": Negation._additional_properties,
    "uniqueItems": Negation._unique_items,
    "items": Negation._items,
    "prefixItems": Negation._prefix_items,
    "contains": Negation._contains,
    "multipleOf": Negation._multiple_of,
    "$strict-notmult": Negation._notmult,
}
