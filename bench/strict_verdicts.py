#!/usr/bin/env python3
"""Strict mode's verdicts on a whole MaskBench folder: every schema compiled by strict mode (or refused, the
refusal counted by keyword), every instance of every compiled schema walked byte by byte through the grammar
(``Grammar.accept_bytes``, then the end state must be complete), and the grammar's verdict compared with the
instance's label and with jsonschema's (the validator of the schema's ``$schema``, 2020-12 by default, with the
2020-12 FormatChecker, as MaskBench labels them), read as the JSON-Schema-Test-Suite reads the specification
(``tests/spec_oracle.py``: ECMA-262 patterns, the RFCs' formats, ``dependencies`` in 2019-09 and 2020-12).
Nothing is timed. Exit status 1 when a compiled grammar's verdict differs from that reading on any instance.

    # the public set: the maskbench/data folder of guidance-ai/jsonschemabench (not carried by the project)
    python bench/strict_verdicts.py PATH/TO/maskbench/data --workers 2 --out verdicts.json
    python bench/strict_verdicts.py bench/data/maskbench            # the project's four hand-made files

The verdict is the grammar's language, not a token walk: bench/maskbench.py --engines bankml-strict walks the
same instances token by token (and times them). A schema whose conversion raises anything but a SchemaError is
counted apart (crash) and named; strict mode's own time bound (``SchemaLimits.max_seconds``) is a refusal.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def judge(path):
    """One file: ``{"name", "status", "keyword", "instances": [[label, jsonschema, grammar], ...]}``."""
    from bankml import Grammar, Rules, Vocab
    from bankml.errors import GrammarError, SchemaError
    from bankml.schema.strict import strict_schema_to_grammar
    from tests import spec_oracle

    name = pathlib.Path(path).name
    try:
        case = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except ValueError as e:
        return {"name": name, "status": "unreadable", "message": str(e)[:200]}
    schema = case["schema"]
    try:
        gbnf = strict_schema_to_grammar(schema)
    except SchemaError as e:
        return {"name": name, "status": "refused", "keyword": e.keyword}
    except Exception as e:  # a bug: counted and named, the run goes on
        return {"name": name, "status": "crash", "message": ("%s: %s" % (type(e).__name__, e))[:300]}
    rules = Rules.parse(gbnf)
    tiny = Vocab([b"x"], [])
    validator = spec_oracle.validator(schema)  # jsonschema as the suite reads the spec (ECMA patterns, RFC formats)
    instances = []
    for t in case.get("tests", []):
        g = Grammar(rules, tiny)
        try:
            g.accept_bytes(json.dumps(t["data"], ensure_ascii=False).encode("utf-8"))
            got = g.complete
        except GrammarError:
            got = False
        instances.append([bool(t["valid"]), bool(validator.is_valid(t["data"])), bool(got)])
    return {"name": name, "status": "compiled", "instances": instances}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a folder of MaskBench files ({schema, tests: [{valid, data}]})")
    ap.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    ap.add_argument("--out", help="write every file's result (JSON) here")
    args = ap.parse_args(argv)
    paths = sorted(pathlib.Path(args.folder).glob("*.json"))
    if not paths:
        ap.error(f"{args.folder}: no *.json file")
    started = time.time()
    results = []
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max(1, args.workers), mp_context=ctx) as pool:
        futures = {pool.submit(judge, str(p)): p for p in paths}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            results.append(future.result())
            if n % 500 == 0:
                print(f"{n}/{len(paths)} files, {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    results.sort(key=lambda r: r["name"])
    status = collections.Counter(r["status"] for r in results)
    refusals = collections.Counter(r["keyword"] for r in results if r["status"] == "refused")
    inst = valid_rejected = invalid_accepted = label_differs = passing = 0
    disagree = []
    for r in results:
        if r["status"] != "compiled":
            continue
        good = True
        for label, oracle, got in r["instances"]:
            inst += 1
            label_differs += label != oracle
            if got != oracle:
                disagree.append(r["name"])
                good = False
                if oracle:
                    valid_rejected += 1
                else:
                    invalid_accepted += 1
        passing += good
    print(
        f"## bench/strict_verdicts.py {args.folder}: {len(paths):,} files, {time.time() - started:.0f} s "
        f"({args.workers} workers)\n"
    )
    print(
        "| files | compiled | refused | crashes | unreadable | instances of compiled schemas | "
        "valid rejected | invalid accepted | schemas passing | labels that differ from jsonschema |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {len(paths):,} | {status['compiled']:,} | {status['refused']:,} | {status['crash']} | "
        f"{status['unreadable']} | {inst:,} | {valid_rejected} | {invalid_accepted} | {passing:,} | {label_differs} |"
    )
    print("\n(valid / invalid: jsonschema's verdict on the instance; a label that differs is MaskBench's own.)")
    print("refused by keyword: " + ", ".join(f"{k} {v}" for k, v in refusals.most_common()))
    for r in results:
        if r["status"] == "crash":
            print(f"{r['status']}: {r['name']} {r.get('message', '')}")
    for name in sorted(set(disagree))[:20]:
        print(f"DISAGREES with jsonschema: {name}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results))
    return 1 if disagree or status["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
