"""Masks inside an unfinished UTF-8 character against masks on a whole character, in the same walks (issue 14:
"masks inside an unfinished character within 2x a normal mask").

Documents full of 2-, 3- and 4-byte characters are fed to a matcher one byte at a time, and the mask is taken
at every byte: a state whose last byte leaves a character open is "inside", any other is "whole". Each
document is walked cold (a freshly parsed grammar: every state is a first visit) and then warm (a new matcher
over the same rules: the context's caches are filled). Thread CPU time, microseconds.

    python bench/partial_chars.py [--vocab llama3|qwen2] [--grammar json] [--rounds 5]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import walks  # noqa: E402

from bankml import Grammar, Rules  # noqa: E402

DOCUMENTS = [
    '{"name": "Zoë — 東京 🙂 naïve", "city": "Kraków", "note": "日本語のテキスト", "e": "😀😃😄"}',
    '{"a": ["Ελληνικά", "русский текст", "中文字符测试", "emoji 🎉🎊", "ümlaut ößä"]}',
    '{"mix": "a𝄞b€c\\u00e9d — ½ ⅓ ¼ · «quotes» ‹x› 한국어 ภาษาไทย"}',
]


def walk(rules, vocab, doc: bytes, out, into):
    g = Grammar(rules, vocab)
    for i in range(1, len(doc)):
        g.accept_bytes(doc[i - 1 : i])
        inside = (doc[i] & 0xC0) == 0x80
        t0 = time.thread_time_ns()
        g.fill_next_token_bitmask(out)
        into["inside" if inside else "whole"].append((time.thread_time_ns() - t0) / 1e3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", choices=("llama3", "qwen2"), default="llama3")
    ap.add_argument("--grammar", default="json", help="a grammar of bench/walks.py (default json)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    vocab = walks.bankml_vocab(args.vocab)
    text = walks.grammar_text(args.grammar)
    out = np.zeros((vocab.n_vocab + 31) // 32, dtype=np.int32)
    Grammar(Rules.parse(text, vocab=vocab), vocab).fill_next_token_bitmask(out)  # the trie, built once
    times = {(p, k): [] for p in ("cold", "warm") for k in ("inside", "whole")}
    for _ in range(args.rounds):
        for doc in DOCUMENTS:
            raw = doc.encode()
            rules = Rules.parse(text, vocab=vocab)
            for phase in ("cold", "warm"):
                into = {"inside": times[(phase, "inside")], "whole": times[(phase, "whole")]}
                walk(rules, vocab, raw, out, into)
    print(
        f"## bench/partial_chars.py: {args.grammar} x {args.vocab}, {len(DOCUMENTS)} documents byte by byte, "
        f"{args.rounds} rounds, thread CPU µs\n"
    )
    print("| walk | state | masks | p50 | p99 | max | mean |")
    print("|---|---|---|---|---|---|---|")
    for (phase, kind), v in times.items():
        a = np.array(v)
        label = "inside a character" if kind == "inside" else "on a whole character"
        print(
            f"| {phase} | {label} | {len(a)} | {np.percentile(a, 50):.1f} | {np.percentile(a, 99):.1f} "
            f"| {a.max():.0f} | {a.mean():.1f} |"
        )
    for phase in ("cold", "warm"):
        i, w = np.array(times[(phase, "inside")]), np.array(times[(phase, "whole")])
        print(
            f"\n{phase}: inside / whole = {np.percentile(i, 50) / np.percentile(w, 50):.2f}x (p50), "
            f"{i.mean() / w.mean():.2f}x (mean)",
            end="",
        )
    print()


if __name__ == "__main__":
    main()
