"""A/B of two builds of bankml's engine: whole-vocabulary mask time, cold and warm, rounds interleaved.

    python bench/ab_engine.py --a /work/wt-split-base --b /work/wt-split --rounds 6 [--vocab qwen2]

Each build is a tree with its extensions built in place (``python setup.py build_ext --inplace``).
A round runs one child process per build (A then B, then B then A in the next round, so neither
always goes first on a shared, noisy machine). A child walks, with bankml alone:

* the 22 schemas of ``bench/data/schemas.json`` (llama.cpp's GBNF of each, as
  ``schema_summary.SchemaWalk`` does: a cold walk with a new ``Rules``, then warm walks with new
  matchers of the same ``Rules``), and
* ``json.gbnf`` along ``walks.DOCUMENT`` the same way,

and prints the mask times (µs, one per position). Per build and position the fastest over the
rounds is kept (the noise of a shared machine only ever adds time); the table gives p50 / mean / p99
per workload (schemas, json) and phase (cold, warm), and B / A for each. The masks of the two builds
must be equal position by position (FNV-1a hash of the allowed ids); a difference stops the run.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from ab_support import interleaved_rounds, ratio_row  # noqa: E402


def child(build: str, vocab_name: str, repeats: int) -> None:
    sys.path[:] = [build, str(HERE)] + [p for p in sys.path if p not in (build, str(HERE))] + [str(ROOT)]
    import bankml

    if not pathlib.Path(bankml.__file__).resolve().is_relative_to(pathlib.Path(build).resolve()):
        raise SystemExit(f"imported {bankml.__file__}, not the build in {build}")
    import gc

    import schema_summary
    import schema_walks
    import walks

    eng = walks.engine("bankml", vocab_name)
    results = {}
    for name in schema_walks.schema_names():
        w = schema_summary.SchemaWalk(eng, name, schema_walks.walk_tokens(name, vocab_name), repeats, 1)
        if w.error:
            raise SystemExit(f"{name}: {w.error}")
        results[f"schema:{name}"] = {
            "cold": w.cold,
            "warm": w.warm,
            "masks": [list(map(int, walks.ids_hash(m))) for m in w.masks],
        }
    # json.gbnf along the document, the same phases
    tokens = walks.walk_tokens(vocab_name)
    out = eng.new_mask()
    rules = eng.compile(walks.grammar_text("json"))
    matcher = eng.matcher(rules)
    cold, masks = [], []
    gc.collect()
    for index in range(len(tokens) + 1):
        cold.append(schema_summary.fill_timed(eng, matcher, out))
        masks.append(list(map(int, walks.ids_hash(eng.allowed_ids(matcher, out)))))
        if index < len(tokens):
            eng.accept(matcher, tokens[index])
    warm = [float("inf")] * (len(tokens) + 1)
    for _ in range(repeats):
        gc.collect()
        matcher = eng.matcher(rules)
        for index in range(len(tokens) + 1):
            warm[index] = min(warm[index], schema_summary.fill_timed(eng, matcher, out))
            if index < len(tokens):
                eng.accept(matcher, tokens[index])
    results["json"] = {"cold": cold, "warm": warm, "masks": masks}
    json.dump(results, sys.stdout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", help="tree of build A (the base)")
    parser.add_argument("--b", help="tree of build B (the change)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="warm walks per child (fastest kept)")
    parser.add_argument("--vocab", default="qwen2")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.vocab, args.repeats)
        return 0
    if not (args.a and args.b):
        parser.error("--a and --b are required")

    def merge(best, got, label, r):
        for key, value in got.items():
            for phase in ("cold", "warm"):
                best[key][phase] = [min(x, y) for x, y in zip(best[key][phase], value[phase])]

    best = interleaved_rounds(
        __file__, args.a, args.b, args.rounds, ["--vocab", args.vocab, "--repeats", str(args.repeats)], merge
    )
    a, b = best["A"], best["B"]
    for key in a:
        if a[key]["masks"] != b[key]["masks"]:
            raise SystemExit(f"{key}: the masks of A and B differ")
    print(f"vocab {args.vocab}, {args.rounds} rounds interleaved, fastest per position kept; µs; B / A")
    print("| workload | phase | A p50 / mean / p99 | B p50 / mean / p99 | B/A p50 | B/A mean | B/A p99 |")
    print("|---|---|---|---|---|---|---|")
    for workload, keys in (("22 schemas", [k for k in a if k.startswith("schema:")]), ("json.gbnf", ["json"])):
        for phase in ("cold", "warm"):
            print(
                ratio_row(
                    [workload, phase], [x for k in keys for x in a[k][phase]], [x for k in keys for x in b[k][phase]]
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
