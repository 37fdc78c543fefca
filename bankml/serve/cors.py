"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

CORS as llama-server answers it (the pre-routing handler of ``tools/server/server-http.cpp``), flags of
``common/arg.cpp``: ``--cors-origins`` (default ``*``), ``--cors-methods`` (``GET, POST, DELETE, OPTIONS``),
``--cors-headers`` (``*``), ``--cors-credentials`` / ``--no-cors-credentials`` (default on).

Every answer carries ``Access-Control-Allow-Origin``, before any route or API key is looked at:

* origins ``*`` with credentials (the default): the request's ``Origin`` header echoed back (empty without one);
* origins ``localhost``: the ``Origin`` echoed back when its host is ``localhost``, ``127.0.0.1`` or ``::1``,
  no header otherwise;
* any other value: the value as given (a comma-separated list is sent as it is, as llama-server sends it).

An ``OPTIONS`` request on any path is a preflight: ``200`` with an empty ``text/html`` body and the
``Access-Control-Allow-Credentials``, ``-Methods`` and ``-Headers`` headers, answered before the API key check
(browsers send no ``Authorization`` header in a preflight).
"""

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["CorsMiddleware", "CorsOptions", "origin_is_localhost"]


@dataclass(frozen=True)
class CorsOptions:
    """llama-server's CORS parameters (``common_params``' ``cors_*`` fields), with its defaults."""

    origins: str = "*"
    methods: str = "GET, POST, DELETE, OPTIONS"
    headers: str = "*"
    credentials: bool = True


def origin_is_localhost(origin):
    """Whether an ``Origin`` header names this machine (llama-server's ``origin_is_localhost``: the URL's host is
    ``localhost``, ``127.0.0.1`` or ``::1``; a value that is no URL is not)."""
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in ("localhost", "127.0.0.1", "::1")


def allow_origin(options, origin):
    """The ``Access-Control-Allow-Origin`` value of an answer to a request from ``origin`` (None: no header)."""
    if options.credentials and options.origins == "*":
        return origin
    if options.origins == "localhost":
        return origin if origin and origin_is_localhost(origin) else None
    return options.origins


class CorsMiddleware:
    """ASGI middleware: llama-server's CORS headers on every HTTP answer (streams included) and its preflight."""

    def __init__(self, app, options=None):
        self.app = app
        self.options = options or CorsOptions()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = ""
        for name, value in scope.get("headers", ()):
            if name == b"origin":
                origin = value.decode("latin-1")
                break
        allowed = allow_origin(self.options, origin)
        extra = [] if allowed is None else [(b"access-control-allow-origin", allowed.encode("latin-1"))]
        if scope.get("method") == "OPTIONS":
            await self._preflight(send, extra)
            return

        async def send_with_headers(message):
            if message["type"] == "http.response.start" and extra:
                message = dict(message, headers=list(message.get("headers", ())) + extra)
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _preflight(self, send, extra):
        o = self.options
        headers = extra + [
            (b"access-control-allow-credentials", b"true" if o.credentials else b"false"),
            (b"access-control-allow-methods", o.methods.encode("latin-1")),
            (b"access-control-allow-headers", o.headers.encode("latin-1")),
            (b"content-type", b"text/html"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
