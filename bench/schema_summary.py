"""Mask time over walks of realistic JSON schemas, every engine, as Markdown tables for docs/PERFORMANCE.md.

    python bench/schema_summary.py --vocab qwen2 --vocab llama3

The workload is ``bench/data/schemas.json``: realistic JSON schemas (hand-written and
pydantic-generated), each with one valid instance document, tokenized by libllama. Each engine
gets the schema the way its users give it (``schema_walks.FRONT_ENDS``): bankml and libllama
llama.cpp's own GBNF of it (``bench/data/schema_grammars.json``, recorded from the pinned
``json_schema_to_grammar``), XGrammar ``compile_json_schema``, llguidance
``grammar_from_json_schema``.

Per schema and engine:

* compile: the schema (or its GBNF) to a ready matcher -- parse, any per-grammar cache build
  (XGrammar's adaptive token mask cache) and the first matcher; fastest of 3, each from scratch
  (for bankml a new ``Rules``, so a new shared context). Vocabulary tables built once per
  vocabulary (bankml's decoded pieces and trie, XGrammar's TokenizerInfo, llguidance's
  LLTokenizer) are not part of it.
* cold walk: the matcher of the last compile walks the document; before each token, and once
  after the last, one whole-vocabulary mask is filled and timed. For bankml the Rules are new, so
  its per-grammar context (node pool, transitions, mask cache) starts empty.
* warm walks: REPEATS more walks (default 3), each with a new matcher of the same compiled
  grammar; per position the fastest is kept. bankml's matchers share the context the cold walk
  filled; XGrammar's share the compiled grammar; llguidance builds a new LLMatcher from the
  grammar each time (its lexer states are per matcher, so its warm walk is as cold as the first);
  libllama has nothing to warm. libllama is timed on every LIBLLAMA_EVERY-th position in the warm
  walks (default 4; ~20 ms a mask), and on every position in the cold walk, whose masks are the
  reference.

The table aggregates all positions of all walks: compile p50 / max over the schemas, mask µs
p50 / mean / p99 / max, bankml's ``MatchContext.cache_bytes`` after its walks (max over schemas),
and at how many positions each engine's mask equals libllama's (count and FNV-1a hash), as is and
with the tokens where XGrammar and llguidance differ from llama.cpp by design set aside (control
and end-of-generation tokens, single bytes 0xF5..0xFF). XGrammar and llguidance compile their own
grammars from the schema, so their masks also differ where their JSON differs from llama.cpp's
(whitespace, number and string rules, additional properties); the notes say how.

A second table compiles llama.cpp's GBNF in XGrammar and llguidance (the ``walks`` adapters) and
walks the instance with it: does either take llama.cpp's grammar as is, and are the masks then
llama.cpp's (compared at every GBNF_EVERY-th position, default 8)? Everything runs on one thread.
--json PATH also writes the per-schema numbers.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import schema_walks  # noqa: E402
import summary  # noqa: E402
import walks  # noqa: E402

VOCAB_LABELS = summary.VOCAB_LABELS
fmt_us = summary.fmt_us


def packed_ids(ids, n_vocab):
    return summary.packed(ids, n_vocab)


def first_matcher(eng, compiled):
    """The first matcher of a compiled grammar (llguidance's compile already made a fresh one)."""
    if eng.name == "llguidance":
        return compiled[1]
    return eng.matcher(compiled)


def fill_timed(eng, matcher, out):
    started = time.perf_counter_ns()
    eng.fill(matcher, out)
    return (time.perf_counter_ns() - started) / 1e3


def accept_checked(eng, matcher, out, token):
    """Accept token after a fill of the current state; libllama must not be fed a token its mask
    rejects (it aborts the process), so its mask is checked first."""
    if eng.name == "libllama" and not out[0][token]:
        raise RuntimeError(f"libllama rejects token {token} ({eng.vocab.piece(token)!r})")
    eng.accept(matcher, token)


class SchemaWalk:
    """One engine's compile, cold walk and warm walks over one schema."""

    def __init__(self, eng, name, tokens, repeats, libllama_every):
        self.error = None
        compile_ms = []
        compiled = matcher = None
        for _ in range(3):
            gc.collect()
            started = time.perf_counter_ns()
            try:
                compiled = schema_walks.compile_schema(eng, name)
                matcher = first_matcher(eng, compiled)
            except Exception as e:  # noqa: BLE001 - an engine that rejects the schema: report it
                self.error = f"compile failed: {str(e).splitlines()[0][:200]}"
                break
            compile_ms.append((time.perf_counter_ns() - started) / 1e6)
        self.compile_ms = min(compile_ms) if compile_ms else None
        self.cold, self.masks, self.warm, self.cache_bytes = [], [], [], None
        if self.error:
            return
        out = eng.new_mask()
        gc.collect()
        n = len(tokens)
        for index in range(n + 1):  # before each token, and after the last
            self.cold.append(fill_timed(eng, matcher, out))
            self.masks.append(packed_ids(eng.allowed_ids(matcher, out), eng.n_vocab))
            if index == n:
                break
            try:
                accept_checked(eng, matcher, out, tokens[index])
            except Exception as e:  # noqa: BLE001
                self.error = f"stopped at token {index} of {n}: {str(e).splitlines()[0][:200]}"
                return
        timed_positions = range(0, n + 1, libllama_every if eng.name == "libllama" else 1)
        warm = np.full(len(timed_positions), np.inf)
        for _ in range(repeats):
            gc.collect()
            matcher = eng.matcher(compiled)
            slot = 0
            for index in range(n + 1):
                if eng.name != "libllama" or index % libllama_every == 0:
                    warm[slot] = min(warm[slot], fill_timed(eng, matcher, out))
                    slot += 1
                if index < n:
                    eng.accept(matcher, tokens[index])  # the cold walk showed every token is accepted
        self.warm = warm.tolist()
        if eng.name == "bankml":
            self.cache_bytes = matcher.context.cache_bytes


def compare_masks(reference, masks, n_vocab, keep_bits):
    """Per position: None where the masks are equal, else (exact?, direction, only_engine, only_reference)
    with the set-aside tokens left out of direction and the two id lists ("=" when equal outside them)."""
    diffs = []
    for ref, mine in zip(reference, masks):
        if np.array_equal(ref, mine):
            diffs.append(None)
            continue
        extra = mine & ~ref & keep_bits
        missing = ref & ~mine & keep_bits
        if not extra.any() and not missing.any():
            direction = "="
        elif not missing.any():
            direction = "more"
        elif not extra.any():
            direction = "less"
        else:
            direction = "both"
        diffs.append((direction, extra, missing))
    return diffs


CLASS_LABELS = {
    "key": "inside a key",
    "string": "inside a string value",
    "number": "in or right after a number",
    "literal": "inside or right after true/false/null",
    "between": "between values (whitespace, punctuation)",
    "end": "after the document",
}


def describe_differences(e, classes_diff, vocab):
    """One note line per position class: how many positions differ, in which direction, one example."""
    lines = []
    for cls, (counts, example) in sorted(classes_diff.items(), key=lambda kv: -sum(kv[1][0].values())):
        total = sum(counts.values())
        how = ", ".join(f"{n:,} {d}" for d, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        schema, snippet, extra, missing = example
        lines.append(
            f"  - {CLASS_LABELS[cls]}: {total:,} positions ({how}). E.g. {schema} after …{snippet!r}: "
            f"only {e} allows {summary.describe_ids(vocab, extra, 6) or 'nothing'}; only libllama allows "
            f"{summary.describe_ids(vocab, missing, 6) or 'nothing'}."
        )
    return lines


def gbnf_check(eng, name, tokens, reference, every, keep_bits):
    """llama.cpp's GBNF given to eng's GBNF front-end: (compiled?, walked?, compile ms, masks compared,
    masks equal, masks equal outside the set-aside tokens, note)."""
    started = time.perf_counter_ns()
    try:
        compiled = schema_walks.gbnf_compile(eng, name)
    except Exception as e:  # noqa: BLE001
        return False, False, None, 0, 0, 0, f"{name}: {str(e).splitlines()[0][:160]}"
    ms = (time.perf_counter_ns() - started) / 1e6
    matcher = eng.matcher(compiled)
    out = eng.new_mask()
    compared = equal = outside = 0
    for index in range(len(tokens) + 1):
        if reference is not None and index % every == 0 and index < len(reference):
            eng.fill(matcher, out)
            compared += 1
            mine = packed_ids(eng.allowed_ids(matcher, out), eng.n_vocab)
            equal += np.array_equal(reference[index], mine)
            outside += np.array_equal(reference[index] & keep_bits, mine & keep_bits)
        if index == len(tokens):
            break
        try:
            eng.accept(matcher, tokens[index])
        except Exception as e:  # noqa: BLE001
            return (
                True,
                False,
                ms,
                compared,
                equal,
                outside,
                f"{name}: stopped at token {index}: {str(e).splitlines()[0][:160]}",
            )
    return True, True, ms, compared, equal, outside, None


def pct(values, q):
    return float(np.percentile(values, q)) if len(values) else float("nan")


def stats(values):
    if not len(values):
        return "–"
    a = np.asarray(values)
    return f"{fmt_us(pct(a, 50))} / {fmt_us(a.mean())} / {fmt_us(pct(a, 99))} / {fmt_us(a.max())}"


def print_per_schema(raw, engines):
    """One row per schema: where the time goes."""
    others = [e for e in ("xgrammar", "llguidance") if e in engines]
    head = ["schema", "source", "tokens", "rules in the GBNF"]
    if "bankml" in engines:
        head += [
            "bankml compile ms",
            "bankml cold mean / max µs",
            "bankml cold masks > 1 ms",
            "bankml warm mean µs",
            "bankml cache MiB",
        ]
    if "libllama" in engines:
        head += ["libllama cold mean µs"]
    head += [f"{e} cold mean µs" for e in others]
    if "libllama" in engines:
        head += [f"{e} = libllama" for e in others]
    print("\n| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 2))
    for row in raw:
        name = row["schema"]
        entry = schema_walks.entry(name)
        cells = [
            name,
            "pydantic" if entry["source"].startswith("pydantic") else "hand",
            str(row["tokens"]),
            str(schema_walks.gbnf(name).count("::=")),
        ]
        eng = row["engines"]
        if "bankml" in engines:
            b = eng["bankml"]
            cold = np.asarray(b["cold_us"]) if b["cold_us"] else np.array([np.nan])
            cells += [
                f"{b['compile_ms']:.2f}" if b["compile_ms"] is not None else "–",
                f"{fmt_us(cold.mean())} / {fmt_us(cold.max())}",
                str(int((cold > 1000).sum())),
                fmt_us(np.mean(b["warm_us"])) if b["warm_us"] else "–",
                f"{b['cache_bytes'] / 2**20:.1f}" if b["cache_bytes"] is not None else "–",
            ]
        if "libllama" in engines:
            cells.append(fmt_us(np.mean(eng["libllama"]["cold_us"])) if eng["libllama"]["cold_us"] else "–")
        for e in others:
            cells.append(fmt_us(np.mean(eng[e]["cold_us"])) if eng[e]["cold_us"] else "–")
        if "libllama" in engines:
            cells += [f"{eng[e].get('masks_equal', 0)}/{row['tokens'] + 1}" for e in others]
        print("| " + " | ".join(cells) + " |")


def run(vocab_name, engines, names, repeats, libllama_every, gbnf_every, gbnf_engines, per_schema=False):
    vocab = walks.bankml_vocab(vocab_name)
    label = VOCAB_LABELS.get(vocab_name, vocab_name)
    set_aside = walks.known_difference_ids(vocab_name)
    keep = np.ones(vocab.n_vocab, dtype=bool)
    keep[set_aside] = False
    keep_bits = np.packbits(keep, bitorder="little")
    order = sorted(engines, key=lambda e: e != "libllama")  # libllama first: its masks are the reference
    per_engine = {
        e: {
            "compile_ms": [],
            "cold": [],
            "warm": [],
            "cache": [],
            "errors": [],
            "walked": 0,
            "exact": 0,
            "outside": 0,
            "classes": {},
        }
        for e in engines
    }
    gbnf = {
        e: {"compiled": 0, "walked": 0, "compile_ms": [], "compared": 0, "equal": 0, "outside": 0, "notes": []}
        for e in gbnf_engines
    }
    positions = 0
    raw = []
    for name in names:
        tokens = schema_walks.walk_tokens(name, vocab_name)
        classes = schema_walks.position_classes(name, vocab_name)
        positions += len(tokens) + 1
        reference = None
        row = {"schema": name, "tokens": len(tokens), "engines": {}}
        for e in order:
            eng = walks.engine(e, vocab_name)
            print(f"  {vocab_name} {name} ({len(tokens)} tokens): {e} ...", file=sys.stderr, flush=True)
            w = SchemaWalk(eng, name, tokens, repeats, libllama_every)
            acc = per_engine[e]
            if w.compile_ms is not None:
                acc["compile_ms"].append(w.compile_ms)
            acc["cold"].extend(w.cold)
            acc["warm"].extend(w.warm)
            if w.cache_bytes is not None:
                acc["cache"].append(w.cache_bytes)
            if w.error:
                acc["errors"].append(f"{name}: {w.error}")
            else:
                acc["walked"] += 1
            if e == "libllama":
                reference = w.masks
            elif reference is not None:
                diffs = compare_masks(reference, w.masks, vocab.n_vocab, keep_bits)
                text = schema_walks.instance_bytes(name)
                ends = [0] + schema_walks.token_ends(name, vocab_name)
                for index, (d, cls) in enumerate(zip(diffs, classes)):
                    if d is None:
                        acc["exact"] += 1
                        acc["outside"] += 1
                    elif d[0] == "=":
                        acc["outside"] += 1
                    else:
                        counts, example = acc["classes"].setdefault(cls, ({}, None))
                        counts[d[0]] = counts.get(d[0], 0) + 1
                        if example is None:
                            snippet = text[max(0, ends[index] - 28) : ends[index]].decode("utf-8", "replace")
                            example = (
                                name,
                                snippet,
                                summary.unpack(d[1], vocab.n_vocab),
                                summary.unpack(d[2], vocab.n_vocab),
                            )
                            acc["classes"][cls] = (counts, example)
                row["engines"].setdefault(e, {})["masks_equal"] = sum(d is None for d in diffs)
            row["engines"].setdefault(e, {}).update(
                compile_ms=w.compile_ms, cold_us=w.cold, warm_us=w.warm, cache_bytes=w.cache_bytes, error=w.error
            )
        for e in gbnf_engines:
            eng = walks.engine(e, vocab_name)
            print(f"  {vocab_name} {name}: {e} given llama.cpp's GBNF ...", file=sys.stderr, flush=True)
            ok, walked, ms, compared, equal, outside, note = gbnf_check(
                eng, name, tokens, reference, gbnf_every, keep_bits
            )
            g = gbnf[e]
            g["compiled"] += ok
            g["walked"] += walked
            if ms is not None:
                g["compile_ms"].append(ms)
            g["compared"] += compared
            g["equal"] += equal
            g["outside"] += outside
            if note:
                g["notes"].append(note)
            row.setdefault("gbnf", {})[e] = {
                "compiled": ok,
                "walked": walked,
                "compile_ms": ms,
                "masks_compared": compared,
                "masks_equal": equal,
                "masks_equal_quirks_aside": outside,
                "note": note,
            }
        raw.append(row)

    n_schemas = len(names)
    print(f"\n### {n_schemas} JSON schemas × {label} ({vocab.n_vocab:,} tokens)\n")
    print(
        f"{n_schemas} schema walks, {positions:,} masks per walk in all (one before each token of each instance "
        f"and one after its last). Mask µs: p50 / mean / p99 / max over all positions of all walks. Cold: the "
        f"first walk of a freshly compiled schema (bankml: new Rules, so an empty shared context). Warm: per "
        f"position the fastest of {repeats} more walks, each with a new matcher of the same compiled grammar"
        f"{f'; libllama timed on every {libllama_every}th position there' if libllama_every > 1 else ''}. "
        f"Compile: schema or GBNF to a ready matcher, fastest of 3, p50 / max over the schemas.\n"
    )
    print(
        "| engine | schema given as | walks done | compile ms p50 / max | cold mask µs p50 / mean / p99 / max "
        "| warm mask µs p50 / mean / p99 / max | cache after walk, max | masks = libllama "
        "| = libllama, known quirks aside |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for e in engines:
        acc = per_engine[e]
        comp = acc["compile_ms"]
        comp_s = f"{pct(comp, 50):,.2f} / {max(comp):,.2f}" if comp else "–"
        cache = f"{max(acc['cache']) / 2**20:,.1f} MiB" if acc["cache"] else "–"
        if e == "libllama":
            same = same_outside = "reference"
        elif "libllama" in engines:
            same = f"{acc['exact']:,}/{positions:,}"
            same_outside = f"{acc['outside']:,}/{positions:,}"
            differ = positions - acc["outside"]
            if differ:
                notes.append(
                    f"- {e}: {differ:,} positions differ with the quirks set aside; by where the walk is "
                    f"(more / less / both: {e} allows tokens libllama does not, the reverse, or both):"
                )
                notes += describe_differences(e, acc["classes"], vocab)
        else:
            same = same_outside = "–"
        for err in acc["errors"]:
            notes.append(f"- {e}: {err}")
        print(
            f"| {e} {walks.engine_version(e)} | {schema_walks.FRONT_ENDS[e]} | {acc['walked']}/{n_schemas} "
            f"| {comp_s} | {stats(acc['cold'])} | {stats(acc['warm'])} | {cache} | {same} | {same_outside} |"
        )
    if per_schema:
        print_per_schema(raw, engines)
    if per_engine.get("bankml", {}).get("cache"):
        c = per_engine["bankml"]["cache"]
        print(
            f"\nbankml cache: `MatchContext.cache_bytes` after the cold and warm walks of a schema; max "
            f"{max(c) / 2**20:,.1f} MiB, median {pct(c, 50) / 2**20:,.1f} MiB, all {n_schemas} schemas together "
            f"{sum(c) / 2**20:,.1f} MiB."
        )
    if notes:
        print("\nWhere the masks differ from libllama's:\n")
        print("\n".join(notes))
    if gbnf_engines:
        print(
            f"\nllama.cpp's GBNF of each schema given directly to the other engines' GBNF front-ends "
            f'(XGrammar `Grammar.from_ebnf`, each empty alternative written `""`; llguidance '
            f'`grammar_from("gbnf")`): compiled, instance walked to the end, and masks equal to '
            f"libllama's at every {gbnf_every}th position, as is and with the known quirks set aside.\n"
        )
        print(
            "| engine | compiles | walks the instance | compile ms p50 / max | masks = libllama (sampled) "
            "| = libllama, known quirks aside |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        gnotes = []
        for e in gbnf_engines:
            g = gbnf[e]
            comp = g["compile_ms"]
            comp_s = f"{pct(comp, 50):,.2f} / {max(comp):,.2f}" if comp else "–"
            print(
                f"| {e} | {g['compiled']}/{n_schemas} | {g['walked']}/{n_schemas} | {comp_s} "
                f"| {g['equal']:,}/{g['compared']:,} | {g['outside']:,}/{g['compared']:,} |"
            )
            gnotes += [f"- {e}: {n}" for n in g["notes"]]
        if gnotes:
            print()
            print("\n".join(gnotes))
    return raw


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vocab",
        action="append",
        choices=sorted(walks.VOCAB_FILES),
        help="vocabulary (repeatable; default qwen2 and llama3)",
    )
    parser.add_argument(
        "--engine", action="append", choices=walks.ENGINES, help="engine (repeatable; default every importable one)"
    )
    parser.add_argument(
        "--schema", action="append", choices=schema_walks.schema_names(), help="schema (repeatable; default all)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="warm walks (default 3)")
    parser.add_argument(
        "--libllama-every",
        type=int,
        default=4,
        help="time libllama's warm walks on every Nth position (default 4; 1 = all)",
    )
    parser.add_argument(
        "--gbnf-every",
        type=int,
        default=8,
        help="compare the GBNF-fed XGrammar/llguidance masks on every Nth position (default 8)",
    )
    parser.add_argument(
        "--no-gbnf-check", action="store_true", help="skip giving llama.cpp's GBNF to XGrammar and llguidance"
    )
    parser.add_argument("--per-schema", action="store_true", help="also print one row per schema")
    parser.add_argument("--json", metavar="PATH", help="also write the per-schema numbers as JSON")
    args = parser.parse_args(argv)
    vocabs = args.vocab or ["qwen2", "llama3"]
    names = args.schema or schema_walks.schema_names()
    available = walks.available_engines()
    if args.engine and any(e not in available for e in args.engine):
        # an engine named on the command line runs or the run stops; only the default list leaves one out
        parser.error(f"--engine: {', '.join(e for e in args.engine if e not in available)} not installed")
    engines = [e for e in (args.engine or walks.ENGINES) if e in available]
    missing = [e for e in (args.engine or walks.ENGINES) if e not in available]
    gbnf_engines = [] if args.no_gbnf_check else [e for e in ("xgrammar", "llguidance") if e in engines]

    print("## Whole-vocabulary mask time along JSON-schema walks\n")
    print(summary.machine_line() + f" Load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.")
    print(
        "Engines: "
        + "; ".join(f"{e} {walks.engine_version(e)}" for e in engines)
        + (f" (not installed: {', '.join(missing)})" if missing else "")
    )
    print(
        "Every engine gets the same token bytes (llama_token_to_piece, special=true). Schemas: "
        f"`bench/data/schemas.json` ({len(names)}), GBNF: `bench/data/schema_grammars.json`."
    )
    raw = {"machine": summary.machine_line(), "runs": []}
    for vocab_name in vocabs:
        raw["runs"].append(
            {
                "vocab": vocab_name,
                "schemas": run(
                    vocab_name,
                    engines,
                    names,
                    args.repeats,
                    max(1, args.libllama_every),
                    max(1, args.gbnf_every),
                    gbnf_engines,
                    args.per_schema,
                ),
            }
        )
    print(f"\nLoad average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.")
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(raw, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
