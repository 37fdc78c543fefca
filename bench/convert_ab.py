"""``json_schema_to_grammar`` before and after: the converter of an earlier commit against this tree's, in one run.

    python bench/convert_ab.py DIR [--baseline 4d8060f] [--n 1000] [--seed 0] [--repeat 5] [--slowest 10]
    python bench/convert_ab.py DIR --check       # differential: every file of DIR and of bench/data
    python bench/convert_ab.py DIR --baseline-so OLD/converter.cpython-311-x86_64-linux-gnu.so

DIR is a folder of MaskBench files (``{"schema": ..., "tests": [...]}``, the ``maskbench/data/`` folder of
guidance-ai/jsonschemabench). The baseline is ``bankml/schema/converter.py`` at ``--baseline`` (``git show``), loaded as a
plain-Python module (over this tree's other ``bankml.schema`` modules, which it imports from the split of the converter
into limits, jsontext, reader and converter on), or with ``--baseline-so`` a compiled converter extension (one copied
from an earlier build, with the converter.py of its commit beside it for its deep-nesting fallback: compiled
against compiled); the current one is ``bankml.schema.converter`` as imported (the
compiled extensions once built). Files are drawn as ``bench/frontend.py`` draws them. Timing: each schema is
converted from its parsed dict (no text cache), baseline and current alternately, ``--repeat`` times each, the
fastest kept, on the thread's CPU clock; prints p50 / p90 / p99 / max and the mean of both and their ratio
(baseline / current), then the ``--slowest`` schemas (by the baseline's time)
one by one and the drawn schemas whose grammar is 300 KB or more, and the load average before and after.

``--check`` converts every schema of DIR, ``bench/data/maskbench/`` and ``bench/data/schemas.json`` with both,
from the dict and from its JSON text, and counts the conversions whose outcome differs: the grammar and the
warnings, or the SchemaError's message and pointer. Exits 1 on any difference.
"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from frontend import percentile, pick  # noqa: E402

import bankml.schema.converter as current  # noqa: E402


def load_baseline(rev):
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", rev + ":bankml/schema/converter.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    source = source.replace("from .errors import SchemaError", "from bankml.errors import SchemaError")
    path = pathlib.Path(tempfile.mkdtemp(prefix="bankml-baseline-")) / "baseline_schema.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_baseline_so(path):
    """A compiled converter extension from another build, imported beside this tree's under another name (its init
    function is found by the name's last part, ``converter``); what it imports (``bankml.errors``, the rules parser,
    ``bankml.schema.jsondepth``) comes from this tree."""
    loader = importlib.machinery.ExtensionFileLoader("baseline_schema.converter", str(path))
    spec = importlib.util.spec_from_file_location("baseline_schema.converter", str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outcome(module, schema):
    try:
        grammar, warnings = module.json_schema_to_grammar(schema)
        return ("grammar", grammar, tuple(warnings))
    except module.SchemaError as e:
        return ("error", str(e), e.pointer)


def cpu_us(module, schema):
    t0 = time.thread_time_ns()
    try:
        module.json_schema_to_grammar(schema)
    except module.SchemaError:
        pass
    return (time.thread_time_ns() - t0) / 1e3


def check(folder, baseline):
    named = [(p.name, json.loads(p.read_text())["schema"]) for p in sorted(pathlib.Path(folder).glob("*.json"))]
    named += [
        ("bench/data/maskbench/" + p.name, json.loads(p.read_text())["schema"])
        for p in sorted((ROOT / "bench/data/maskbench").glob("*.json"))
    ]
    named += [
        ("bench/data/schemas.json#%d" % i, e["schema"])
        for i, e in enumerate(json.loads((ROOT / "bench/data/schemas.json").read_text())["schemas"])
    ]
    conversions = differences = errors = 0
    for name, schema in named:
        for form in (schema, json.dumps(schema, ensure_ascii=False)):
            a, b = outcome(baseline, form), outcome(current, form)
            conversions += 1
            errors += a[0] == "error"
            if a != b:
                differences += 1
                print("DIFFERENT", name, type(form).__name__, a[0], b[0])
    print(
        f"{len(named)} schemas, {conversions} conversions (each from the dict and from the JSON text): "
        f"{differences} differences ({conversions - errors} grammars, {errors} SchemaErrors in the baseline)"
    )
    return differences


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--baseline", default="4d8060f")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--slowest", type=int, default=10)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--baseline-so", help="a compiled converter extension as the baseline (instead of --baseline)")
    ap.add_argument(
        "--include",
        nargs="*",
        default=[],
        help="more files of DIR, timed and listed among the slowest but left out of the percentiles",
    )
    args = ap.parse_args(argv)
    if args.baseline_so:
        baseline = load_baseline_so(args.baseline_so)
        print(f"baseline: {args.baseline_so} (compiled); current: {current.__file__}")
    else:
        baseline = load_baseline(args.baseline)
        print(f"baseline: bankml/schema/converter.py at {args.baseline} (plain Python); current: {current.__file__}")
    current._raise_recursion_limit()
    baseline._raise_recursion_limit()
    if args.check:
        sys.exit(1 if check(args.folder, baseline) else 0)
    names = pick(args.folder, args.n, args.seed)
    extra = [name for name in args.include if name not in names]
    load_before = os.getloadavg()
    rows = []
    for name in names + extra:
        schema = json.loads((pathlib.Path(args.folder) / name).read_text())["schema"]
        old = new = float("inf")
        for _ in range(args.repeat):
            old = min(old, cpu_us(baseline, schema))
            new = min(new, cpu_us(current, schema))
        rows.append((name, old, new, len(outcome(current, schema)[1])))
    load_after = os.getloadavg()
    print(
        f"{len(names)} schemas (seed {args.seed}, n {args.n}, best of {args.repeat}, thread CPU time); load average "
        f"before {load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    sample = rows[: len(names)]
    for q in (50, 90, 99, 100):
        o, n = percentile([r[1] for r in sample], q), percentile([r[2] for r in sample], q)
        print(
            f"  {'max' if q == 100 else 'p%d' % q:>4}  baseline {o / 1e3:8.3f} ms   current {n / 1e3:8.3f} ms   "
            f"{o / n:5.2f}x"
        )
    o, n = sum(r[1] for r in sample) / len(sample), sum(r[2] for r in sample) / len(sample)
    print(f"  mean  baseline {o / 1e3:8.3f} ms   current {n / 1e3:8.3f} ms   {o / n:5.2f}x")
    print(
        f"the {args.slowest} slowest for the baseline, --include files too (ms; grammars refused past a SchemaLimits bound marked *):"
    )
    for name, o, n, _ in sorted(rows, key=lambda r: -r[1])[: args.slowest]:
        refused = (
            "*"
            if outcome(current, json.loads((pathlib.Path(args.folder) / name).read_text())["schema"])[0] == "error"
            else " "
        )
        print(f"  {name:<55}{refused} baseline {o / 1e3:8.2f}   current {n / 1e3:7.2f}   {o / n:5.2f}x")

    big = sorted((r for r in rows if r[0] in names and r[3] >= 300_000), key=lambda r: r[3])
    if big:
        print("the grammars of 300 KB and more among the drawn files (ms):")
        for name, o, n, size in big:
            print(f"  {name:<55} {size:>9,} B  baseline {o / 1e3:8.2f}   current {n / 1e3:7.2f}   {o / n:5.2f}x")


if __name__ == "__main__":
    main()
