"""The grammar commands: ``bankml check`` (a GBNF grammar parsed as llama.cpp parses it, or its error at its
line and column), ``bankml convert`` (llama.cpp's GBNF grammar of a JSON schema, or the strict compiler's) and
``bankml mask`` (the tokens a grammar allows next over a GGUF vocabulary, and the mask's time).

Owns these commands' flags and printing; the work is the engine's and the schema converter's. Must not import:
``bankml.cli``'s other command modules.
"""

import re
import sys
import time

import numpy as np

from bankml.cli.files import InputError, read_text
from bankml.engine._grammar import Grammar, Rules
from bankml.engine._hash import mask_hash
from bankml.engine.vocab import Vocab
from bankml.errors import GrammarError, SchemaError
from bankml.schema.grammar import json_schema_to_grammar


def add_check_parser(sub):
    check = sub.add_parser("check", help="parse a GBNF grammar as llama.cpp does; report the rules or the error")
    check.add_argument("grammar", help="a GBNF grammar file")
    check.add_argument("--root", default="root", help="the start rule (default: root)")
    check.add_argument("-v", "--verbose", action="store_true", help="print every rule's elements")
    check.set_defaults(run=cmd_check)


def cmd_check(args):
    try:
        text = read_text(args.grammar)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        rules = Rules.parse(text, root=args.root)
    except GrammarError as err:
        line, column = err.line, err.column
        if line is None:  # llama.cpp checks undefined rules after parsing: the place of the first use
            line, column = _rule_use(text, err.reason)
        where = f"{args.grammar}:{line}:{column}" if line is not None else args.grammar
        print(f"{where}: error: {err.reason}" + (f" near {err.context!r}" if err.context else ""), file=sys.stderr)
        return 1
    names = {rule_id: name for name, rule_id in rules.symbol_ids.items()}
    print(f"{args.grammar}: {len(rules)} rules, {rules.n_elements} elements, root {args.root!r}")
    if args.verbose:
        for rule_id, elements in enumerate(rules.rules):
            print(f"  {rule_id:4d} {names.get(rule_id, '?')}: {elements}")
    return 0


def _rule_use(text, reason):
    """(line, column), 1-based in characters, of the first use of the rule an error names (``Undefined rule
    identifier 'x'``) outside strings, character classes and comments; (None, None) when there is none."""
    named = re.search(r"identifier '([^']*)'", reason)
    if not named:
        return None, None
    name, i, line, start = named.group(1), 0, 1, 0
    while i < len(text):
        c = text[i]
        if c == "\n":
            line, start, i = line + 1, i + 1, i + 1
        elif c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif c in '"[':
            close = '"' if c == '"' else "]"
            i += 1
            while i < len(text) and text[i] != close and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif c.isalnum() or c in "-_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] in "-_"):
                j += 1
            defined = re.match(r"[ \t]*::=", text[j:])
            if text[i:j] == name and not defined:
                return line, i - start + 1
            i = j
        else:
            i += 1
    return None, None


def add_convert_parser(sub):
    convert = sub.add_parser("convert", help="print llama.cpp's GBNF grammar for a JSON schema (file, or - for stdin)")
    convert.add_argument("schema", help="a JSON schema file, or - for stdin")
    convert.add_argument(
        "--strict",
        action="store_true",
        help="strict mode: exactly what jsonschema accepts, or refuse naming the keyword",
    )
    convert.add_argument(
        "--lenient",
        action="append",
        metavar="KEYWORD",
        help="with --strict: treat KEYWORD as an annotation instead of refusing it (repeatable)",
    )
    convert.add_argument(
        "--strict-style",
        choices=["canonical", "exact"],
        help="with --strict: canonical (default: the language to generate in) or exact (every JSON text of each "
        "valid instance, to judge texts with)",
    )
    convert.set_defaults(run=cmd_convert)


def cmd_convert(args):
    if args.lenient and not args.strict:
        print(
            "error: --lenient KEYWORD applies to --strict only (llama.cpp's converter has no such option)",
            file=sys.stderr,
        )
        return 2
    if args.strict_style is not None and not args.strict:
        print(
            "error: --strict-style applies to --strict only (llama.cpp's converter has no such option)", file=sys.stderr
        )
        return 2
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
        if args.strict:
            grammar, warnings = json_schema_to_grammar(
                text, mode="strict", lenient=tuple(args.lenient or ()), strict_style=args.strict_style
            )
        else:
            grammar, warnings = json_schema_to_grammar(text)
    except SchemaError as err:
        keyword = f" (keyword {err.keyword})" if getattr(err, "keyword", None) else ""
        print(f"{args.schema}: error at {err.pointer}{keyword}: {err}", file=sys.stderr)
        return 1
    if warnings:
        # llama.cpp's wording: one line for all of them
        print("WARNING: JSON schema conversion was incomplete: " + "; ".join(warnings), file=sys.stderr)
    sys.stdout.write(grammar)
    sys.stdout.flush()
    return 0


def add_mask_parser(sub):
    mask = sub.add_parser("mask", help="the tokens a grammar allows next, over a GGUF vocabulary")
    mask.add_argument("grammar", help="a GBNF grammar file")
    mask.add_argument("--vocab", required=True, help="a GGUF file (a vocab-only one is enough)")
    mask.add_argument("--prefix", default="", help="text the grammar accepts before the mask")
    mask.add_argument("--root", default="root", help="the start rule (default: root)")
    mask.add_argument("--show", type=int, default=12, help="allowed tokens to print (default: 12)")
    mask.add_argument(
        "--repeat", type=int, default=5, help="times the mask is computed, to time it cold and cached (default: 5)"
    )
    mask.set_defaults(run=cmd_mask)


def cmd_mask(args):
    started = time.perf_counter()
    try:
        text = read_text(args.grammar)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    vocab = Vocab.from_gguf(args.vocab)
    loaded = time.perf_counter()
    try:
        grammar = Grammar(Rules.parse(text, root=args.root, vocab=vocab), vocab)
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
    allowed = np.flatnonzero(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: len(vocab)])
    count, digest = mask_hash(allowed)
    print(f"vocabulary: {args.vocab} ({len(vocab):,} tokens, loaded in {1e3 * (loaded - started):.0f} ms)")
    print(f"grammar: {args.grammar} (compiled in {1e3 * (compiled - loaded):.1f} ms), prefix {args.prefix!r}")
    print(f"allowed next: {count:,} tokens (fnv1a-64 {digest:#018x}); complete: {grammar.complete}")
    shown = ", ".join(repr(vocab.piece(int(t)).decode("utf-8", "replace")) for t in allowed[: args.show])
    print(f"first {min(args.show, count)}: {shown}")
    again = f", then min {1e6 * min(times[1:]):,.1f} µs from the grammar's mask cache" if len(times) > 1 else ""
    print(f"mask time: first {1e6 * times[0]:,.0f} µs{again}")
    return 0
