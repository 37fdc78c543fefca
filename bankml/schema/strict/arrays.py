# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The array emitter: the GBNF of the arrays a term's constraints leave: items by position (prefixItems/items,
then the rest), counts (minItems/maxItems), ``contains`` counted per schema (its items split by which contains
schemas they satisfy), ``uniqueItems`` over a small finite item language (one rule per set of values written).

Owns: ``array_expr``, ``array_unique``, ``array_contains``. The items' rules come from the compiler (``rule``).
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.bounds import MAX_CONTAINS, MAX_STATES, MAX_UNIQUE_VALUES
from bankml.schema.strict.gbnf import NEVER
from bankml.schema.strict.values import is_num, json_type, spellings, vkey
from bankml.schema.strict.vocabulary import refuse


class Arrays:
    """The array rules of one conversion."""

    def __init__(self, doc, rules):
        self.doc = doc
        self.rules = rules

    def link(self, c):
        """The parts it calls: the compiler (an item's rule), the readers, the expansion and merge, the
        validator, the const and number emitters."""
        self.c = c
        self.readers = c.readers
        self.terms = c.terms
        self.merger = c.merger
        self.validator = c.validator
        self.consts = c.consts
        self.numbers = c.numbers

    def array_expr(self, m, term, ptr):
        if m.unique is not None:
            if m.max_items is None or m.max_items > 1:
                return self.array_unique(m, term, ptr)
        if len(m.contains) > MAX_CONTAINS:
            refuse("contains", m.contains[-1][3], "more than %d contains on one array" % MAX_CONTAINS)
        lo, hi = m.min_items, m.max_items
        plen = 0
        for d in term:
            plen = max(plen, len(self.readers.items_of(d)[0]))
        pos = [self.c.rule(self.readers.item_conj(term, i), ptr + "/items/%d" % i) for i in range(plen)]
        rest_conj = self.readers.item_conj(term, plen)
        rest = self.c.rule(rest_conj, ptr + "/items")
        # an impossible item ends the array before it
        for i, r in enumerate(pos):
            if r is None:
                hi = i if hi is None else min(hi, i)
                break
        else:
            if rest is None:
                hi = plen if hi is None else min(hi, plen)
        if hi is not None and lo > hi:
            return None
        if m.contains:
            return self.array_contains(m, term, pos, rest, rest_conj, lo, hi, ptr)
        memo = {}

        def seq(i, first):
            # the items from position i on ("," before each but the first), then "]"
            _check_stack()
            key = (i, first)
            if key in memo:
                return memo[key]
            sep = "" if first else '"," space '
            if i >= plen:
                # the rest: a repetition of the rest item
                a = max(0, lo - i)
                b = None if hi is None else hi - i
                if b == 0:
                    out = '"]"'
                elif first:
                    more = self.rules.rep('"," space ' + rest + " space", max(a - 1, 0), None if b is None else b - 1)
                    one = rest + " space" + (" " + more if more else "")
                    out = ("( " + one + " )? " if a == 0 else one + " ") + '"]"'
                else:
                    more = self.rules.rep('"," space ' + rest + " space", a, b)
                    out = (more + " " if more else "") + '"]"'
                memo[key] = out
                return out
            alts = []
            if i >= lo:
                alts.append('"]"')
            if hi is None or i < hi:
                alts.append(sep + pos[i] + " space " + seq(i + 1, False))
            body = " | ".join(alts)
            name = self.rules.add_rule("arr", body)
            memo[key] = name
            return name

        out = '"[" space ' + seq(0, True)
        # a recursive closure refers to itself: freed now, not by the collector
        seq = None  # noqa: F841
        return out

    def array_unique(self, m, term, ptr):
        """uniqueItems over a finite item language of at most MAX_UNIQUE_VALUES values (an enum, const,
        booleans and null): the items in any order, each value at most once, one rule per set of values
        written. Refused otherwise."""
        if m.contains or any(self.readers.items_of(d)[0] for d in term):
            refuse("uniqueItems", m.unique, "uniqueItems beside prefixItems or contains")
        values = {}  # value key -> the texts of its spellings
        for t in self.terms.product([self.terms.expand(x) for x in self.readers.item_conj(term, 0)], ptr + "/items"):
            mt = self.merger.merge(t)
            if mt is None:
                continue
            if mt.enum is not None:
                cands = mt.enum
            elif mt.types <= {"null", "boolean"}:
                cands = [x for x in (None, True, False) if json_type(x, self.doc.draft) in mt.types]
            else:
                refuse("uniqueItems", m.unique, "uniqueItems over items that are not a small finite set")
            for x in cands:
                key = vkey(x)
                if key is None or not any(self.validator.valid_term(y, t) for y in spellings(x)):
                    continue
                text = self.numbers.number_value(x, ptr, mt.types) if is_num(x) else self.consts.value_expr(x, ptr)
                if text is not None:
                    values.setdefault(key, []).append(text)
        if len(values) > MAX_UNIQUE_VALUES:
            refuse(
                "uniqueItems",
                m.unique,
                "uniqueItems over %d distinct item values (at most %d)" % (len(values), MAX_UNIQUE_VALUES),
            )
        items = [self.rules.add_rule("uitem", " | ".join(dict.fromkeys(texts))) for texts in values.values()]
        lo, hi = m.min_items, m.max_items
        memo = {}

        def state(mask):
            _check_stack()
            if mask in memo:
                return memo[mask]
            name = self.rules.new_name("uarr")
            memo[mask] = name
            count = mask.bit_count()
            alts = ['"]"'] if count >= lo else []
            if hi is None or count < hi:
                sep = "" if mask == 0 else '"," space '
                for i, item in enumerate(items):
                    if not mask >> i & 1:
                        alts.append(sep + item + " space " + state(mask | 1 << i))
            self.rules.set_rule(name, " | ".join(alts) if alts else NEVER)
            return name

        out = '"[" space ' + state(0)
        # a recursive closure refers to itself: freed now, not by the collector
        state = None  # noqa: F841
        return out

    def array_contains(self, m, term, pos, rest, rest_conj, lo, hi, ptr):
        """The array of item counts lo..hi whose items each contains schema counts within its bounds: per
        position, one rule per set of the contains schemas the item satisfies (and fails the others), the
        states counting items per contains schema (capped where its bounds stop telling counts apart)."""
        cs = m.contains
        plen = len(pos)
        negs = [self.doc.synth({"$strict-not": c}, cptr) for c, _, _, cptr in cs]
        cptr0 = cs[0][3]

        def split(i):
            """{set of contains schemas the item satisfies (bits): its rule} at position i."""
            _check_stack()
            conj = self.readers.item_conj(term, i)
            if i < plen and pos[i] is None:
                return {}
            out = {}
            for ws in reversed(range(1 << len(cs))):  # (one schema: its items first, then the others)
                parts = [cs[j][0] if ws >> j & 1 else negs[j] for j in range(len(cs))]
                r = self.c.rule(conj + parts, cptr0 if len(cs) == 1 else ptr + "/contains")
                if r is not None:
                    out[ws] = r
            return out

        icap = max(plen, lo, (hi + 1) if hi is not None else 0)
        caps = [max(cmin, (cmax + 1) if cmax is not None else 0) for _, cmin, cmax, _ in cs]
        states = icap + 1
        for cap in caps:
            states *= cap + 1
        if states > MAX_STATES:
            refuse("contains", cptr0, "contains with counts that need more than %d states" % MAX_STATES)
        splits = {}
        memo = {}

        def seq(i, ns, first):
            _check_stack()
            ns = tuple(min(n, cap) for n, cap in zip(ns, caps))
            key = (min(i, icap), ns, first)
            if key in memo:
                return memo[key]
            name = self.rules.new_name("arr")
            memo[key] = name
            alts = []
            if i >= lo and all(n >= cmin for n, (_, cmin, _, _) in zip(ns, cs)):
                alts.append('"]"')
            if hi is None or i < hi:
                j = min(i, plen)
                if j not in splits:
                    splits[j] = split(j)
                sep = "" if first else '"," space '
                # the item that satisfies every contains schema first, as the one-schema automaton had it
                for ws, r in sorted(splits[j].items(), reverse=True):
                    nxt = tuple(n + (ws >> k & 1) for k, n in enumerate(ns))
                    if all(cmax is None or n <= cmax for n, (_, _, cmax, _) in zip(nxt, cs)):
                        alts.append(sep + r + " space " + seq(i + 1, nxt, False))
            self.rules.set_rule(name, " | ".join(alts) if alts else NEVER)
            return name

        out = '"[" space ' + seq(0, (0,) * len(cs), True)
        # closures that refer to themselves: freed now, not by the collector
        seq = split = None  # noqa: F811, F841
        return out
