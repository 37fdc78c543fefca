# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""DFA minimization: the coarsest partition of a trimmed DFA's states into language-equivalence classes
(Hopcroft's refinement), for ``automaton.finish``.

Owns: ``hopcroft`` and the range merging it compares character sets with. Imports nothing of bankml.
"""

from __future__ import annotations


def merge_ranges(ranges) -> tuple:
    if len(ranges) == 1:
        return tuple(ranges)
    out: list = []
    for lo, hi in sorted(ranges):
        if out and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def hopcroft(states, trans, acc, live) -> dict:
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
            rev.setdefault(t, []).append((s, merge_ranges(ranges)))
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
                    touched[p] = merge_ranges(got + ranges)
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
