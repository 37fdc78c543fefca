"""The JSON-mode content rule's cost (docs/modules/content.md, "Advantages and efficiency"): a whole answer's parse
and a stream of it in 4-character pieces, on the recorded ChatML ``json_object`` answer and on generated indented
JSON of 8 and 32 KB, the ChatML template.

    python bench/content_parse.py [--repeat 5] [--no-reparse]

A parse is ``json_content(raw, "chatml")`` (the non-partial parse of a whole answer); a stream is a
``ContentStream`` fed the pieces, then ``finish()``, with its incremental scan (the default) and, for the 8 KB
answer, reparsing the whole answer at every piece as llama-server does (``incremental=False``: seconds; left out
with ``--no-reparse``). Each figure is the fastest of ``--repeat`` runs on the thread's CPU clock (the reparsing
stream runs once). Nothing is asserted; tests/chat/test_content.py checks that both streams give the same content.
"""

import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bankml import ContentStream, from_openai, json_content  # noqa: E402

RECORDED = ROOT / "tests" / "data" / "llama-server-jsonmode.json"


def indented_json(size):
    """Indented JSON text of at least ``size`` bytes: a list of small objects, as a model might write it."""
    items, text = [], ""
    while len(text) < size:
        i = len(items)
        items.append({"id": i, "name": "item %d" % i, "tags": ["red", "round"], "price": i * 1.5, "ok": i % 2 == 0})
        text = json.dumps({"items": items}, indent=2)
    return text


def fastest(fn, repeat):
    best = None
    for _ in range(repeat):
        t0 = time.thread_time_ns()
        fn()
        took = (time.thread_time_ns() - t0) / 1e6
        best = took if best is None else min(best, took)
    return best


def stream(text, constraint, incremental=True):
    s = ContentStream(constraint, template="chatml", incremental=incremental)
    for i in range(0, len(text), 4):
        s.push(text[i : i + 4])
    s.finish()
    return s.content


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the fastest is kept (default 5)")
    ap.add_argument("--no-reparse", action="store_true", help="leave out the reparsing stream (seconds)")
    args = ap.parse_args(argv)
    case = json.loads(RECORDED.read_text(encoding="utf-8"))["smollm2-chatml/json_object"]
    constraint = from_openai(case["request"])
    answers = [
        ("the recorded ChatML json_object answer", case["content"]),
        ("indented JSON, 8 KB", indented_json(8 << 10)),
        ("indented JSON, 32 KB", indented_json(32 << 10)),
    ]
    print(f"thread CPU ms, fastest of {args.repeat}; load average {os.getloadavg()[0]:.2f}")
    print("| answer | bytes | parse ms | stream ms (4-character pieces) | stream ms, reparsing every piece |")
    print("|---|---:|---:|---:|---:|")
    for name, text in answers:
        assert stream(text, constraint) == text == json_content(text, "chatml")
        parse = fastest(lambda: json_content(text, "chatml"), args.repeat)
        streamed = fastest(lambda: stream(text, constraint), args.repeat)
        reparse = "-"
        if name.endswith("8 KB") and not args.no_reparse:
            reparse = f"{fastest(lambda: stream(text, constraint, incremental=False), 1):,.1f}"
        print(f"| {name} | {len(text.encode()):,} | {parse:.3f} | {streamed:.3f} | {reparse} |", flush=True)


if __name__ == "__main__":
    main()
