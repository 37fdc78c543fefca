# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""A schema as its disjunctive normal form: a list of terms, each a tuple of atomic schema objects (their
combinators, ``$ref``, ``if``/``then``/``else`` and schema dependencies expanded into the terms), the terms whose
keywords contradict dropped (``merge``). ``negation`` gives the DNF of "not s", ``oneof`` that of a oneOf.

Owns: ``expand``, the distribution of a conjunction over alternatives (``product``, ``union``), the builds in
progress (``once``: a cycle the instance does not descend through is refused, nesting is bounded). Must not import
the emitters.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.bounds import MAX_DEPTH, MAX_TERMS
from bankml.schema.strict.document import escape
from bankml.schema.strict.values import same_json
from bankml.schema.strict.vocabulary import UNEVALUATED, VOCAB, Refuse, check_schema, refuse


class Terms:
    """The expansion of one conversion's schemas (``expand``), cached by the schema object."""

    def __init__(self, doc, budget):
        self.doc = doc
        self.budget = budget
        self.expand_cache = {}  # id(schema object) -> its terms
        self.active = set()  # (build, id) of the expansions and negations in progress
        self.has_key_cache = {}  # key -> the synthetic schema of the objects holding it

    def link(self, c):
        """The parts it calls back: the negation, oneOf, the merge."""
        self.negation = c.negation
        self.oneof = c.oneof
        self.merger = c.merger
        self.unevaluated = c.unevaluated

    def expand(self, s):
        if s is True:
            return [()]
        if s is False:
            return []
        check_schema(s, "#")
        return self.once(
            self.expand_cache,
            id(s),
            self._expand,
            s,
            "$ref",
            "a reference cycle that does not descend into the instance",
        )

    def once(self, cache, key, build, s, keyword, cycle):
        """``build(s)`` computed once per ``key`` (cached in ``cache``); a call of it for the same ``key`` from
        within itself is a cycle the instance does not descend through: refused naming ``keyword``."""
        if key in cache:
            return cache[key]
        mark = (build.__name__, key)
        if mark in self.active:
            refuse(keyword, self.doc.p(s), cycle)
        if len(self.active) >= MAX_DEPTH:
            # builds nest as $ref chains, allOf and not do: bounded as nesting is (each level costs more work
            # the deeper it is, so a 3,000-level chain took 22 s before compiled code reached its stack's end)
            raise Refuse(
                "SchemaLimits.max_depth",
                self.doc.p(s),
                "the schema's references nest deeper than %d levels" % MAX_DEPTH,
            )
        self.active.add(mark)
        try:
            res = build(s)
        finally:
            self.active.discard(mark)
        cache[key] = res
        return res

    def _expand(self, s):
        _check_stack()
        ptr = self.doc.p(s)
        self.budget.tick(ptr)
        synthetic = self.doc.synthetic(s)
        if "$strict-not" in s:
            return self.negation.negate(s["$strict-not"])
        if "$strict-any" in s:
            return self.union([self.expand(x) for x in s["$strict-any"]])
        if not synthetic:
            if any(k in s and k in self.doc.vocab for k in UNEVALUATED):
                return self.unevaluated.terms_of(s)
        if "$ref" in s and not synthetic:
            target = self.doc.resolve(s["$ref"], s)
            if self.doc.draft <= 7:
                return self.expand(target)  # draft 4-7: keywords beside $ref are ignored
            parts = [[(s,)], self.expand(target)]
        else:
            parts = [[(s,)]]
        v = self.doc.vocab if not synthetic else VOCAB[2020]
        if "$dynamicRef" in s and "$dynamicRef" in v and not synthetic:
            parts.append(self.expand(self.doc.resolve_dynamic(s)))
        if "$recursiveRef" in s and "$recursiveRef" in v and not synthetic:
            parts.append(self.expand(self.doc.resolve_recursive(s)))
        if "allOf" in s and "allOf" in v:
            subs = self.sublist(s, "allOf")
            for x in subs:
                parts.append(self.expand(x))
        if "anyOf" in s and "anyOf" in v:
            parts.append(self.union([self.expand(x) for x in self.sublist(s, "anyOf")]))
        if "oneOf" in s and "oneOf" in v:
            parts.append(self.oneof.one_of(s))
        if "not" in s and "not" in v:
            check_schema(s["not"], ptr + "/not")
            parts.append(self.negation.negate(s["not"]))
        if "if" in s and "if" in v and ("then" in s or "else" in s):  # if alone validates nothing
            check_schema(s["if"], ptr + "/if")
            then = s.get("then", True)
            els = s.get("else", True)
            check_schema(then, ptr + "/then")
            check_schema(els, ptr + "/else")
            parts.append(
                self.union(
                    [
                        self.product([self.expand(s["if"]), self.expand(then)], ptr),
                        self.product([self.negation.negate(s["if"]), self.expand(els)], ptr),
                    ]
                )
            )
        for k, a, x, kp in self.schema_deps(s, v):
            # a schema dependency: an object holding the key a satisfies x too; the instances split into those
            # (the key present, x) and the rest (not an object, or an object without a), as jsonschema reads it
            has = self.has_key(a, kp)
            parts.append(self.union([self.product([[(has,)], self.expand(x)], kp), self.negation.negate(has)]))
        return self.product(parts, ptr)

    def schema_deps(self, s, v):
        """(keyword, key, schema, pointer) of each schema dependency of s (``dependentSchemas``, and the schema form
        of draft 4-7's ``dependencies``; its array form is ``deps_of``'s); one that constrains nothing is left out."""
        out = []
        for k in ("dependentSchemas", "dependencies"):
            val = s.get(k)
            if val is None or k not in v:
                continue
            if not isinstance(val, dict):
                refuse(k, self.doc.p(s) + "/" + k, "%s must be an object" % k)
            for a, x in val.items():
                kp = self.doc.p(s) + "/" + k + "/" + escape(a)
                if isinstance(x, list):
                    if k == "dependentSchemas":
                        refuse(k, kp, "a dependentSchemas value must be a schema")
                    continue
                check_schema(x, kp)
                if x is True or x == {}:
                    continue
                out.append((k, a, x, kp))
        return out

    def has_key(self, a, pointer):
        """The synthetic schema of the objects that hold the key a."""
        cache = self.has_key_cache
        if a not in cache:
            cache[a] = self.doc.synth({"$strict-types": frozenset({"object"}), "required": [a]}, pointer)
        return cache[a]

    def sublist(self, s, k):
        subs = s[k]
        if not isinstance(subs, list) or not subs:
            refuse(k, self.doc.p(s) + "/" + k, "%s must be a non-empty array of schemas" % k)
        for i, x in enumerate(subs):
            check_schema(x, "%s/%s/%d" % (self.doc.p(s), k, i))
        return subs

    def union(self, lists):
        out = []
        seen = set()
        for terms in lists:
            for t in terms:
                key = frozenset(map(id, t))
                if key not in seen:
                    seen.add(key)
                    out.append(t)
        if len(out) > MAX_TERMS:
            refuse("anyOf", "#", "the schema distributes into more than %d alternatives" % MAX_TERMS)
        return out

    def product(self, parts, ptr):
        terms = [()]
        for part in parts:
            nt = []
            seen = set()
            for a in terms:
                for b in part:
                    t = self.join(a, b)
                    key = frozenset(map(id, t))
                    if key not in seen:
                        seen.add(key)
                        nt.append(t)
            terms = nt
            if len(terms) > MAX_TERMS:
                refuse("anyOf", ptr, "allOf/anyOf/oneOf/if distribute into more than %d alternatives" % MAX_TERMS)
        # drop terms whose keywords contradict (no instance), so they do not multiply further up
        return [t for t in terms if self.merger.merge(t) is not None]

    def join(self, a, b):
        """The term of both terms a and b."""
        # a dict equal to one the term holds adds nothing; Python's == finds {"enum": [0]} equal to
        # {"enum": [false]}, so equal ones are compared again with JSON's types (same)
        out = [x for x in b if x not in a or not self._holds(a, x)]
        return a + tuple(out) if out else a

    def _holds(self, a, x):
        """Whether the term a holds a dict equal to x as JSON (join's test, a loop: a generator per call cost more than
        the test)."""
        for y in a:
            if y == x and self.same(x, y):
                return True
        return False

    def same(self, x, y):
        """Two schema dicts equal as JSON (a boolean is no number) and read with the same vocabulary."""
        return (self.doc.synthetic(x)) == (self.doc.synthetic(y)) and same_json(x, y)
