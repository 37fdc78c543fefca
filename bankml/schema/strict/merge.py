# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The intermediate representation the emitters write from: a term (a conjunction of atomic schema objects, one
alternative of a schema's disjunctive normal form, ``terms``) merged into ``Constraints``, per JSON type, or None
when no instance satisfies it.

Owns: ``Constraints``, ``StringConstraint`` and the merge of a term (one cache per conversion, keyed by the term's
objects). Builds on the document and the keyword readers; must not import the algebra above it or the emitters.
"""

from __future__ import annotations

from bankml.schema.strict.document import escape
from bankml.schema.strict.values import is_num, json_type, same_json, vkey, vkeys
from bankml.schema.strict.vocabulary import ALL_TYPES, CHECKED_FORMATS, check_schema, refuse

UNMERGED = object()  # Merger.merge_cache: not merged yet (a merge may be None)


class StringConstraint:
    """The constraints on one JSON string, as an intersection: length range, regexes (and negated ones),
    formats (and negated), a finite set it must belong to (or None) and a finite set it must avoid."""

    __slots__ = ("min", "max", "patterns", "notpatterns", "formats", "notformats", "include", "exclude")

    def __init__(self):
        self.min, self.max = 0, None
        self.patterns, self.notpatterns, self.formats, self.notformats = [], [], [], []
        self.include, self.exclude = None, set()

    def copy(self):
        c = StringConstraint()
        c.min, c.max = self.min, self.max
        c.patterns, c.notpatterns = list(self.patterns), list(self.notpatterns)
        c.formats, c.notformats = list(self.formats), list(self.notformats)
        c.include = None if self.include is None else set(self.include)
        c.exclude = set(self.exclude)
        return c

    def needs_lang(self):
        return bool(self.patterns or self.notpatterns or self.formats or self.notformats)


class Constraints:
    """The per-type constraints of one term: the types it leaves (``types``, of ALL_TYPES), the enum values
    (``enum``, None: no enum; ``enum_keys``, their vkeys) and the values excluded (``notvalues``); for numbers,
    ``bounds`` ((is_lower, Decimal, exclusive)), ``mult`` (multipleOf divisors) and ``notmult`` (divisors it must
    not be a multiple of); for strings, ``string`` (a StringConstraint); for arrays, ``min_items``, ``max_items``,
    ``contains`` ((schema, min, max, pointer)), ``unique`` (the uniqueItems pointer or None); for objects,
    ``min_props``, ``max_props`` and ``some`` ((member constraint, pointer): ``$strict-some``, the object holds a
    member it names). Keywords read where the rules are built (properties, items...) stay in the term's objects."""

    __slots__ = (
        "types",
        "enum",
        "enum_keys",
        "notvalues",
        "bounds",
        "mult",
        "notmult",
        "string",
        "min_items",
        "max_items",
        "contains",
        "unique",
        "min_props",
        "max_props",
        "some",
    )

    def __init__(self):
        self.types = set(ALL_TYPES)
        self.enum = None
        self.enum_keys = None
        self.notvalues = []
        self.bounds = []
        self.mult = []
        self.notmult = []
        self.string = StringConstraint()
        self.min_items = 0
        self.max_items = None
        self.contains = []
        self.unique = None
        self.min_props = 0
        self.max_props = None
        self.some = []


class Merger:
    """The merge of one conversion's terms (``merge``), cached by the term's objects."""

    def __init__(self, doc, readers, lenient):
        self.doc = doc
        self.readers = readers
        self.lenient = lenient
        self.merge_cache = {}  # id(dict), or the frozenset of a term's dict ids -> merge(term)

    def merge(self, term):
        """The per-type constraints of a term, or None when no instance satisfies it."""
        # a one-dict term (each atom valid() checks a value against) keyed by the dict's id, without a set
        key = id(term[0]) if len(term) == 1 else frozenset(map(id, term))
        m = self.merge_cache.get(key, UNMERGED)
        if m is UNMERGED:
            m = self.merge_cache[key] = self._merge(term)
        return m

    def _merge(self, term):
        m = Constraints()
        for d in term:
            ptr = self.doc.p(d)
            v = self.doc.vocab_of(d)
            for k, val in d.items():
                if k.startswith("$strict-"):
                    pass
                elif k not in v:
                    continue
                kp = ptr + "/" + escape(k)
                read = _READ.get(k)
                if read is not None:
                    read(self, m, d, ptr, kp, k, val)
                elif k not in _READ_ELSEWHERE:
                    refuse(k, kp, "%s is not supported in strict mode" % k)
        return self._settle(m)

    def _settle(self, m):
        """m, or None when its keywords leave no instance; a type its bounds contradict dropped, its enum values
        kept only where their type remains, once each, none excluded."""
        types = m.types
        if not types:
            return None
        st = m.string
        if st.max is not None and st.min > st.max:
            types.discard("string")
        if m.max_items is not None and m.min_items > m.max_items:
            types.discard("array")
        if m.max_props is not None and m.min_props > m.max_props:
            types.discard("object")
        if not types:
            return None
        if m.enum is not None:
            vals = []
            excluded = vkeys(m.notvalues)
            kept = set()  # the keys of the values kept: no value twice, and valid_atomic's membership test
            for x in m.enum:
                k = vkey(x)
                if self.enum_type_ok(x, types) and (k is None or (k not in excluded and k not in kept)):
                    if k is not None:
                        kept.add(k)
                    vals.append(x)
            if not vals:
                return None
            m.enum = vals
            m.enum_keys = kept
        return m

    def enum_type_ok(self, x, types):
        """Some instance jsonschema-equal to the enum value x has a type in types (an integral number can be an
        int or a float)."""
        if is_num(x) and (isinstance(x, int) or x.is_integer()):
            return bool(types & {"int", "frac"}) and (self.doc.draft <= 4 or "int" in types)
        return json_type(x, self.doc.draft) in types

    # --- one keyword of one schema object (d, at ptr; the keyword k at kp) into m ---
    def _type(self, m, d, ptr, kp, k, val):
        m.types &= self.readers.types_of(val, kp)

    def _types(self, m, d, ptr, kp, k, val):
        m.types &= val

    def _enum(self, m, d, ptr, kp, k, val):
        vals = val if k == "enum" else [val]
        if k == "enum" and not isinstance(val, list):
            refuse("enum", kp, "enum must be an array")
        if m.enum is None:
            m.enum = list(vals)
        else:
            keys = vkeys(vals)  # hashed: enums of thousands of values met each other pairwise
            m.enum = [x for x in m.enum if vkey(x) in keys]

    def _notvalues(self, m, d, ptr, kp, k, val):
        m.notvalues.extend(val)

    def _bound(self, m, d, ptr, kp, k, val):
        m.bounds.extend(self.readers.bounds_of(d, k, val, kp))

    def _multiple(self, m, d, ptr, kp, k, val):
        if "multipleOf" in self.lenient:
            return
        if not is_num(val) or val <= 0:
            refuse(k, kp, "multipleOf must be a positive number")
        if isinstance(val, float) and not val.is_integer():
            refuse(
                "multipleOf",
                kp,
                "a multipleOf that is not an integer (jsonschema divides floats: not a regular language)",
            )
        m.mult.append(int(val))

    def _notmult(self, m, d, ptr, kp, k, val):
        m.notmult.append(val)

    def _min_length(self, m, d, ptr, kp, k, val):
        m.string.min = max(m.string.min, self.readers.count(d, k, kp))

    def _max_length(self, m, d, ptr, kp, k, val):
        st = m.string
        n = self.readers.count(d, k, kp)
        st.max = n if st.max is None else min(st.max, n)

    def _pattern(self, m, d, ptr, kp, k, val):
        if "pattern" in self.lenient:
            return
        if not isinstance(val, str):
            refuse(k, kp, "pattern must be a string")
        self.readers.regex(val, "pattern", kp)
        m.string.patterns.append((val, kp))

    def _notpattern(self, m, d, ptr, kp, k, val):
        m.string.notpatterns.append((val, kp))

    def _format(self, m, d, ptr, kp, k, val):
        if isinstance(val, str) and val in CHECKED_FORMATS and "format" not in self.lenient:
            m.string.formats.append((val, kp))

    def _notformat(self, m, d, ptr, kp, k, val):
        m.string.notformats.append((val, kp))

    def _some(self, m, d, ptr, kp, k, val):
        if not any(same_json(x, val) for x, _ in m.some):  # the same constraint twice: once
            m.some.append((val, ptr))

    def _min_items(self, m, d, ptr, kp, k, val):
        m.min_items = max(m.min_items, self.readers.count(d, k, kp))

    def _max_items(self, m, d, ptr, kp, k, val):
        n = self.readers.count(d, k, kp)
        m.max_items = n if m.max_items is None else min(m.max_items, n)

    def _min_props(self, m, d, ptr, kp, k, val):
        m.min_props = max(m.min_props, self.readers.count(d, k, kp))

    def _max_props(self, m, d, ptr, kp, k, val):
        n = self.readers.count(d, k, kp)
        m.max_props = n if m.max_props is None else min(m.max_props, n)

    def _unique(self, m, d, ptr, kp, k, val):
        if val is True and "uniqueItems" not in self.lenient:
            m.unique = kp

    def _contains(self, m, d, ptr, kp, k, val):
        if "contains" in self.lenient:
            return
        check_schema(val, kp)
        lo, hi = 1, None
        if self.doc.draft >= 2019:
            if "minContains" in d:
                lo = self.readers.count(d, "minContains", ptr + "/minContains")
            if "maxContains" in d:
                hi = self.readers.count(d, "maxContains", ptr + "/maxContains")
        m.contains.append((val, lo, hi, kp))

    def _dependencies(self, m, d, ptr, kp, k, val):
        # the array form is read by deps_of; the schema form was expanded into the term (schema_deps)
        if not isinstance(val, dict):
            refuse(k, kp, "%s must be an object" % k)


_READ = {
    "type": Merger._type,
    "$strict-types": Merger._types,
    "enum": Merger._enum,
    "const": Merger._enum,
    "$strict-notvalues": Merger._notvalues,
    "minimum": Merger._bound,
    "maximum": Merger._bound,
    "exclusiveMinimum": Merger._bound,
    "exclusiveMaximum": Merger._bound,
    "$strict-bound": Merger._bound,
    "multipleOf": Merger._multiple,
    "$strict-notmult": Merger._notmult,
    "minLength": Merger._min_length,
    "maxLength": Merger._max_length,
    "pattern": Merger._pattern,
    "$strict-notpattern": Merger._notpattern,
    "format": Merger._format,
    "$strict-notformat": Merger._notformat,
    "$strict-some": Merger._some,
    "minItems": Merger._min_items,
    "maxItems": Merger._max_items,
    "minProperties": Merger._min_props,
    "maxProperties": Merger._max_props,
    "uniqueItems": Merger._unique,
    "contains": Merger._contains,
    "dependentSchemas": Merger._dependencies,
    "dependencies": Merger._dependencies,
}
# read where the object/array rules are built, or expanded into the term; any other keyword (of the draft's
# vocabulary, or a synthetic one) is refused
_READ_ELSEWHERE = frozenset(
    {
        "required",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "dependentRequired",
        "items",
        "prefixItems",
        "additionalItems",
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "$strict-not",
        "$strict-any",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
