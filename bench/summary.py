"""Mask time over a whole JSON walk, every engine, as Markdown tables for docs/PERFORMANCE.md.

    python bench/summary.py --vocab qwen2 --vocab llama3

For each grammar x vocabulary, each engine walks the whole document (tokenized by libllama)
on its own, REPEATS times (default 3), each walk with a new matcher: before every token it
fills one whole-vocabulary mask, times it, fills and times a second one of the same state,
then accepts the token. Per position the fastest first mask over the walks is kept (what
generation pays, one mask per token); the second mask shows what a per-state cache leaves.
The table gives p50 / mean / p99 / max of the per-position first-mask times in µs, the mean
of the second, the vocabulary preparation and grammar compile times (min of 3) in ms,
the ratio to bankml, and at how many positions the engine's mask equals libllama's (count and
FNV-1a hash), both as is and with the tokens where XGrammar and llguidance differ from
llama.cpp by design set aside (control and end-of-generation tokens, and the single-byte
tokens 0xF5..0xFF that llama.cpp's decode_utf8 takes as 4-byte lead bytes). Everything
runs on one thread. --json PATH also writes the per-position times.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import walks  # noqa: E402

VOCAB_LABELS = {"qwen2": "Qwen2", "llama3": "Llama 3"}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_line() -> str:
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        f"Machine: {cpu_model()}, {cores} cores ({usable} usable), Python {platform.python_version()}, "
        f"numpy {np.__version__}; {now:%Y-%m-%d %H:%M} UTC; single thread."
    )


def packed(ids: np.ndarray, n_vocab: int) -> np.ndarray:
    allowed = np.zeros(n_vocab, dtype=bool)
    allowed[ids] = True
    return np.packbits(allowed, bitorder="little")


def timed(fn):
    started = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - started


def walk_engine(eng, text, tokens, walks_count):
    """Walk the document walks_count times, each time with a new matcher.

    Returns per-position times in µs -- ``first``: the first mask of that state in its walk, fastest
    over the walks (what generation pays: one mask per token); ``again``: a second mask of the same
    state right after, fastest over the walks (what a cache of the state's mask leaves) --, the masks
    of the first walk (packed bits), the compile time in ms (fastest of 3) and an error if the engine
    rejected the walk.
    """
    compile_ns = []
    for _ in range(3):
        started = time.perf_counter_ns()
        compiled = eng.compile(text)
        compile_ns.append(time.perf_counter_ns() - started)
    first = np.full(len(tokens), np.inf)
    again = np.full(len(tokens), np.inf)
    masks, error = [], None
    out = eng.new_mask()
    for walk in range(walks_count):
        matcher = eng.matcher(compiled)
        for index, token in enumerate(tokens):
            first[index] = min(first[index], timed(lambda: eng.fill(matcher, out)))
            again[index] = min(again[index], timed(lambda: eng.fill(matcher, out)))
            if walk == 0:
                masks.append(packed(eng.allowed_ids(matcher, out), eng.n_vocab))
            try:
                eng.accept(matcher, token)
            except Exception as e:  # an engine that rejects the walk: report where, keep what was timed
                error = f"stopped at token {index}: {e}"
                break
        if error:
            break
    n = len(masks)
    return first[:n] / 1e3, again[:n] / 1e3, masks, min(compile_ns) / 1e6, error


def describe_ids(vocab, ids, limit=12):
    shown = ", ".join(f"{int(i)}={vocab.piece(int(i))!r}" for i in ids[:limit])
    more = f", … ({len(ids)} tokens)" if len(ids) > limit else ""
    return f"{shown}{more}"


def compare(reference, masks, vocab, set_aside: np.ndarray):
    """Positions where masks equal libllama's: (exact, outside set_aside, differences summary)."""
    keep = np.ones(vocab.n_vocab, dtype=bool)
    keep[set_aside] = False
    keep_bits = np.packbits(keep, bitorder="little")
    exact = outside = 0
    only_engine: set[int] = set()
    only_libllama: set[int] = set()
    for ref, mine in zip(reference, masks):
        if walks.ids_hash(unpack(ref, vocab.n_vocab)) == walks.ids_hash(unpack(mine, vocab.n_vocab)):
            exact += 1
            outside += 1
            continue
        if np.array_equal(ref & keep_bits, mine & keep_bits):
            outside += 1
        diff_mine = unpack(mine & ~ref, vocab.n_vocab)
        diff_ref = unpack(ref & ~mine, vocab.n_vocab)
        only_engine.update(diff_mine.tolist())
        only_libllama.update(diff_ref.tolist())
    return exact, outside, sorted(only_engine), sorted(only_libllama)


def unpack(bits, n_vocab):
    return np.flatnonzero(np.unpackbits(bits, bitorder="little")[:n_vocab]).astype(np.int32)


def fmt_us(x):
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_ratio(x, base):
    r = x / base
    if r >= 10:
        return f"{r:,.0f}×"
    if r >= 0.1:
        return f"{r:.2f}×"
    return f"1/{base / x:,.0f}"


def run(grammar_name, vocab_name, engines, repeats):
    text = walks.grammar_text(grammar_name)
    tokens = walks.walk_tokens(vocab_name)
    vocab = walks.bankml_vocab(vocab_name)
    document = walks.DOCUMENT.encode("utf-8")
    label = VOCAB_LABELS.get(vocab_name, vocab_name)
    results = {}
    for name in engines:
        eng = walks.engine(name, vocab_name)
        print(f"  walking {name} on {vocab_name} ...", file=sys.stderr, flush=True)
        results[name] = (eng,) + walk_engine(eng, text, tokens, repeats)
    set_aside = walks.known_difference_ids(vocab_name)

    print(f"\n### `{walks.GRAMMAR_FILES[grammar_name].name}` × {label} ({vocab.n_vocab:,} tokens)\n")
    print(
        f"{len(tokens)}-token walk of a {len(document)}-byte JSON document; before each token the first "
        f"whole-vocabulary mask of that state, fastest of {repeats} walks (each with a new matcher).\n"
    )
    print(
        "| engine | version | p50 µs | mean µs | p99 µs | max µs | same state again, mean µs | vocab prep ms "
        "| compile ms | mean vs bankml | p50 vs bankml | masks = libllama | = libllama, known quirks aside |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = results.get("bankml")
    reference = results.get("libllama")
    notes = []
    for name, (eng, us, again, masks, compile_ms, error) in results.items():
        p50, mean, p99, mx = np.percentile(us, 50), us.mean(), np.percentile(us, 99), us.max()
        if base is not None:
            mean_ratio = fmt_ratio(mean, base[1].mean())
            p50_ratio = fmt_ratio(p50, np.percentile(base[1], 50))
        else:
            mean_ratio = p50_ratio = "–"
        if reference is not None:
            n = min(len(masks), len(reference[3]))
            exact, outside, only_engine, only_libllama = compare(reference[3][:n], masks[:n], vocab, set_aside)
            same = f"{exact}/{len(tokens)}"
            same_outside = f"{outside}/{len(tokens)}"
            if only_engine or only_libllama:
                notes.append(
                    f"- {name}: allows where libllama does not: "
                    f"{describe_ids(vocab, only_engine) or 'none'}; libllama allows where {name} does not: "
                    f"{describe_ids(vocab, only_libllama) or 'none'}"
                )
        else:
            same = same_outside = "–"
        if error:
            notes.append(f"- {name}: {error}")
        prep = "–" if eng.prepare_ms is None else f"{eng.prepare_ms:,.0f}"
        print(
            f"| {name} | {walks.engine_version(name)} | {fmt_us(p50)} | {fmt_us(mean)} | {fmt_us(p99)} "
            f"| {fmt_us(mx)} | {fmt_us(again.mean())} | {prep} | {compile_ms:.2f} | {mean_ratio} | {p50_ratio} "
            f"| {same} | {same_outside} |"
        )
    print(
        "\nsame state again: a second mask of the same state right after the first (what a per-state "
        "cache leaves). vocab prep: per-vocabulary work before any grammar (bankml's decoded pieces, XGrammar's "
        "TokenizerInfo and GrammarCompiler, llguidance's LLTokenizer); compile: GBNF to a ready matcher "
        "(fastest of 3; XGrammar with max_threads=1 and its cache off)."
    )
    if notes:
        print("\nTokens on which the masks differ from libllama's (union over the walk):\n")
        print("\n".join(notes))
    return {
        name: {
            "version": walks.engine_version(name),
            "first_mask_us": us.tolist(),
            "same_state_again_us": again.tolist(),
            "compile_ms": compile_ms,
            "vocab_prep_ms": eng.prepare_ms,
            "error": error,
        }
        for name, (eng, us, again, masks, compile_ms, error) in results.items()
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vocab",
        action="append",
        choices=sorted(walks.VOCAB_FILES),
        help="vocabulary to walk (repeatable; default qwen2 and llama3)",
    )
    parser.add_argument(
        "--grammar", action="append", choices=sorted(walks.GRAMMAR_FILES), help="grammar (repeatable; default json)"
    )
    parser.add_argument(
        "--engine", action="append", choices=walks.ENGINES, help="engine (repeatable; default every importable one)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="walks, each with a new matcher; the fastest mask per position is kept (default 3)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the per-position times as JSON")
    args = parser.parse_args(argv)
    vocabs = args.vocab or ["qwen2", "llama3"]
    grammars = args.grammar or ["json"]
    available = walks.available_engines()
    if args.engine and any(e not in available for e in args.engine):
        # an engine named on the command line runs or the run stops; only the default list leaves one out
        parser.error(f"--engine: {', '.join(e for e in args.engine if e not in available)} not installed")
    engines = [e for e in (args.engine or walks.ENGINES) if e in available]
    missing = [e for e in (args.engine or walks.ENGINES) if e not in available]

    print("## Whole-vocabulary mask time along a JSON walk\n")
    print(machine_line())
    print(
        "Engines: "
        + "; ".join(f"{e} {walks.engine_version(e)}" for e in engines)
        + (f" (not installed: {', '.join(missing)})" if missing else "")
    )
    print(
        "Every engine gets the same token bytes (llama_token_to_piece, special=true) and the same GBNF "
        '(for XGrammar each empty alternative is written `""`).'
    )
    raw = {"machine": machine_line(), "document_bytes": len(walks.DOCUMENT.encode("utf-8")), "runs": []}
    for grammar_name in grammars:
        for vocab_name in vocabs:
            raw["runs"].append(
                {
                    "grammar": grammar_name,
                    "vocab": vocab_name,
                    "tokens": list(walks.walk_tokens(vocab_name)),
                    "engines": run(grammar_name, vocab_name, engines, args.repeats),
                }
            )
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(raw, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
