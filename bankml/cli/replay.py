"""``bankml replay``: a seeded run record rerun over its recorded logits, reporting the first step whose token
differs from the record (``bankml.sampling.replay``).

Owns this command's flags and printing. Must not import: ``bankml.cli``'s other command modules.
"""

import sys

from bankml.engine.vocab import Vocab
from bankml.sampling.replay import replay


def add_parser(sub):
    command = sub.add_parser(
        "replay", help="rerun a seeded run record over its recorded logits; report the first divergent step"
    )
    command.add_argument("record", help="a run record (JSON lines) written by bankml.sampling.replay.RunRecorder")
    command.add_argument("--vocab", help="the GGUF vocabulary, if not the one the record names")
    command.set_defaults(run=cmd_replay)


def cmd_replay(args):
    try:
        result = replay(args.record, vocab=None if args.vocab is None else Vocab.from_gguf(args.vocab))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.record}: {result}")
    return 0 if result.matches else 1
