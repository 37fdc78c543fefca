# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""Regular languages of JSON-Schema strings, exact, as minimal DFAs over code points, and their GBNF.

What this module owns (the "strict" schema compiler's regular-language core):

* :class:`Lang` — an immutable regular language over Unicode scalar values (the alphabet is
  U+0000..U+10FFFF without the surrogates U+D800..U+DFFF), held as a trimmed, minimized,
  canonically numbered DFA whose edges are labelled with code-point ranges.  Builders:

  - ``Lang.regex(pattern)`` — the strings ``s`` with ``re.search(pattern, s)`` (JSON Schema's
    ``pattern`` as the ``jsonschema`` package checks it: Python ``re`` semantics, unanchored).
  - ``Lang.literal(s)``, ``Lang.any_string()``, ``Lang.empty()``, ``Lang.chars(ranges)`` (one
    character in inclusive code-point ranges),
    ``Lang.length(min_len, max_len)`` (``len()`` in code points, ``max_len=None`` = no maximum).
  - ``Lang.format(name, bare_checker=False)`` — the strings the ``jsonschema`` format checker
    accepts for ``name``.
  - Builders that can refuse take ``keyword=`` (the keyword a ``LangError`` names).
  - ``a & b``, ``a | b``, ``a - b``, ``a.complement()``, ``a.concat(b)``.
  - Queries: ``is_empty()``, ``is_universal()``, ``is_finite()``, ``matches(s)``, ``n_states``, ``a == b``
    (language equality: canonical minimal DFAs compare equal), ``example()``.

* :func:`string_lang` ``(pattern=None, min_length=None, max_length=None, format=None)`` — a
  string schema's keywords intersected, each refusal naming its keyword.

* :func:`string_gbnf` ``(lang, name, admit_surrogates=False) -> (expression, rules)`` — GBNF
  for the whole quoted JSON text of a string whose decoded value is in a ``Lang``.

* :func:`is_known_format`, :func:`draft_checks_format`, ``FORMAT_DRAFTS`` — which format names
  jsonschema checks, and in which drafts.

* :class:`LangError` (``keyword``, ``reason``) — raised for whatever cannot be built exactly or
  within the bounds: ``MAX_STATES`` DFA states per construction (fixed format constructions may
  use 3x in intermediate automata), ``MAX_NFA_NODES`` regex NFA nodes, ``MAX_WORK`` thread steps
  and ``MAX_EDGES`` range transitions per regex.  Every construction is bounded by those counts,
  so none hangs or grows without limit (the module globals may be changed by a caller).

How: a regex is parsed by Python's own parser, compiled to a Thompson NFA whose assertions are
evaluated on the previous character (kept by the subset construction) and, for look-ahead ones
(``$``, ``\\Z``, ``\\b``), carried as requirements on the rest of the input; the subset
construction runs over an alphabet partition (a class like ``\\w`` is one atom), then Hopcroft
minimization.  Products, complements and the format-specific preimages (``str.upper()``,
``str.replace``, ``str.strip``) work on range-labelled DFAs.  Formats are cached per process;
everything else is a pure function of its arguments (``Lang`` is immutable and hashable).

What it must not touch: it is pure Python on the standard library only — no import of bankml's
engine (rules, matcher) nor of ``jsonschema`` (whose behaviour it models; the tests compare).

Regex (``pattern``) support — parsed by Python's own parser (``re._parser``), so every quirk of
Python's syntax (what ``{`` means when it is not a quantifier, octal escapes, verbose mode...)
is Python's: literals and all escapes; classes with ranges and negation; ``\\d \\D \\w \\W \\s \\S``
Unicode-aware (or ASCII under ``(?a)``), their code-point sets taken from ``re`` itself by one
scan of the alphabet (cached); ``.`` (no ``\\n`` unless ``(?s)``); anchors ``^ $ \\A \\Z`` and
``(?m)`` line anchors, anywhere in the pattern, with Python's meaning (``$`` also before a final
``\\n``); word boundaries ``\\b \\B`` (whether ``\\B`` matches in the empty string is asked of the
running ``re``: not up to 3.13); groups of all capturing/non-capturing/named kinds; alternation; greedy and lazy
quantifiers (laziness does not change what ``re.search`` finds); inline and scoped flags
``i m s x a u`` — ``(?i)`` is exact because each case-folded class is computed by ``re`` itself
over the alphabet.  Refused (``LangError("pattern", ...)``): lookahead, lookbehind,
backreferences, conditionals ``(?(1)..)``, atomic groups and possessive quantifiers, and any
pattern ``re.compile`` rejects.

Formats — ``Lang.format(name)`` follows the checkers of ``jsonschema`` 4.x with its format
extras installed (``jsonschema[format]``: uri/iri through ``rfc3987``, which jsonschema prefers
to ``rfc3986-validator``; date-time through ``rfc3339-validator``; duration through
``isoduration``), as ``Draft202012Validator.FORMAT_CHECKER`` (and ``Draft201909``/``Draft7``)
applies them: ``date``, ``time``, ``date-time``, ``duration``, ``email``, ``idn-email``,
``ipv4``, ``ipv6``, ``uri``, ``uri-reference``, ``iri``, ``iri-reference``, ``json-pointer``,
``uuid``; each is the language of what the checker actually accepts (``email`` is "contains
``@``", ``date-time`` upper-cases the instance first and allows a trailing ``\\n`` through ``$``,
``ipv4`` refuses leading zeros, ``uuid`` is whatever ``uuid.UUID`` parses — braces, ``urn:uuid:``,
``int(..., 16)``'s whitespace, sign, ``0x`` and underscores — with '-' at 8, 13, 18, 23; that one
is exact but large: 6,938 states).  ``hostname`` is refused: exact, it needs 23,813 states
before its case preimage (labels of <= 63 inside <= 253 characters); so are ``idn-hostname``, ``regex`` (not
regular), ``relative-json-pointer``, ``uri-template`` (and ``color`` but with ``bare_checker``).
Note the bare ``FormatChecker()`` (class-level registry) checks ``time`` with the draft-3
``strptime('%H:%M:%S')`` checker instead, and checks draft 3's ``color`` (CSS3 keywords or
``#rgb``/``#rrggbb``); ``Lang.format(name, bare_checker=True)`` builds those.  Every other name raises
``LangError("format", ...)``: ``jsonschema`` itself treats formats
it has no checker for as annotations, so a caller may treat the refusal of an *unknown* name
(``is_known_format(name)`` is False) as "no constraint", but must not do so for a known one —
unless the draft's checker does not assert it (``draft_checks_format(draft, name)``: e.g. draft 4
has no ``date``, ``uuid`` or ``duration`` checker).

JSON string encoding policy of :func:`string_gbnf` — *every* JSON encoding of every character:
raw (anything but ``"``, ``\\`` and U+0000..U+001F, written as UTF-8), the short escapes
``\\" \\\\ \\/ \\b \\f \\n \\r \\t``, ``\\uXXXX`` with hex digits of either case, and surrogate pairs
``\\uD8xx\\uDCxx`` (either case) for code points above U+FFFF.  The grammar's language is
therefore exactly the JSON texts whose decoded value is in the ``Lang`` (lone surrogates, which
``json.loads`` would decode to an unpaired surrogate, are never accepted).
"""

from __future__ import annotations

import bisect
import re
import threading

import numpy as np

from bankml.schema import format_data, unicode_categories
from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.limits import _TooDeep

try:  # Python >= 3.11
    import re._constants as _sre_c
    import re._parser as _sre_parse
except ImportError:  # pragma: no cover - Python <= 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = [
    "LangError",
    "Lang",
    "string_gbnf",
    "string_lang",
    "intersect_all",
    "is_known_format",
    "draft_checks_format",
    "MAX_STATES",
    "KNOWN_FORMATS",
    "FORMAT_DRAFTS",
]

#: Most DFA states any one construction may create (subset, product, preimage).
MAX_STATES = 8000
# Fixed format constructions may use this many times MAX_STATES in intermediate automata (their
# size is known: the largest, uuid, peaks near 10,000 states and ends at 6,938).
_FORMAT_SCALE = 3
_LOCAL = threading.local()  # per thread: the scale in force (formats build under a larger one)


def _state_limit() -> int:
    return MAX_STATES * getattr(_LOCAL, "scale", 1)


#: Most elementary steps (thread moves, range visits) one regex's subset construction may take.
MAX_WORK = 1_500_000
#: Most range transitions (summed over states) one regex's subset construction may create; a
#: Unicode class such as \\w is ~700 ranges, so a pattern that splits it in many states costs here.
MAX_EDGES = 600_000
#: Most NFA nodes (and repetition copies) one regex may expand to.
MAX_NFA_NODES = 60000

MAXCP = 0x10FFFF
SUR_LO, SUR_HI = 0xD800, 0xDFFF
# The alphabet: scalar values, as a sorted tuple of inclusive (lo, hi) ranges.
UNIVERSE = ((0, SUR_LO - 1), (SUR_HI + 1, MAXCP))


class LangError(Exception):
    """A language bankml cannot build exactly (or within the state bounds)."""

    def __init__(self, keyword: str, reason: str):
        super().__init__(f"{keyword}: {reason}")
        self.keyword = keyword
        self.reason = reason


# --------------------------------------------------------------------------- character sets
# A charset is a tuple of disjoint, non-adjacent, sorted inclusive ranges of scalar values.


def _norm(ranges) -> tuple:
    """Sort, clip to the alphabet, merge overlapping/adjacent ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        # Clip the surrogate block out: split a range that spans it.
        pieces = []
        if lo < SUR_LO:
            pieces.append((lo, min(hi, SUR_LO - 1)))
        if hi > SUR_HI:
            pieces.append((max(lo, SUR_HI + 1), hi))
        for a, b in pieces:
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
    # Ranges that touch across the (excluded) surrogate block stay separate; that is harmless.
    return tuple((a, b) for a, b in out)


def _norm_sorted(ranges: list) -> tuple:
    """``_norm`` for ranges that are usually normal already (a DFA row's ranges to one target): checked in one
    pass, normalized only when they are not."""
    prev = -2
    for lo, hi in ranges:
        if lo <= prev + 1 or lo > hi or (lo <= SUR_HI and hi >= SUR_LO):
            return _norm(ranges)
        prev = hi
    return tuple(ranges)


def _cs_neg(cs) -> tuple:
    out = []
    prev = 0
    for lo, hi in cs:
        if lo > prev:
            out.append((prev, lo - 1))
        prev = hi + 1
    if prev <= MAXCP:
        out.append((prev, MAXCP))
    return _norm(out)


def _cs_union(*sets) -> tuple:
    return _norm([r for s in sets for r in s])


def _cs_inter(a, b) -> tuple:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _cs_diff(a, b) -> tuple:
    return _cs_inter(a, _cs_neg(b))


def _clip(lo: int, hi: int, cs) -> list:
    """The parts of cs (sorted disjoint ranges) inside [lo, hi], found by bisection."""
    out = []
    i = bisect.bisect_right(cs, (lo, MAXCP + 1)) - 1
    if i < 0 or cs[i][1] < lo:
        i += 1
    while i < len(cs) and cs[i][0] <= hi:
        out.append((max(cs[i][0], lo), min(cs[i][1], hi)))
        i += 1
    return out


def _cs_has(cs, c: int) -> bool:
    i = bisect.bisect_right(cs, (c, MAXCP + 1)) - 1
    return i >= 0 and cs[i][0] <= c <= cs[i][1]


_ALL_TEXT = None


def _all_text() -> str:
    """Every scalar value once, in order (a 1.1M-char string): `re` scans it to get exact sets."""
    global _ALL_TEXT
    if _ALL_TEXT is None:
        cps = np.concatenate((np.arange(SUR_LO, dtype="<u4"), np.arange(SUR_HI + 1, MAXCP + 1, dtype="<u4")))
        _ALL_TEXT = cps.tobytes().decode("utf-32-le")
    return _ALL_TEXT


def _pos_to_cp(i: int) -> int:
    return i if i < SUR_LO else i + (SUR_HI + 1 - SUR_LO)


_SCAN_CACHE: dict = {}


def _scan_class(fragment: str, flags: int) -> tuple:
    """The exact set of code points one single-character regex fragment matches under flags."""
    key = (fragment, flags)
    got = _SCAN_CACHE.get(key)
    if got is None:
        rx = re.compile("(?:%s)+" % fragment, flags)
        got = _norm((_pos_to_cp(m.start()), _pos_to_cp(m.end() - 1)) for m in rx.finditer(_all_text()))
        # A run crossing the surrogate gap maps to one range spanning it: _norm split it.
        _SCAN_CACHE[key] = got
    return got


def _category(name: str, ascii_only: bool) -> tuple:
    """The code points of ``\\<name>`` (d, s, w or their negations): the table shipped for this Python's Unicode
    database (bankml.schema.unicode_categories), else a scan."""
    key = ("\\" + name, re.ASCII if ascii_only else 0)
    got = _SCAN_CACHE.get(key)
    if got is None:
        ranges = unicode_categories.shipped(name.lower(), ascii_only)
        if ranges is None:
            return _scan_class(*key)
        got = _SCAN_CACHE[key] = _norm(ranges) if name.islower() else _cs_neg(_norm(ranges))
    return got


# --------------------------------------------------------------------------- the DFA


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
        trans = []
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
        return _finish(rows, acc, "enum")

    @staticmethod
    def chars(ranges) -> "Lang":
        """The one-character strings whose code point is in ``ranges`` (inclusive pairs)."""
        cs = _norm(ranges)
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
        if n > MAX_STATES:
            kw = keyword if max_len is not None else "minLength"
            raise LangError(kw, f"a length bound of {n - 1} exceeds {MAX_STATES} states")
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
        return _regex_lang(pattern, keyword)

    @staticmethod
    def format(name: str, bare_checker: bool = False, draft3_time: bool = False) -> "Lang":
        """The strings the ``jsonschema`` format checker accepts for ``name`` (see module doc):
        ``Draft202012Validator.FORMAT_CHECKER``'s, or with ``bare_checker`` the class-level
        ``FormatChecker()``'s, which differs in ``time`` (strptime) and checks ``color`` too.
        (``draft3_time`` is the older name of ``bare_checker``.)"""
        return _format_lang(name, bare_checker or draft3_time)

    # ------------------------------------------------------------ algebra
    def __and__(self, other: "Lang") -> "Lang":
        return _product(self, other, both=True)

    def __or__(self, other: "Lang") -> "Lang":
        return _product(self, other, both=False)

    def __sub__(self, other: "Lang") -> "Lang":
        return self & other.complement()

    def complement(self, keyword: str = "not") -> "Lang":
        """Every string over the alphabet that is not in this language."""
        # Over the DFA's own alphabet partition: completed with a sink, acceptance flipped.
        intervals, interval_atom, rows, n_atoms = _atomize(self)
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
        return _expand_atoms(_finish(trans, acc, keyword), atom_ranges)

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

        return _subset(close({0}), step_sets, close, accepting, keyword)

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
        prev = {0: None}
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


# --------------------------------------------------------------------------- DFA machinery


def _finish(trans, acc, keyword: str) -> Lang:
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
    block = _hopcroft(states, trans, acc, live)
    # Canonical BFS numbering of blocks from the start's block.
    rep = {}
    for s in states:
        rep.setdefault(block[s], s)
    num = {block[0]: 0}
    queue = [block[0]]
    out_trans = []
    out_acc = []
    for b in queue:
        s = rep[b]
        row = []
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


def _canonical(trans, acc) -> Lang:
    """Renumber an already minimal, trimmed DFA in the canonical breadth-first order."""
    num = {0: 0}
    order = [0]
    for s in order:
        for _, _, t in trans[s]:
            if t not in num:
                num[t] = len(order)
                order.append(t)
    return Lang([tuple((lo, hi, num[t]) for lo, hi, t in trans[s]) for s in order], [acc[s] for s in order])


def _merge_ranges(ranges) -> tuple:
    if len(ranges) == 1:
        return tuple(ranges)
    out = []
    for lo, hi in sorted(ranges):
        if out and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def _full_row(row) -> list:
    """A DFA row completed over [0, MAXCP] with target -1 (reject) in its gaps."""
    out = []
    prev = 0
    for lo, hi, t in row:
        if lo > prev:
            out.append((prev, lo - 1, -1))
        out.append((lo, hi, t))
        prev = hi + 1
    if prev <= MAXCP:
        out.append((prev, MAXCP, -1))
    return out


def _hopcroft(states, trans, acc, live) -> dict:
    """Coarsest partition of the (trimmed) states into language-equivalence classes.

    Hopcroft's refinement with whole-alphabet splitters: a splitter block C separates states
    that reach C on different character sets.  Agreeing on "chars into B" and "chars into a
    part P of B" implies agreeing on "chars into B \\ P", so the smaller-half rule holds and the
    run is O(m log n) set operations (m edges), where Moore's rounds would be O(n m)."""
    # rev[t]: (p, all ranges p -> t) — one entry per (p, t) pair, ranges already sorted.
    rev: dict = {}
    for s in states:
        per_t: dict = {}
        for lo, hi, t in trans[s]:
            if live[t]:
                per_t.setdefault(t, []).append((lo, hi))
        for t, ranges in per_t.items():
            # canonical (adjacent ranges joined) so equal character sets compare equal
            rev.setdefault(t, []).append((s, _merge_ranges(ranges)))
    block_of = {}
    members: list[set] = []
    for flag in (True, False):
        part = {s for s in states if bool(acc[s]) == flag}
        if part:
            for s in part:
                block_of[s] = len(members)
            members.append(part)
    work = list(range(len(members)))
    in_work = set(work)
    while work:
        c = work.pop()
        in_work.discard(c)
        touched: dict = {}
        for t in list(members[c]):
            for p, ranges in rev.get(t, ()):
                got = touched.get(p)
                if got is None:
                    touched[p] = ranges
                else:
                    touched[p] = _merge_ranges(got + ranges)
        by_block: dict = {}
        for p, ranges in touched.items():
            by_block.setdefault(block_of[p], {}).setdefault(ranges, []).append(p)
        for b, groups in by_block.items():
            n_touched = sum(len(g) for g in groups.values())
            rest = len(members[b]) - n_touched
            if len(groups) + (1 if rest else 0) <= 1:
                continue
            glist = list(groups.values())
            if not rest:
                # The largest group stays in block b; the others move out.
                glist.sort(key=len, reverse=True)
                glist = glist[1:]
            new_ids = []
            for g in glist:
                nb = len(members)
                part = set(g)
                members[b].difference_update(part)
                members.append(part)
                for p in g:
                    block_of[p] = nb
                new_ids.append(nb)
            if b in in_work:
                for nb in new_ids:
                    work.append(nb)
                    in_work.add(nb)
            else:
                sizes = [(len(members[x]), x) for x in new_ids + [b]]
                largest = max(sizes)[1]
                for _, x in sizes:
                    if x != largest:
                        work.append(x)
                        in_work.add(x)
    return block_of


def _atomize(lang: Lang):
    """The alphabet partition of one DFA: its elementary intervals (between all row boundaries,
    surrogates left out) grouped into atoms — the intervals every state treats alike.

    Returns (intervals, atom of each interval, per-state dict atom -> target, atom count)."""
    pts = {0, MAXCP + 1, SUR_LO, SUR_HI + 1}
    for row in lang._trans:
        for lo, hi, _ in row:
            pts.add(lo)
            pts.add(hi + 1)
    pts = sorted(pts)
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


def _joint_add(joint: dict, joint_ranges: list, joint_keys: list, key: tuple, lo: int, hi: int) -> None:
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


def _product(a: Lang, b: Lang, both: bool, keyword: str | None = None) -> Lang:
    """Intersection (both=True) or union of two DFAs by the product construction.

    Runs over the joint alphabet partition (pairs of the two DFAs' atoms that meet), so a Unicode
    class of hundreds of ranges costs once, not once per state; the minimized result is expanded
    back to code-point ranges."""
    if keyword is None:
        keyword = "allOf" if both else "anyOf"
    ia, aa, rows_a, _ = _atomize(a)
    ib, ab, rows_b, _ = _atomize(b)
    # Joint atoms: sweep the two interval lists (both cover the alphabet without surrogates).
    joint: dict = {}
    joint_ranges: list[list] = []
    joint_pair: list = []
    i = j = 0
    while i < len(ia) and j < len(ib):
        lo = max(ia[i][0], ib[j][0])
        hi = min(ia[i][1], ib[j][1])
        if lo <= hi:
            _joint_add(joint, joint_ranges, joint_pair, (aa[i], ab[j]), lo, hi)
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
                if len(pairs) > _state_limit():
                    raise LangError(keyword, f"the product automaton exceeds {_state_limit()} states")
            row.append((at, at, t))
        trans.append(row)
        fa = p >= 0 and a._acc[p]
        fb = q >= 0 and b._acc[q]
        acc.append((fa and fb) if both else (fa or fb))
    small = _finish(trans, acc, keyword)  # minimal over joint atoms, so over code points too
    return _expand_atoms(small, joint_ranges)


_SINK = -2  # a complemented language's component past its DFA's end: every string from here on is in it


def intersect_all(parts, keyword: str = "allOf") -> Lang:
    """The intersection of ``parts``, pairs ``(lang, negated)`` (``negated``: the complement of ``lang``), as one
    product over the joint alphabet partition of them all, minimized and expanded back to code points once: the
    same language (so the same canonical DFA) as ``a & b & c.complement() ...`` in the order given, without an
    intermediate automaton per operation. A product past the state bound is done again pairwise in that order
    (whose minimized steps may stay under the bound, or raise as they did)."""
    if not parts:
        return Lang.any_string()
    if len(parts) == 2 and not parts[0][1] and not parts[1][1]:
        return _product(parts[0][0], parts[1][0], both=True, keyword=keyword)
    if len(parts) > 1:
        try:
            return _product_all(parts, keyword)
        except LangError:
            pass
    lang = None
    for part, neg in parts:
        part = part.complement() if neg else part
        lang = part if lang is None else _product(lang, part, both=True, keyword=keyword)
    return lang


def _product_all(parts, keyword: str) -> Lang:
    atomized = [_atomize(lang) for lang, _ in parts]
    # joint atoms: the elementary intervals between every part's boundaries, grouped by their atoms' tuple
    cuts = sorted({lo for ivs, _, _, _ in atomized for lo, _ in ivs} | {SUR_LO})  # no interval spans the surrogates
    pos = [0] * len(parts)
    joint: dict = {}
    joint_ranges: list[list] = []
    joint_atoms: list = []
    for k, lo in enumerate(cuts):
        hi = cuts[k + 1] - 1 if k + 1 < len(cuts) else MAXCP
        if SUR_LO <= lo <= SUR_HI:
            continue  # no part's intervals cover the surrogates
        key = []
        for i, (ivs, iatom, _, _) in enumerate(atomized):
            j = pos[i]
            while ivs[j][1] < lo:
                j += 1
            pos[i] = j
            key.append(iatom[j])
        _joint_add(joint, joint_ranges, joint_atoms, tuple(key), lo, hi)
    rows = [part_rows for _, _, part_rows, _ in atomized]
    negs = [neg for _, neg in parts]
    accs = [lang._acc for lang, _ in parts]
    start = (0,) * len(parts)
    index = {start: 0}
    tuples = [start]
    trans = []
    acc = []
    limit = _state_limit()
    for state in tuples:
        row = []
        for at, atoms in enumerate(joint_atoms):
            nxt = []
            for s, a, part_rows, neg in zip(state, atoms, rows, negs):
                if s == _SINK:
                    nxt.append(_SINK)
                    continue
                t = part_rows[s].get(a, -1)
                if t < 0:
                    if not neg:
                        break  # this part rejects every string through here
                    t = _SINK
                nxt.append(t)
            else:
                key = tuple(nxt)
                t = index.get(key)
                if t is None:
                    t = index[key] = len(tuples)
                    tuples.append(key)
                    if len(tuples) > limit:
                        raise LangError(keyword, f"the product automaton exceeds {limit} states")
                row.append((at, at, t))
        trans.append(row)
        acc.append(all((s == _SINK or not a[s]) if neg else a[s] for s, a, neg in zip(state, accs, negs)))
    return _expand_atoms(_finish(trans, acc, keyword), joint_ranges)


def _expand_atoms(small: Lang, atom_ranges, keyword: str | None = None) -> Lang:
    """A DFA over atom ids turned back into code-point ranges, canonically numbered. With ``keyword``, more
    than MAX_EDGES range transitions is a LangError naming it."""
    rows = []
    total = 0
    for row in small._trans:
        out = []
        for a0, a1, t in row:
            for at in range(a0, a1 + 1):
                if keyword is not None:
                    total += len(atom_ranges[at])
                    if total > MAX_EDGES:
                        raise LangError(keyword, f"the pattern's automaton exceeds {MAX_EDGES} range transitions")
                for lo, hi in atom_ranges[at]:
                    out.append((lo, hi, t))
        out.sort()
        merged = []
        for lo, hi, t in out:
            if merged and merged[-1][2] == t and merged[-1][1] + 1 == lo:
                merged[-1] = (merged[-1][0], hi, t)
            else:
                merged.append((lo, hi, t))
        rows.append(merged)
    return _canonical(rows, small._acc)


def _subset(start_key, step_rows, close, accepting, keyword: str) -> Lang:
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
        pts = set()
        for row in rows:
            for lo, hi, _ in row:
                pts.add(lo)
                pts.add(hi + 1)
        pts = sorted(pts)
        targets: list[set] = [set() for _ in range(max(0, len(pts) - 1))]
        for row in rows:
            for lo, hi, t in row:
                k = bisect.bisect_left(pts, lo)
                while k < len(pts) - 1 and pts[k] <= hi:
                    targets[k].add(t)
                    k += 1
        out = []
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
                if len(keys) > _state_limit():
                    raise LangError(keyword, f"the automaton exceeds {_state_limit()} states")
            lo, hi = pts[k], pts[k + 1] - 1
            if out and out[-1][2] == t and out[-1][1] + 1 == lo:
                out[-1] = (out[-1][0], hi, t)
            else:
                out.append((lo, hi, t))
        trans.append(out)
        acc.append(accepting(key))
    return _finish(trans, acc, keyword)


def _preimage_map(d: Lang, fmap: dict, keyword: str) -> Lang:
    """{s : f(s) in d} for a per-character map f: chars absent from ``fmap`` map to themselves,
    ``fmap[c]`` is the string (maybe longer than one char) that code point c maps to."""
    exc = sorted(fmap)
    keep = _cs_neg(_norm((c, c) for c in exc))  # the characters that map to themselves
    trans = []
    sink = len(d._trans)

    run = d.run

    for q in range(len(d._trans)):
        row = []
        # identity part: d's edges minus the exception characters
        for lo, hi, t in d._trans[q]:
            for a, b in _clip(lo, hi, keep):
                row.append((a, b, t))
        for c in exc:
            t = run(q, fmap[c])
            if t >= 0:
                row.append((c, c, t))
        row.sort()
        trans.append(row)
    del sink
    return _finish(trans, list(d._acc), keyword)


# --------------------------------------------------------------------------- regex → DFA

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
        self.budget = MAX_NFA_NODES
        self.interned: dict = {}

    def new(self, kind, arg, nxt) -> int:
        self.budget -= 1
        if self.budget < 0:
            raise LangError(self.keyword, f"the pattern expands past {MAX_NFA_NODES} automaton nodes")
        if kind == 0:
            arg = self.interned.setdefault(arg, arg)
        self.kind.append(kind)
        self.arg.append(arg)
        self.nxt.append(nxt)
        return len(self.kind) - 1


_FLAG_I, _FLAG_M, _FLAG_S, _FLAG_A = re.IGNORECASE, re.MULTILINE, re.DOTALL, re.ASCII


def _fragment_of_items(items) -> str:
    """Serialize an IN item list back to a regex class, for an exact scan by ``re``."""
    parts = []
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
        return UNIVERSE if flags & _FLAG_S else _cs_neg(((10, 10),))
    if flags & _FLAG_I:
        # Case-insensitive: let `re` itself say which code points match (exact folding).
        if op is _sre_c.LITERAL:
            return _scan_class("\\U%08x" % av, scan_flags)
        if op is _sre_c.NOT_LITERAL:
            return _scan_class("[^\\U%08x]" % av, scan_flags)
        return _scan_class(_fragment_of_items(av), scan_flags)
    if op is _sre_c.LITERAL:
        return _norm(((av, av),))
    if op is _sre_c.NOT_LITERAL:
        return _cs_neg(((av, av),))
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
            acc.extend(_category(esc[1], ascii_only))
        else:
            raise LangError("pattern", f"unsupported class item {iop}")
    cs = _norm(acc)
    return _cs_neg(cs) if neg else cs


class _RegexBuilder:
    def __init__(self, keyword: str):
        self.nfa = _Nfa(keyword)
        self.keyword = keyword
        self.word_flags: set = set()
        self.uses_bos = self.uses_bol = self.uses_wb = False

    def refuse(self, what: str):
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


def _regex_lang(pattern: str, keyword: str = "pattern") -> Lang:
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
    nfa = b.nfa
    final = nfa.new(3, None, None)
    try:
        start = b.seq(parsed.data, flags, final)
    except (RecursionError, _TooDeep):
        raise LangError(keyword, "the pattern nests too deeply") from None
    word = _category("w", bool(b.word_flags and next(iter(b.word_flags)))) if b.uses_wb else ()

    work = [0]
    edges = [0]

    def closure(prev: int, seeds) -> frozenset:
        out = set()
        seen = set()
        stack = list(seeds)
        while stack:
            work[0] += 1
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
                a = nfa.arg[node]
                add = None
                if a == _A_BOS:
                    if prev != _P_BOS:
                        continue
                elif a == _A_BOL:
                    if prev not in (_P_BOS, _P_NL):
                        continue
                elif a == _A_EOS:
                    add = _R_E0
                elif a == _A_EOSNL:
                    add = _R_E1
                elif a == _A_EOL:
                    add = _R_NL
                elif a == _A_WB:
                    add = _R_NN if prev == _P_W else _R_NW
                else:  # _A_NWB
                    # Python < 3.14: \\B never matches inside the empty string (ask re itself).
                    add = _R_NNC if prev == _P_BOS and not _NWB_MATCHES_EMPTY else (_R_NW if prev == _P_W else _R_NN)
                if add is not None:
                    nr = _req_simplify(reqs | {add})
                    if nr is None:
                        continue
                    reqs = nr
                stack.append((nfa.nxt[node], reqs))
        return frozenset(out)

    TOP = ("top",)

    def make_key(prev: int, threads: frozenset):
        # The context (prev) is consumed by the closure: the threads alone say what follows.
        for node, reqs in threads:
            if node == final and not reqs:
                return TOP
        return threads

    # The alphabet partition: atoms are the classes of code points that every character set of
    # the NFA (and the word / newline kinds the assertions look at) treats alike.  The subset
    # construction runs over atoms (a Unicode class like \\w is one atom, not ~700 ranges); the
    # minimized automaton is expanded back to code-point ranges at the end.
    charsets = list(nfa.interned.values())
    bounds = {0, MAXCP + 1, SUR_LO, SUR_HI + 1, 10, 11}
    for cs in charsets + ([word] if word else []):
        for lo, hi in cs:
            bounds.add(lo)
            bounds.add(hi + 1)
    bounds = sorted(bounds)
    members: list[list[int]] = [[] for _ in range(len(bounds) - 1)]
    for ci, cs in enumerate(charsets + ([word] if word else [])):
        for lo, hi in cs:
            k = bisect.bisect_left(bounds, lo)
            while k < len(bounds) - 1 and bounds[k] <= hi:
                members[k].append(ci)
                k += 1
    word_ci = len(charsets) if word else -1
    atom_of_sig: dict = {}
    atom_ranges: list[list] = []
    atom_kind: list[int] = []
    cs_atoms: dict = {id(cs): set() for cs in charsets}
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1] - 1
        if SUR_LO <= lo <= SUR_HI:
            continue
        sig = tuple(members[k])
        kind = _K_NL if lo == 10 else (_K_W if word_ci in sig else _K_O)
        a = atom_of_sig.get((sig, kind))
        if a is None:
            a = atom_of_sig[(sig, kind)] = len(atom_ranges)
            atom_ranges.append([])
            atom_kind.append(kind)
            for ci in sig:
                if ci != word_ci:
                    cs_atoms[id(charsets[ci])].add(a)
        atom_ranges[a].append((lo, hi))
    n_atoms = len(atom_ranges)

    start_key = make_key(_P_BOS, closure(_P_BOS, [(start, frozenset())]))
    index = {start_key: 0}
    keys = [start_key]
    trans = []
    acc = []
    for key in keys:
        if key is TOP:
            me = index[key]
            trans.append([(0, n_atoms - 1, me)])
            acc.append(True)
            continue
        threads = list(key)  # order is irrelevant: every target is a set
        groups: dict = {}
        finals = []
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
        work[0] += len(threads) + n_atoms
        if work[0] > MAX_WORK:
            raise LangError(keyword, f"the pattern's automaton needs more than {MAX_WORK} steps to build")
        covers: dict = {}
        for gi, (cs, _) in enumerate(glist):
            for a in cs_atoms[id(cs)]:
                covers.setdefault(a, []).append(gi)
        row = []
        cache: dict = {}
        for a in range(n_atoms):
            cov = tuple(covers.get(a, ()))
            ck = atom_kind[a]
            newprev = _P_NL if (ck == _K_NL and b.uses_bol) else (_P_W if ck == _K_W else _P_O)
            ckey = (cov, ck)
            target = cache.get(ckey)
            if target is None:
                seeds = [(start, frozenset())]
                stepping = [ti for gi in cov for ti in glist[gi][1]]
                for ti in stepping + finals:
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
                    nxt = final if nfa.kind[node] == 3 else nfa.nxt[node]
                    seeds.append((nxt, frozenset(nr)))
                nk = make_key(newprev, closure(newprev, seeds))
                target = index.get(nk)
                if target is None:
                    target = index[nk] = len(keys)
                    keys.append(nk)
                    if len(keys) > _state_limit():
                        raise LangError(keyword, f"the pattern's automaton exceeds {_state_limit()} states")
                cache[ckey] = target
            if row and row[-1][2] == target and row[-1][1] + 1 == a:
                row[-1] = (row[-1][0], a, target)
            else:
                row.append((a, a, target))
        trans.append(row)
        edges[0] += len(row)
        if edges[0] > MAX_EDGES:
            raise LangError(keyword, f"the pattern's automaton exceeds {MAX_EDGES} transitions")
        acc.append(any(nfa.kind[node] == 3 and all(_REQ_EOS_OK[r] for r in reqs) for node, reqs in threads))
    small = _finish(trans, acc, keyword)  # minimal over atoms, so minimal over code points too
    return _expand_atoms(small, atom_ranges, keyword)


# --------------------------------------------------------------------------- formats
# Each language below is what the jsonschema checker (jsonschema/_format.py with its extras)
# accepts, derived from what that code actually does; tests/schema/test_strict_lang.py checks each one
# against the checker itself on generated and mutated strings.

KNOWN_FORMATS = frozenset(
    (
        "date",
        "time",
        "date-time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "json-pointer",
        "uuid",
        # known to jsonschema, not built here (LangError): too large, not regular, or not modelled
        "idn-hostname",
        "relative-json-pointer",
        "regex",
        "uri-template",
        "color",
    )
)


_D4_ON = ("draft4", "draft6", "draft7", "draft2019-09", "draft2020-12")
#: Which drafts' format checkers (``jsonschema``'s ``DraftNValidator.FORMAT_CHECKER``) assert each
#: format name (draft 3 is not listed: its checker has other names).  Elsewhere jsonschema treats
#: the name as an annotation.
FORMAT_DRAFTS = {
    "email": _D4_ON,
    "idn-email": _D4_ON,
    "ipv4": _D4_ON,
    "ipv6": _D4_ON,
    "hostname": _D4_ON,
    "uri": _D4_ON,
    "date-time": _D4_ON,
    "regex": _D4_ON,
    "uri-reference": _D4_ON[1:],
    "json-pointer": _D4_ON[1:],
    "uri-template": _D4_ON[1:],
    "idn-hostname": _D4_ON[2:],
    "iri": _D4_ON[2:],
    "iri-reference": _D4_ON[2:],
    "date": _D4_ON[2:],
    "time": _D4_ON[2:],
    "relative-json-pointer": _D4_ON[2:],
    "duration": _D4_ON[3:],
    "uuid": _D4_ON[3:],
}


def draft_checks_format(draft: str, name: str) -> bool:
    """True when jsonschema's checker for ``draft`` ("draft4" ... "draft2020-12") asserts the
    format ``name``; False means the keyword is only an annotation there."""
    return draft in FORMAT_DRAFTS.get(name, ())


def is_known_format(name: str) -> bool:
    """True for the format names ``jsonschema``'s checker validates (built here or refused);
    a ``LangError`` for any other name may be read as "annotation only", as jsonschema does."""
    return name in KNOWN_FORMATS


def _cls(cs) -> str:
    """A regex class for a charset (for building format patterns from computed sets)."""
    return "[" + "".join("\\U%08x-\\U%08x" % (lo, hi) for lo, hi in cs) + "]"


_CASE_MAPS: dict = {}


def _case_map(kind: str) -> dict:
    """{code point: its str.upper() / str.lower()} for the code points that map elsewhere."""
    got = _CASE_MAPS.get(kind)
    if got is None:
        got = {}
        text = _all_text()
        conv = str.upper if kind == "upper" else str.lower
        # Most 256-character blocks map to themselves: compare whole blocks first (in C).
        for start in range(0, len(text), 256):
            block = text[start : start + 256]
            if conv(block) == block:
                continue
            for i, ch in enumerate(block):
                m = conv(ch)
                if m != ch:
                    got[_pos_to_cp(start + i)] = m
        _CASE_MAPS[kind] = got
    return got


def _full(p: str) -> Lang:
    """The strings that fully match ``p`` (``\\A(?:p)\\Z``)."""
    return Lang.regex(r"\A(?:%s)\Z" % p, "format")


def _preimage_replace(d: Lang, needle: str) -> Lang:
    """{s : s.replace(needle, "") in d} — str.replace's leftmost, non-overlapping deletion,
    run as a transducer whose state is the pending prefix of ``needle``."""
    specials = sorted(set(needle))
    others = _cs_neg(_norm((ord(c), ord(c)) for c in specials))

    run = d.run

    def feed(buf, ch):
        s = buf + ch
        out = ""
        while True:
            if s == needle:
                return "", out
            if needle.startswith(s):
                return s, out
            out += s[0]
            s = s[1:]

    index = {("", 0): 0}
    keys = [("", 0)]
    trans = []
    acc = []
    for buf, q in keys:
        row = []

        def target(key):
            t = index.get(key)
            if t is None:
                t = index[key] = len(keys)
                keys.append(key)
                if len(keys) > _state_limit():
                    raise LangError("format", f"the automaton exceeds {_state_limit()} states")
            return t

        for ch in specials:
            nb, out = feed(buf, ch)
            q2 = run(q, out)
            if q2 >= 0:
                row.append((ord(ch), ord(ch), target((nb, q2))))
        q1 = run(q, buf)  # any other character flushes the pending prefix and passes
        if q1 >= 0:
            for lo, hi, t in d._trans[q1]:
                for a, b in _clip(lo, hi, others):
                    row.append((a, b, target(("", t))))
        row.sort()
        trans.append(row)
        qf = run(q, buf)
        acc.append(qf >= 0 and d._acc[qf])
    return _finish(trans, acc, "format")


def _preimage_strip(d: Lang, chars: str) -> Lang:
    """{s : s.strip(chars) in d}: s = B m B' with B, B' runs of ``chars`` and m neither
    starting nor ending with one of them (or s all ``chars`` and "" in d)."""
    cls = _cls(_norm((ord(c), ord(c)) for c in chars))
    runs = _full(cls + "*")
    not_edge = _full(r"(?s:(?:[^%s](?:.*[^%s])?)?)" % (re.escape(chars), re.escape(chars)))
    out = runs.concat((d & not_edge).concat(runs, "format"), "format")
    if d.matches(""):
        out = out | runs
    return out


_YEAR_NZ = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
)
# A real calendar date, years 0001-9999 (date.fromisoformat and calendar.monthrange agree).
_DATE = r"(?:%s-%s|%s-02-29)" % (_YEAR_NZ, _MONTH_DAY, _LEAP)
# rfc3339_validator's time part (re.ASCII, so [0-9]).
_TIME = (
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = r"(?:%s\.){3}%s" % (_OCTET, _OCTET)


def _ipv6_pattern() -> str:
    """ipaddress.IPv6Address's grammar: 8 hextets, or "::" standing for at least one, an IPv4
    tail counting as two hextets, no scope id (jsonschema rejects a non-empty one)."""
    h = "[0-9a-fA-F]{1,4}"

    def hextets(k):
        return "(?:%s:){%d}%s" % (h, k - 1, h) if k else ""

    alts = ["(?:%s:){7}%s" % (h, h), "(?:%s:){6}%s" % (h, _IPV4)]
    for k1 in range(8):
        for k2 in range(8 - k1):
            tails = [hextets(k2)]
            if k2 >= 2:
                tails.append("(?:%s:){%d}%s" % (h, k2 - 2, _IPV4))
            for tail in tails:
                alts.append(hextets(k1) + "::" + tail)
    return "|".join(alts)


def _uri_patterns(iri: bool = False) -> tuple[str, str]:
    """RFC 3986's URI and URI-reference (or RFC 3987's IRI and IRI-reference) as rfc3987 —
    jsonschema's uri/iri checker — writes them; note its dec-octet accepts leading zeros
    inside IP literals.  Returns (absolute form, reference form)."""
    # RFC 3987 ucschar and iprivate, as rfc3987 lists them.
    ucs = (
        (
            "\\xA0-\\uD7FF\\uF900-\\uFDCF\\uFDF0-\\uFFEF"
            + "".join("\\U%08X-\\U%08X" % (p << 16, (p << 16) + 0xFFFD) for p in range(1, 14))
            + "\\U000E1000-\\U000EFFFD"
        )
        if iri
        else ""
    )
    private = "\\uE000-\\uF8FF\\U000F0000-\\U000FFFFD\\U00100000-\\U0010FFFD"
    pct = "%[0-9A-Fa-f]{2}"
    unres_sub = "A-Za-z0-9._~!$&'()*+,;=\\-" + ucs
    pchar = "(?:[%s:@]|%s)" % (unres_sub, pct)
    scheme = "[A-Za-z][A-Za-z0-9+.\\-]*"
    userinfo = "(?:[%s:]|%s)*" % (unres_sub, pct)
    reg_name = "(?:[%s]|%s)*" % (unres_sub, pct)
    dec_octet = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
    ipv4 = "(?:%s\\.){3}%s" % (dec_octet, dec_octet)
    h16 = "[0-9A-Fa-f]{1,4}"
    ls32 = "(?:%s:%s|%s)" % (h16, h16, ipv4)
    v6 = "|".join(
        [
            "(?:%s:){6}%s" % (h16, ls32),
            "::(?:%s:){5}%s" % (h16, ls32),
            "(?:%s)?::(?:%s:){4}%s" % (h16, h16, ls32),
            "(?:(?:%s:)?%s)?::(?:%s:){3}%s" % (h16, h16, h16, ls32),
            "(?:(?:%s:){0,2}%s)?::(?:%s:){2}%s" % (h16, h16, h16, ls32),
            "(?:(?:%s:){0,3}%s)?::%s:%s" % (h16, h16, h16, ls32),
            "(?:(?:%s:){0,4}%s)?::%s" % (h16, h16, ls32),
            "(?:(?:%s:){0,5}%s)?::%s" % (h16, h16, h16),
            "(?:(?:%s:){0,6}%s)?::" % (h16, h16),
        ]
    )
    # IPvFuture keeps the ASCII unreserved set even in IRIs (rfc3987 shares the rule).
    ipvfuture = "v[0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=\\-:]+"
    host = "(?:\\[(?:%s|%s)\\]|%s|%s)" % (v6, ipvfuture, ipv4, reg_name)
    authority = "(?:%s@)?%s(?::[0-9]*)?" % (userinfo, host)
    segment = pchar + "*"
    seg_nz = pchar + "+"
    seg_nz_nc = "(?:[%s@]|%s)+" % (unres_sub, pct)
    abempty = "(?:/%s)*" % segment
    absolute = "/(?:%s(?:/%s)*)?" % (seg_nz, segment)
    rootless = "%s(?:/%s)*" % (seg_nz, segment)
    noscheme = "%s(?:/%s)*" % (seg_nz_nc, segment)
    query = "(?:%s|[/?%s])*" % (pchar, private if iri else "")
    fragment = "(?:%s|[/?])*" % pchar
    hier = "(?://%s%s|%s|%s|)" % (authority, abempty, absolute, rootless)
    rel = "(?://%s%s|%s|%s|)" % (authority, abempty, absolute, noscheme)
    uri = "%s:%s(?:\\?%s)?(?:#%s)?" % (scheme, hier, query, fragment)
    relref = "%s(?:\\?%s)?(?:#%s)?" % (rel, query, fragment)
    return uri, "(?:%s|%s)" % (uri, relref)


def _duration_lang() -> Lang:
    """isoduration.parse_duration plus jsonschema's "ends with one of DMYWHMS"."""
    num = r"[+\-0-9.,eE]"
    # Decimal() of the run (',' read as '.'): sign, digits with one point, optional exponent.
    dec = r"[+-]?(?:[0-9]+(?:[.,][0-9]*)?|[.,][0-9]+)(?:[eE][+-]?[0-9]+)?"
    zero = r"[+-]?(?:0+(?:[.,]0*)?|[.,]0+)(?:[eE][+-]?[0-9]+)?"
    # Designators in order (parse_designator pops the ones it passes); W only after zero values
    # (the parser compares the DateDuration so far with an all-zero one).
    date_ne = "(?:{d}Y(?:{d}M)?(?:{d}D)?|{d}M(?:{d}D)?|{d}D|(?:{z}Y)?(?:{z}M)?(?:{z}D)?{d}W)".format(d=dec, z=zero)
    time_ne = "(?:{d}H(?:{d}M)?(?:{d}S)?|{d}M(?:{d}S)?|{d}S)".format(d=dec)
    # After the last date designator, number characters before 'T' are collected and dropped;
    # with no designator at all a run without ',' sends the string to arrow's datetime parser,
    # which never yields a value ending in a designator letter (so: rejected).
    body = "(?:{dn}|{dn}{n}*T{tn}|(?:{n}*,{n}*)?T{tn})".format(dn=date_ne, n=num, tn=time_ne)
    return _full(r"[+-]?P" + body)


def _uuid_lang() -> Lang:
    """uuid.UUID(s) then jsonschema's "s[8], s[13], s[18], s[23] are '-'".

    UUID: h = s.replace('urn:', '').replace('uuid:', '').strip('{}').replace('-', ''), then
    len(h) == 32 and int(h, 16) — which allows surrounding whitespace, a sign, a 0x prefix,
    single underscores between digits, and any Unicode decimal digit as a digit."""
    space = _cs_union(((9, 13), (32, 32)), _cs_diff(_category("s", False), ((0, 127),)))
    digit = _cs_union(((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)), _category("d", False))
    ws, dg = _cls(space), _cls(digit)
    h = _full(r"{w}*[+\-]?(?:0[xX]_?)?{d}(?:_?{d})*{w}*".format(w=ws, d=dg)) & Lang.length(32, 32)
    t3 = _preimage_map(h, {0x2D: ""}, "format")
    t2 = _preimage_strip(t3, "{}")
    t1 = _preimage_replace(t2, "uuid:")
    s = _preimage_replace(t1, "urn:")
    return s & _full(r"(?s:.{8}-.{4}-.{4}-.{4}-.*)")


def _hostname_lang() -> Lang:
    """fqdn.FQDN(s, min_labels=1).is_valid: s.lower() matched (re.IGNORECASE) against labels
    of 1-63 of [-A-Z\\d] not starting/ending with '-', dot-separated, optional final dot, and
    `$` (so a final '\\n' passes); length <= 253 not counting a final dot."""
    label = r"[A-Z\d](?:[-A-Z\d]{0,61}[A-Z\d])?"
    names = Lang.regex(r"(?i)\A(?:%s\.)*%s\.?\n?\Z" % (label, label), "format")
    length = _full(r"(?s:.{0,253})") | _full(r"(?s:.{0,253}\.)")
    return _preimage_map(names & length, _case_map("lower"), "format")


def _draft3_time_lang() -> Lang:
    """datetime.strptime(s, '%H:%M:%S'): _strptime's IGNORECASE regex (Unicode \\d, read by
    int()) must span s; seconds 60 and 61 pass the regex but datetime() refuses them."""
    rx = Lang.regex(r"(?i)\A(?:2[0-3]|[0-1]\d|\d):(?:[0-5]\d|\d):(?:[0-5]\d|\d)\Z", "format")
    return rx


# The CSS3 colour keywords (CSS Color Module Level 3, section 4.3), the names webcolors' default
# spec knows: the draft-3 "color" checker looks the lower-cased instance up among them.
_CSS3_COLOR_NAMES = """
aliceblue antiquewhite aqua aquamarine azure beige bisque black blanchedalmond blue blueviolet brown
burlywood cadetblue chartreuse chocolate coral cornflowerblue cornsilk crimson cyan darkblue darkcyan
darkgoldenrod darkgray darkgreen darkgrey darkkhaki darkmagenta darkolivegreen darkorange darkorchid
darkred darksalmon darkseagreen darkslateblue darkslategray darkslategrey darkturquoise darkviolet
deeppink deepskyblue dimgray dimgrey dodgerblue firebrick floralwhite forestgreen fuchsia gainsboro
ghostwhite gold goldenrod gray green greenyellow grey honeydew hotpink indianred indigo ivory khaki
lavender lavenderblush lawngreen lemonchiffon lightblue lightcoral lightcyan lightgoldenrodyellow
lightgray lightgreen lightgrey lightpink lightsalmon lightseagreen lightskyblue lightslategray
lightslategrey lightsteelblue lightyellow lime limegreen linen magenta maroon mediumaquamarine
mediumblue mediumorchid mediumpurple mediumseagreen mediumslateblue mediumspringgreen
mediumturquoise mediumvioletred midnightblue mintcream mistyrose moccasin navajowhite navy oldlace
olive olivedrab orange orangered orchid palegoldenrod palegreen paleturquoise palevioletred
papayawhip peachpuff peru pink plum powderblue purple red rosybrown royalblue saddlebrown salmon
sandybrown seagreen seashell sienna silver skyblue slateblue slategray slategrey snow springgreen
steelblue tan teal thistle tomato turquoise violet wheat white whitesmoke yellow yellowgreen
""".split()


def _color_lang() -> Lang:
    """The bare FormatChecker()'s draft-3 "color": webcolors.name_to_hex(s) (s.lower() among the
    CSS3 keywords) or else normalize_hex(s.lower()) (^#(3 or 6 hex digits)$, so a final '\\n'
    passes)."""
    names = Lang.empty()
    for n in _CSS3_COLOR_NAMES:
        names = names | Lang.literal(n)
    hexes = _full(r"#(?:[a-fA-F0-9]{3}|[a-fA-F0-9]{6})\n?")
    return _preimage_map(names | hexes, _case_map("lower"), "format")


_FORMAT_CACHE: dict = {}


def _format_lang(name: str, bare_checker: bool) -> Lang:
    bare_checker = bool(bare_checker and name in ("time", "color"))
    key = (name, bare_checker)
    got = _FORMAT_CACHE.get(key)
    if got is None:
        shipped = format_data.load(name, bare_checker) if key in _SHIPPED else None
        if shipped is not None:
            got = _FORMAT_CACHE[key] = Lang(*shipped)  # built by build_format_lang, checked by the tests
        else:
            try:
                got = build_format_lang(name, bare_checker)
            except LangError as e:
                # a format that cannot be built fails the same way every time: remembered (hostname took
                # 40 ms to reach the state bound, in every schema that has it)
                got = (e.keyword, e.reason)
            _FORMAT_CACHE[key] = got
    if isinstance(got, tuple):
        raise LangError(*got)
    return got


_SHIPPED = frozenset(format_data.FORMATS)


def build_format_lang(name: str, bare_checker: bool = False) -> Lang:
    """A format's language built now from the checker's reading (the slow way; bankml.schema.format_data
    ships the result)."""
    _LOCAL.scale = _FORMAT_SCALE
    try:
        return _build_format(name, bare_checker)
    finally:
        _LOCAL.scale = 1


def write_format_data() -> None:
    """Rebuild bankml/schema/formats.npz from build_format_lang."""
    langs = {}
    for name, bare in format_data.FORMATS:
        lang = build_format_lang(name, bare)
        langs[(name, bare)] = (lang._trans, lang._acc)
    format_data.write(langs)


def _build_format(name: str, bare_checker: bool) -> Lang:
    if name in ("email", "idn-email"):
        got = Lang.regex("@", "format")
    elif name == "date":
        got = _full(_DATE)
    elif name == "date-time":
        # validate_rfc3339(s.upper()): ^...$ so a final '\n' passes too.
        got = _preimage_map(_full(r"%sT%s\n?" % (_DATE, _TIME)), _case_map("upper"), "format")
    elif name == "time" and bare_checker:
        got = _draft3_time_lang()
    elif name == "color" and bare_checker:
        got = _color_lang()
    elif name == "time":
        got = _preimage_map(_full(_TIME + r"\n?"), _case_map("upper"), "format")
    elif name == "ipv4":
        got = _full(_IPV4)
    elif name == "ipv6":
        got = _full(_ipv6_pattern())
    elif name == "hostname":
        _LOCAL.scale = 1  # its exact automaton is far too large: fail fast at the plain bound
        try:
            got = _hostname_lang()
        except LangError:
            raise LangError(
                "format",
                "hostname: labels of at most 63 characters inside a name of at "
                f"most 253 need far more than {MAX_STATES} DFA states",
            ) from None
    elif name == "duration":
        got = _duration_lang()
    elif name == "uuid":
        got = _uuid_lang()
    elif name in ("uri", "uri-reference", "iri", "iri-reference"):
        # rfc3987.parse: its regex as ^...$, so a final '\n' passes too.
        absolute, ref = _uri_patterns(iri=name.startswith("iri"))
        got = _full("(?:%s)\\n?" % (ref if name.endswith("reference") else absolute))
    elif name == "json-pointer":
        # jsonpointer.JsonPointer: no '~' but '~0'/'~1' (its search of (~[^01]|~$), where $ also
        # matches before a final '\n'), and empty or starting with '/'.
        got = Lang.regex(r"(~[^01]|~$)", "format").complement() & Lang.regex(r"\A(?:/|\Z)", "format")
    elif name == "color":
        raise LangError(
            "format",
            "'color' is checked only by the bare FormatChecker() (draft 3's "
            "checker; an annotation in later drafts): Lang.format('color', "
            "bare_checker=True) builds it",
        )
    elif name in KNOWN_FORMATS:
        raise LangError("format", f"format {name!r} is not built exactly (not regular, or its checker is not modelled)")
    else:
        raise LangError("format", f"unknown format {name!r} (jsonschema treats it as an annotation)")
    return got


def string_lang(
    pattern: str | None = None, min_length: int | None = None, max_length: int | None = None, format: str | None = None
) -> Lang:
    """The language of a string schema's ``pattern`` ∩ ``minLength``/``maxLength`` ∩ ``format``
    (each optional).  Raises ``LangError`` naming the keyword that cannot be built; an unknown
    ``format`` raises too (check ``is_known_format`` first to treat it as an annotation)."""
    lang = Lang.any_string()
    if min_length is not None or max_length is not None:
        lang = Lang.length(min_length or 0, max_length)
    if pattern is not None:
        lang = _product(lang, Lang.regex(pattern), True, "pattern")
    if format is not None:
        lang = _product(lang, Lang.format(format), True, "format")
    return lang


# --------------------------------------------------------------------------- GBNF emission

# Characters JSON lets a string hold unescaped.
_RAW_OK = _cs_diff(UNIVERSE, ((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)))
# Short escapes: decoded code point -> the letter after the backslash.
_SHORT_ESC = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_HEX_FULL = "[0-9a-fA-F]"


def _gbnf_cp(c: int) -> str:
    """One code point inside a GBNF class or string literal."""
    if 0x30 <= c <= 0x39 or 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A:
        return chr(c)
    if c <= 0xFFFF:
        return "\\u%04X" % c
    return "\\U%08X" % c


def _gbnf_class(cs, admit_surrogates: bool = False) -> str:
    """A GBNF class for the code points of cs, negated (``[^...]``, listing the surrogates too,
    which no UTF-8 text holds) when that is shorter.  With ``admit_surrogates`` the class also
    takes U+D800..U+DFFF wherever that makes it simpler (ranges joined across the gap, negated
    classes not listing them)."""
    if admit_surrogates:
        joined = []
        for lo, hi in cs:
            if joined and joined[-1][1] == SUR_LO - 1 and lo == SUR_HI + 1:
                joined[-1] = (joined[-1][0], hi)
            else:
                joined.append((lo, hi))
        cs = tuple(joined)
    pos = _gbnf_class_body(cs)
    comp = []
    prev = 0
    for lo, hi in cs:
        if lo > prev:
            comp.append((prev, lo - 1))
        prev = hi + 1
    if prev <= MAXCP:
        comp.append((prev, MAXCP))
    if not admit_surrogates:
        comp = _plain_ranges(comp + [(SUR_LO, SUR_HI)])
    else:
        comp = _cs_diff_plain(comp, ((SUR_LO, SUR_HI),))
    neg = _gbnf_class_body(comp) if comp else None
    if neg is not None and len(neg) < len(pos):
        return "[^" + neg + "]"
    return "[" + pos + "]"


def _cs_diff_plain(a, b) -> tuple:
    out = []
    for lo, hi in a:
        pieces = [(lo, hi)]
        for blo, bhi in b:
            nxt = []
            for x, y in pieces:
                if bhi < x or blo > y:
                    nxt.append((x, y))
                    continue
                if x < blo:
                    nxt.append((x, blo - 1))
                if y > bhi:
                    nxt.append((bhi + 1, y))
            pieces = nxt
        out.extend(pieces)
    return tuple(out)


def _gbnf_class_body(cs) -> str:
    parts = []
    for lo, hi in cs:
        if lo == hi:
            parts.append(_gbnf_cp(lo))
        elif hi == lo + 1:
            parts.append(_gbnf_cp(lo) + _gbnf_cp(hi))
        else:
            parts.append(_gbnf_cp(lo) + "-" + _gbnf_cp(hi))
    return "".join(parts)


def _hex_digit_class(values) -> str:
    """A class of hex digits with the given values (0..15), letters in both cases."""
    vals = sorted(values)
    if vals == list(range(16)):
        return _HEX_FULL
    ranges = []
    for v in vals:
        if ranges and ranges[-1][1] + 1 == v:
            ranges[-1][1] = v
        else:
            ranges.append([v, v])
    digits = []
    letters = []
    for lo, hi in ranges:
        if lo <= 9:
            digits.append((lo, min(hi, 9)))
        if hi >= 10:
            letters.append((max(lo, 10), hi))
    out = []
    for lo, hi in digits:
        out.append(str(lo) if lo == hi else "%d-%d" % (lo, hi))
    for base in ("a", "A"):
        for lo, hi in letters:
            a, b = chr(ord(base) + lo - 10), chr(ord(base) + hi - 10)
            out.append(a if lo == hi else a + "-" + b)
    if len(vals) == 1 and vals[0] <= 9:
        return '"%d"' % vals[0]
    return "[" + "".join(out) + "]"


def _hex_expr(ranges: tuple, k: int, memo: dict) -> str | None:
    """GBNF for the k-hex-digit strings (either case) whose value lies in ``ranges``."""
    if not ranges:
        return None
    key = (ranges, k)
    got = memo.get(key)
    if got is not None:
        return got
    size = 16**k
    if ranges == ((0, size - 1),):
        out = " ".join([_HEX_FULL] * k)
    else:
        step = size // 16
        # the ranges split at the leading digit's boundaries, relative to their digit's base, in one pass
        buckets: dict = {}
        for lo, hi in ranges:
            d, d1 = lo // step, hi // step
            while d < d1:
                buckets.setdefault(d, []).append((lo - d * step, step - 1))
                d += 1
                lo = d * step
            buckets.setdefault(d, []).append((lo - d * step, hi - d * step))
        groups: dict = {}
        order = []
        for d, sub in buckets.items():
            rel = tuple(sub)
            e = _hex_expr(rel, k - 1, memo) if k > 1 else ""
            if e not in groups:
                groups[e] = []
                order.append(e)
            groups[e].append(d)
        alts = []
        for e in order:
            cls = _hex_digit_class(groups[e])
            alts.append((cls + " " + e).strip())
        out = alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"
    memo[key] = out
    return out


def _plain_ranges(cs) -> tuple:
    """Ranges over plain integers (no surrogate clipping), merged."""
    out: list[list[int]] = []
    for lo, hi in sorted(cs):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


# The GBNF of a character set, shared by every conversion of the process: the same sets (any character but
# '"', a pattern's classes, a format's) come back in schema after schema. Both caches are bounded: past their
# size they start again empty.
_CHARSET_GBNF: dict = {}
_HEX_MEMO: dict = {}
_CHARSET_CACHE_MAX = 4096
_HEX_MEMO_MAX = 200_000


def _charset_gbnf(cs, admit_surrogates: bool = False) -> str:
    """The alternatives of ``_charset_alts`` joined into one rule body, from the process-wide cache."""
    key = (cs, admit_surrogates)
    got = _CHARSET_GBNF.get(key)
    if got is None:
        if len(_CHARSET_GBNF) >= _CHARSET_CACHE_MAX:
            _CHARSET_GBNF.clear()
        if len(_HEX_MEMO) >= _HEX_MEMO_MAX:
            _HEX_MEMO.clear()
        got = _CHARSET_GBNF[key] = " | ".join(_charset_alts(cs, _HEX_MEMO, admit_surrogates))
    return got


def _charset_alts(cs, memo: dict, admit_surrogates: bool = False) -> list[str]:
    """Every JSON encoding of one character of ``cs``, as GBNF alternatives."""
    alts = []
    raw = _cs_inter(cs, _RAW_OK)
    if raw:
        alts.append(_gbnf_class(raw, admit_surrogates))
    # The escapes after one backslash, and the \u ones after one "u": a character set of many surrogate-pair
    # groups (Python's \w) would otherwise put as many stacks on a backslash, each of them stepped on every
    # character (the language is the same).
    short = sorted(_SHORT_ESC[c] for c in _SHORT_ESC if _cs_has(cs, c))
    short_expr = None
    if short:
        body = "".join("\\\\" if ch == "\\" else ('\\"' if ch == '"' else ch) for ch in short)
        short_expr = "[" + body + "]" if len(short) > 1 else '"' + body + '"'
    u_alts = []
    bmp = _cs_inter(cs, ((0, 0xFFFF),))
    if bmp:
        u_alts.append(_hex_expr(_plain_ranges(bmp), 4, memo))
    # Above U+FFFF: surrogate pairs; group high surrogates that take the same low ones.
    # A high surrogate whose whole block of 1,024 is in the set takes every low one: such blocks are kept as
    # runs (h0, h1), so a wide range costs two partial blocks, not one entry per block.
    partial: dict = {}  # high surrogate index -> low ranges
    runs = []  # (first, last) high surrogate indexes of whole blocks
    for lo, hi in _cs_inter(cs, ((0x10000, MAXCP),)):
        h0, h1 = (lo - 0x10000) >> 10, (hi - 0x10000) >> 10
        f0 = h0 if (lo - 0x10000) & 0x3FF == 0 else h0 + 1
        f1 = h1 if (hi - 0x10000) & 0x3FF == 0x3FF else h1 - 1
        for h in (h0, h1) if h0 != h1 else (h0,):
            if f0 <= h <= f1:
                continue
            a = max(lo, 0x10000 + (h << 10)) - 0x10000 - (h << 10)
            b = min(hi, 0x10000 + (h << 10) + 0x3FF) - 0x10000 - (h << 10)
            partial.setdefault(h, []).append((0xDC00 + a, 0xDC00 + b))
        if f0 <= f1:
            runs.append((f0, f1))
    entries = [(h, h, _plain_ranges(r)) for h, r in partial.items()]
    entries += [(a, b, ((0xDC00, 0xDFFF),)) for a, b in runs]
    entries.sort()
    lows: dict = {}
    order = []
    for h0, h1, lk in entries:
        if lk not in lows:
            lows[lk] = []
            order.append(lk)
        lows[lk].append((0xD800 + h0, 0xD800 + h1))
    for lk in order:
        u_alts.append(_hex_expr(_plain_ranges(lows[lk]), 4, memo) + ' "\\\\u" ' + _hex_expr(lk, 4, memo))
    if len(u_alts) + (short_expr is not None) <= 1:
        if short_expr is not None:
            alts.append('"\\\\' + short_expr[1:] if short_expr[0] == '"' else '"\\\\" ' + short_expr)
        for u in u_alts:
            alts.append('"\\\\u" ' + u)
        return alts
    after_u = u_alts[0] if len(u_alts) == 1 else "( " + " | ".join(u_alts) + " )"
    escapes = ([short_expr] if short_expr is not None else []) + (['"u" ' + after_u] if u_alts else [])
    alts.append('"\\\\" ' + (escapes[0] if len(escapes) == 1 else "( " + " | ".join(escapes) + " )"))
    return alts


#: Deepest chain of single-use states written inline into one rule.
_MAX_INLINE = 16


def string_gbnf(lang: Lang, name: str, admit_surrogates: bool = False) -> tuple[str, dict[str, str]]:
    """GBNF for the whole quoted JSON string (quotes included) whose decoded value is in ``lang``.

    Returns ``(expression, rules)``: ``expression`` goes into a rule body; ``rules`` maps new rule
    names, each ``name + "-..."``, to their bodies.  Encoding policy: every JSON encoding of every
    character (see the module doc).  Layout: one rule ``name-cN`` per distinct character set
    (shared by all the edges over it: raw UTF-8 | short escape | ``\\uXXXX`` | surrogate pair),
    one rule ``name-sN`` per DFA state that more than one edge enters (or that loops); a state
    entered once is written inline in its predecessor's rule, and an accepting state's way out is
    the closing quote.  The empty language gives a rule that matches nothing: an empty char class
    ``[^\\u0000-\\U0010FFFF]``.

    ``admit_surrogates=True`` trades exactness on *invalid* UTF-8 for mask speed: raw classes then
    also take the surrogate code points U+D800..U+DFFF (the 3-byte sequences ED A0 80..ED BF BF,
    which no UTF-8 decoder accepts — a vocabulary may hold tokens with them) wherever that makes a
    class simpler.  bankml's mask engine has a fast path for classes that treat every code point
    >= 0x80 alike; a class that excludes the surrogates misses it (measured on the llama-3
    vocabulary, the first mask inside an any-string: ~16 ms exact vs ~0.3 ms admitting them).
    The valid-UTF-8 texts accepted are the same either way.
    """
    if not re.fullmatch(r"[a-zA-Z0-9-]+", name):
        raise ValueError(f"bad GBNF rule name {name!r}")
    rules: dict[str, str] = {}
    if lang.is_empty():
        rules[name + "-none"] = "[^\\u0000-\\U0010FFFF]"
        return name + "-none", rules
    cs_rule: dict = {}

    def charset_ref(cs) -> str:
        ref = cs_rule.get(cs)
        if ref is None:
            ref = cs_rule[cs] = f"{name}-c{len(cs_rule)}"
            rules[ref] = _charset_gbnf(cs, admit_surrogates)
        return ref

    n = lang.n_states
    groups = []  # per state: [(target, charset)] in order of first range
    refs = [0] * n
    refs[0] += 1
    for s in range(n):
        by_t: dict = {}
        order = []
        for lo, hi, t in lang._trans[s]:
            if t not in by_t:
                by_t[t] = []
                order.append(t)
            by_t[t].append((lo, hi))
        groups.append([(t, _norm_sorted(by_t[t])) for t in order])
        for t in order:
            refs[t] += 1
    named = [refs[s] != 1 for s in range(n)]
    named[0] = True

    def body(s: int, depth: int) -> list[str]:
        alts = []
        for t, cs in groups[s]:
            alts.append(charset_ref(cs) + " " + target(t, depth))
        if lang._acc[s]:
            alts.append('"\\""')
        return alts

    todo = [t for t in range(n - 1, -1, -1) if named[t]]  # every named state gets its rule, 0 first

    def target(t: int, depth: int) -> str:
        if named[t] or depth >= _MAX_INLINE:
            if not named[t]:
                named[t] = True
                todo.append(t)
            return f"{name}-s{t}"
        alts = body(t, depth + 1)
        return alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"

    done = set()
    while todo:
        s = todo.pop()
        if s in done:
            continue
        done.add(s)
        rules[f"{name}-s{s}"] = " | ".join(body(s, 0))
    # Rules for states later forced to be named by the depth cap are emitted by the loop above.
    # body and target call each other: freed now (with the tables they hold), not by the collector
    body = target = charset_ref = None  # noqa: F811, F841
    return '"\\"" ' + f"{name}-s0", rules
