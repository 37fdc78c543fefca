"""The format languages of strict mode, built once and shipped: ``formats.npz`` beside this file.

Each format strict mode asserts (``date``, ``time``, ``date-time``, ``uuid``, ``uri``, ...) is an exact regular
language, as its RFC reads (bankml.schema.strict.lang's ``build_format_lang``). Building one takes from 1 ms
(``uuid``) to about 2 s (``date-time``: the leap second 23:59:60 UTC written in every offset keeps 1,440 local
times apart, 11,049 states) on this project's machines, which would be spent in the first conversion of a process
that meets the format. The minimal DFAs are the same on every machine (a canonical numbering), so they are built
here once and loaded in a few milliseconds.

Beside it, ``formats-gbnf.json.gz``: each such format's GBNF (``strict.lang.string_gbnf`` of the shipped
automaton, its rules named ``GBNF_NAME-...``), which strict mode takes as it is where a string has the format
and nothing else (``uuid``'s is 272 kB, written from 6,938 states in about 100 ms).

``python -m tests.schema.test_format_data --write`` (from the checkout's root, so that its bankml is the one
imported) rebuilds both files (``strict.lang.write_format_data``,
``strict.patterns.write_format_gbnf``); ``tests/schema/test_format_data.py`` builds every format again and checks
that the shipped tables and GBNF are equal.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import numpy as np

PATH = pathlib.Path(__file__).with_name("formats.npz")
GBNF_PATH = pathlib.Path(__file__).with_name("formats-gbnf.json.gz")
#: the rule-name prefix the shipped GBNF is written under (string_gbnf's ``name``); a reader renames it
GBNF_NAME = "shipped-format"
_GBNF: dict | None = None

#: (format name, bare FormatChecker) of every format language strict mode builds; hostname and idn-email are not
#: here (hostname's exact automaton is past the state bound, idn-email's U-labels are not built: both refused)
FORMATS = (
    ("date", False),
    ("date-time", False),
    ("duration", False),
    ("email", False),
    ("ipv4", False),
    ("ipv6", False),
    ("iri", False),
    ("iri-reference", False),
    ("json-pointer", False),
    ("time", False),
    ("time", True),
    ("color", True),
    ("uri", False),
    ("uri-reference", False),
    ("uuid", False),
)


def _key(name: str, bare: bool) -> str:
    return name + ("@bare" if bare else "")


def tables(trans, acc) -> dict[str, np.ndarray]:
    """A DFA's tables as arrays: per state its first transition (``start``, n + 1 entries), every transition's
    ``lo``, ``hi``, ``target``, and ``acc``."""
    start = np.zeros(len(trans) + 1, dtype=np.int32)
    flat = [t for row in trans for t in row]
    for i, row in enumerate(trans):
        start[i + 1] = start[i] + len(row)
    arr = np.array(flat, dtype=np.int32).reshape(-1, 3) if flat else np.zeros((0, 3), dtype=np.int32)
    return {
        "start": start,
        "lo": arr[:, 0].copy(),
        "hi": arr[:, 1].copy(),
        "to": arr[:, 2].copy(),
        "acc": np.array(acc, dtype=np.bool_),
    }


def load(name: str, bare: bool):
    """``(trans, acc)`` of a shipped format, or None when the file does not hold it."""
    key = _key(name, bare)
    try:
        with np.load(PATH) as data:
            if key + "/start" not in data.files:
                return None
            start, lo, hi, to, acc = (data[key + "/" + f] for f in ("start", "lo", "hi", "to", "acc"))
    except OSError:
        return None
    triples = list(zip(lo.tolist(), hi.tolist(), to.tolist()))
    bounds = start.tolist()
    trans = [tuple(triples[bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)]
    return trans, acc.tolist()


def write(langs) -> None:
    """Write the file from ``{(name, bare): (trans, acc)}``."""
    arrays: dict = {}  # np.savez_compressed's stubs read **kwds as its allow_pickle flag
    for (name, bare), (trans, acc) in langs.items():
        for field, arr in tables(trans, acc).items():
            arrays[_key(name, bare) + "/" + field] = arr
    np.savez_compressed(PATH, **arrays)  # type: ignore[arg-type]


def load_gbnf(name: str):
    """``(expression, rules)`` of a shipped format's GBNF (string_gbnf's result under ``GBNF_NAME``), or None
    when the file does not hold it. The file is read once per process."""
    global _GBNF
    if _GBNF is None:
        try:
            _GBNF = json.loads(gzip.decompress(GBNF_PATH.read_bytes()))
        except OSError:
            _GBNF = {}
    got = _GBNF.get(name)
    return None if got is None else (got[0], dict(got[1]))  # the rules in string_gbnf's order: the grammar's


def write_gbnf(entries) -> None:
    """Write the GBNF file from ``{format name: (expression, rules)}``."""
    global _GBNF
    text = json.dumps({k: [e, list(r.items())] for k, (e, r) in sorted(entries.items())})
    GBNF_PATH.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    _GBNF = None
