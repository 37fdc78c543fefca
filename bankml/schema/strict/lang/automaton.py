# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""``Lang``: an immutable regular language over Unicode scalar values, held as a trimmed, minimized, canonically
numbered DFA whose edges are labelled with code-point ranges; and the DFA machinery its algebra runs on.

Builders: ``Lang.literal(s)``, ``Lang.literals(strings)``, ``Lang.any_string()``, ``Lang.empty()``,
``Lang.chars(ranges)``, ``Lang.length(min_len, max_len)``, and ``Lang.regex(pattern)`` / ``Lang.format(name)``,
whose builders live in ``regex`` and ``formats`` (they build on this module, so they enter ``BUILDERS`` when the
package is imported). Algebra: ``a & b``, ``a | b``, ``a - b``, ``a.complement()``, ``a.concat(b)``. Queries:
``is_empty()``, ``is_universal()``, ``is_finite()``, ``matches(s)``, ``n_states``, ``a == b`` (language equality:
canonical minimal DFAs compare equal), ``example()``.

The machinery: ``finish`` (trim, minimize through ``minimize.hopcroft``, renumber), ``canonical``, ``atomize``
(a DFA's alphabet partition), ``product`` (intersection or union over the joint partition), ``expand_atoms``,
``subset`` (a generic subset construction). Every construction counts against ``bounds``.

Owns: the Lang type and those constructions. Must not import ``regex``, ``formats``, ``gbnf`` (they build on it).
"""

from __future__ import annotations

import bisect
from typing import Any

from bankml.schema.strict.lang import bounds
from bankml.schema.strict.lang.bounds import LangError
from bankml.schema.strict.lang.charsets import MAXCP, SUR_HI, SUR_LO, UNIVERSE, norm
from bankml.schema.strict.lang.minimize import hopcroft

# The builders of Lang.regex and Lang.format ({"regex": fn(pattern, keyword), "format": fn(name, bare_checker)}),
# set by the modules that define them (bankml.schema.strict.lang.regex, .formats) when the package is imported
BUILDERS: dict = {}


class Lang:
    """An immutable regular language over code points, held as a canonical minimal DFA.

    ``_trans[s]`` is a tuple of ``(lo, hi, target)`` sorted by ``lo`` (missing = reject),
    ``_acc[s]`` says whether ``s`` accepts; state 0 is the start.  Every state is reachable and
    can reach acceptance (except the lone start state of the empty language).  States are
    numbered in breadth-first order, so two equal languages have identical tables.
    """

    __slots__ = ("_trans", "_acc", "_hash")

    def __init__(self, trans, acc):
        self._trans = tuple(tuple(t) for t in trans)
        self._acc = tuple(bool(a) for a in acc)
        self._hash = None

    # ------------------------------------------------------------ builders
    @staticmethod
    def empty() -> "Lang":
        """The empty language."""
        return Lang(((),), (False,))

    @staticmethod
    def any_string() -> "Lang":
        """Every string over the alphabet."""
        return Lang((tuple((lo, hi, 0) for lo, hi in UNIVERSE),), (True,))

    @staticmethod
    def literal(s: str) -> "Lang":
        """The one string ``s`` (which must not contain surrogates)."""
        trans: list[tuple] = []
        for i, ch in enumerate(s):
            c = ord(ch)
            if SUR_LO <= c <= SUR_HI:
                return Lang.empty()
            trans.append(((c, c, i + 1),))
        trans.append(())
        return Lang(trans, [False] * len(s) + [True])

    @staticmethod
    def literals(strings) -> "Lang":
        """Exactly the given strings: their trie, minimized once (a union of literals one ``|`` at a time
        costs a product per string). Strings holding a surrogate are left out, as ``literal`` leaves them."""
        trans: list[dict] = [{}]
        acc = [False]
        for s in strings:
            if any(SUR_LO <= ord(ch) <= SUR_HI for ch in s):
                continue
            node = 0
            for ch in s:
                c = ord(ch)
                nxt = trans[node].get(c)
                if nxt is None:
                    nxt = trans[node][c] = len(trans)
                    trans.append({})
                    acc.append(False)
                node = nxt
            acc[node] = True
        if not any(acc):
            return Lang.empty()
        rows = [[(c, c, t) for c, t in sorted(row.items())] for row in trans]
        return finish(rows, acc, "enum")

    @staticmethod
    def chars(ranges) -> "Lang":
        """The one-character strings whose code point is in ``ranges`` (inclusive pairs)."""
        cs = norm(ranges)
        if not cs:
            return Lang.empty()
        return Lang((tuple((lo, hi, 1) for lo, hi in cs), ()), (False, True))

    @staticmethod
    def length(min_len: int = 0, max_len: int | None = None, keyword: str = "maxLength") -> "Lang":
        """Strings whose ``len()`` (code points) is in ``[min_len, max_len]``."""
        min_len = max(0, int(min_len))
        if max_len is not None and max_len < min_len:
            return Lang.empty()
        n = (max_len if max_len is not None else min_len) + 1
        if n > bounds.MAX_STATES:
            kw = keyword if max_len is not None else "minLength"
            raise LangError(kw, f"a length bound of {n - 1} exceeds {bounds.MAX_STATES} states")
        trans = []
        for i in range(n):
            if i + 1 < n:
                trans.append(tuple((lo, hi, i + 1) for lo, hi in UNIVERSE))
            elif max_len is None:
                trans.append(tuple((lo, hi, i) for lo, hi in UNIVERSE))
            else:
                trans.append(())
        return Lang(trans, [i >= min_len for i in range(n)])

    @staticmethod
    def regex(pattern: str, keyword: str = "pattern") -> "Lang":
        """The strings ``s`` for which ``re.search(pattern, s)`` finds a match."""
        return BUILDERS["regex"](pattern, keyword)

    @staticmethod
    def format(name: str, bare_checker: bool = False, draft3_time: bool = False) -> "Lang":
        """The strings the ``jsonschema`` format checker accepts for ``name`` (see module doc):
        ``Draft202012Validator.FORMAT_CHECKER``'s, or with ``bare_checker`` the class-level
        ``FormatChecker()``'s, which differs in ``time`` (strptime) and checks ``color`` too.
        (``draft3_time`` is the older name of ``bare_checker``.)"""
        return BUILDERS["format"](name, bare_checker or draft3_time)

    # ------------------------------------------------------------ algebra
    def __and__(self, other: "Lang") -> "Lang":
        return product(self, other, both=True)

    def __or__(self, other: "Lang") -> "Lang":
        return product(self, other, both=False)

    def __sub__(self, other: "Lang") -> "Lang":
        return self & other.complement()

    def complement(self, keyword: str = "not") -> "Lang":
        """Every string over the alphabet that is not in this language."""
        # Over the DFA's own alphabet partition: completed with a sink, acceptance flipped.
        intervals, interval_atom, rows, n_atoms = atomize(self)
        atom_ranges: list[list] = [[] for _ in range(n_atoms)]
        for (lo, hi), at in zip(intervals, interval_atom):
            atom_ranges[at].append((lo, hi))
        n = len(self._trans)
        sink = n
        trans = []
        for st in range(n):
            trans.append([(at, at, rows[st].get(at, sink)) for at in range(n_atoms)])
        trans.append([(at, at, sink) for at in range(n_atoms)])
        acc = [not x for x in self._acc] + [True]
        return expand_atoms(finish(trans, acc, keyword), atom_ranges)

    def concat(self, other: "Lang", keyword: str = "pattern") -> "Lang":
        """The strings ``xy`` with ``x`` in self and ``y`` in other (via subset construction)."""
        a, b = self, other
        na = len(a._trans)

        def close(states):
            out = set(states)
            for s in states:
                if s < na and a._acc[s]:
                    out.add(na)  # b's start
            return frozenset(out)

        def step_sets(key):
            rows = []
            for s in key:
                row = a._trans[s] if s < na else b._trans[s - na]
                off = 0 if s < na else na
                rows.append([(lo, hi, t + off) for lo, hi, t in row])
            return rows

        def accepting(key):
            return any((s >= na and b._acc[s - na]) for s in key)

        return subset(close({0}), step_sets, close, accepting, keyword)

    # ------------------------------------------------------------ queries
    @property
    def n_states(self) -> int:
        return len(self._trans)

    def is_empty(self) -> bool:
        return not any(self._acc)

    def is_universal(self) -> bool:
        return self.complement().is_empty()

    def is_finite(self) -> bool:
        """True when the language has finitely many strings (the trimmed DFA has no cycle)."""
        color = [0] * len(self._trans)
        stack = [(0, iter(self._trans[0]))]
        color[0] = 1
        while stack:
            s, it = stack[-1]
            for _, _, t in it:
                if color[t] == 1:
                    return False
                if color[t] == 0:
                    color[t] = 1
                    stack.append((t, iter(self._trans[t])))
                    break
            else:
                color[s] = 2
                stack.pop()
        return True

    def run(self, state: int, s: str) -> int:
        """The state reached from ``state`` by reading ``s``; -1 once a character has no transition (and from -1)."""
        for ch in s:
            if state < 0:
                return -1
            row = self._trans[state]
            c = ord(ch)
            i = bisect.bisect_right(row, (c, MAXCP + 1, 1 << 62)) - 1
            state = row[i][2] if i >= 0 and row[i][0] <= c <= row[i][1] else -1
        return state

    def matches(self, s: str) -> bool:
        state = self.run(0, s)
        return state >= 0 and self._acc[state]

    def example(self) -> str | None:
        """A shortest string of the language (smallest code points first), or None if empty."""
        if not self._acc[0] and not self._trans[0]:
            return None
        prev: dict[int, Any] = {0: None}  # state -> (the state before it, the code point read), None at the start
        queue = [0]
        for s in queue:
            if self._acc[s]:
                out = []
                while prev[s] is not None:
                    p, c = prev[s]
                    out.append(chr(c))
                    s = p
                return "".join(reversed(out))
            for lo, _, t in self._trans[s]:
                if t not in prev:
                    prev[t] = (s, lo)
                    queue.append(t)
        return None

    def __eq__(self, other) -> bool:
        return isinstance(other, Lang) and self._trans == other._trans and self._acc == other._acc

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self._trans, self._acc))
        return self._hash

    def __repr__(self) -> str:
        return f"<Lang {len(self._trans)} states>"


def finish(trans, acc, keyword: str) -> Lang:
    """Trim (reachable and co-reachable states only), minimize (Moore refinement), renumber."""
    n = len(trans)
    # reachable from 0
    seen = [False] * n
    seen[0] = True
    order = [0]
    for s in order:
        for _, _, t in trans[s]:
            if not seen[t]:
                seen[t] = True
                order.append(t)
    # co-reachable: reverse edges
    rev: list[list[int]] = [[] for _ in range(n)]
    for s in order:
        for _, _, t in trans[s]:
            rev[t].append(s)
    live = [False] * n
    stack = [s for s in order if acc[s]]
    for s in stack:
        live[s] = True
    while stack:
        t = stack.pop()
        for s in rev[t]:
            if not live[s]:
                live[s] = True
                stack.append(s)
    if not live[0]:
        return Lang.empty()
    states = [s for s in order if live[s]]
    block = hopcroft(states, trans, acc, live)
    # Canonical BFS numbering of blocks from the start's block.
    rep: dict = {}
    for s in states:
        rep.setdefault(block[s], s)
    num = {block[0]: 0}
    queue = [block[0]]
    out_trans = []
    out_acc = []
    for b in queue:
        s = rep[b]
        row: list = []
        for lo, hi, t in trans[s]:
            if not live[t]:
                continue
            tb = block[t]
            if tb not in num:
                num[tb] = len(queue)
                queue.append(tb)
            tn = num[tb]
            if row and row[-1][2] == tn and row[-1][1] + 1 == lo:
                row[-1] = (row[-1][0], hi, tn)
            else:
                row.append((lo, hi, tn))
        out_trans.append(tuple(row))
        out_acc.append(acc[s])
    return Lang(out_trans, out_acc)


def canonical(trans, acc) -> Lang:
    """Renumber an already minimal, trimmed DFA in the canonical breadth-first order."""
    num = {0: 0}
    order = [0]
    for s in order:
        for _, _, t in trans[s]:
            if t not in num:
                num[t] = len(order)
                order.append(t)
    return Lang([tuple((lo, hi, num[t]) for lo, hi, t in trans[s]) for s in order], [acc[s] for s in order])


def atomize(lang: Lang):
    """The alphabet partition of one DFA: its elementary intervals (between all row boundaries,
    surrogates left out) grouped into atoms — the intervals every state treats alike.

    Returns (intervals, atom of each interval, per-state dict atom -> target, atom count)."""
    points = {0, MAXCP + 1, SUR_LO, SUR_HI + 1}
    for row in lang._trans:
        for lo, hi, _ in row:
            points.add(lo)
            points.add(hi + 1)
    pts = sorted(points)
    intervals = [(pts[k], pts[k + 1] - 1) for k in range(len(pts) - 1) if not SUR_LO <= pts[k] <= SUR_HI]
    starts = [lo for lo, _ in intervals]
    sigs: list[list] = [[] for _ in intervals]
    for st, row in enumerate(lang._trans):
        for lo, hi, t in row:
            k = bisect.bisect_left(starts, lo)
            while k < len(intervals) and intervals[k][0] <= hi:
                sigs[k].append((st, t))
                k += 1
    atom_of: dict = {}
    interval_atom = []
    rows: list[dict] = [{} for _ in lang._trans]
    for sig in sigs:
        key = tuple(sig)
        at = atom_of.get(key)
        if at is None:
            at = atom_of[key] = len(atom_of)
            for st, t in sig:
                rows[st][at] = t
        interval_atom.append(at)
    return intervals, interval_atom, rows, len(atom_of)


def joint_add(joint: dict, joint_ranges: list, joint_keys: list, key: tuple, lo: int, hi: int) -> None:
    """The code points lo..hi go to the joint atom of the parts' atoms ``key`` (a new atom when it is new)."""
    at = joint.get(key)
    if at is None:
        at = joint[key] = len(joint_ranges)
        joint_ranges.append([])
        joint_keys.append(key)
    rs = joint_ranges[at]
    if rs and rs[-1][1] + 1 == lo:
        rs[-1] = (rs[-1][0], hi)
    else:
        rs.append((lo, hi))


def product(a: Lang, b: Lang, both: bool, keyword: str | None = None) -> Lang:
    """Intersection (both=True) or union of two DFAs by the product construction.

    Runs over the joint alphabet partition (pairs of the two DFAs' atoms that meet), so a Unicode
    class of hundreds of ranges costs once, not once per state; the minimized result is expanded
    back to code-point ranges."""
    if keyword is None:
        keyword = "allOf" if both else "anyOf"
    ia, aa, rows_a, _ = atomize(a)
    ib, ab, rows_b, _ = atomize(b)
    # Joint atoms: sweep the two interval lists (both cover the alphabet without surrogates).
    joint: dict = {}
    joint_ranges: list[list] = []
    joint_pair: list = []
    i = j = 0
    while i < len(ia) and j < len(ib):
        lo = max(ia[i][0], ib[j][0])
        hi = min(ia[i][1], ib[j][1])
        if lo <= hi:
            joint_add(joint, joint_ranges, joint_pair, (aa[i], ab[j]), lo, hi)
        if ia[i][1] <= ib[j][1]:
            i += 1
        else:
            j += 1
    index = {(0, 0): 0}
    pairs = [(0, 0)]
    trans = []
    acc = []
    for p, q in pairs:
        ra = rows_a[p] if p >= 0 else {}
        rb = rows_b[q] if q >= 0 else {}
        row = []
        for at, (xa, xb) in enumerate(joint_pair):
            ta = ra.get(xa, -1)
            tb = rb.get(xb, -1)
            if both and (ta < 0 or tb < 0):
                continue
            if ta < 0 and tb < 0:
                continue
            key = (ta, tb)
            t = index.get(key)
            if t is None:
                t = index[key] = len(pairs)
                pairs.append(key)
                if len(pairs) > bounds.state_limit():
                    raise LangError(keyword, f"the product automaton exceeds {bounds.state_limit()} states")
            row.append((at, at, t))
        trans.append(row)
        fa = p >= 0 and a._acc[p]
        fb = q >= 0 and b._acc[q]
        acc.append((fa and fb) if both else (fa or fb))
    small = finish(trans, acc, keyword)  # minimal over joint atoms, so over code points too
    return expand_atoms(small, joint_ranges)


def expand_atoms(small: Lang, atom_ranges, keyword: str | None = None) -> Lang:
    """A DFA over atom ids turned back into code-point ranges, canonically numbered. With ``keyword``, more
    than bounds.MAX_EDGES range transitions is a LangError naming it."""
    rows = []
    total = 0
    for row in small._trans:
        out = []
        for a0, a1, t in row:
            for at in range(a0, a1 + 1):
                if keyword is not None:
                    total += len(atom_ranges[at])
                    if total > bounds.MAX_EDGES:
                        raise LangError(
                            keyword, f"the pattern's automaton exceeds {bounds.MAX_EDGES} range transitions"
                        )
                for lo, hi in atom_ranges[at]:
                    out.append((lo, hi, t))
        out.sort()
        merged: list = []
        for lo, hi, t in out:
            if merged and merged[-1][2] == t and merged[-1][1] + 1 == lo:
                merged[-1] = (merged[-1][0], hi, t)
            else:
                merged.append((lo, hi, t))
        rows.append(merged)
    return canonical(rows, small._acc)


def subset(start_key, step_rows, close, accepting, keyword: str) -> Lang:
    """Generic subset construction: keys are frozensets of NFA-ish states.

    ``step_rows(key)`` gives, per member, its sorted ``(lo, hi, target)`` edges; ``close`` maps a
    set of targets to the next key; ``accepting(key)`` says whether the key accepts.
    """
    index = {start_key: 0}
    keys = [start_key]
    trans = []
    acc = []
    for key in keys:
        rows = step_rows(key)
        points = set()
        for row in rows:
            for lo, hi, _ in row:
                points.add(lo)
                points.add(hi + 1)
        pts = sorted(points)
        targets: list[set] = [set() for _ in range(max(0, len(pts) - 1))]
        for row in rows:
            for lo, hi, t in row:
                k = bisect.bisect_left(pts, lo)
                while k < len(pts) - 1 and pts[k] <= hi:
                    targets[k].add(t)
                    k += 1
        out: list = []
        cache: dict = {}
        for k in range(len(pts) - 1):
            if not targets[k]:
                continue
            fs = frozenset(targets[k])
            nk = cache.get(fs)
            if nk is None:
                nk = cache[fs] = close(fs)
            t = index.get(nk)
            if t is None:
                t = index[nk] = len(keys)
                keys.append(nk)
                if len(keys) > bounds.state_limit():
                    raise LangError(keyword, f"the automaton exceeds {bounds.state_limit()} states")
            lo, hi = pts[k], pts[k + 1] - 1
            if out and out[-1][2] == t and out[-1][1] + 1 == lo:
                out[-1] = (out[-1][0], hi, t)
            else:
                out.append((lo, hi, t))
        trans.append(out)
        acc.append(accepting(key))
    return finish(trans, acc, keyword)
