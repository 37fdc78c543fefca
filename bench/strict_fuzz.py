#!/usr/bin/env python3
"""Strict mode's property run at any size: random schemas over every keyword strict mode enforces (the
generator of tests/schema/strict_fuzz.py, one hypothesis run per keyword family), random and mutated
instances, each instance's verdict by the compiled grammar against jsonschema's (bytes; a tenth of the schemas
also token by token over the llama-bpe vocabulary). Prints the counts: examples, schemas compiled and refused
(by keyword), verdicts equal to jsonschema's (valid / invalid), token walks, the keywords drawn, and every
disagreement (schema and instance); exit status 1 when there is one.

    python bench/strict_fuzz.py --seed 0 --examples 250       # the slice the test suite runs
    python bench/strict_fuzz.py --seed 1 --examples 5000      # a nightly-sized run (about 4 minutes, one core)
    python bench/strict_fuzz.py --seed 7 --examples 5000 --out run.json

Nothing is timed. A seed gives the same run for the same hypothesis version (``phases=[generate]``, no database).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.schema import strict_fuzz  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="hypothesis's seed (default 0)")
    ap.add_argument("--examples", type=int, default=250, help="schemas drawn in all, over the families (default 250)")
    ap.add_argument("--out", help="write the counts and the disagreements (JSON) here")
    args = ap.parse_args(argv)
    if args.examples < 1:
        ap.error("--examples must be at least 1")
    import hypothesis

    started = time.time()
    counts, disagreements = strict_fuzz.run(args.seed, args.examples)
    seconds = time.time() - started
    refusals = {k[len("refused: ") :]: v for k, v in sorted(counts.items()) if k.startswith("refused: ")}
    keywords = {k[len("keyword: ") :]: v for k, v in sorted(counts.items()) if k.startswith("keyword: ")}
    print(
        f"## bench/strict_fuzz.py --seed {args.seed} --examples {args.examples} "
        f"(hypothesis {hypothesis.__version__}, {seconds:.0f} s)\n"
    )
    print(
        "| examples | compiled | refused | instances valid (jsonschema) | instances invalid | token walks | disagreements |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {counts['examples']:,} | {counts['compiled']:,} | {counts['refused']:,} | {counts['valid']:,} | "
        f"{counts['invalid']:,} | {counts['token walks']:,} | {len(disagreements)} |"
    )
    print("\nrefused by keyword: " + (", ".join(f"{k} {v}" for k, v in refusals.items()) or "none"))
    print("schemas using each keyword: " + ", ".join(f"{k} {v}" for k, v in keywords.items()))
    for d in disagreements[:20]:
        print("DISAGREES: " + json.dumps(d, ensure_ascii=False)[:1000])
    if args.out:
        pathlib.Path(args.out).write_text(
            json.dumps(
                {"seed": args.seed, "examples": args.examples, "counts": counts, "disagreements": disagreements},
                indent=1,
                ensure_ascii=False,
            )
        )
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
