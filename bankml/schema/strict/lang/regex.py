# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""A regex (JSON Schema's ``pattern``) as the language of the strings ``re.search`` finds it in: ``regex_lang``,
the builder of ``Lang.regex``.

How: the pattern is parsed by Python's own parser (``re._parser``), so every quirk of Python's syntax is Python's;
compiled to a Thompson NFA (built backwards from the continuation) whose assertions are evaluated on the previous
character (kept by the subset construction) and, for look-ahead ones (``$``, ``\\Z``, ``\\b``), carried as
requirements on the rest of the input; the subset construction runs over an alphabet partition (a class like
``\\w`` is one atom), then Hopcroft minimization. Supported and refused constructs: the package's docstring.

Owns: the NFA, the classes' code-point sets under the flags, the subset construction over atoms. Builds on
``automaton`` and ``charsets``; must not import ``formats`` or ``gbnf``.
"""

from __future__ import annotations

import bisect
import re
from typing import NoReturn

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.limits import _TooDeep
from bankml.schema.strict.lang import bounds
from bankml.schema.strict.lang.automaton import BUILDERS, Lang, expand_atoms, finish
from bankml.schema.strict.lang.bounds import LangError
from bankml.schema.strict.lang.charsets import MAXCP, SUR_HI, SUR_LO, UNIVERSE, category, cs_neg, norm, scan_class

try:  # Python >= 3.11
    import re._constants as _sre_c
    import re._parser as _sre_parse
except ImportError:  # pragma: no cover - Python <= 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]


# Assertion kinds (lookbehind part evaluated on the previous character, lookahead part kept as
# a requirement on the rest of the input).
_A_BOS, _A_BOL, _A_EOS, _A_EOSNL, _A_EOL, _A_WB, _A_NWB = range(7)
# Requirements on the remaining input.
_R_E0, _R_E1, _R_NL, _R_NW, _R_NN, _R_NNC = range(6)
# Previous-character context.
_P_BOS, _P_W, _P_NL, _P_O = range(4)
# Character kinds seen by requirements: newline, word, other.
_K_NL, _K_W, _K_O = range(3)
_DONE, _DEAD = -1, -2
_NWB_MATCHES_EMPTY = re.search(r"\B", "") is not None


def _req_step(r: int, k: int) -> int:
    if r == _R_E0:
        return _DEAD
    if r == _R_E1:
        return _R_E0 if k == _K_NL else _DEAD
    if r == _R_NL:
        return _DONE if k == _K_NL else _DEAD
    if r == _R_NW:
        return _DONE if k == _K_W else _DEAD
    return _DONE if k != _K_W else _DEAD  # NN, NNC


_REQ_EOS_OK = {_R_E0: True, _R_E1: True, _R_NL: True, _R_NW: False, _R_NN: True, _R_NNC: False}


def _req_simplify(reqs: frozenset) -> frozenset | None:
    """Drop implied requirements; None when no continuation can satisfy them all."""
    if _R_E0 in reqs:
        if _R_NW in reqs or _R_NNC in reqs:
            return None
        return frozenset((_R_E0,))
    if _R_E1 in reqs:
        if _R_NW in reqs:
            return None
        reqs = reqs - {_R_NL, _R_NN}
    if _R_NNC in reqs:
        reqs = reqs - {_R_NN}
    if _R_NW in reqs and (_R_NN in reqs or _R_NNC in reqs or _R_NL in reqs):
        return None
    return frozenset(reqs)


class _Nfa:
    """Thompson-style NFA built backwards from the continuation (node ids are ints)."""

    def __init__(self, keyword: str):
        self.kind: list[int] = []  # 0 char, 1 split, 2 assert, 3 final
        self.arg: list = []  # charset / None / assertion kind
        self.nxt: list = []  # next node / list of nodes
        self.keyword = keyword
        self.budget = bounds.MAX_NFA_NODES
        self.interned: dict = {}

    def new(self, kind, arg, nxt) -> int:
        self.budget -= 1
        if self.budget < 0:
            raise LangError(self.keyword, f"the pattern expands past {bounds.MAX_NFA_NODES} automaton nodes")
        if kind == 0:
            arg = self.interned.setdefault(arg, arg)
        self.kind.append(kind)
        self.arg.append(arg)
        self.nxt.append(nxt)
        return len(self.kind) - 1


_FLAG_I, _FLAG_M, _FLAG_S, _FLAG_A = re.IGNORECASE, re.MULTILINE, re.DOTALL, re.ASCII


def _fragment_of_items(items) -> str:
    """Serialize an IN item list back to a regex class, for an exact scan by ``re``."""
    parts: list[str] = []
    for op, av in items:
        if op is _sre_c.NEGATE:
            parts.insert(0, "^")
        elif op is _sre_c.LITERAL:
            parts.append("\\U%08x" % av)
        elif op is _sre_c.RANGE:
            parts.append("\\U%08x-\\U%08x" % av)
        elif op is _sre_c.CATEGORY:
            parts.append(_CATEGORY_ESC[av])
        else:
            raise LangError("pattern", f"unsupported class item {op}")
    return "[" + "".join(parts) + "]"


_CATEGORY_ESC = {
    _sre_c.CATEGORY_DIGIT: "\\d",
    _sre_c.CATEGORY_NOT_DIGIT: "\\D",
    _sre_c.CATEGORY_SPACE: "\\s",
    _sre_c.CATEGORY_NOT_SPACE: "\\S",
    _sre_c.CATEGORY_WORD: "\\w",
    _sre_c.CATEGORY_NOT_WORD: "\\W",
}


def _class_set(op, av, flags: int) -> tuple:
    """The code points one single-character element matches under the given flags."""
    ascii_only = bool(flags & _FLAG_A)
    scan_flags = (re.IGNORECASE if flags & _FLAG_I else 0) | (re.ASCII if ascii_only else 0)
    if op is _sre_c.ANY:
        return UNIVERSE if flags & _FLAG_S else cs_neg(((10, 10),))
    if flags & _FLAG_I:
        # Case-insensitive: let `re` itself say which code points match (exact folding).
        if op is _sre_c.LITERAL:
            return scan_class("\\U%08x" % av, scan_flags)
        if op is _sre_c.NOT_LITERAL:
            return scan_class("[^\\U%08x]" % av, scan_flags)
        return scan_class(_fragment_of_items(av), scan_flags)
    if op is _sre_c.LITERAL:
        return norm(((av, av),))
    if op is _sre_c.NOT_LITERAL:
        return cs_neg(((av, av),))
    # IN
    neg = False
    acc = []
    for iop, iav in av:
        if iop is _sre_c.NEGATE:
            neg = True
        elif iop is _sre_c.LITERAL:
            acc.append((iav, iav))
        elif iop is _sre_c.RANGE:
            acc.append(iav)
        elif iop is _sre_c.CATEGORY:
            esc = _CATEGORY_ESC.get(iav)
            if esc is None:
                raise LangError("pattern", f"unsupported class category {iav}")
            acc.extend(category(esc[1], ascii_only))
        else:
            raise LangError("pattern", f"unsupported class item {iop}")
    cs = norm(acc)
    return cs_neg(cs) if neg else cs


class _RegexBuilder:
    def __init__(self, keyword: str):
        self.nfa = _Nfa(keyword)
        self.keyword = keyword
        self.word_flags: set = set()
        self.uses_bos = self.uses_bol = self.uses_wb = False

    def refuse(self, what: str) -> NoReturn:
        raise LangError(self.keyword, f"{what} is not supported (not a regular language bankml builds)")

    def seq(self, items, flags: int, cont: int) -> int:
        for op, av in reversed(list(items)):
            cont = self.item(op, av, flags, cont)
        return cont

    def item(self, op, av, flags: int, cont: int) -> int:
        _check_stack()
        c = _sre_c
        nfa = self.nfa
        if op in (c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN):
            cs = _class_set(op, av, flags)
            return nfa.new(0, cs, cont)
        if op is c.BRANCH:
            return nfa.new(1, None, [self.seq(alt, flags, cont) for alt in av[1]])
        if op is c.SUBPATTERN:
            _group, add, dele, sub = av
            return self.seq(sub, (flags | add) & ~dele, cont)
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            lo, hi, sub = av
            if hi is c.MAXREPEAT or hi == c.MAXREPEAT:
                loop = nfa.new(1, None, None)
                body = self.seq(sub, flags, loop)
                nfa.nxt[loop] = [body, cont]
                entry = loop
            else:
                entry = cont
                for _ in range(hi - lo):
                    nfa.new(1, None, None)  # charge the budget even for an empty body
                    entry = nfa.new(1, None, [self.seq(sub, flags, entry), cont])
            for _ in range(lo):
                nfa.new(1, None, None)
                entry = self.seq(sub, flags, entry)
            return entry
        if op is c.AT:
            multiline = bool(flags & _FLAG_M)
            if av is c.AT_BEGINNING:
                kind = _A_BOL if multiline else _A_BOS
            elif av is c.AT_BEGINNING_STRING:
                kind = _A_BOS
            elif av is c.AT_END:
                kind = _A_EOL if multiline else _A_EOSNL
            elif av is c.AT_END_STRING:
                kind = _A_EOS
            elif av in (c.AT_BOUNDARY, c.AT_NON_BOUNDARY):
                kind = _A_WB if av is c.AT_BOUNDARY else _A_NWB
                self.word_flags.add(bool(flags & _FLAG_A))
                if len(self.word_flags) > 1:
                    self.refuse("mixing ASCII and Unicode word boundaries")
                self.uses_wb = True
            else:
                self.refuse(f"the anchor {av}")
            if kind == _A_BOS:
                self.uses_bos = True
            if kind == _A_BOL:
                self.uses_bol = True
            return nfa.new(2, kind, cont)
        if op in (c.ASSERT, c.ASSERT_NOT):
            self.refuse("lookbehind" if av[0] < 0 else "lookahead")
        if op is c.GROUPREF:
            self.refuse("a backreference")
        if op is c.GROUPREF_EXISTS:
            self.refuse("a conditional group")
        if op is getattr(c, "ATOMIC_GROUP", None):
            self.refuse("an atomic group")
        if op is getattr(c, "POSSESSIVE_REPEAT", None):
            self.refuse("a possessive quantifier")
        if op is c.FAILURE:
            return nfa.new(0, (), cont)  # matches nothing
        self.refuse(f"the construct {op}")


def regex_lang(pattern: str, keyword: str = "pattern") -> Lang:
    """The strings ``s`` for which ``re.search(pattern, s)`` finds a match (``Lang.regex``)."""
    if not isinstance(pattern, str):
        raise LangError(keyword, "the pattern is not a string")
    try:
        re.compile(pattern)
        parsed = _sre_parse.parse(pattern, 0)
    except (re.error, RecursionError, OverflowError, ValueError) as e:
        raise LangError(keyword, f"Python's re rejects it: {e}") from None
    flags = parsed.state.flags
    if flags & re.LOCALE:
        raise LangError(keyword, "the LOCALE flag is not supported")
    b = _RegexBuilder(keyword)
    final = b.nfa.new(3, None, None)
    try:
        start = b.seq(parsed.data, flags, final)
    except (RecursionError, _TooDeep):
        raise LangError(keyword, "the pattern nests too deeply") from None
    return _Subsets(b, start, final, keyword).run()


BUILDERS["regex"] = regex_lang

# the state past a match with no requirement left on the rest of the input: every string from there on is in
_TOP = ("top",)


class _Subsets:
    """The subset construction of one regex's NFA. A state is the set of the NFA's threads (node, requirements on
    the rest of the input) after the closure under the previous character's context. It runs over the alphabet
    partition: atoms are the classes of code points that every character set of the NFA (and the word / newline
    kinds the assertions look at) treats alike, so a Unicode class like \\w is one atom, not ~700 ranges; the
    minimized automaton is expanded back to code-point ranges at the end."""

    def __init__(self, builder: _RegexBuilder, start: int, final: int, keyword: str):
        self.nfa = builder.nfa
        self.start, self.final, self.keyword = start, final, keyword
        self.uses_bol = builder.uses_bol
        self.work = 0  # thread moves and atom visits, against bounds.MAX_WORK
        self.edges = 0  # the automaton's transitions, against bounds.MAX_EDGES
        word = category("w", bool(builder.word_flags and next(iter(builder.word_flags)))) if builder.uses_wb else ()
        self._partition(word)

    def _partition(self, word) -> None:
        """The atoms: ``atom_ranges`` (code points of each), ``atom_kind`` (newline, word, other) and
        ``cs_atoms`` (the atoms of each of the NFA's character sets, by the set's id)."""
        charsets = list(self.nfa.interned.values())
        points = {0, MAXCP + 1, SUR_LO, SUR_HI + 1, 10, 11}
        for cs in charsets + ([word] if word else []):
            for lo, hi in cs:
                points.add(lo)
                points.add(hi + 1)
        cuts = sorted(points)
        members: list[list[int]] = [[] for _ in range(len(cuts) - 1)]
        for ci, cs in enumerate(charsets + ([word] if word else [])):
            for lo, hi in cs:
                k = bisect.bisect_left(cuts, lo)
                while k < len(cuts) - 1 and cuts[k] <= hi:
                    members[k].append(ci)
                    k += 1
        word_ci = len(charsets) if word else -1
        atom_of_sig: dict = {}
        self.atom_ranges: list[list] = []
        self.atom_kind: list[int] = []
        self.cs_atoms: dict = {id(cs): set() for cs in charsets}
        for k in range(len(cuts) - 1):
            lo, hi = cuts[k], cuts[k + 1] - 1
            if SUR_LO <= lo <= SUR_HI:
                continue
            sig = tuple(members[k])
            kind = _K_NL if lo == 10 else (_K_W if word_ci in sig else _K_O)
            a = atom_of_sig.get((sig, kind))
            if a is None:
                a = atom_of_sig[(sig, kind)] = len(self.atom_ranges)
                self.atom_ranges.append([])
                self.atom_kind.append(kind)
                for ci in sig:
                    if ci != word_ci:
                        self.cs_atoms[id(charsets[ci])].add(a)
            self.atom_ranges[a].append((lo, hi))
        self.n_atoms = len(self.atom_ranges)

    def closure(self, prev: int, seeds) -> frozenset:
        """The threads reachable from ``seeds`` without reading a character, assertions evaluated on ``prev``."""
        nfa = self.nfa
        out = set()
        seen = set()
        stack = list(seeds)
        steps = 0
        while stack:
            steps += 1
            node, reqs = item = stack.pop()
            if item in seen:
                continue
            seen.add(item)
            k = nfa.kind[node]
            if k == 0 or k == 3:
                out.add(item)
            elif k == 1:
                for t in nfa.nxt[node]:
                    stack.append((t, reqs))
            else:
                add = _assertion(nfa.arg[node], prev)
                if add is _FAILS:
                    continue
                if add is not None:
                    nr = _req_simplify(reqs | {add})
                    if nr is None:
                        continue
                    reqs = nr
                stack.append((nfa.nxt[node], reqs))
        self.work += steps
        return frozenset(out)

    def make_key(self, threads: frozenset):
        # The context (prev) is consumed by the closure: the threads alone say what follows.
        for node, reqs in threads:
            if node == self.final and not reqs:
                return _TOP
        return threads

    def run(self) -> Lang:
        start_key = self.make_key(self.closure(_P_BOS, [(self.start, frozenset())]))
        index = {start_key: 0}
        keys = [start_key]
        trans = []
        acc = []
        kind = self.nfa.kind
        for key in keys:
            if key is _TOP:
                trans.append([(0, self.n_atoms - 1, index[key])])
                acc.append(True)
                continue
            row = self._row(list(key), index, keys)  # order is irrelevant: every target is a set
            trans.append(row)
            self.edges += len(row)
            if self.edges > bounds.MAX_EDGES:
                raise LangError(self.keyword, f"the pattern's automaton exceeds {bounds.MAX_EDGES} transitions")
            acc.append(any(kind[node] == 3 and all(_REQ_EOS_OK[r] for r in reqs) for node, reqs in key))
        small = finish(trans, acc, self.keyword)  # minimal over atoms, so minimal over code points too
        return expand_atoms(small, self.atom_ranges, self.keyword)

    def _row(self, threads: list, index: dict, keys: list) -> list:
        """The transitions of the state of ``threads`` over the atoms (runs of atoms to one target joined)."""
        nfa = self.nfa
        groups: dict[int, tuple[tuple, list[int]]] = {}  # id(charset) -> (charset, the threads on it)
        finals: list[int] = []
        for ti, (node, reqs) in enumerate(threads):
            if nfa.kind[node] == 3:
                finals.append(ti)
                continue
            cs = nfa.arg[node]
            g = groups.get(id(cs))
            if g is None:
                g = groups[id(cs)] = (cs, [])
            g[1].append(ti)
        glist = list(groups.values())
        self.work += len(threads) + self.n_atoms
        if self.work > bounds.MAX_WORK:
            raise LangError(self.keyword, f"the pattern's automaton needs more than {bounds.MAX_WORK} steps to build")
        covers: dict = {}
        for gi, (cs, _) in enumerate(glist):
            for a in self.cs_atoms[id(cs)]:
                covers.setdefault(a, []).append(gi)
        row: list = []
        cache: dict = {}
        for a in range(self.n_atoms):
            cov = tuple(covers.get(a, ()))
            ck = self.atom_kind[a]
            target = cache.get((cov, ck))
            if target is None:
                stepping = [ti for gi in cov for ti in glist[gi][1]]
                target = cache[(cov, ck)] = self._target(threads, stepping + finals, ck, index, keys)
            if row and row[-1][2] == target and row[-1][1] + 1 == a:
                row[-1] = (row[-1][0], a, target)
            else:
                row.append((a, a, target))
        return row

    def _target(self, threads: list, moving: list, ck: int, index: dict, keys: list) -> int:
        """The state after a character of kind ``ck`` that the threads ``moving`` (indexes) step over: their
        successors, the requirements stepped, and a new search from the start (``re.search``)."""
        nfa = self.nfa
        newprev = _P_NL if (ck == _K_NL and self.uses_bol) else (_P_W if ck == _K_W else _P_O)
        seeds: list[tuple] = [(self.start, frozenset())]
        for ti in moving:
            node, reqs = threads[ti]
            nr = []
            ok = True
            for r in reqs:
                r2 = _req_step(r, ck)
                if r2 == _DEAD:
                    ok = False
                    break
                if r2 != _DONE:
                    nr.append(r2)
            if not ok:
                continue
            nxt = self.final if nfa.kind[node] == 3 else nfa.nxt[node]
            seeds.append((nxt, frozenset(nr)))
        nk = self.make_key(self.closure(newprev, seeds))
        target = index.get(nk)
        if target is None:
            target = index[nk] = len(keys)
            keys.append(nk)
            if len(keys) > bounds.state_limit():
                raise LangError(self.keyword, f"the pattern's automaton exceeds {bounds.state_limit()} states")
        return target


_FAILS = object()  # _assertion: the assertion fails here


def _assertion(a: int, prev: int):
    """What the assertion ``a`` asks after a character of context ``prev``: _FAILS, nothing more (None), or a
    requirement on the rest of the input."""
    if a == _A_BOS:
        return None if prev == _P_BOS else _FAILS
    if a == _A_BOL:
        return None if prev in (_P_BOS, _P_NL) else _FAILS
    if a == _A_EOS:
        return _R_E0
    if a == _A_EOSNL:
        return _R_E1
    if a == _A_EOL:
        return _R_NL
    if a == _A_WB:
        return _R_NN if prev == _P_W else _R_NW
    # _A_NWB. Python < 3.14: \\B never matches inside the empty string (ask re itself).
    return _R_NNC if prev == _P_BOS and not _NWB_MATCHES_EMPTY else (_R_NW if prev == _P_W else _R_NN)
