"""The ``bankml`` command line: generate on a real model, serve OpenAI/Ollama requests, check a grammar,
convert a JSON schema, compute masks over a real vocabulary.

Owns argument parsing and printing only; everything it does goes through the public API. One module per
command, each with its parser and its ``cmd_*``: ``generate``, ``serve`` (whose server extra, Starlette and
uvicorn, is imported only when the server starts), ``grammar`` (``check``, ``convert``, ``mask``), ``replay``;
``options`` holds the model and chat flags that ``generate`` and ``serve`` share, ``files`` the reading of the
user's files. This module assembles the parser and runs a command line (``main``).

Must not import: nothing of bankml's is above it; every package may be imported here.
"""

import argparse
import sys

from bankml.cli import generate, grammar, replay, serve

# read through the command line's module by tests of ``bankml serve``'s defaults
from bankml.serve.flags import context_options as context_options


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bankml", description=" ".join(__doc__.split("\n\n")[0].replace("``", "").split())
    )
    sub = parser.add_subparsers(dest="command", required=True)
    generate.add_parser(sub)
    serve.add_parser(sub)
    grammar.add_check_parser(sub)
    grammar.add_convert_parser(sub)
    grammar.add_mask_parser(sub)
    replay.add_parser(sub)
    return parser


def _llama_server_spelling(parser, argv):
    """``bankml serve``'s command line with llama-server's spelling of flags: as common/arg.cpp, a ``--`` flag
    may write ``_`` for ``-`` (``--backend_sampling``); only a token that is no flag as written and is one with
    dashes is rewritten, so a value is never touched."""
    if not argv or argv[0] != "serve":
        return argv
    known = set(parser._subparsers._group_actions[0].choices["serve"]._option_string_actions)
    out = [argv[0]]
    for token in argv[1:]:
        dashed = token.replace("_", "-")
        out.append(dashed if token.startswith("--") and token not in known and dashed in known else token)
    return out


def main(argv=None):
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_llama_server_spelling(parser, argv))
    return args.run(args)
