"""bankml alone on MaskBench schemas, in one process: time to first mask, cold and warm masks and allows()
on the thread's CPU clock, and when the background build of the segment cache ends (issue 14's figures in
docs/PERFORMANCE.md). The same draw as bench/maskbench.py (random.Random(seed).shuffle of the names).

    python bench/maskbench_bankml.py PATH/TO/maskbench/data 100 0 --allows --bgend
"""

import argparse
import json
import pathlib
import random
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402  (after the path set-up above)
import walks  # noqa: E402  (after the path set-up above)

from bankml import Grammar, Rules, json_schema_to_grammar  # noqa: E402  (after the path set-up above)

ap = argparse.ArgumentParser()
ap.add_argument("folder")
ap.add_argument("n", type=int)
ap.add_argument("seed", type=int)
ap.add_argument("--precompute", type=float, default=None)
ap.add_argument("--names")
ap.add_argument("--allows", action="store_true")
ap.add_argument("--maxtok", type=int, default=400)
ap.add_argument("--bgend", action="store_true", help="time from Grammar() until the background build ends (no masks)")
args = ap.parse_args()
oracle = walks.oracle_vocab("llama3")
vocab = walks.bankml_vocab("llama3")
Grammar(Rules.parse('root ::= "a"', vocab=vocab), vocab)  # warm the trie
paths = sorted(pathlib.Path(args.folder).glob("*.json"))
if args.names:
    wanted = set(pathlib.Path(args.names).read_text().split())
    paths = [p for p in paths if p.name in wanted]
else:
    random.Random(args.seed).shuffle(paths)
    paths = paths[: args.n]
cpu = time.thread_time_ns
wall = time.perf_counter_ns
kw = {} if args.precompute is None else {"precompute": args.precompute}
ttfm, cold, warm, slow, allow_t, allow_again, bg, built = [], [], [], [], [], [], [], []
out = np.zeros((len(vocab) + 31) // 32, dtype=np.int32)
for p in paths:
    case = json.loads(p.read_text())
    try:
        c0 = cpu()
        text, _ = json_schema_to_grammar(case["schema"])
        rules = Rules.parse(text, vocab=vocab)
        g = Grammar(rules, vocab, **kw)
        g.fill_next_token_bitmask(out)
        c1 = cpu()
    except Exception:
        continue
    ttfm.append((c1 - c0) / 1e6)
    if args.bgend:
        g2 = Grammar(Rules.parse(text, vocab=vocab), vocab, **kw)
        w0 = time.perf_counter()
        ok = g2.context.wait_precompute()
        w1 = time.perf_counter()
        bg.append((w1 - w0) * 1e3)
        built.append(g2.context.segment_stats["built"])
    toks = [
        oracle.tokenize(json.dumps(t["data"], ensure_ascii=False).encode(), add_special=False, parse_special=False)[
            : args.maxtok
        ]
        for t in case.get("tests", [])
    ]
    for passno, dest in (("cold", cold), ("warm", warm)):
        for k, ids in enumerate(toks):
            m = g if (passno == "cold" and k == 0) else Grammar(rules, vocab, **kw)
            for i, t in enumerate(ids):
                if not (passno == "cold" and k == 0 and i == 0):
                    s0 = cpu()
                    m.fill_next_token_bitmask(out)
                    s1 = cpu()
                    dest.append((s1 - s0) / 1e3)
                    if passno == "cold" and dest[-1] > 1000:
                        slow.append((dest[-1], p.name, k, i))
                ok = (int(out[t >> 5]) >> (t & 31)) & 1
                if args.allows and passno == "warm":
                    # (the wall clock: reading the thread's CPU clock is a ~0.44 us system call on these
                    # virtual machines, about what allows itself takes; perf_counter_ns is ~25 ns)
                    a0 = wall()
                    a = m.allows(t)
                    a1 = wall()
                    allow_t.append((a1 - a0) / 1e3)
                    a0 = wall()
                    m.allows(t)
                    a1 = wall()
                    allow_again.append((a1 - a0) / 1e3)
                    assert a == bool(ok), (p.name, k, i)
                if not ok:
                    break
                try:
                    m.accept(t)
                except Exception:
                    break


def pr(label, v, unit):
    v = np.array(v)
    print(
        f"{label}: n={len(v)} p50 {np.percentile(v, 50):.2f} p75 {np.percentile(v, 75):.2f} "
        f"p99 {np.percentile(v, 99):.2f} max {v.max():.2f} mean {v.mean():.2f} {unit}"
    )


pr("TTFM", ttfm, "ms")
pr("cold", cold, "us")
pr("warm", warm, "us")
if allow_t:
    pr("allows, first call in the state (wall clock)", allow_t, "us")
    pr("allows, the same call again (transitions memoized)", allow_again, "us")
if bg:
    pr("background build end (wall, after construction)", bg, "ms")
    pr("entries built ahead", built, "")
print("cold > 1ms:", len(slow))
[print("  ", s) for s in sorted(slow, reverse=True)[:8]]
