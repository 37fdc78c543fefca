"""Mask throughput per CPU core for serving engines (docs/modules/engines.md): the 22 benchmark schemas
(bench/data/schemas.json) over SmolLM2's vocabulary, each walked along its instance document; batches of
1-256 matchers taken across all schemas' walk states, filled with ``fill_next_token_bitmasks``.

    PYTHONPATH=. python bench/engines_throughput.py [--out FILE.json]

Reports per schema the compile cost (llama.cpp's converter, Rules.parse, the first mask) and the memory
(pickled Vocab and Rules, the MatchContext's caches after the walk); per batch size the masks per second
on one core (``max_workers=1``), cold (fresh contexts: first time through each state) and warm (the same
states again). Prints one JSON document; nothing is asserted.
"""

import argparse
import json
import os
import pathlib
import pickle
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bankml import Grammar, Rules, Vocab, fill_next_token_bitmasks, json_schema_to_grammar  # noqa: E402
from bankml.integrations.adapters import llama_cpp_tokenizer  # noqa: E402
from tests import engines_support  # noqa: E402

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    gguf = engines_support.smollm2_gguf()
    vocab = Vocab.from_gguf(gguf)
    tokenize = llama_cpp_tokenizer(gguf)
    schemas = json.loads((ROOT / "bench" / "data" / "schemas.json").read_text())["schemas"]
    width = (len(vocab) + 31) // 32
    row = np.zeros(width, dtype=np.int32)
    report = {
        "load_average_before": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "n_vocab": len(vocab),
        "vocab_pickle_bytes": len(pickle.dumps(vocab)),
        "schemas": [],
        "batches": [],
    }

    def walk_states(rules, tokens):
        g = Grammar(rules, vocab)
        states = []
        for t in tokens:
            states.append(g.clone())
            g.accept(t)
        states.append(g.clone())
        return states

    all_rules = []
    for s in schemas:
        t0 = time.perf_counter()
        gbnf = json_schema_to_grammar(s["schema"])[0]
        t1 = time.perf_counter()
        rules = Rules.parse(gbnf, "root", vocab)
        t2 = time.perf_counter()
        g = Grammar(rules, vocab)
        g.fill_next_token_bitmask(row)
        t3 = time.perf_counter()
        tokens = tokenize(s["instance"].encode("utf-8"), False, False)
        states = walk_states(rules, tokens)
        t4 = time.perf_counter()
        for st in states:
            st.fill_next_token_bitmask(row)
        t5 = time.perf_counter()
        ctx = g.context
        report["schemas"].append(
            {
                "name": s["name"],
                "gbnf_bytes": len(gbnf),
                "tokens": len(tokens),
                "convert_ms": (t1 - t0) * 1e3,
                "parse_ms": (t2 - t1) * 1e3,
                "first_mask_ms": (t3 - t2) * 1e3,
                "walk_masks_cold_ms_per_token": (t5 - t4) * 1e3 / len(states),
                "rules_pickle_bytes": len(pickle.dumps(rules)),
                "context_cache_bytes": ctx.cache_bytes,
                "context_segment_bytes": ctx.segment_bytes,
                "context_nodes": ctx.n_nodes,
                "context_sets": ctx.n_sets,
            }
        )
        all_rules.append((rules, tokens))

    def batch_states(n, fresh):
        # round robin over the schemas, each schema's states in walk order; fresh: new contexts (cold caches)
        out = []
        per = []
        for rules, tokens in all_rules:
            if fresh:
                rules = Rules.parse(json_schema_to_grammar(schemas[len(per)]["schema"])[0], "root", vocab)
            per.append(walk_states(rules, tokens))
        k = 0
        while len(out) < n:
            for states in per:
                if k < len(states) and len(out) < n:
                    out.append(states[k])
            k += 1
        return out

    for n in BATCHES:
        bitmask = np.zeros((n, width), dtype=np.int32)
        entry = {"batch": n}
        states = batch_states(n, True)
        t0 = time.perf_counter()
        fill_next_token_bitmasks(states, bitmask, max_workers=1)
        cold = time.perf_counter() - t0
        reps = max(1, 512 // n)
        t0 = time.perf_counter()
        for _ in range(reps):
            fill_next_token_bitmasks(states, bitmask, max_workers=1)
        warm = (time.perf_counter() - t0) / reps
        entry.update(
            {
                "cold_ms": cold * 1e3,
                "warm_ms": warm * 1e3,
                "cold_masks_per_s_per_core": n / cold,
                "warm_masks_per_s_per_core": n / warm,
            }
        )
        report["batches"].append(entry)
        print(json.dumps(entry), file=sys.stderr)
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
