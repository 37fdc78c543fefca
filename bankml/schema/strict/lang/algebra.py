# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""Languages combined: ``intersect_all`` (several parts, some complemented, in one product), ``preimage_map`` (the
strings a per-character map sends into a language: the case preimages of the formats), ``bounded`` (a language
within length bounds, its states counted only where the bound can cut a continuation) and ``string_lang`` (a
string schema's keywords intersected).

Owns: those constructions. Builds on ``automaton``; must not import ``regex``, ``formats`` or ``gbnf``.
"""

from __future__ import annotations

from bankml.schema.strict.lang import bounds
from bankml.schema.strict.lang.automaton import Lang, atomize, expand_atoms, finish, joint_add, product
from bankml.schema.strict.lang.bounds import LangError
from bankml.schema.strict.lang.charsets import MAXCP, SUR_HI, SUR_LO, clip, cs_neg, norm

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
        return product(parts[0][0], parts[1][0], both=True, keyword=keyword)
    if len(parts) > 1:
        try:
            return _product_all(parts, keyword)
        except LangError:
            pass
    lang = None
    for part, neg in parts:
        part = part.complement() if neg else part
        lang = part if lang is None else product(lang, part, both=True, keyword=keyword)
    return lang  # type: ignore[return-value]  # parts is not empty: lang is a Lang


def _product_all(parts, keyword: str) -> Lang:
    atomized = [atomize(lang) for lang, _ in parts]
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
        joint_key = []
        for i, (ivs, iatom, _, _) in enumerate(atomized):
            j = pos[i]
            while ivs[j][1] < lo:
                j += 1
            pos[i] = j
            joint_key.append(iatom[j])
        joint_add(joint, joint_ranges, joint_atoms, tuple(joint_key), lo, hi)
    rows = [part_rows for _, _, part_rows, _ in atomized]
    negs = [neg for _, neg in parts]
    accs = [lang._acc for lang, _ in parts]
    start = (0,) * len(parts)
    index = {start: 0}
    tuples = [start]
    trans = []
    acc = []
    limit = bounds.state_limit()
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
    return expand_atoms(finish(trans, acc, keyword), joint_ranges)


def preimage_map(d: Lang, fmap: dict, keyword: str) -> Lang:
    """{s : f(s) in d} for a per-character map f: chars absent from ``fmap`` map to themselves,
    ``fmap[c]`` is the string (maybe longer than one char) that code point c maps to."""
    exc = sorted(fmap)
    keep = cs_neg(norm((c, c) for c in exc))  # the characters that map to themselves
    trans = []
    run = d.run
    for q in range(len(d._trans)):
        row = []
        # identity part: d's edges minus the exception characters
        for lo, hi, t in d._trans[q]:
            for a, b in clip(lo, hi, keep):
                row.append((a, b, t))
        for c in exc:
            t = run(q, fmap[c])
            if t >= 0:
                row.append((c, c, t))
        row.sort()
        trans.append(row)
    return finish(trans, list(d._acc), keyword)


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
        lang = product(lang, Lang.regex(pattern), True, "pattern")
    if format is not None:
        lang = product(lang, Lang.format(format), True, "format")
    return lang


def _path_lengths(lang: Lang):
    """Per state of a trimmed DFA: the fewest and the most characters to an accepting state (None: no most, the
    state reaches a cycle)."""
    trans, acc = lang._trans, lang._acc
    n = len(trans)
    preds: list[list[int]] = [[] for _ in range(n)]
    outdeg = [0] * n
    for s, row in enumerate(trans):
        for _, _, t in row:
            preds[t].append(s)
            outdeg[s] += 1
    # the most: states taken off once every edge out of them is (a reversed topological order); those left
    # reach a cycle
    most: list = [None] * n
    ready = [s for s in range(n) if outdeg[s] == 0]
    while ready:
        s = ready.pop()
        best = 0 if acc[s] else -1
        for _, _, t in trans[s]:
            best = max(best, most[t] + 1)
        most[s] = best
        for p in preds[s]:
            outdeg[p] -= 1
            if outdeg[p] == 0:
                ready.append(p)
    # the fewest: a breadth-first walk back from the accepting states
    fewest = [0 if a else -1 for a in acc]
    frontier = [s for s in range(n) if acc[s]]
    d = 0
    while frontier:
        d += 1
        nxt = []
        for s in frontier:
            for p in preds[s]:
                if fewest[p] < 0:
                    fewest[p] = d
                    nxt.append(p)
        frontier = nxt
    return fewest, most


def bounded(lang: Lang, lo: int, hi: int | None, keyword: str = "maxLength") -> Lang:
    """``lang`` ∩ the strings of ``lo``..``hi`` code points, without the product's copy of every state per
    length: a state is counted only while the bound can still cut one of its continuations (its longest is
    longer than the characters left, or ``lo`` is not reached yet), and is the state of ``lang`` itself after
    that; counted states that no continuation can finish within ``hi`` are not made. The states made count
    against the state bound, the result minimized."""
    trans, acc = lang._trans, lang._acc
    fewest, most = _path_lengths(lang)
    limit = bounds.state_limit()
    n = len(trans)
    # a key is a state of lang (free: uncounted) or (state, characters read)
    index: dict = {}
    keys: list = []
    out_trans: list = []

    def key_of(q, k):
        if hi is not None and k + fewest[q] > hi:
            return None
        if k >= lo and (hi is None or (most[q] is not None and k + most[q] <= hi)):
            return q
        return (q, k)

    def add(key):
        t = index.get(key)
        if t is None:
            t = index[key] = len(keys)
            keys.append(key)
            if len(keys) > limit + n:
                raise LangError(keyword, f"the length-bounded automaton exceeds {limit} states")
        return t

    start = key_of(0, 0)
    if start is None:
        return Lang.empty()
    add(start)
    out_acc = []
    for key in keys:
        if key.__class__ is int:
            out_trans.append([(a, b, add(t)) for a, b, t in trans[key]])
            out_acc.append(acc[key])
            continue
        q, k = key
        row = []
        for a, b, t in trans[q]:
            nk = key_of(t, k + 1)
            if nk is not None:
                row.append((a, b, add(nk)))
        out_trans.append(row)
        out_acc.append(acc[q] and k >= lo)
    return finish(out_trans, out_acc, keyword)
