"""The ``bankml`` command line: check a grammar, convert a JSON schema, compute masks over a real vocabulary.

Owns argument parsing and printing only; everything it does goes through the public API.
"""
import argparse
import sys
import time

import numpy as np


def _read(path):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8")


def cmd_check(args):
    from . import GrammarError, Rules
    try:
        rules = Rules.parse(_read(args.grammar), root=args.root)
    except GrammarError as err:
        print(f"{args.grammar}:{err.line or 0}:{err.column or 0}: error: {err.reason}"
              + (f" near {err.context!r}" if err.context else ""), file=sys.stderr)
        return 1
    names = {rule_id: name for name, rule_id in rules.symbol_ids.items()}
    print(f"{args.grammar}: {len(rules)} rules, {rules.n_elements} elements, root {args.root!r}")
    if args.verbose:
        for rule_id, elements in enumerate(rules.rules):
            print(f"  {rule_id:4d} {names.get(rule_id, '?')}: {elements}")
    return 0


def cmd_convert(args):
    from . import SchemaError, json_schema_to_grammar
    try:
        if args.schema == "-":
            text = sys.stdin.buffer.read()
        else:
            with open(args.schema, "rb") as handle:
                text = handle.read()
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        grammar, warnings = json_schema_to_grammar(text)
    except SchemaError as err:
        print(f"{args.schema}: error at {err.pointer}: {err}", file=sys.stderr)
        return 1
    if warnings:
        # llama.cpp's wording: one line for all of them
        print("WARNING: JSON schema conversion was incomplete: " + "; ".join(warnings), file=sys.stderr)
    sys.stdout.write(grammar)
    sys.stdout.flush()
    return 0


def cmd_mask(args):
    from . import Grammar, GrammarError, Rules, Vocab, mask_hash
    started = time.perf_counter()
    vocab = Vocab.from_gguf(args.vocab)
    loaded = time.perf_counter()
    try:
        grammar = Grammar(Rules.parse(_read(args.grammar), root=args.root, vocab=vocab), vocab)
        if args.prefix:
            grammar.accept_bytes(args.prefix.encode("utf-8"))
    except GrammarError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    compiled = time.perf_counter()
    bitmask = np.zeros((len(vocab) + 31) // 32, dtype=np.int32)
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        grammar.fill_next_token_bitmask(bitmask)
        times.append(time.perf_counter() - t0)
    allowed = np.flatnonzero(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:len(vocab)])
    count, digest = mask_hash(allowed)
    print(f"vocabulary: {args.vocab} ({len(vocab):,} tokens, loaded in {1e3 * (loaded - started):.0f} ms)")
    print(f"grammar: {args.grammar} (compiled in {1e3 * (compiled - loaded):.1f} ms), prefix {args.prefix!r}")
    print(f"allowed next: {count:,} tokens (fnv1a-64 {digest:#018x}); complete: {grammar.complete}")
    shown = ", ".join(repr(vocab.piece(int(t)).decode("utf-8", "replace")) for t in allowed[:args.show])
    print(f"first {min(args.show, count)}: {shown}")
    again = f", then min {1e6 * min(times[1:]):,.1f} µs from the grammar's mask cache" if len(times) > 1 else ""
    print(f"mask time: first {1e6 * times[0]:,.0f} µs{again}")
    return 0


def cmd_replay(args):
    from .replay import replay
    from .vocab import Vocab
    try:
        result = replay(args.record, vocab=None if args.vocab is None else Vocab.from_gguf(args.vocab))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.record}: {result}")
    return 0 if result.matches else 1


def build_parser():
    parser = argparse.ArgumentParser(prog="bankml", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="parse a GBNF grammar as llama.cpp does; report the rules or the error")
    check.add_argument("grammar")
    check.add_argument("--root", default="root")
    check.add_argument("-v", "--verbose", action="store_true", help="print every rule's elements")
    check.set_defaults(run=cmd_check)
    convert = sub.add_parser("convert", help="print llama.cpp's GBNF grammar for a JSON schema (file, or - for stdin)")
    convert.add_argument("schema")
    convert.set_defaults(run=cmd_convert)
    mask = sub.add_parser("mask", help="the tokens a grammar allows next, over a GGUF vocabulary")
    mask.add_argument("grammar")
    mask.add_argument("--vocab", required=True, help="a GGUF file (a vocab-only one is enough)")
    mask.add_argument("--prefix", default="", help="text the grammar accepts before the mask")
    mask.add_argument("--root", default="root")
    mask.add_argument("--show", type=int, default=12)
    mask.add_argument("--repeat", type=int, default=5)
    mask.set_defaults(run=cmd_mask)
    replay = sub.add_parser("replay", help="rerun a seeded run record over its recorded logits; report the first divergent step")
    replay.add_argument("record", help="a run record (JSON lines) written by bankml.replay.RunRecorder")
    replay.add_argument("--vocab", help="the GGUF vocabulary, if not the one the record names")
    replay.set_defaults(run=cmd_replay)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
