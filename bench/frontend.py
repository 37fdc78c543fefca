"""Front-end speed on MaskBench schemas: ``json_schema_to_grammar`` (convert) and ``Rules.parse`` (parse).

    python bench/frontend.py DIR [--n 1000] [--seed 0] [--repeat 3] [--out results.json]

DIR is a folder of MaskBench files (``{"schema": ..., "tests": [...]}``; the public set is the
``maskbench/data/`` folder of guidance-ai/jsonschemabench). ``--n`` files are drawn with ``random.Random(seed)``
from the sorted file list (``--n 0``: all of them); the largest grammars of the public set (Kubernetes
kb_1004, JsonSchemaStore cityjson, Github_hard o9882) are added when present, so the tail is always measured.
Each schema's JSON is read once outside the timing; each phase is timed ``--repeat`` times and the fastest
run is kept (the machine is shared: the fastest run is the one least disturbed), on the wall clock and on the
thread's CPU clock. Prints p50 / p90 / p99 / max per phase and clock, the grammars of 300 KB and more (with their
rule and element counts), the slowest schemas, and the load
average before and after. Conversion runs on the parsed dict (no text cache), as ``bench/maskbench.py`` does.
"""

import argparse
import json
import os
import pathlib
import random
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bankml import Rules, SchemaError, json_schema_to_grammar  # noqa: E402
from bankml.errors import GrammarError  # noqa: E402

ALWAYS = [
    "Kubernetes---kb_1004_Normalized.json",
    "JsonSchemaStore---cityjson.min.schema.json",
    "Github_hard---o9882.json",
]


def pick(folder, n, seed):
    files = sorted(p.name for p in pathlib.Path(folder).glob("*.json"))
    chosen = files if n <= 0 or n >= len(files) else random.Random(seed).sample(files, n)
    return chosen + [name for name in ALWAYS if name in files and name not in chosen]


def timed(fn, repeat):
    """(result, wall µs, thread CPU µs): the fastest of `repeat` runs on each clock."""
    best_wall = best_cpu = None
    result = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        result = fn()
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        wall, cpu = (w1 - w0) / 1e3, (c1 - c0) / 1e3
        best_wall = wall if best_wall is None else min(best_wall, wall)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    return result, best_wall, best_cpu


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


def summary_line(name, values):
    return (
        f"{name:<14} n={len(values):>5}  p50 {percentile(values, 50) / 1e3:8.3f}  p90 {percentile(values, 90) / 1e3:8.3f}"
        f"  p99 {percentile(values, 99) / 1e3:8.3f}  max {max(values) / 1e3:9.3f}  mean {statistics.fmean(values) / 1e3:8.3f} ms"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    names = pick(args.folder, args.n, args.seed)
    load_before = os.getloadavg()
    rows, refused = [], {"convert": 0, "parse": 0}
    for name in names:
        schema = json.loads((pathlib.Path(args.folder) / name).read_text())["schema"]
        try:
            (text, _), conv_wall, conv_cpu = timed(lambda: json_schema_to_grammar(schema), args.repeat)
        except SchemaError:
            refused["convert"] += 1
            continue
        try:
            rules, parse_wall, parse_cpu = timed(lambda: Rules.parse(text), args.repeat)
        except GrammarError:
            refused["parse"] += 1
            continue
        rows.append(
            {
                "file": name,
                "gbnf_bytes": len(text.encode()),
                "rules": len(rules),
                "elements": rules.n_elements,
                "convert_wall": conv_wall,
                "convert_cpu": conv_cpu,
                "parse_wall": parse_wall,
                "parse_cpu": parse_cpu,
            }
        )
    load_after = os.getloadavg()
    print(
        f"{len(names)} schemas (seed {args.seed}, n {args.n}, best of {args.repeat}); {len(rows)} converted and "
        f"parsed; refused: {refused['convert']} by the converter, {refused['parse']} by the parser"
    )
    print(
        f"load average before {load_before[0]:.2f} / {load_before[1]:.2f}, after {load_after[0]:.2f} / "
        f"{load_after[1]:.2f} (1 / 5 min)"
    )
    for key in ("convert_wall", "convert_cpu", "parse_wall", "parse_cpu"):
        print(summary_line(key, [r[key] for r in rows]))
    total = [r["convert_cpu"] + r["parse_cpu"] for r in rows]
    print(summary_line("both_cpu", total))
    big = [r for r in rows if r["gbnf_bytes"] >= 300_000]
    if big:
        print("grammars of 300 KB and more (rules, elements; thread CPU ms):")
        for r in sorted(big, key=lambda r: r["gbnf_bytes"]):
            print(
                f"  {r['file']:<60} {r['gbnf_bytes']:>9,} B {r['rules']:>8,} rules {r['elements']:>10,} elements"
                f"  convert {r['convert_cpu'] / 1e3:8.2f}"
                f"  parse {r['parse_cpu'] / 1e3:8.2f}"
            )
    print("slowest conversions (thread CPU ms):")
    for r in sorted(rows, key=lambda r: -r["convert_cpu"])[:5]:
        print(f"  {r['file']:<60} {r['convert_cpu'] / 1e3:8.2f}  ({r['gbnf_bytes']:,} B of GBNF)")
    if args.out:
        pathlib.Path(args.out).write_text(
            json.dumps(
                {
                    "seed": args.seed,
                    "n": args.n,
                    "repeat": args.repeat,
                    "files": names,
                    "load": [load_before, load_after],
                    "rows": rows,
                    "refused": refused,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
