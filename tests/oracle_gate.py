"""The gate on the oracle counts: ``tests/oracle_minimums.json`` holds a minimum for every count the oracle tests
report (``ORACLE_STATS``), and ``tests/conftest.py`` fails the run (exit status 1, after the tests) when a count is
below its minimum or missing, when a count has no entry in the file, when a count came from a test module the
file does not name as its producer, or when a test was skipped for any reason but an engine that is not
installed (vLLM, SGLang: ``tests/engines_support.import_or_skip``).

Which counts a run must reach:

* the whole default collection (``python -m pytest`` with no path, as ``.ci/run`` runs it, nothing deselected):
  every count of the file, except those of a module skipped because its engine is not installed and those whose
  ``when`` condition does not hold on this machine;
* any other run (a path, ``path::test``, ``-k``, ``-m``, ``--deselect``, ``--lf``): only the counts all of whose
  producing modules were collected in full (the module collected, none of its tests deselected, no
  ``path::test`` narrowing it). Counts of modules that did not run are listed as not enforced, never passed.

An entry of the file: ``{"min": N, "kind": K, "modules": [...], "when": C}``. ``kind`` says what the count
compares, and the run's report groups by it:

* ``reference``: bankml compared with the reference (the pinned libllama, llama.cpp's converter and chat layer,
  llama-server; jsonschema's verdicts for strict mode), live or from recorded answers as the count's name says;
* ``source``: where libllama's side of the mask comparisons came from: computed live in this run, or replayed
  from digests recorded earlier by the same libllama (``tests/oracle/mask_recording.py``);
* ``self-check``: a recording checked against itself or against the live reference, with no bankml in it.

``when`` (optional) names a condition that the producing module sets at import (``ORACLE_CONDITIONS``): the entry
is enforced only where the condition is true (the recordings hold for this machine's kernels; libllama's masks
are replayed, i.e. ``BANKML_ORACLE_LIVE`` is unset). ``max`` (optional) bounds a count that must stay at most
that (a count of differences).

This module only evaluates; the pytest hooks live in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import pathlib

MINIMUMS = pathlib.Path(__file__).parent / "oracle_minimums.json"
KINDS = ("reference", "source", "self-check")
KIND_TITLES = {
    "reference": "bankml vs the reference (the pinned libllama, llama.cpp's converter and chat layer, llama-server; "
    "jsonschema for strict mode; live or recorded, as each name says)",
    "source": "libllama's side of the mask comparisons: computed live in this run vs replayed from recorded digests",
    "self-check": "recordings checked against themselves or the live reference (no bankml in these)",
}
# the one kind of skip the gate allows: tests/engines_support.import_or_skip's, for an engine not installed
ENGINE_SKIP_FILE = "engines_support.py"
ENGINE_SKIP_TEXT = "is not importable here"


def load(path=MINIMUMS):
    data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    counts = data["counts"]
    for key, entry in counts.items():
        if entry.get("kind") not in KINDS:
            raise ValueError(f"{path}: {key!r}: kind must be one of {', '.join(KINDS)}")
        if not entry.get("modules"):
            raise ValueError(f"{path}: {key!r}: no producing module")
        if "min" not in entry and "max" not in entry:
            raise ValueError(f"{path}: {key!r}: neither min nor max")
    return counts


def engine_skip(path, reason):
    """The engine a skip names when it is ``import_or_skip``'s (``"vLLM"``, ``"SGLang"``), else None."""
    if str(path).replace("\\", "/").endswith(ENGINE_SKIP_FILE) and ENGINE_SKIP_TEXT in reason:
        return reason.split(ENGINE_SKIP_TEXT)[0].replace("Skipped:", "").strip()
    return None


def evaluate(counts, minimums, *, full_collection, full_modules, engine_skipped_modules, producers, conditions):
    """``(failures, enforced, not_enforced)`` of one run.

    counts: the run's ORACLE_STATS; minimums: ``load()``'s entries; full_collection: the whole default collection
    ran; full_modules: the modules collected in full; engine_skipped_modules: modules skipped because their engine
    is not installed; producers: count -> the modules that added to it; conditions: name -> bool."""
    failures, enforced, not_enforced = [], [], []
    for key in sorted(counts):
        if key not in minimums:
            failures.append(f"{key!r} = {counts[key]:,} has no entry in tests/oracle_minimums.json (add its minimum)")
    for key, modules in sorted(producers.items()):
        if key in minimums:
            stray = sorted(set(modules) - set(minimums[key]["modules"]))
            if stray:
                failures.append(f"{key!r} came from {', '.join(stray)}, not among its modules in the minimums file")
    for key, entry in minimums.items():
        modules = entry["modules"]
        excused = [m for m in modules if m in engine_skipped_modules]
        if excused:
            not_enforced.append((key, f"{', '.join(excused)} skipped: engine not installed"))
            continue
        if not full_collection:
            partial = [m for m in modules if m not in full_modules]
            if partial:
                not_enforced.append((key, f"not collected in full: {', '.join(partial)}"))
                continue
        when = entry.get("when")
        if when is not None and not conditions.get(when, False):
            not_enforced.append((key, f"condition {when!r} does not hold here"))
            continue
        value = counts.get(key)
        if "min" in entry and value is None and entry["min"] > 0:
            failures.append(f"{key!r} is missing (minimum {entry['min']:,}; from {', '.join(modules)})")
        elif "min" in entry and (value or 0) < entry["min"]:
            failures.append(f"{key!r} = {value or 0:,}, below its minimum {entry['min']:,}")
        elif "max" in entry and (value or 0) > entry["max"]:
            failures.append(f"{key!r} = {value:,}, above its maximum {entry['max']:,}")
        else:
            enforced.append(key)
    return failures, enforced, not_enforced


def bad_skips(skips):
    """The skips the gate refuses: ``skips`` is ``[(nodeid, path, reason)]``; an engine's skip is allowed."""
    return [(nodeid, reason) for nodeid, path, reason in skips if engine_skip(path, reason) is None]
