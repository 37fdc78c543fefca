# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The object emitter: the GBNF of the objects a term's constraints leave. The listed keys (properties, required,
dependencies) get one member rule each; other keys one rule of extra members (``keys.Keys.extra_kv``). The
members come in any order, each listed key once: one rule per set of keys written while the grammar's budget of
key sets lasts (``ANY_ORDER_BUDGET``); past it, with no count, one rule per set of required and dependency keys
written, the others free to come again; otherwise, lenient, in the schema's order (the package's docstring
says why each is exact). Negated object keywords (``$strict-some``) ask for a member that witnesses each.

Owns: ``object_expr``, the three forms, the grammar's key-set budget. The values' rules come from the compiler.
"""

from __future__ import annotations

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.bounds import (
    ANY_ORDER_BUDGET,
    EXACT_ORDER_BUDGET,
    MAX_ANY_ORDER,
    MAX_REQUIRED_ANY_ORDER,
    MAX_STATES,
    MAX_WITNESSES,
)
from bankml.schema.strict.document import escape
from bankml.schema.strict.gbnf import NEVER
from bankml.schema.strict.vocabulary import refuse


class Objects:
    """The object rules of one conversion, and its budget of any-order key sets."""

    def __init__(self, doc, rules, lenient, canonical=False):
        self.doc = doc
        self.rules = rules
        self.lenient = lenient
        self.canonical = canonical  # the listed keys in the schema's order (``_SchemaOrder``), no key-order sets
        self.any_order_states = 0
        self.exact_order_states = 0  # key sets of objects taking the exact form where the repeating one would do

    def link(self, c):
        """The parts it calls: the compiler (a value's rule), the readers, the validator, the strings, the keys."""
        self.c = c
        self.readers = c.readers
        self.validator = c.validator
        self.strings = c.strings
        self.keys = c.keys

    def object_expr(self, m, term, ptr):
        names, required, deps = self._names(term)
        if len(m.some) > MAX_WITNESSES:
            refuse("not", m.some[-1][1], "more than %d negated object keywords met in one object" % MAX_WITNESSES)
        pnames = self.readers.prop_names(term)
        items = self._items(term, names, required, deps, pnames, ptr)
        if items is None:
            return None
        extra = self.keys.extra_kv(term, names, pnames, ptr)
        witness = None
        if m.some:
            witness = self._witness(m, term, items, names, pnames, ptr)
            if witness is None:
                return None  # a negated keyword no member can witness
        return self._form(m, items, required, deps, extra, witness, ptr)

    def _names(self, term):
        """(the listed keys in order: properties, then required, then dependencies; the required keys; the
        dependencies {key: the keys it needs})."""
        names = []
        seen = set()

        def listed(k):
            if isinstance(k, str) and k not in seen:
                seen.add(k)
                names.append(k)

        for d in term:
            v = self.doc.vocab_of(d)
            props = d.get("properties") if "properties" in v else None
            if props is not None and not isinstance(props, dict):
                refuse("properties", self.doc.p(d) + "/properties", "properties must be an object")
            for k in props or {}:
                listed(k)
        required = self.readers.required_of(term)
        deps = self.readers.deps_of(term)
        for d in term:
            r = d.get("required")
            if isinstance(r, list) and ("required" in self.doc.vocab or self.doc.synthetic(d)):
                for k in r:
                    if not isinstance(k, str):
                        refuse("required", self.doc.p(d) + "/required", "required must list strings")
                    listed(k)
        for a, bs in deps.items():
            listed(a)
            for b in bs:
                listed(b)
        return names, required, deps

    def _items(self, term, names, required, deps, pnames, ptr):
        """[(key, its value's rule)] of the listed keys that may come, or None when a required one cannot."""
        items = []
        for k in names:
            conj = self.readers.value_conj(term, k)
            ok = all(self.validator.valid(k, pn) for pn in pnames)
            r = self.c.rule(conj, ptr + "/properties/" + escape(k)) if ok else None
            if r is None:
                if k in required:
                    return None
                continue
            items.append((k, r))
        present = {k for k, _ in items}
        for a, bs in deps.items():
            if a in present and not set(bs) <= present:
                # a can only come with keys that cannot come: a cannot come
                items = [(k, r) for k, r in items if k != a]
                if a in required:
                    return None
        return items

    def _witness(self, m, term, items, names, pnames, ptr):
        """Negated object keywords: the object must hold, for each, a member it names (key_ok and its value), a
        listed one or an extra one. Per set S of them, the members that witness all of S get a rule of their own
        (the value satisfies S's schemas too): {S: (per listed member its rule or None, the extra members' rule
        or None)}; None when some keyword has no witness."""
        somes = [x for x, _ in m.some]
        witness = {}
        covered = 0
        for wset in range(1, 1 << len(somes)):
            chosen = [somes[j] for j in range(len(somes)) if wset >> j & 1]
            wit_kv = []
            for k, _ in items:
                wr = None
                if all(self.validator.key_ok(x, k) for x in chosen):
                    wr = self.c.rule(
                        self.readers.value_conj(term, k) + [x["value"] for x in chosen],
                        ptr + "/properties/" + escape(k),
                    )
                wit_kv.append(None if wr is None else self.member_rule(k, wr))
            wit_extra = self.keys.extra_kv(term, names, pnames, ptr, chosen)
            if wit_extra is not None or any(x is not None for x in wit_kv):
                witness[wset] = (wit_kv, wit_extra)
                covered |= wset
        if covered != (1 << len(somes)) - 1:
            return None
        return witness

    def _form(self, m, items, required, deps, extra, witness, ptr):
        """The object in any order, in any order with optional keys repeating, or in the schema's order."""
        minp, maxp = m.min_props, m.max_props
        n = len(items)
        # one rule per member: the automaton's states name it instead of repeating the key's spellings
        kv = [self.member_rule(k, r) for k, r in items]
        if self.canonical and witness is None:
            return self._schema_order(items, kv, required, deps, extra, minp, maxp, ptr)
        sets = 1 << (n + len(m.some))  # each negated keyword doubles the states: witnessed or not
        req = [i for i, (k, _) in enumerate(items) if k in required]
        # the keys whose presence the repeating form tracks: the required ones and those of a dependency
        tracked = _tracked(items, required, deps)
        # the repeating form (optional keys may come again) fits: no count tells keys apart
        repeats = (
            witness is None
            and not minp
            and maxp is None
            and len(tracked) <= MAX_REQUIRED_ANY_ORDER
            and (self.any_order_states + (1 << len(tracked)) <= ANY_ORDER_BUDGET)
        )
        if n <= MAX_ANY_ORDER and self.any_order_states + sets <= ANY_ORDER_BUDGET:
            # exact where the repeating form would not do, or would be as large (no optional key), and for the
            # first EXACT_ORDER_BUDGET key sets of the others: 2^n rules an object, the cost of big schemas
            if not repeats or len(tracked) == n or self.exact_order_states + sets <= EXACT_ORDER_BUDGET:
                if repeats and len(tracked) < n:
                    self.exact_order_states += sets
                self.any_order_states += sets
                return self.object_any_order(items, kv, required, deps, extra, minp, maxp, ptr, witness)
        if witness is not None:
            refuse(
                "not",
                m.some[0][1],
                "a negated object keyword beside %d listed keys (at most %d, and %d key sets per grammar)"
                % (n, MAX_ANY_ORDER, ANY_ORDER_BUDGET),
            )
        if repeats:
            self.any_order_states += 1 << len(tracked)
            return self.object_any_order_repeating(items, kv, tracked, required, deps, extra)
        if "properties" not in self.lenient and (n > 1 or extra is not None):
            # JSON objects are unordered: a grammar of one key order would reject valid texts
            refuse(
                "properties",
                ptr,
                "%d listed keys (%d required) cannot be taken in every order (at most %d listed keys, or %d required "
                "or dependency keys without minProperties or maxProperties, and %d key sets per grammar); "
                "lenient=['properties'] takes them in the schema's order"
                % (n, len(req), MAX_ANY_ORDER, MAX_REQUIRED_ANY_ORDER, ANY_ORDER_BUDGET),
            )
        return self._schema_order(items, kv, required, deps, extra, minp, maxp, ptr)

    def _schema_order(self, items, kv, required, deps, extra, minp, maxp, ptr):
        """The listed keys in the schema's order, each optional one skippable, then the extra keys."""
        body = _SchemaOrder(self, items, kv, required, deps, extra, minp, maxp, ptr).seq(
            0, 0, True, frozenset(), frozenset()
        )
        if body is None:
            return None
        return '"{" space ' + body

    def member_rule(self, k, value_rule):
        """The rule of one member: the key k in every spelling, the colon, a value of value_rule."""
        return self.rules.add_rule("kv", self.strings.str_literal(k) + ' space ":" space ' + value_rule + " space")

    def object_any_order(self, items, kv, required, deps, extra, minp, maxp, ptr, witness=None):
        """The members in any order, each listed key at most once, extra keys anywhere: one rule per set of
        listed keys written so far (and count of extra members, capped where min/maxProperties need it).
        witness: object_expr's witness rules by set of negated object keywords, when the object must hold a
        witness of each: the states then also tell which have one."""
        counted = bool(minp or maxp is not None)
        ecap = max(minp, (maxp + 1) if maxp is not None else 0) if counted else 1
        if not items and witness is None:
            tail = self.extras_tail(extra, 0, True, minp, maxp)
            return None if tail is None else '"{" space ' + tail
        if ecap > 256:
            refuse(
                "maxProperties" if maxp is not None and maxp >= 256 else "minProperties",
                ptr,
                "property counts past 256 beside listed properties",
            )
        walk = _AnyOrder(self.rules, items, kv, required, deps, extra, minp, maxp, witness or {}, counted, ecap)
        return '"{" space ' + walk.state(0, 0, 0)

    def object_any_order_repeating(self, items, kv, tracked, required, deps, extra):
        """Members in any order where the optional keys are too many for one rule per set of keys: one rule per
        set of tracked keys written (``tracked``: the indexes of the required keys and of those a dependency
        names, each at most once); another key may come again (json.loads keeps the last value, and every value
        must pass its schema, so no invalid object is accepted; the package's docstring). "}" comes where every
        required key is written and every written key's dependencies are."""
        n = len(items)
        pos = {i: b for b, i in enumerate(tracked)}
        optional = [kv[i] for i in range(n) if i not in pos] + ([extra] if extra is not None else [])
        opt = self.rules.add_rule("opt", " | ".join(optional)) if optional else None
        need = sum(1 << pos[i] for i, (k, _) in enumerate(items) if k in required)
        # (the key's bit, the bits it needs): _items left a key only where every key it needs is listed
        dep_masks = [
            (1 << pos[i], sum(1 << pos[j] for j, (b, _) in enumerate(items) if b in deps[k]))
            for i, (k, _) in enumerate(items)
            if deps.get(k)
        ]
        memo = {}

        def state(mask, first):
            _check_stack()
            key = (mask, first)
            if key in memo:
                return memo[key]
            name = self.rules.new_name("obj")
            memo[key] = name
            sep = "" if first else '"," space '
            closes = mask & need == need and all(mask & d == d for b, d in dep_masks if mask & b)
            alts = ['"}"'] if closes else []
            if opt is not None:
                alts.append(sep + opt + " " + state(mask, False))
            for b, i in enumerate(tracked):
                if not mask >> b & 1:
                    alts.append(sep + kv[i] + " " + state(mask | 1 << b, False))
            self.rules.set_rule(name, " | ".join(alts) if alts else NEVER)
            return name

        out = '"{" space ' + state(0, True)
        # a recursive closure refers to itself: freed now, not by the collector
        state = None  # noqa: F841
        return out

    def extras_tail(self, extra, c, first, minp, maxp):
        """The extra keys after the listed ones, then "}": c members so far."""
        a = max(0, minp - c)
        b = None if maxp is None else maxp - c
        if extra is None or b == 0:
            return '"}"' if a == 0 else None
        if first:
            if a == 0:
                more = self.rules.rep('"," space ' + extra, 0, None if b is None else b - 1, "maxProperties")
                return "( " + extra + (" " + more if more else "") + ' )? "}"'
            more = self.rules.rep('"," space ' + extra, a - 1, None if b is None else b - 1, "maxProperties")
            return extra + (" " + more if more else "") + ' "}"'
        more = self.rules.rep('"," space ' + extra, a, b, "maxProperties")
        return (more + " " if more else "") + '"}"'


class _AnyOrder:
    """object_any_order's states: (the listed keys written, as bits; the extra members counted, capped; the
    negated keywords witnessed, as bits), one rule each."""

    def __init__(self, rules, items, kv, required, deps, extra, minp, maxp, witness, counted, ecap):
        self.rules, self.extra, self.minp, self.maxp = rules, extra, minp, maxp
        self.witness, self.counted, self.ecap = witness, counted, ecap
        self.n = n = len(items)
        keys = [k for k, _ in items]
        self.full = 0  # every keyword witnessed (object_expr built a witness set for each)
        for ws in witness:
            self.full |= ws
        self.memo = {}
        # the keys as bits of the mask: which must be written before "}" (required, and what a written key's
        # dependentRequired names); a key named there that is not listed can never be written, so no "}"
        bit = {k: 1 << i for i, k in enumerate(keys)}  # the listed keys are distinct (object_expr's names)
        self.closable = all(k in bit for k in required)
        self.need = sum(bit[k] for k in required if k in bit)
        self.dep_masks = []  # (the key's bit, the bits it needs, or -1 when it needs a key that is not listed)
        for k in keys:
            ds = set(deps.get(k, ()))
            if ds:
                self.dep_masks.append((bit[k], sum(bit[d] for d in ds) if ds <= bit.keys() else -1))
        self.opening = [kv[i] + " " for i in range(n)]
        self.following = ['"," space ' + kv[i] + " " for i in range(n)]

    def closes(self, mask, count, w):
        """Whether "}" may come in the state (mask, count, w)."""
        return (
            self.closable
            and mask & self.need == self.need
            and all(d != -1 and mask & d == d for b, d in self.dep_masks if mask & b)
            and (not self.counted or count >= self.minp)
            and w == self.full
        )

    def state(self, mask, e, w):
        _check_stack()
        if not self.counted and mask:
            e = 0  # uncounted, e only tells whether something was written: mask says so already
        key = (mask, e, w)
        if key in self.memo:
            return self.memo[key]
        name = self.rules.new_name("obj")
        self.memo[key] = name
        first = mask == 0 and e == 0
        count = mask.bit_count() + e
        alts = []
        if self.closes(mask, count, w):
            alts.append('"}"')
        if self.maxp is None or count < self.maxp:
            pre = self.opening if first else self.following
            sep = "" if first else '"," space '
            # a member witnessing keywords already witnessed adds nothing: only sets of the others
            wsets = [(ws, r) for ws, r in self.witness.items() if not ws & w]
            for i in range(self.n):
                if not mask >> i & 1:
                    alts.append(pre[i] + self.state(mask | 1 << i, e, w))
                    for ws, (wit_kv, _) in wsets:
                        if wit_kv[i] is not None:
                            alts.append(sep + wit_kv[i] + " " + self.state(mask | 1 << i, e, w | ws))
            if self.extra is not None:
                alts.append(sep + self.extra + " " + self.state(mask, min(e + 1, self.ecap), w))
            for ws, (_, wit_extra) in wsets:
                if wit_extra is not None:
                    alts.append(sep + wit_extra + " " + self.state(mask, min(e + 1, self.ecap), w | ws))
        self.rules.set_rule(name, " | ".join(alts) if alts else NEVER)
        return name


class _SchemaOrder:
    """The listed keys in the schema's order (lenient ``properties``), each optional one skippable, then the
    extra keys: a state is (next listed key, members counted, first, keys remembered for dependencies, keys a
    dependency still obliges)."""

    def __init__(self, objects, items, kv, required, deps, extra, minp, maxp, ptr):
        self.objects, self.rules = objects, objects.rules
        self.items, self.kv, self.required, self.deps, self.extra = items, kv, required, deps, extra
        self.minp, self.maxp, self.ptr = minp, maxp, ptr
        self.counted = bool(minp or maxp is not None)
        self.cap = max(minp, (maxp + 1) if maxp is not None else 0) if self.counted else 0
        self.n = len(items)
        # which keys must be remembered: dependency targets listed before their source
        self.index = index = {k: i for i, (k, _) in enumerate(items)}
        self.track = set()
        for a, bs in deps.items():
            if a in index:
                for b in bs:
                    if b in index and index[b] < index[a]:
                        self.track.add(b)
        self.memo = {}
        self.states = 0

    def seq(self, i, c, first, seenk, oblig):
        _check_stack()
        key = (i, c, first, seenk, oblig)
        if key in self.memo:
            return self.memo[key]
        self.states += 1
        if self.states > MAX_STATES:
            refuse("SchemaLimits", self.ptr, "the object's automaton has more than %d states" % MAX_STATES)
        if i == self.n:
            out = None if oblig else self.objects.extras_tail(self.extra, c, first, self.minp, self.maxp)
            self.memo[key] = out
            return out
        k, _ = self.items[i]
        alts = []
        # take item i
        if self.maxp is None or c < self.maxp:
            nob = self.taken(i, k, seenk, oblig)
            if nob is not None:
                nxt = self.seq(
                    i + 1,
                    min(c + 1, self.cap) if self.counted else 0,
                    False,
                    seenk | {k} if k in self.track else seenk,
                    nob,
                )
                if nxt is not None:
                    alts.append(("" if first else '"," space ') + self.kv[i] + " " + nxt)
        # skip item i
        if k not in self.required and k not in oblig:
            nxt = self.seq(i + 1, c, first, seenk, oblig)
            if nxt is not None:
                alts.append(nxt)
        name = self.rules.add_rule("obj", " | ".join(alts)) if alts else None
        self.memo[key] = name
        return name

    def taken(self, i, k, seenk, oblig):
        """The keys still obliged once item i (key k) is taken, or None when its dependencies forbid it here."""
        ok = True
        nob = set(oblig)
        nob.discard(k)
        index = self.index
        for b in self.deps.get(k, ()):
            if b in index and index[b] < i:
                if b not in seenk:
                    ok = False
            elif b in index:
                nob.add(b)
            else:
                ok = False
        return frozenset(nob) if ok else None


def _tracked(items, required, deps):
    """The indexes of items whose presence the repeating form tracks: the required keys, each key with
    dependencies and the keys it needs."""
    listed = {k for k, _ in items}
    named = set(required)
    for a, bs in deps.items():
        if a in listed and bs:
            named.add(a)
            named.update(bs)
    return [i for i, (k, _) in enumerate(items) if k in named]
