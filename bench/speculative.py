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
(D + 1 masks, D accepts, one rollback), from a fresh matcher per schema; between cycles each engine
accepts the D tokens again, untimed (the verified tokens), and goes on. A cycle's first mask is then the
state the previous cycle's bonus row masked: bankml's context keeps that mask and answers it from its cache,
XGrammar and llguidance compute it again. So the first mask is timed apart (its own columns, over the cycles
after a walk's first), and the per-draft-token figure is the rest of the cycle / D: D masks (the draft rows
after the first, and the bonus row), D accepts and the rollback, all on states no engine has masked before
(cold for every engine). Reported: µs, p50 / mean / p99 over all cycles of all schemas, and the ratio of
means to bankml's. Single thread. ``--engines`` names from bankml, xgrammar, llguidance (bankml among them);
any other name, or one not installed, is an error.

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

SPECULATORS = ("bankml", "xgrammar", "llguidance")


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
        """The timed part: a mask and an accept per draft token, the bonus mask, one rollback. Returns None when
        a draft token is refused, else the clocks (wall ns, thread CPU ns) read once the first mask was filled:
        the caller times the first mask apart from the rest of the cycle."""
        m, bitmask = self.matcher, self.bitmask
        wall, cpu = time.perf_counter_ns, time.thread_time_ns
        first = None
        if self.name == "bankml":
            for i, t in enumerate(drafts):
                m.fill_next_token_bitmask(bitmask, i)
                if i == 0:
                    first = (wall(), cpu())
                if not m.accept_tokens([t]):
                    return None
            m.fill_next_token_bitmask(bitmask, len(drafts))
            m.rollback(len(drafts))
        elif self.name == "xgrammar":
            for i, t in enumerate(drafts):
                m.fill_next_token_bitmask(bitmask, i)
                if i == 0:
                    first = (wall(), cpu())
                if not m.accept_token(t):
                    return None
            m.fill_next_token_bitmask(bitmask, len(drafts))
            m.rollback(len(drafts))
        else:
            fill = self.eng.llg_numpy.fill_next_token_bitmask
            for i, t in enumerate(drafts):
                fill(m, bitmask, i)
                if i == 0:
                    first = (wall(), cpu())
                if not m.consume_token(t):
                    return None
            fill(m, bitmask, len(drafts))
            m.rollback(len(drafts))
        return first

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
                    first = spec.cycle(chunk)
                    elapsed_cpu = time.thread_time_ns() - began_cpu
                    elapsed = time.perf_counter_ns() - began
                    if first is None:
                        live.discard(e)
                        stopped[drafts][e].append(f"{name}@{start}")
                        continue
                    # the first mask apart: after the untimed advance below, a cycle starts in the state whose
                    # mask the previous cycle's bonus row filled, and bankml's context keeps that mask (the
                    # others compute it again). The rest of the cycle (D masks, D accepts, one rollback) meets
                    # only states no engine has masked before.
                    first_ns, first_cpu = first[0] - began, first[1] - began_cpu
                    results[drafts][e].append(
                        (
                            (elapsed - first_ns) / 1e3 / drafts,
                            (elapsed_cpu - first_cpu) / 1e3 / drafts,
                            first_ns / 1e3,
                            first_cpu / 1e3,
                            start == 0,
                        )
                    )
                    spec.advance(chunk)
    return results, stopped


def summarize(results, stopped, engine_names):
    rows = []
    for drafts, by_engine in results.items():
        base = np.asarray(by_engine["bankml"]).mean(axis=0) if by_engine.get("bankml") else None
        for e in engine_names:
            values = np.asarray(by_engine[e], dtype=float).reshape(-1, 5)
            if not values.size:
                continue
            later = values[values[:, 4] == 0]  # the cycles after a walk's first: their first mask is the bonus state
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
            for column, clock in ((2, "first_mask_wall"), (3, "first_mask_cpu")):
                first = later[:, column] if later.size else values[:, column]
                row[clock] = {"p50": float(np.percentile(first, 50)), "mean": float(first.mean())}
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
    if args.engines:
        unknown = [e for e in args.engines if e not in SPECULATORS]
        if unknown:
            parser.error(
                f"--engines: unknown engine {', '.join(map(repr, unknown))} (the engines: {', '.join(SPECULATORS)})"
            )
        missing = [e for e in args.engines if e not in walks.available_engines()]
        if missing:
            parser.error(f"--engines: {', '.join(missing)} not installed (pip install -e '.[bench]')")
        if "bankml" not in args.engines:
            parser.error("--engines: the ratios are to bankml's: name bankml too")
    engine_names = args.engines or [e for e in SPECULATORS if e in walks.available_engines()]
    names = schema_walks.schema_names()[: args.schemas]
    load_before = os.getloadavg()
    results, stopped = run(args.vocab, args.drafts, engine_names, names)
    load_after = os.getloadavg()
    rows = summarize(results, stopped, engine_names)
    print(
        f"speculative cycle per draft token, {len(names)} schemas, vocabulary {args.vocab}, µs, "
        f"p50 / mean / p99 (load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)"
    )
    print(
        "Per draft token: the cycle without its first mask (D masks, D accepts, one rollback) / D. The first mask, "
        "apart (p50 / mean, cycles after a walk's first): the state the previous cycle's bonus row masked, which "
        "bankml's context keeps and the others compute again."
    )
    print(
        "| drafts | engine | version | cycles | wall clock | thread CPU | mean / bankml's (wall, CPU) "
        "| first mask wall | first mask CPU |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        w, c = r["wall"], r["cpu"]
        fw, fc = r["first_mask_wall"], r["first_mask_cpu"]
        ratio = f"{w['ratio']:.2f}, {c['ratio']:.2f}" if w["ratio"] is not None else "–"
        print(
            f"| {r['drafts']} | {r['engine']} | {r['version']} | {r['cycles']} "
            f"| {w['p50']:.1f} / {w['mean']:.1f} / {w['p99']:.1f} | {c['p50']:.1f} / {c['mean']:.1f} / {c['p99']:.1f} "
            f"| {ratio} | {fw['p50']:.1f} / {fw['mean']:.1f} | {fc['p50']:.1f} / {fc['mean']:.1f} |"
        )
        if r["stopped"]:
            print(f"  ({r['engine']} refused a draft token at {', '.join(r['stopped'])})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"vocab": args.vocab, "load": [load_before, load_after], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
