"""The code points of Python's ``\\d``, ``\\s`` and ``\\w``, shipped per Unicode version: ``categories.json.gz``.

strict mode reads a pattern's classes as exact sets of code points, and it asks Python's ``re`` itself which
code points a class takes (``bankml.schema.strict.lang.charsets.scan_class``: the class run over every scalar value,
13–23 ms a class on this project's machines). That cost fell on the first conversion of a process meeting ``\\d``, ``\\s``
or ``\\w``: a schema converting in 17 ms took 36. The three categories (each with and without ``re.ASCII``) are
scanned here once per Unicode database, by each Python at hand, and loaded in a millisecond.

The table of the running Python is used only where the file holds its ``unicodedata.unidata_version``; elsewhere
the classes are scanned as before. ``tests/schema/test_strict_lang.py`` scans them again and checks the shipped
table of the running Python equal.

This file runs alone under any Python 3 (it imports nothing of bankml): ``python3.X unicode_categories.py``
prints that Python's table as JSON; ``python unicode_categories.py --write T1.json T2.json ...`` merges such
tables into the shipped file.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import re
import sys
import unicodedata

PATH = pathlib.Path(__file__).with_name("categories.json.gz")
SUR_LO, SUR_HI, MAXCP = 0xD800, 0xDFFF, 0x10FFFF
#: the table's keys: the category letter, "a" after it for the ``re.ASCII`` reading
KEYS = ("d", "da", "s", "sa", "w", "wa")
_TABLES: dict | None = None


def scan(letter: str, ascii_only: bool) -> list:
    """The inclusive ranges of scalar values ``\\<letter>`` matches (surrogates never: they are no scalar values)."""
    text = "".join(map(chr, range(SUR_LO))) + "".join(map(chr, range(SUR_HI + 1, MAXCP + 1)))
    out: list = []
    for m in re.finditer("(?:\\%s)+" % letter, text, re.ASCII if ascii_only else 0):
        lo, hi = m.start(), m.end() - 1
        for a, b in ((lo, min(hi, SUR_LO - 1)), (max(lo, SUR_LO), hi)):
            if a > b:
                continue
            if a >= SUR_LO:  # positions past the gap: shift back to code points
                a, b = a + SUR_HI + 1 - SUR_LO, b + SUR_HI + 1 - SUR_LO
            out.append([a, b])
    return out


def table() -> dict:
    """This Python's table: every key of KEYS to its ranges."""
    return {key: scan(key[0], key.endswith("a")) for key in KEYS}


def shipped(letter: str, ascii_only: bool):
    """The shipped ranges (a tuple of pairs) of ``\\<letter>`` (lower case) for the running Python's Unicode
    database, or None where the file does not hold it."""
    global _TABLES
    if _TABLES is None:
        try:
            with gzip.open(PATH, "rt", encoding="utf-8") as f:
                _TABLES = json.load(f)
        except (OSError, EOFError, ValueError):  # missing, truncated or unreadable: the classes are scanned
            _TABLES = {}
    got = _TABLES.get(unicodedata.unidata_version)
    if got is None:
        return None
    return tuple((a, b) for a, b in got[letter + ("a" if ascii_only else "")])


def write(paths) -> None:
    """Merge the tables in paths (each the JSON this file prints) into the shipped file."""
    try:
        with gzip.open(PATH, "rt", encoding="utf-8") as f:
            merged = json.load(f)
    except OSError:
        merged = {}
    for p in paths:
        got = json.loads(pathlib.Path(p).read_text())
        merged[got["unidata_version"]] = got["table"]
    with gzip.GzipFile(PATH, "wb", mtime=0) as f:
        f.write(json.dumps(merged, sort_keys=True, separators=(",", ":")).encode("utf-8"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        write(sys.argv[2:])
    else:
        print(json.dumps({"unidata_version": unicodedata.unidata_version, "table": table()}))
