# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The keys of an object beyond its listed ones: one rule of extra members, the keys split into regions by the
patternProperties regexes they match (each region's values satisfying its regexes' schemas, or
additionalProperties), the keys narrowed by propertyNames and, for a witness of a negated keyword, by its member
constraint.

Owns: ``extra_kv`` and the key constraints of propertyNames. The values' rules come from the compiler, the keys'
from the string emitter.
"""

from __future__ import annotations

from bankml.schema.strict.bounds import MAX_PATTERN_REGIONS
from bankml.schema.strict.document import escape
from bankml.schema.strict.merge import StringConstraint
from bankml.schema.strict.vocabulary import check_schema, refuse


class Keys:
    """The extra members of one conversion's objects."""

    def __init__(self, doc, rules):
        self.doc = doc
        self.rules = rules

    def link(self, c):
        """The parts it calls: the compiler (a value's rule), the expansion, the merge, the strings."""
        self.c = c
        self.terms = c.terms
        self.merger = c.merger
        self.strings = c.strings

    def extra_kv(self, term, names, pnames, ptr, somes=()):
        """The GBNF of one extra member (key, colon, value, trailing space), or None when no extra key may
        come. Keys are split into regions by which patternProperties regexes they match. somes (member
        constraints of $strict-some): only the extra members that each names (a witness rule)."""
        pats = self._patterns(term)
        # the key constraints of propertyNames
        keyc = StringConstraint()
        keyc.exclude = set(names)
        for pn in pnames:
            keyc = self.names_constraint(pn, keyc, ptr)
            if keyc is None:
                return None
        alts = []
        for mask in range(1 << len(pats)):
            matched = [pats[i] for i in range(len(pats)) if mask >> i & 1]
            conj = [sub for _, sub, _, _ in matched] + [x["value"] for x in somes]
            for d in term:
                v = self.doc.vocab_of(d)
                if (
                    "additionalProperties" in d
                    and "additionalProperties" in v
                    and not any(md is d for _, _, md, _ in matched)
                ):
                    check_schema(d["additionalProperties"], self.doc.p(d) + "/additionalProperties")
                    conj.append(d["additionalProperties"])
            val = self.c.rule(conj, ptr + "/additionalProperties")
            if val is None:
                continue
            kc = self._region_keys(keyc, pats, mask, somes)
            if kc is None:
                continue
            key = self.strings.string_expr(
                kc, pats[0][3] if pats else ptr, keyword="patternProperties" if pats else "additionalProperties"
            )
            if key is None:
                continue
            alts.append(key + ' space ":" space ' + val + " space")
        if not alts:
            return None
        return self.rules.add_rule("extra", " | ".join(alts))

    def _patterns(self, term):
        """[(regex, schema, its object, pointer)] of the term's patternProperties."""
        pats = []
        for d in term:
            v = self.doc.vocab_of(d)
            pp = d.get("patternProperties") if "patternProperties" in v else None
            if pp is not None:
                if not isinstance(pp, dict):
                    refuse("patternProperties", self.doc.p(d) + "/patternProperties", "must be an object")
                for pat, sub in pp.items():
                    kp = self.doc.p(d) + "/patternProperties/" + escape(pat)
                    check_schema(sub, kp)
                    pats.append((pat, sub, d, kp))
        if len(pats) > MAX_PATTERN_REGIONS:
            refuse(
                "patternProperties",
                pats[0][3],
                "more than %d patternProperties regexes on one object" % MAX_PATTERN_REGIONS,
            )
        return pats

    def _region_keys(self, keyc, pats, mask, somes):
        """The keys of the region ``mask`` (the regexes it matches, as bits; none of the others), narrowed by the
        member constraints somes; None when none is left."""
        kc = keyc.copy()
        for i, (pat, _, _, kp) in enumerate(pats):
            (kc.patterns if mask >> i & 1 else kc.notpatterns).append((pat, kp))
        for some in somes:
            kc.exclude |= set(some["exclude"])
            kc.patterns += some["patterns"]
            kc.notpatterns += some["notpatterns"]
            if some["names"] is not None:
                kc = self.narrow_names(kc, some["names"])
                if kc is None:
                    return None
        return kc

    def names_constraint(self, pn, keyc, ptr):
        """keyc narrowed by the propertyNames schema pn (a string schema), or None when no key passes."""
        terms = self.terms.expand(pn)
        live = []
        for t in terms:
            m = self.merger.merge(t)
            if m is None or "string" not in m.types:
                continue
            live.append((t, m))
        if not live:
            return None
        if len(live) > 1:
            refuse("propertyNames", self.doc.p(pn), "propertyNames with alternatives")
        return self.narrow_names(keyc, live[0][0])

    def narrow_names(self, keyc, t):
        """keyc narrowed by the string constraints of the term t, or None when no string passes it."""
        m = self.merger.merge(t)
        if m is None or "string" not in m.types:
            return None
        st = m.string
        kc = keyc.copy()
        kc.min = max(kc.min, st.min)
        if st.max is not None:
            kc.max = st.max if kc.max is None else min(kc.max, st.max)
        kc.patterns += st.patterns
        kc.notpatterns += st.notpatterns
        kc.formats += st.formats
        kc.notformats += st.notformats
        kc.exclude |= {x for x in m.notvalues if isinstance(x, str)}
        if m.enum is not None:
            inc = {x for x in m.enum if isinstance(x, str)}
            kc.include = inc if kc.include is None else kc.include & inc
        return kc
