"""A/B of two builds of bankml's sampler: the time of one draw of the sampling chain, rounds interleaved.

    python bench/ab_sampler.py --a /tmp/ab-main --b /work/wt-engine-parts --rounds 6

Each build is a tree with its extensions built in place (``python setup.py build_ext --inplace``).
A round runs one child process per build (A then B, then B then A in the next round, so neither
always goes first on a shared, noisy machine). A child draws, with each configuration of
``bench/sampler_configs.py`` (llama-server's parameters, seed 1234) over the same 151,936 float32
logits, ``--draws`` times ``Sampler.sample(logits)`` after a few untimed draws, and prints each
draw's time (µs) and the tokens drawn. Neither accepts a token, so every draw samples the same state
(only the generators move), as bench/test_sampler_bench.py does.

Per build, configuration and draw the fastest over the rounds is kept (the noise of a shared machine
only ever adds time); the table gives p50 / mean / p99 per configuration and B / A for each. The
tokens the two builds draw must be equal draw by draw; a difference stops the run.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab_support import interleaved_rounds, ratio_row  # noqa: E402

WARMUP_DRAWS = 5


class SizedVocab:
    """A stand-in vocabulary of n tokens (the configurations never look at pieces)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def child(build: str, draws: int) -> None:
    sys.path[:] = [build, str(HERE)] + [p for p in sys.path if p not in (build, str(HERE))]
    import bankml

    if not pathlib.Path(bankml.__file__).resolve().is_relative_to(pathlib.Path(build).resolve()):
        raise SystemExit(f"imported {bankml.__file__}, not the build in {build}")
    import gc

    import numpy as np
    from sampler_configs import CONFIGS, N_VOCAB

    from bankml.sampling._sampler import Sampler
    from bankml.sampling.params import SamplerParams

    logits = (np.random.default_rng(0).standard_normal(N_VOCAB) * 3).astype(np.float32)
    results = {}
    for name, config in CONFIGS.items():
        sampler = Sampler(SamplerParams(seed=1234, **config), SizedVocab(N_VOCAB))
        tokens = [sampler.sample(logits) for _ in range(WARMUP_DRAWS)]
        times = []
        gc.collect()
        for _ in range(draws):
            start = time.perf_counter_ns()
            token = sampler.sample(logits)
            times.append((time.perf_counter_ns() - start) / 1000)
            tokens.append(token)
        results[name] = {"times": times, "tokens": tokens}
    json.dump(results, sys.stdout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", help="tree of build A (the base)")
    parser.add_argument("--b", help="tree of build B (the change)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--draws", type=int, default=200, help="timed draws per configuration and child")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.draws)
        return 0
    if not (args.a and args.b):
        parser.error("--a and --b are required")

    def merge(best, got, label, r):
        for key, value in got.items():
            if value["tokens"] != best[key]["tokens"]:
                raise SystemExit(f"{key}: build {label} drew other tokens in round {r + 1}")
            best[key]["times"] = [min(x, y) for x, y in zip(best[key]["times"], value["times"])]

    best = interleaved_rounds(__file__, args.a, args.b, args.rounds, ["--draws", str(args.draws)], merge)
    a, b = best["A"], best["B"]
    for key in a:
        if a[key]["tokens"] != b[key]["tokens"]:
            raise SystemExit(f"{key}: the tokens A and B draw differ")
    print(f"{args.rounds} rounds interleaved, {args.draws} draws each, fastest per draw kept; µs per draw; B / A")
    print("| configuration | A p50 / mean / p99 | B p50 / mean / p99 | B/A p50 | B/A mean | B/A p99 |")
    print("|---|---|---|---|---|---|")
    for key in a:
        print(ratio_row([key], a[key]["times"], b[key]["times"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
