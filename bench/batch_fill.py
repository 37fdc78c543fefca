"""The batch fill alone, as a serving engine calls it once per step: ``fill_next_token_bitmasks`` filling a
whole batch's rows of vLLM's int32 bitmask in one call, on 1 and on 2 threads (docs/modules/engines.md,
docs/PERFORMANCE.md).

    PYTHONPATH=. python bench/batch_fill.py [--out FILE.json] [--threads 1,2] [--seconds 0.3]

The rows are matchers over SmolLM2's vocabulary (the model vLLM serves in the engine tests) in real walk
states: the 22 schemas of bench/data/schemas.json (llama.cpp's converter) walked along their instance
documents, and the tool-call grammars llama.cpp builds for ``tool_choice: required`` (recorded by the
chat-tools oracle, tests/data/chat_tools_oracle.json.gz) walked along the recorded call. A batch of n takes
the states round robin over the grammars (batch 256 = ~8 states of each of ~30 grammars).

* warm: every state's mask was filled once before (the steady state of a long-running server); per batch
  and thread count, the best of ``--repeats`` timings of as many calls as fit in ``--seconds``.
* cold: each timing on fresh contexts (new Rules, so the first masks of every state: a server meeting new
  schemas), one call per batch.

Scaling = time on 1 thread / time on 2 threads, from one run. The load average is recorded before and
after: on a shared machine the second core is not always free, and the wall-clock figures say so. So the
warm rows also report the CPU time of the busiest thread (the calling thread or a mask thread, per-thread
CPU clocks): 1-thread CPU / busiest-thread CPU on 2 threads is the scaling the split of the work allows when
both threads have a core (it leaves out waking a thread and waiting for one).
"""

import argparse
import gzip
import json
import os
import pathlib
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bankml import Grammar, Rules, Vocab, fill_next_token_bitmasks, json_schema_to_grammar  # noqa: E402
from bankml.errors import GrammarError  # noqa: E402
from bankml.integrations.adapters import llama_cpp_tokenizer  # noqa: E402
from tests import engines_support  # noqa: E402

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
# tool-call grammars of these templates (llama.cpp's grammar for tool_choice=required, several tools)
TOOL_TEMPLATES = [
    "Apertus-8B-Instruct.jinja",
    "Bielik-11B-v3.0-Instruct.jinja",
    "ByteDance-Seed-OSS.jinja",
    "GLM-4.6.jinja",
    "GigaChat3.1-10B-A1.8B.jinja",
    "Apriel-1.6-15b-Thinker-fixed.jinja",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
]


def grammar_sources(vocab, tokenize):
    """(name, GBNF, tokens to walk) for the 22 schemas and the tool-call grammars."""
    out = []
    for s in json.loads((ROOT / "bench" / "data" / "schemas.json").read_text())["schemas"]:
        out.append((s["name"], json_schema_to_grammar(s["schema"])[0], tokenize(s["instance"].encode(), False, False)))
    tools = json.load(gzip.open(ROOT / "tests" / "data" / "chat_tools_oracle.json.gz"))["templates"]
    for name in TOOL_TEMPLATES:
        template = tools.get(name)
        answer = (template or {}).get("answers", {}).get("many/required/think-off") or {}
        if not answer.get("grammar") or answer.get("grammar_lazy"):
            continue
        call = template["outputs"].get("call") or template["outputs"].get("two-calls") or ""
        out.append(("tools:" + name, answer["grammar"], tokenize(call.encode(), False, True)))
    return out


def walk_states(rules, vocab, tokens):
    """Clones of a matcher at each position of the walk; the walk stops at the first token it rejects."""
    g = Grammar(rules, vocab)
    states = [g.clone()]
    for t in tokens:
        try:
            g.accept(t)
        except GrammarError:
            break
        states.append(g.clone())
    return states


def batch_of(per_grammar, n):
    out, k = [], 0
    while len(out) < n:
        for states in per_grammar:
            if k < len(states) and len(out) < n:
                out.append(states[k])
        k += 1
    return out


def thread_clocks():
    """CPU clocks of the calling thread and of bankml's mask threads (time.pthread_getcpuclockid)."""
    helpers = [t for t in threading.enumerate() if t.name.startswith("bankml-mask-")]
    return [time.CLOCK_THREAD_CPUTIME_ID] + [time.pthread_getcpuclockid(t.ident) for t in helpers]


def timed(states, bitmask, threads, seconds, repeats):
    """(best wall seconds per call, CPU seconds per call of the busiest thread in the run with the best
    busiest-thread figure); the second does not count time the threads waited for a core."""
    best = best_cpu = float("inf")
    t0 = time.perf_counter()
    fill_next_token_bitmasks(states, bitmask, max_workers=threads)
    first = time.perf_counter() - t0
    calls = max(1, int(seconds / max(first, 1e-6)))
    clocks = thread_clocks()
    for _ in range(repeats):
        c0 = [time.clock_gettime(c) for c in clocks]
        t0 = time.perf_counter()
        for _ in range(calls):
            fill_next_token_bitmasks(states, bitmask, max_workers=threads)
        best = min(best, (time.perf_counter() - t0) / calls)
        busiest = max(time.clock_gettime(c) - c0[k] for k, c in enumerate(clocks))
        best_cpu = min(best_cpu, busiest / calls)
    return best, best_cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cold-repeats", type=int, default=3)
    args = ap.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    gguf = engines_support.smollm2_gguf()
    vocab = Vocab.from_gguf(gguf)
    tokenize = llama_cpp_tokenizer(gguf)
    width = (len(vocab) + 31) // 32
    sources = grammar_sources(vocab, tokenize)
    report = {
        "load_average_before": os.getloadavg(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "n_vocab": len(vocab),
        "grammars": [],
        "warm": [],
        "cold": [],
    }
    per_grammar = []
    for name, gbnf, tokens in sources:
        rules = Rules.parse(gbnf, "root", vocab)
        states = walk_states(rules, vocab, tokens)
        per_grammar.append(states)
        report["grammars"].append({"name": name, "states": len(states)})
    print(f"{len(per_grammar)} grammars, {sum(len(s) for s in per_grammar)} states", file=sys.stderr)
    # warm: every state's mask filled once first
    every = [s for states in per_grammar for s in states]
    fill_next_token_bitmasks(every, np.zeros((len(every), width), dtype=np.int32), max_workers=1)
    for n in BATCHES:
        states = batch_of(per_grammar, n)
        bitmask = np.zeros((n, width), dtype=np.int32)
        entry = {"batch": n}
        for threads in thread_counts:
            wall, cpu = timed(states, bitmask, threads, args.seconds, args.repeats)
            entry[f"ms_{threads}t"] = wall * 1e3
            entry[f"busiest_thread_cpu_ms_{threads}t"] = cpu * 1e3
        if 1 in thread_counts and 2 in thread_counts:
            entry["scaling_2t"] = entry["ms_1t"] / entry["ms_2t"]
            entry["cpu_scaling_2t"] = entry["busiest_thread_cpu_ms_1t"] / entry["busiest_thread_cpu_ms_2t"]
        entry["masks_per_s_1t"] = n / entry["ms_1t"] * 1e3 if "ms_1t" in entry else None
        report["warm"].append(entry)
        print("warm", json.dumps(entry), file=sys.stderr)
    # cold: fresh Rules (new contexts) for each timing
    for n in BATCHES:
        entry = {"batch": n}
        for threads in thread_counts:
            best = float("inf")
            for _ in range(args.cold_repeats):
                fresh = []
                for (_, gbnf, tokens), states in zip(sources, per_grammar):
                    rules = Rules.parse(gbnf, "root", vocab)
                    fresh.append(walk_states(rules, vocab, tokens[: len(states) - 1]))
                states = batch_of(fresh, n)
                bitmask = np.zeros((n, width), dtype=np.int32)
                t0 = time.perf_counter()
                fill_next_token_bitmasks(states, bitmask, max_workers=threads)
                best = min(best, time.perf_counter() - t0)
            entry[f"ms_{threads}t"] = best * 1e3
        if 1 in thread_counts and 2 in thread_counts:
            entry["scaling_2t"] = entry["ms_1t"] / entry["ms_2t"]
        report["cold"].append(entry)
        print("cold", json.dumps(entry), file=sys.stderr)
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
