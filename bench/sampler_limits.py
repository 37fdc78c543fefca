"""Time and memory of docs/RELIABILITY.md's sampler rows (issue 11's hostile sampler input), each in a child
process under a 4 GiB address-space limit: the work's wall time (after imports and the vocabulary's load, unless
the row says it includes the load) and the child's peak resident memory, as a markdown table.

    python bench/sampler_limits.py [--draws 100000] [--dry-draws 20000]

The outcomes themselves are checked, untimed, by tests/sampling/test_sampler_limits.py. DRY over an INT32_MAX
history is O(history) per draw, so its row grows with the square of ``--dry-draws`` (100,000 took 46 s on
2026-12-01).
"""

import argparse
import ast
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
QWEN2 = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"
LIMIT_AS = 4 << 30

PRELUDE = f"""
import resource, time
import numpy as np
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_AS}, {LIMIT_AS}))
from bankml import Vocab
from bankml.sampling._sampler import Sampler
from bankml.sampling.params import SamplerParams
QWEN2 = {str(QWEN2)!r}
SMALL = Vocab([b"a", b"b", b":", b"c d", b"\\n"], [4])
LOGITS = np.array([3, 2, 1, 0.5, -1], dtype=np.float32)
def draws(fields, n):
    sampler = Sampler(SamplerParams(seed=7, **fields), SMALL)
    t0 = time.perf_counter()
    for _ in range(n):
        sampler.accept(sampler.sample(LOGITS))
    return time.perf_counter() - t0
"""


def cases(args):
    return [
        (
            f"repeat_last_n=INT32_MAX, repeat_penalty=1.1: {args.draws:,} draws and accepts",
            f"took = draws(dict(repeat_last_n=2**31 - 1, repeat_penalty=1.1), {args.draws})",
        ),
        (
            f"dry_multiplier=0.8, dry_penalty_last_n=INT32_MAX: {args.dry_draws:,} draws and accepts",
            f"took = draws(dict(dry_multiplier=0.8, dry_penalty_last_n=2**31 - 1), {args.dry_draws})",
        ),
        (
            f"repeat_last_n=2**28, repeat_penalty=1.1: {args.draws:,} draws and accepts",
            f"took = draws(dict(repeat_last_n=2**28, repeat_penalty=1.1), {args.draws})",
        ),
        (
            "infill first on all 151,936 Qwen2 candidates: per draw, fastest and slowest of 5",
            """
         vocab = Vocab.from_gguf(QWEN2)
         rng = np.random.default_rng(2)
         sampler = Sampler(SamplerParams(seed=1, samplers="infill;temperature"), vocab)
         each = []
         for _ in range(5):
             logits = rng.standard_normal(len(vocab)).astype(np.float32)
             logits[rng.integers(0, len(vocab), 3)] += 12
             t0 = time.perf_counter()
             token = sampler.sample(logits)
             each.append(time.perf_counter() - t0)
             sampler.accept(token)
         took = (min(each), max(each))""",
        ),
        (
            "50 DRY breakers of 400 random characters on Qwen2: cold, then a second Sampler (cached)",
            """
         rng = np.random.default_rng(5)
         breakers = ["".join(rng.choice(list("abcdefghij \\n:"), 400)) for _ in range(50)]
         vocab = Vocab.from_gguf(QWEN2).with_tokenizer(lambda t, a, p: list(t))
         params = SamplerParams(seed=1, dry_multiplier=0.8, dry_sequence_breakers=breakers)
         t0 = time.perf_counter(); Sampler(params, vocab); t1 = time.perf_counter(); Sampler(params, vocab)
         took = (t1 - t0, time.perf_counter() - t1)""",
        ),
        (
            "llama-server's default breakers on a plain Qwen2 Vocab, the GGUF load included",
            """
         t0 = time.perf_counter()
         Sampler(SamplerParams(seed=1, dry_multiplier=0.8), Vocab.from_gguf(QWEN2))
         took = time.perf_counter() - t0""",
        ),
    ]


def seconds(took):
    return " / ".join(f"{t:.3g} s" for t in took) if isinstance(took, tuple) else f"{took:.3g} s"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=100_000, help="draws of the penalty rows (default 100,000)")
    ap.add_argument("--dry-draws", type=int, default=20_000, help="draws of the DRY row (quadratic; default 20,000)")
    args = ap.parse_args(argv)
    print("| input | time | peak RSS (MiB) |")
    print("|---|---|---:|")
    for name, body in cases(args):
        code = (
            PRELUDE
            + textwrap.dedent(body)
            + "\nprint(repr(took), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
        if proc.returncode != 0:
            print(f"| {name} | exit {proc.returncode}: {proc.stderr.strip()[-200:]} | - |", flush=True)
            continue
        took_text, peak = proc.stdout.strip().splitlines()[-1].rsplit(" ", 1)
        print(f"| {name} | {seconds(ast.literal_eval(took_text))} | {int(peak) / 1024:.0f} |", flush=True)


if __name__ == "__main__":
    main()
