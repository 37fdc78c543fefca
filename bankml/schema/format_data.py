"""The format languages of strict mode, built once and shipped: ``formats.npz`` beside this file.

Each format jsonschema's FormatChecker checks (``date``, ``uuid``, ``uri``, ...) is an exact regular language
(bankml.schema.strict_lang's ``_build_format``: the checker's own parsing, read as an automaton). Building one
takes from 1 ms (``email``) to about 1 s (``uuid``: every Unicode decimal digit, a sign, ``0x``, underscores,
``urn:``/``uuid:`` and braces, as ``uuid.UUID`` reads them) on this project's machines, which would be spent in
the first conversion of a process that meets the format. The minimal DFAs are the same on every machine (a
canonical numbering), so they are built here once and loaded in a few milliseconds.

``python tests/schema/test_format_data.py --write`` rebuilds the file (strict_lang's
``write_format_data``); ``tests/schema/test_format_data.py`` builds every format again and checks that the
shipped tables are equal.
"""

from __future__ import annotations

import pathlib

import numpy as np

PATH = pathlib.Path(__file__).with_name("formats.npz")

#: (format name, bare FormatChecker) of every format language strict mode builds; hostname is not here (its
#: exact automaton is past the state bound: strict mode refuses it)
FORMATS = (
    ("date", False),
    ("date-time", False),
    ("duration", False),
    ("email", False),
    ("idn-email", False),
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
