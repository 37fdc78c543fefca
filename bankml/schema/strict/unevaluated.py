# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""``unevaluatedProperties`` and ``unevaluatedItems`` (2019-09, 2020-12): the annotations a schema's in-place
applicators leave, followed through the disjunctive normal form.

A schema s holding one of them is expanded as ``flow(s)``: its terms, each with the annotations (``Ann``) the
instance has collected when it satisfies that term (the properties and patternProperties names, ``all`` keys
after additionalProperties or an inner unevaluatedProperties; the prefix length, ``all`` items after items, the
``contains`` schemas of 2020-12). Within one term they are static, so the keyword becomes, for that term, a
synthetic schema: ``{"properties": {evaluated names: true}, "patternProperties": {...: true},
"additionalProperties": U}`` (every other key satisfies U), or ``{"prefixItems": [true] * n, "items": U or a
contains schema}``.

An instance satisfies more subschemas than a term names (an ``anyOf``'s other branches), and collects their
annotations too. More annotations only weaken the keyword, so a term's annotations, those of subschemas that the
instance is known to satisfy, give a language inside the schema's; ``anyOf`` is taken as every set of branches
(the union of each set's terms and annotations) so that the instance's whole set is among them. Annotations under
``not`` and of a failed ``if`` are dropped: their terms carry none. ``oneOf`` holds exactly one branch.
Where this is not known (the negation of these keywords, the schema form of ``dependencies``, a ``$dynamicRef``
or ``$recursiveRef`` whose target depends on the path, ``document.resolve_dynamic``), the schema is refused.

Owns: ``Unevaluated`` (``terms_of``, ``flow``, cached by the schema object). Must not import the emitters.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.bounds import MAX_TERMS
from bankml.schema.strict.vocabulary import UNEVALUATED, check_schema, refuse

MAX_ANY_BRANCHES = 8  # anyOf branches taken as every set of them inside an unevaluated* keyword's scope


class Ann:
    """The annotations of one term: ``names`` and ``patterns`` (frozensets) or ``props_all``; ``prefix`` (the
    items evaluated by position), ``contains`` (the contains schemas, whose matching items are evaluated) or
    ``items_all``."""

    __slots__ = ("props_all", "names", "patterns", "items_all", "prefix", "contains")

    def __init__(self, props_all=False, names=frozenset(), patterns=frozenset(), items_all=False, prefix=0,
                 contains=()):  # fmt: skip
        self.props_all, self.names, self.patterns = props_all, names, patterns
        self.items_all, self.prefix, self.contains = items_all, prefix, contains
        if props_all:
            self.names, self.patterns = frozenset(), frozenset()
        if items_all:
            self.prefix, self.contains = 0, ()

    def key(self):
        return (
            self.props_all,
            self.names,
            self.patterns,
            self.items_all,
            self.prefix,
            frozenset(map(id, self.contains)),
        )

    def union(self, o):
        contains = self.contains + tuple(c for c in o.contains if not any(c is x for x in self.contains))
        return Ann(
            self.props_all or o.props_all,
            self.names | o.names,
            self.patterns | o.patterns,
            self.items_all or o.items_all,
            max(self.prefix, o.prefix),
            contains,
        )

    def covers(self, o):
        """Every annotation of o is one of self's."""
        props = self.props_all or (not o.props_all and o.names <= self.names and o.patterns <= self.patterns)
        ids = set(map(id, self.contains))
        items = self.items_all or (
            not o.items_all and o.prefix <= self.prefix and all(id(c) in ids for c in o.contains)
        )
        return props and items


NONE = Ann()


class Unevaluated:
    """The annotation flow of one conversion's schemas."""

    def __init__(self, doc, budget):
        self.doc = doc
        self.budget = budget
        self.flow_cache = {}  # id(schema object) -> [(term, Ann)]

    def link(self, c):
        """The parts it calls: the expansion, the negation, oneOf, the merge."""
        self.terms = c.terms
        self.negation = c.negation
        self.oneof = c.oneof
        self.merger = c.merger

    def terms_of(self, s):
        """The terms of s, a schema object holding unevaluatedProperties or unevaluatedItems."""
        return [t for t, _ in self.flow(s)]

    def flow(self, s):
        """``[(term, Ann)]``: s's disjunctive normal form, each term with the annotations it leaves."""
        if s is True:
            return [((), NONE)]
        if s is False:
            return []
        check_schema(s, "#")
        return self.terms.once(
            self.flow_cache, id(s), self._flow, s, "$ref", "a reference cycle that does not descend into the instance"
        )

    def _flow(self, s):
        _check_stack()
        ptr = self.doc.p(s)
        self.budget.tick(ptr)
        if self.doc.synthetic(s):
            # the algebra's own schemas (a negation, a key's presence) annotate nothing
            return [(t, NONE) for t in self.terms.expand(s)]
        v = self.doc.vocab
        parts = [[((s,), self.own(s, v))]]
        if "$ref" in s:
            parts.append(self.flow(self.doc.resolve(s["$ref"], s)))
        if "$dynamicRef" in s and "$dynamicRef" in v:
            parts.append(self.flow(self.doc.resolve_dynamic(s)))
        if "$recursiveRef" in s and "$recursiveRef" in v:
            parts.append(self.flow(self.doc.resolve_recursive(s)))
        if "allOf" in s and "allOf" in v:
            parts.extend(self.flow(x) for x in self.terms.sublist(s, "allOf"))
        if "anyOf" in s and "anyOf" in v:
            parts.append(self.any_of(s))
        if "oneOf" in s and "oneOf" in v:
            parts.append(self.one_of(s))
        if "not" in s and "not" in v:
            check_schema(s["not"], ptr + "/not")
            parts.append(self.bare(self.negation.negate(s["not"])))
        if "if" in s and "if" in v:
            parts.append(self.if_then_else(s, ptr))
        if isinstance(s.get("dependencies"), dict) and "dependencies" in v:
            if any(not isinstance(x, list) for x in s["dependencies"].values()):
                refuse(
                    "dependencies",
                    ptr + "/dependencies",
                    "the schema form of dependencies beside unevaluated keywords (its annotations are not specified)",
                )
        if "dependentSchemas" in s and "dependentSchemas" in v:
            for _, a, x, kp in self.terms.schema_deps(s, v):
                has = self.terms.has_key(a, kp)
                present = self.product([[((has,), NONE)], self.flow(x)], kp)
                parts.append(self.union([present, self.bare(self.negation.negate(has))], kp))
        out = self.product(parts, ptr)
        if any(k in s and k in v for k in UNEVALUATED):
            out = self.check(s, out, ptr, v)
        return out

    def own(self, s, v):
        """The annotations of s's own keywords (when s holds)."""
        props_all = "additionalProperties" in s and "additionalProperties" in v
        names = frozenset(s["properties"]) if isinstance(s.get("properties"), dict) and "properties" in v else ()
        pats = s.get("patternProperties") if "patternProperties" in v else None
        patterns = frozenset(pats) if isinstance(pats, dict) else frozenset()
        items = s.get("items") if "items" in v else None
        items_all = items is not None and not isinstance(items, list)
        prefix = 0
        if isinstance(items, list):
            prefix = len(items)
            items_all = "additionalItems" in s and "additionalItems" in v
        if isinstance(s.get("prefixItems"), list) and "prefixItems" in v:
            prefix = len(s["prefixItems"])
        # contains annotates the items it matches from 2020-12 on (2019-09's unevaluatedItems ignores it)
        contains = (s["contains"],) if "contains" in s and self.doc.draft >= 2020 else ()
        return Ann(props_all, frozenset(names), patterns, items_all, prefix, contains)

    def check(self, s, out, ptr, v):
        """out, each term with s's unevaluated keywords as the synthetic schema its annotations make of them;
        then every key and item annotated (s holds)."""
        res = []
        for t, ann in out:
            extra = ()
            up = s.get("unevaluatedProperties") if "unevaluatedProperties" in v else None
            if up is not None:
                kp = ptr + "/unevaluatedProperties"
                check_schema(up, kp)
                if up is not True and not ann.props_all:
                    d = {"additionalProperties": up}
                    if ann.names:
                        d["properties"] = {n: True for n in sorted(ann.names)}
                    if ann.patterns:
                        d["patternProperties"] = {p: True for p in sorted(ann.patterns)}
                    extra += (self.doc.synth(d, kp),)
            ui = s.get("unevaluatedItems") if "unevaluatedItems" in v else None
            if ui is not None:
                kp = ptr + "/unevaluatedItems"
                check_schema(ui, kp)
                if ui is not True and not ann.items_all:
                    rest = ui
                    if ann.contains:
                        rest = self.doc.synth({"$strict-any": list(ann.contains) + [ui]}, kp)
                    d = {"items": rest}
                    if ann.prefix:
                        d["prefixItems"] = [True] * ann.prefix
                    extra += (self.doc.synth(d, kp),)
            res.append((t + extra, ann.union(Ann(up is not None, items_all=ui is not None))))
        return self.product([res], ptr)

    def bare(self, terms):
        """Terms that annotate nothing (a negation's)."""
        return [(t, NONE) for t in terms]

    def if_then_else(self, s, ptr):
        check_schema(s["if"], ptr + "/if")
        then = s.get("then", True)
        els = s.get("else", True)
        check_schema(then, ptr + "/then")
        check_schema(els, ptr + "/else")
        passed = self.product([self.flow(s["if"]), self.flow(then)], ptr)
        if "then" not in s and "else" not in s:
            # if alone validates nothing, and a failed if annotates nothing: every instance with no annotation
            # (fewer than a passing if's), no negation needed
            return self.union([passed, [((), NONE)]], ptr)
        failed = self.product([self.bare(self.negation.negate(s["if"])), self.flow(els)], ptr)
        return self.union([passed, failed], ptr)

    def one_of(self, s):
        ptr = self.doc.p(s) + "/oneOf"
        alts = []
        for x, _, negs in self.oneof.branches(s):
            alts.append(self.product([self.flow(x)] + [self.bare(n) for n in negs], ptr))
        return self.union(alts, ptr)

    def any_of(self, s):
        """Every nonempty set of the branches: its terms joined, their annotations together. A set whose
        annotations are no more than one of its members' adds no instance, and is left out."""
        ptr = self.doc.p(s) + "/anyOf"
        subs = self.terms.sublist(s, "anyOf")
        if len(subs) > MAX_ANY_BRANCHES:
            refuse(
                "anyOf",
                ptr,
                "an anyOf of more than %d branches inside unevaluatedProperties/unevaluatedItems" % MAX_ANY_BRANCHES,
            )
        acc = []
        for x in subs:
            branch = self.flow(x)
            joined = []
            for a, aa in acc:
                for b, ba in branch:
                    ann = aa.union(ba)
                    if not aa.covers(ann) and not ba.covers(ann):
                        joined.append((self.terms.join(a, b), ann))
            acc = self.union([acc, branch, self.product([joined], ptr)], ptr)
        return acc

    def union(self, lists, ptr):
        out = []
        seen = set()
        for pairs in lists:
            for t, ann in pairs:
                key = (frozenset(map(id, t)), ann.key())
                if key not in seen:
                    seen.add(key)
                    out.append((t, ann))
        if len(out) > MAX_TERMS:
            refuse("anyOf", ptr, "the schema distributes into more than %d alternatives" % MAX_TERMS)
        return out

    def product(self, parts, ptr):
        pairs = [((), NONE)]
        for part in parts:
            nt = []
            seen = set()
            for a, aa in pairs:
                for b, ba in part:
                    t = self.terms.join(a, b)
                    ann = aa.union(ba)
                    key = (frozenset(map(id, t)), ann.key())
                    if key not in seen:
                        seen.add(key)
                        nt.append((t, ann))
            pairs = nt
            if len(pairs) > MAX_TERMS:
                refuse("anyOf", ptr, "allOf/anyOf/oneOf/if distribute into more than %d alternatives" % MAX_TERMS)
        return [(t, ann) for t, ann in pairs if self.merger.merge(t) is not None]
