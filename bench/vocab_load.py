"""Loading a vocabulary from its GGUF: bankml's ``Vocab.from_gguf`` beside libllama's vocab-only load (the pinned
llama.cpp, ``tests/oracle/libllama.py``), in one run, on the Qwen2 and Llama 3 vocabularies of tests/data and
SmolLM2's model file.

    python bench/vocab_load.py [--repeat 5]

Each figure is the fastest of ``--repeat`` loads (wall clock, ms; libllama's without its per-path cache), the
two loaders taking turns. bankml's load also builds what its masks need (the pieces' trie, the token classes);
libllama's builds its own tables. Nothing is asserted (the tests check what the load gives, not how fast).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bankml import Vocab  # noqa: E402  (after the path set-up above)
from tests import engines_support  # noqa: E402
from tests.oracle import libllama  # noqa: E402

DATA = ROOT / "tests" / "data"


def vocab_files():
    return {
        "qwen2": DATA / "ggml-vocab-qwen2.gguf",
        "llama3": DATA / "ggml-vocab-llama-bpe.gguf",
        "smollm2": pathlib.Path(engines_support.smollm2_gguf()),
    }


def once(load, path):
    """Milliseconds of one ``load(path)``."""
    t = time.perf_counter()
    load(path)
    return (time.perf_counter() - t) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; fastest of {args.repeat}, ms")
    print("| vocabulary | tokens | bankml `Vocab.from_gguf` | libllama vocab-only | bankml / libllama |")
    print("|---|---|---|---|---|")
    for name, path in vocab_files().items():
        n = len(Vocab.from_gguf(path))  # untimed: the token count, and the file in the page cache for both loaders
        ours = theirs = float("inf")
        for _ in range(args.repeat):  # the two loaders take turns
            ours = min(ours, once(Vocab.from_gguf, path))
            theirs = min(theirs, once(lambda p: libllama.load_vocab(p, cached=False).close(), path))
        print(f"| {name} | {n:,} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
