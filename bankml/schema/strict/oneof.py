# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""``oneOf``: exactly one branch. Branches that are provably disjoint (beside the schema's own type) make it an
``anyOf``; otherwise each branch is taken with the negation of every branch it may overlap. ``disjoint`` is a
sound, incomplete test: no shared type, enums the other term refuses, required keys whose values cannot meet,
number ranges apart.

Owns: ``one_of`` and ``disjoint``. Must not import the emitters.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.values import spellings
from bankml.schema.strict.vocabulary import Refuse


class OneOf:
    """The oneOf of one conversion's schemas."""

    def __init__(self, doc):
        self.doc = doc

    def link(self, c):
        """The parts it calls: the expansion, the negation, the merge, the readers, the validator."""
        self.terms = c.terms
        self.negation = c.negation
        self.merger = c.merger
        self.readers = c.readers
        self.validator = c.validator

    def one_of(self, s):
        ptr = self.doc.p(s) + "/oneOf"
        plan = self.branches(s)
        if not any(negs for _, _, negs in plan):
            return self.terms.union([b for _, b, _ in plan])  # provably disjoint: oneOf is anyOf
        return self.terms.union([self.terms.product([b] + negs, ptr) for _, b, negs in plan])

    def branches(self, s):
        """``[(branch, its terms, [the terms of the negation of each branch it may overlap])]`` of s's oneOf, its
        branches that some instance satisfies: exactly one branch holds where each is taken with those negations
        (none where the branches are provably disjoint)."""
        ptr = self.doc.p(s) + "/oneOf"
        subs = self.terms.sublist(s, "oneOf")
        expanded = [(x, self.terms.expand(x)) for x in subs]
        live = [(x, b) for x, b in expanded if b]
        # the branches are met only beside s's own type (s's term is in every product oneOf's terms join): two
        # branches that overlap only where it fails (a number, under "type": "object") are disjoint here. Only
        # the type: s's other keywords may lead back to s through $ref while s is being expanded
        v = self.doc.vocab_of(s)
        within = [b for _, b in live]
        if "type" in s and "type" in v:
            ctx = self.doc.synth(
                {"$strict-types": self.readers.types_of(s["type"], self.doc.p(s) + "/type")}, self.doc.p(s)
            )
            within = [[(ctx,) + t for t in b] for b in within]
        overlap = {i: [] for i in range(len(live))}
        for i in range(len(live)):
            for j in range(i + 1, len(live)):
                if not all(self.disjoint(t1, t2, 0) for t1 in within[i] for t2 in within[j]):
                    overlap[i].append(j)
                    overlap[j].append(i)
        # exactly one: branch i and the negation of every branch it may overlap
        out = []
        for i, (x, terms) in enumerate(live):
            try:
                negs = [self.negation.negate(live[j][0]) for j in overlap[i]]
            except Refuse as e:
                raise Refuse(
                    "oneOf",
                    ptr,
                    "oneOf branches that are not provably disjoint, one of which strict "
                    "mode cannot negate (%s: %s)" % (e.keyword, e.reason),
                ) from None
            out.append((x, terms, negs))
        return out

    def disjoint(self, t1, t2, depth):
        _check_stack()
        m1, m2 = self.merger.merge(t1), self.merger.merge(t2)
        if m1 is None or m2 is None:
            return True
        common = m1.types & m2.types
        if not common:
            return True
        for m, t, other in ((m1, t1, t2), (m2, t2, t1)):
            if m.enum is not None:
                vals = [y for x in m.enum for y in spellings(x) if self.validator.valid_term(y, t)]
                if not any(self.validator.valid_term(x, other) for x in vals):
                    return True
        if common == {"object"} and depth < 4:
            # sorted: the keys' order decides which check (and which refusal inside it) comes first, and a
            # set of strings iterates in the order of the process's string hashes (PYTHONHASHSEED)
            r1, r2 = sorted(self.readers.required_of(t1)), sorted(self.readers.required_of(t2))
            for k in sorted(set(r1) & set(r2)):
                c1, c2 = self.readers.value_conj(t1, k), self.readers.value_conj(t2, k)
                e1 = self.terms.product([self.terms.expand(x) for x in c1], "#")
                e2 = self.terms.product([self.terms.expand(x) for x in c2], "#")
                if all(self.disjoint(a, b, depth + 1) for a in e1 for b in e2):
                    return True
            for k in r1:
                if not self.terms.product([self.terms.expand(x) for x in self.readers.value_conj(t2, k)], "#"):
                    return True
            for k in r2:
                if not self.terms.product([self.terms.expand(x) for x in self.readers.value_conj(t1, k)], "#"):
                    return True
        if common <= {"int", "frac"}:
            lo1, hi1 = self.range_of(m1)
            lo2, hi2 = self.range_of(m2)
            if (hi1 is not None and lo2 is not None and self.below(hi1, lo2)) or (
                hi2 is not None and lo1 is not None and self.below(hi2, lo1)
            ):
                return True
        return False

    @staticmethod
    def below(hi, lo):
        """Every x <= hi is below every y >= lo (each a (value, exclusive) pair)."""
        return hi[0] < lo[0] or (hi[0] == lo[0] and (hi[1] or lo[1]))

    @staticmethod
    def range_of(m):
        lo = hi = None
        for lower, b, excl in m.bounds:
            if lower and (lo is None or b > lo[0] or (b == lo[0] and excl)):
                lo = (b, excl)
            if not lower and (hi is None or b < hi[0] or (b == hi[0] and excl)):
                hi = (b, excl)
        return lo, hi
