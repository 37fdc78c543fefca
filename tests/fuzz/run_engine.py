"""The long fuzz harness of the GBNF engine: run it for minutes, not in the suite.

    PYTHONPATH=. python -m tests.fuzz.run_engine --minutes 5            # parser + differential, small vocab
    PYTHONPATH=. python -m tests.fuzz.run_engine --minutes 5 --qwen2    # the differential on Qwen2 too
    PYTHONPATH=. python -m tests.fuzz.run_engine --minutes 5 --oracle   # ... and against libllama

It runs the suite's hypothesis properties (tests/fuzz/grammars.py) with a large example budget, each
example under a watchdog (a hang prints the stacks of every thread and ends the run) and the whole run
under an address-space limit. A failing input is written to tests/fuzz/corpus/found-<hash>.json, which the
suite replays from then on (tests/engine/test_reliability_engine.py::test_corpus_replays); check its "expect"
and "note" before committing it. At the end it prints the counts, the slowest example of each property and
the peak memory.
"""

import argparse
import faulthandler
import hashlib
import json
import pathlib
import resource
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis.errors import HypothesisException

from . import grammars

CORPUS = pathlib.Path(__file__).parent / "corpus"


def save(kind, text, error):
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    path = CORPUS / f"found-{digest}.json"
    entry = {
        "note": f"found by run_engine ({kind}): {str(error)[:300]}",
        "text": text,
        "expect": "ok",
        "vocab": "small",
        "walk": 0,
        "steps": 8,
    }
    path.write_text(json.dumps(entry, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"  saved {path}", flush=True)


def run_property(name, strategy, check, seconds, example_seconds, stats, chunk=200):
    """Run the property in chunks of `chunk` examples (each chunk a fresh random run) until `seconds` pass."""
    deadline = time.monotonic() + seconds
    slowest = [0.0, None]
    count = [0]

    def timed(example):
        faulthandler.dump_traceback_later(example_seconds, exit=True)
        start = time.perf_counter()
        try:
            _last_failure["example"] = example
            check(example)
        finally:
            faulthandler.cancel_dump_traceback_later()
        took = time.perf_counter() - start
        count[0] += 1
        if took > slowest[0]:
            slowest[0], slowest[1] = took, example

    prop = settings(max_examples=chunk, deadline=None, suppress_health_check=list(HealthCheck), database=None)(
        given(strategy)(timed)
    )
    while time.monotonic() < deadline:
        try:
            prop()
        except HypothesisException:
            raise
        except Exception as error:  # hypothesis re-raises the shrunk failure, which ran last
            print(f"{name}: FAILED: {error!r}", flush=True)
            example = _last_failure.get("example")
            if example is not None:
                save(name, example[0] if isinstance(example, tuple) else example, error)
            stats[name] = ("failed", count[0], slowest[0], repr(example)[:200])
            return False
    stats[name] = ("ok", count[0], slowest[0], repr(slowest[1])[:200])
    return True


_last_failure = {}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--example-seconds", type=float, default=20.0, help="the watchdog per example")
    parser.add_argument("--memory-gib", type=float, default=4.0)
    parser.add_argument("--qwen2", action="store_true", help="also walk on the Qwen2 vocabulary")
    parser.add_argument("--oracle", action="store_true", help="also compare with libllama on Qwen2")
    args = parser.parse_args(argv)
    limit = int(args.memory_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    faulthandler.enable()
    properties = [
        ("parser", grammars.gbnf_text(), grammars.check_parse),
        (
            "differential-small",
            grammars.grammar_and_walk(max_steps=12),
            lambda case: grammars.check_walk(case, grammars.small_vocab()),
        ),
    ]
    if args.qwen2 or args.oracle:
        from ..oracle_support import load_bankml_vocab

        qwen2 = load_bankml_vocab("qwen2")
        properties.append(
            (
                "differential-qwen2",
                grammars.grammar_and_walk(max_steps=6),
                lambda case: grammars.check_walk(case, qwen2),
            )
        )
    if args.oracle:
        from ..oracle_support import load_oracle_vocab

        oracle_vocab = load_oracle_vocab("qwen2")
        properties.append(
            (
                "libllama-qwen2",
                grammars.grammar_and_walk(max_steps=4),
                lambda case: grammars.check_walk(case, qwen2, oracle_vocab=oracle_vocab),
            )
        )
    share = args.minutes * 60 / len(properties)
    stats = {}
    started = time.monotonic()
    ok = True
    for name, strategy, check in properties:
        print(f"{name}: {share:.0f} s", flush=True)
        ok &= run_property(name, strategy, check, share, args.example_seconds, stats)
    print(f"\n{'property':22} {'outcome':8} {'examples':>9} {'slowest s':>10}")
    for name, (outcome, count, slowest, detail) in stats.items():
        print(f"{name:22} {outcome:8} {count:9,} {slowest:10.3f}  {detail}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"total {time.monotonic() - started:.0f} s, peak resident memory {peak:.0f} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
