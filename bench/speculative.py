"""Speculative decoding's grammar work: per draft token a mask and an accept, then one rollback.

The shape vLLM's structured-output manager drives with draft tokens (``grammar_bitmask`` in
``vllm/v1/structured_output/__init__.py``): for each of the D draft positions it fills that row of
the batch bitmask and accepts the draft token, fills the bonus row, then rolls the D accepted
tokens back. This script runs that cycle along the 22 JSON-schema walks of the benchmark
(``schema_walks``: each schema's instance document as libllama tokenizes it), D tokens per cycle,
with every engine in the same run, schema by schema:

* bankml: llama.cpp's GBNF of the schema; ``fill_next_token_bitmask(bitmask, i)``,
  ``accept_tokens([t])``, ``rollback(D)``;
* XGrammar: ``compile_json_schema``; ``GrammarMatcher.fill_next_token_bitmask(bitmask, i)``,
  ``accept_token``, ``rollback(D)``;
* llguidance: ``grammar_from_json_schema``; ``llguidance.numpy.fill_next_token_bitmask(m, bitmask, i)``,
  ``LLMatcher.consume_token``, ``rollback(D)``.

Timed (wall clock and the thread's CPU clock, which a loaded machine disturbs less): one cycle
(D + 1 masks, D accepts, one rollback), from a fresh matcher per schema (so
masks are cold: every cycle meets states the walk has not met before); between cycles each engine
accepts the D tokens again, untimed (the verified tokens), and goes on. Reported per draft token:
cycle time / D, µs, p50 / mean / p99 over all cycles of all schemas, and the ratio of means to
bankml's. Single thread.

Run: ``python bench/speculative.py [--vocab qwen2] [--drafts 4 8] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import schema_walks  # noqa: E402
import walks  # noqa: E402


class Speculator:
    """One engine's three calls, on one matcher."""

    def __init__(self, eng, compiled, drafts):
        self.eng = eng
        self.name = eng.name
        self.matcher = eng.matcher(compiled)
        if self.name == "bankml":
            self.bitmask = np.zeros((drafts + 1, (eng.n_vocab + 31) // 32), dtype=np.int32)
        elif self.name == "xgrammar":
            self.bitmask = eng.xgr.allocate_token_bitmask(drafts + 1, eng.n_vocab)
        else:
            self.bitmask = eng.llg_numpy.allocate_token_bitmask(drafts + 1, eng.n_vocab)

    def cycle(self, drafts):
        """The timed part: a mask and an accept per draft token, the bonus mask, one rollback."""
        m, bitmask = self.matcher, self.bitmask
        if self.name == "bankml":
            for i, t in enumerate(drafts):
                m.fill_next_token_bitmask(bitmask, i)
                if not m.accept_tokens([t]):
                    return False
            m.fill_next_token_bitmask(bitmask, len(drafts))
            m.rollback(len(drafts))
        elif self.name == "xgrammar":
            for i, t in enumerate(drafts):
                m.fill_next_token_bitmask(bitmask, i)
                if not m.accept_token(t):
                    return False
            m.fill_next_token_bitmask(bitmask, len(drafts))
            m.rollback(len(drafts))
        else:
            fill = self.eng.llg_numpy.fill_next_token_bitmask
            for i, t in enumerate(drafts):
                fill(m, bitmask, i)
                if not m.consume_token(t):
                    return False
            fill(m, bitmask, len(drafts))
            m.rollback(len(drafts))
        return True

    def advance(self, tokens):
        for t in tokens:
            self.eng.accept(self.matcher, t)


def run(vocab_name, drafts_list, engine_names, schema_names):
    results = {d: {e: [] for e in engine_names} for d in drafts_list}
    stopped = {d: {e: [] for e in engine_names} for d in drafts_list}
    engines = {e: walks.engine(e, vocab_name) for e in engine_names}
    for name in schema_names:
        tokens = schema_walks.walk_tokens(name, vocab_name)
        for drafts in drafts_list:
            # compiled again for each draft count: bankml's context keeps what its matchers worked out,
            # so a second walk over the same Rules would be warm
            compiled = {e: schema_walks.compile_schema(engines[e], name) for e in engine_names}
            specs = {e: Speculator(engines[e], compiled[e], drafts) for e in engine_names}
            live = set(engine_names)
            for start in range(0, len(tokens) - drafts + 1, drafts):
                chunk = list(tokens[start : start + drafts])
                for e in engine_names:  # engines in turn, cycle by cycle: the same load
                    if e not in live:
                        continue
                    spec = specs[e]
                    began, began_cpu = time.perf_counter_ns(), time.thread_time_ns()
                    ok = spec.cycle(chunk)
                    elapsed_cpu = time.thread_time_ns() - began_cpu
                    elapsed = time.perf_counter_ns() - began
                    if not ok:
                        live.discard(e)
                        stopped[drafts][e].append(f"{name}@{start}")
                        continue
                    results[drafts][e].append((elapsed / 1e3 / drafts, elapsed_cpu / 1e3 / drafts))
                    spec.advance(chunk)
    return results, stopped


def summarize(results, stopped, engine_names):
    rows = []
    for drafts, by_engine in results.items():
        base = np.asarray(by_engine["bankml"]).mean(axis=0) if by_engine.get("bankml") else None
        for e in engine_names:
            values = np.asarray(by_engine[e]).reshape(-1, 2)
            if not values.size:
                continue
            row = {
                "drafts": drafts,
                "engine": e,
                "version": walks.engine_version(e),
                "cycles": int(len(values)),
                "stopped": stopped[drafts][e],
            }
            for column, clock in ((0, "wall"), (1, "cpu")):
                mean = float(values[:, column].mean())
                row[clock] = {
                    "p50": float(np.percentile(values[:, column], 50)),
                    "mean": mean,
                    "p99": float(np.percentile(values[:, column], 99)),
                    "ratio": (mean / base[column]) if base is not None else None,
                }
            rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", default="qwen2", choices=sorted(walks.VOCAB_FILES))
    parser.add_argument("--drafts", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--engines", nargs="+", default=None)
    parser.add_argument("--schemas", type=int, default=None, help="only the first N schemas")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    engine_names = args.engines or [e for e in ("bankml", "xgrammar", "llguidance") if e in walks.available_engines()]
    names = schema_walks.schema_names()[: args.schemas]
    load_before = os.getloadavg()
    results, stopped = run(args.vocab, args.drafts, engine_names, names)
    load_after = os.getloadavg()
    rows = summarize(results, stopped, engine_names)
    print(
        f"speculative cycle per draft token, {len(names)} schemas, vocabulary {args.vocab}, µs, "
        f"p50 / mean / p99 (load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)"
    )
    print("| drafts | engine | version | cycles | wall clock | thread CPU | mean / bankml's (wall, CPU) |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        w, c = r["wall"], r["cpu"]
        ratio = f"{w['ratio']:.2f}, {c['ratio']:.2f}" if w["ratio"] is not None else "–"
        print(
            f"| {r['drafts']} | {r['engine']} | {r['version']} | {r['cycles']} "
            f"| {w['p50']:.1f} / {w['mean']:.1f} / {w['p99']:.1f} | {c['p50']:.1f} / {c['mean']:.1f} / {c['p99']:.1f} "
            f"| {ratio} |"
        )
        if r["stopped"]:
            print(f"  ({r['engine']} refused a draft token at {', '.join(r['stopped'])})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"vocab": args.vocab, "load": [load_before, load_after], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
