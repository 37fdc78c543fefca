"""``bankml serve``'s command line: its flags (bankml's own, llama-server's through ``bankml.serve.server_flags``,
and llama-server's ``LLAMA_ARG_*`` environment variables under them) and its start.

Owns the flags' declarations; the server is ``bankml.serve.app``'s, imported only when ``bankml serve`` runs, so
that the other commands run without the server extra (Starlette, uvicorn). Must not import: ``bankml.cli``'s
other command modules.
"""

import argparse
import os
import sys

from bankml.cli.options import add_chat_arguments, add_model_arguments
from bankml.serve.contexts import ModelError
from bankml.serve.flags import env_defaults
from bankml.serve.server_flags import add_arguments as add_llama_server_flags


def add_parser(sub):
    serve = sub.add_parser("serve", help="an OpenAI- and Ollama-compatible HTTP server")
    add_model_arguments(serve)
    add_chat_arguments(serve)
    serve.set_defaults(ctx_size=0)  # llama-server's -c 0: the model's training context
    _add_listen_arguments(serve)
    _add_template_arguments(serve)
    _add_limit_arguments(serve)
    _add_auth_arguments(serve)
    _add_endpoint_arguments(serve)
    # llama-server's other flags: served (-n, the sampler defaults, -v, CORS, --kv-unified), accepted with no
    # bearing on an answer, or refused naming the flag (bankml.serve.server_flags)
    add_llama_server_flags(serve)
    # llama-server's LLAMA_ARG_* environment variables, under the command line (which overrides them)
    try:
        serve.set_defaults(**env_defaults(os.environ))
    except ValueError as err:
        serve.set_defaults(env_error=str(err))
    serve.set_defaults(run=cmd_serve)


def cmd_serve(args):
    if getattr(args, "env_error", None):
        print(args.env_error, file=sys.stderr)
        return 2
    try:
        # the server extra (Starlette, uvicorn) is optional: bankml's other commands run without it
        from bankml.serve.app import serve
    except ImportError as err:
        print(f'error: bankml serve needs the server extra: pip install "bankml[server]" ({err})', file=sys.stderr)
        return 2
    try:
        return serve(args)
    except ModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _add_listen_arguments(p):
    """Where the server listens, its slots and its model's names."""
    p.add_argument("--host", default="127.0.0.1", help="IP address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    p.add_argument(
        "--parallel",
        "-np",
        type=int,
        default=-1,
        help="number of server slots, generations served at once, one context each (default: -1, "
        "-1 = auto: 4, as llama-server)",
    )
    p.add_argument(
        "--alias", "-a", help="model name aliases, comma-separated; the first in sorted order names the model"
    )


def _add_template_arguments(p):
    """How chats are formatted: the Jinja engine or libllama's built-in templates, the template given inline."""
    p.add_argument(
        "--jinja",
        action="store_true",
        default=True,
        help="use the jinja template engine for chat (default: on, as llama-server's)",
    )
    p.add_argument(
        "--no-jinja",
        dest="jinja",
        action="store_false",
        help="format chats with libllama's built-in templates (llama-server's --no-jinja): no tools, no parser",
    )
    p.add_argument(
        "--chat-template",
        help="a Jinja chat template given inline (with --no-jinja: a built-in template's name, e.g. chatml, llama3)",
    )
    p.add_argument(
        "--no-warmup",
        action="store_true",
        help="accepted for llama-server's command lines: bankml runs no warmup decode either way",
    )


def _add_limit_arguments(p):
    """bankml's own limits on a request: its body, its messages, its grammar, its time."""
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest request body accepted (default 8 MiB); past it a 400, before any work",
    )
    p.add_argument("--max-messages", type=int, default=None, help="most chat messages per request (default 4096)")
    p.add_argument(
        "--reject-unknown-fields",
        action="store_true",
        help="answer a 400 naming the body fields a route does not read (default: ignored, as llama-server)",
    )
    p.add_argument("--max-grammar-bytes", type=int, default=None, help="longest GBNF 'grammar' field (default 1 MiB)")
    p.add_argument(
        "--prepare-timeout",
        type=float,
        default=None,
        help="seconds to read, check, convert and tokenize a request (default 30)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        help="seconds for a whole request, slot wait included; a generation then ends with "
        "finish_reason length (default 600)",
    )
    p.add_argument(
        "--max-preparing",
        type=int,
        default=None,
        help="requests prepared at once (default 8); more wait, then get a 503",
    )


class _InOrder(argparse.Action):
    """Appends (kind, value) to one list shared by several options, in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((self.const, values))
        setattr(namespace, self.dest, items)


def _add_auth_arguments(p):
    """llama-server's API key options (bankml.serve.auth)."""
    p.add_argument(
        "--api-key",
        action=_InOrder,
        dest="api_key_sources",
        const="key",
        metavar="KEY",
        help="API key to use for authentication, multiple keys can be provided as a comma-separated "
        "list, or the option repeated (default: none; env LLAMA_API_KEY)",
    )
    p.add_argument(
        "--api-key-file",
        action=_InOrder,
        dest="api_key_sources",
        const="file",
        metavar="FNAME",
        help="path to file containing API keys, one per line; lines starting with a hash are treated "
        "as comments (default: none; env LLAMA_ARG_API_KEY_FILE)",
    )


def _add_endpoint_arguments(p):
    """llama-server's monitoring and property endpoints, on or off."""
    p.add_argument(
        "--slots",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="expose slots monitoring endpoint (default: enabled; --no-slots)",
    )
    p.add_argument(
        "--metrics", action="store_true", help="enable prometheus compatible metrics endpoint (default: disabled)"
    )
    p.add_argument(
        "--props", action="store_true", help="enable changing global properties via POST /props (default: disabled)"
    )
