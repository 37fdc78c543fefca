"""What the A/B scripts of two builds share (bench/ab_engine.py, bench/ab_sampler.py): the interleaved rounds of
one child process per build, the percentiles, and a table row of both builds' figures with B / A."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def interleaved_rounds(script, a, b, rounds, child_args, merge):
    """Run ``script --child BUILD *child_args`` for build A (tree ``a``) and B (tree ``b``) once per round, A first
    in even rounds and B first in odd ones; the first answer (JSON on stdout) of a build is its best so far and
    ``merge(best, got, label, round)`` folds each later one into it. Returns ``{"A": best, "B": best}``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    best = {"A": None, "B": None}
    for r in range(rounds):
        for label in ("A", "B") if r % 2 == 0 else ("B", "A"):
            build = a if label == "A" else b
            done = subprocess.run(
                [sys.executable, script, "--child", build, *child_args], capture_output=True, text=True, env=env
            )
            if done.returncode:
                raise SystemExit(f"child {label} failed:\n{done.stderr[-4000:]}")
            got = json.loads(done.stdout)
            if best[label] is None:
                best[label] = got
            else:
                merge(best[label], got, label, r)
            print(f"round {r + 1}/{rounds}: {label} done", file=sys.stderr, flush=True)
    return best


def percentile(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def stats(values):
    return {"p50": percentile(values, 0.5), "mean": sum(values) / len(values), "p99": percentile(values, 0.99)}


def ratio_row(cells, a_times, b_times):
    """A Markdown table row: the leading ``cells``, A's and B's p50 / mean / p99, then B / A of each."""
    sa, sb = stats(a_times), stats(b_times)
    return (
        "| "
        + " | ".join(cells)
        + f" | {sa['p50']:.1f} / {sa['mean']:.1f} / {sa['p99']:.1f} "
        + f"| {sb['p50']:.1f} / {sb['mean']:.1f} / {sb['p99']:.1f} | "
        + " | ".join(f"{sb[m] / sa[m]:.3f}" for m in ("p50", "mean", "p99"))
        + " |"
    )
