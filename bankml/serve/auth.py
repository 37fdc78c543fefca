# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""``bankml serve``'s API keys, as the pinned llama-server takes and checks them.

* ``--api-key KEY`` (repeatable): each value is a comma-separated row (``common/arg.cpp``'s ``parse_csv_row``:
  a field may be double-quoted, ``""`` inside quotes is one quote); empty fields are dropped.
* ``--api-key-file FNAME``: one key per line, lines that are empty or start with ``#`` skipped; the rest of the
  line is the key as it is (a trailing ``\\r`` stays part of it, as ``std::getline`` leaves it).
* The environment variables ``LLAMA_API_KEY`` and ``LLAMA_ARG_API_KEY_FILE`` are read first, as llama-server
  reads them, and the command line's keys are added to theirs.

The check (``server-http.cpp``'s ``middleware_validate_api_key``), on every request when at least one key is set:
``/health``, ``/v1/health`` and ``/`` are public; an ``OPTIONS`` request (a browser's CORS preflight) is not
checked; otherwise the key is the ``Authorization`` header, or ``X-Api-Key`` when that is absent, with a leading
``Bearer `` removed, and it must equal one of the keys. Anything else is answered ``401`` with
``{"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}`` before the request
is read any further.
"""

import hmac
import json
import os

__all__ = [
    "PUBLIC_PATHS",
    "ApiKeyError",
    "ApiKeyMiddleware",
    "api_keys_from_args",
    "parse_csv_row",
    "read_api_key_file",
]

PUBLIC_PATHS = frozenset(("/health", "/v1/health", "/"))
_BODY = json.dumps(
    {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}, separators=(",", ":")
).encode("utf-8")


class ApiKeyError(ValueError):
    """A key file that cannot be read (llama-server: ``error: failed to open file '...'``)."""


def parse_csv_row(text):
    """The fields of one comma-separated row: a double quote opens a quoted field only at its start (elsewhere
    it is a literal character); inside quotes, ``""`` is a quote and ``,`` is a comma."""
    fields, field, in_quotes, i = [], [], False, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            if not in_quotes:
                if field:
                    field.append('"')
                else:
                    in_quotes = True
            elif i + 1 < len(text) and text[i + 1] == '"':
                field.append('"')
                i += 1
            else:
                in_quotes = False
        elif ch == "," and not in_quotes:
            fields.append("".join(field))
            field = []
        else:
            field.append(ch)
        i += 1
    fields.append("".join(field))
    return fields


def read_api_key_file(path):
    """The keys of a key file: every line that is not empty and does not start with ``#``."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        raise ApiKeyError(f"error: failed to open file '{path}'") from None
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line opens no line of its own
    return [line for line in lines if line and not line.startswith("#")]


def api_keys_from_args(args, environ=None):
    """The server's keys, in llama-server's order: ``LLAMA_API_KEY``, ``LLAMA_ARG_API_KEY_FILE``, then every
    ``--api-key`` and ``--api-key-file`` of the command line. An empty list: no key is checked."""
    environ = os.environ if environ is None else environ
    keys = []
    if environ.get("LLAMA_API_KEY"):
        keys += [k for k in parse_csv_row(environ["LLAMA_API_KEY"]) if k]
    if environ.get("LLAMA_ARG_API_KEY_FILE"):
        keys += read_api_key_file(environ["LLAMA_ARG_API_KEY_FILE"])
    for kind, value in getattr(args, "api_key_sources", None) or ():
        if kind == "key":
            keys += [k for k in parse_csv_row(value) if k]
        else:
            keys += read_api_key_file(value)
    return keys


def _header(scope, name):
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def key_accepted(keys, authorization, x_api_key=""):
    """Whether a request's headers carry one of ``keys``."""
    given = authorization or x_api_key
    given = given.removeprefix("Bearer ")
    given = given.encode("utf-8", "surrogateescape")
    accepted = False
    for key in keys:  # every key compared, in constant time
        accepted |= hmac.compare_digest(given, key.encode("utf-8", "surrogateescape"))
    return accepted


class ApiKeyMiddleware:
    """ASGI middleware: the API key check in front of every route (OpenAI, Ollama and the rest alike)."""

    def __init__(self, app, keys):
        self.app = app
        self.keys = list(keys)

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "http"
            or not self.keys
            or scope.get("method") == "OPTIONS"
            or scope.get("path") in PUBLIC_PATHS
        ):
            return await self.app(scope, receive, send)
        if key_accepted(self.keys, _header(scope, b"authorization"), _header(scope, b"x-api-key")):
            return await self.app(scope, receive, send)
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json; charset=utf-8"),
                    (b"content-length", str(len(_BODY)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _BODY})
