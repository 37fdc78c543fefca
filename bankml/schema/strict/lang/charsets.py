# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""Character sets over the alphabet of JSON-Schema strings: Unicode scalar values (U+0000..U+10FFFF without the
surrogates U+D800..U+DFFF). A charset is a tuple of disjoint, non-adjacent, sorted inclusive ranges.

Owns: the alphabet's constants, the set operations, and the exact sets of a regex class (``scan_class``: asked of
Python's ``re`` by one scan of the alphabet; ``category``: ``\\d``, ``\\s``, ``\\w`` from the table shipped in
bankml.schema.unicode_categories). Must not import the rest of the package (everything builds on it).
"""

from __future__ import annotations

import bisect
import re

import numpy as np

from bankml.schema import unicode_categories

MAXCP = 0x10FFFF
SUR_LO, SUR_HI = 0xD800, 0xDFFF
# The alphabet: scalar values, as a sorted tuple of inclusive (lo, hi) ranges.
UNIVERSE = ((0, SUR_LO - 1), (SUR_HI + 1, MAXCP))


def norm(ranges) -> tuple:
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


def norm_sorted(ranges: list) -> tuple:
    """``norm`` for ranges that are usually normal already (a DFA row's ranges to one target): checked in one
    pass, normalized only when they are not."""
    prev = -2
    for lo, hi in ranges:
        if lo <= prev + 1 or lo > hi or (lo <= SUR_HI and hi >= SUR_LO):
            return norm(ranges)
        prev = hi
    return tuple(ranges)


def cs_neg(cs) -> tuple:
    out = []
    prev = 0
    for lo, hi in cs:
        if lo > prev:
            out.append((prev, lo - 1))
        prev = hi + 1
    if prev <= MAXCP:
        out.append((prev, MAXCP))
    return norm(out)


def cs_union(*sets) -> tuple:
    return norm([r for s in sets for r in s])


def cs_inter(a, b) -> tuple:
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


def cs_diff(a, b) -> tuple:
    return cs_inter(a, cs_neg(b))


def clip(lo: int, hi: int, cs) -> list:
    """The parts of cs (sorted disjoint ranges) inside [lo, hi], found by bisection."""
    out = []
    i = bisect.bisect_right(cs, (lo, MAXCP + 1)) - 1
    if i < 0 or cs[i][1] < lo:
        i += 1
    while i < len(cs) and cs[i][0] <= hi:
        out.append((max(cs[i][0], lo), min(cs[i][1], hi)))
        i += 1
    return out


def cs_has(cs, c: int) -> bool:
    i = bisect.bisect_right(cs, (c, MAXCP + 1)) - 1
    return i >= 0 and cs[i][0] <= c <= cs[i][1]


_ALL_TEXT = None


def all_text() -> str:
    """Every scalar value once, in order (a 1.1M-char string): `re` scans it to get exact sets."""
    global _ALL_TEXT
    if _ALL_TEXT is None:
        cps = np.concatenate((np.arange(SUR_LO, dtype="<u4"), np.arange(SUR_HI + 1, MAXCP + 1, dtype="<u4")))
        _ALL_TEXT = cps.tobytes().decode("utf-32-le")
    return _ALL_TEXT


def pos_to_cp(i: int) -> int:
    return i if i < SUR_LO else i + (SUR_HI + 1 - SUR_LO)


_SCAN_CACHE: dict = {}


def scan_class(fragment: str, flags: int) -> tuple:
    """The exact set of code points one single-character regex fragment matches under flags."""
    key = (fragment, flags)
    got = _SCAN_CACHE.get(key)
    if got is None:
        rx = re.compile("(?:%s)+" % fragment, flags)
        got = norm((pos_to_cp(m.start()), pos_to_cp(m.end() - 1)) for m in rx.finditer(all_text()))
        # A run crossing the surrogate gap maps to one range spanning it: norm split it.
        _SCAN_CACHE[key] = got
    return got


def category(name: str, ascii_only: bool) -> tuple:
    """The code points of ``\\<name>`` (d, s, w or their negations): the table shipped for this Python's Unicode
    database (bankml.schema.unicode_categories), else a scan."""
    key = ("\\" + name, re.ASCII if ascii_only else 0)
    got = _SCAN_CACHE.get(key)
    if got is None:
        ranges = unicode_categories.shipped(name.lower(), ascii_only)
        if ranges is None:
            return scan_class(*key)
        got = _SCAN_CACHE[key] = norm(ranges) if name.islower() else cs_neg(norm(ranges))
    return got
