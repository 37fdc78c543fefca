"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

``bankml serve``: an OpenAI- and Ollama-compatible HTTP server (Starlette + uvicorn) over ``bankml.serve.runtime``.

* ``POST /v1/chat/completions``: messages, ``response_format`` (json_object / json_schema), ``grammar``,
  ``json_schema``, the sampler fields and ``seed``, ``max_tokens``, ``stop``, ``stream`` (server-sent
  events); ``tools``, ``tool_choice`` (auto / none / required), ``parallel_tool_calls`` and histories with
  ``tool_calls`` and ``role: "tool"`` results; the answer is parsed by the template's parser into content,
  reasoning_content and ``tool_calls`` (``finish_reason: "tool_calls"``), streamed as llama-server's deltas.
* ``POST /v1/completions``: a raw prompt (no template), ``grammar`` / ``json_schema``.
* ``GET /v1/models``, ``GET /health``, ``GET /v1/health``.
* llama-server's extra endpoints (``bankml.serve.endpoints``): ``POST /apply-template``, ``/tokenize``,
  ``/detokenize``, ``GET /props``, ``/slots``, ``/metrics`` (with ``--metrics``).
* ``--api-key`` / ``--api-key-file``: every route but the public ones asks for a key (``bankml.serve.auth``).
* ``POST /api/chat``, ``POST /api/generate`` (Ollama: ``format``, ``options``, ``tools`` with
  ``message.tool_calls[].function.arguments`` as an object, NDJSON streaming, default ``stream: true``),
  ``GET /api/tags``, ``GET /api/version``.
* Vertex AI's prediction protocol with ``AIP_MODE=PREDICTION`` (``bankml.serve.gcp``); every answer's header names
  in llama-server's case (``bankml.serve.headers``).

The app does HTTP and streaming only, in parts: the plumbing (``bankml.serve.plumbing``: the body, its preparation,
the generation thread, the error objects) and the routes of each wire format (``openai_routes``, ``agent_routes``,
``ollama_routes``; llama-server's extra endpoints in ``endpoints``); this module assembles them, with the flags of
``bankml serve``. A body is read, off the event loop, into one typed
``bankml.serve.request.Request`` by ``bankml.serve.openai`` or ``bankml.serve.ollama`` (every field checked there),
the runtime makes a Job of it (``Model.prepare``), and the app sends the answer or its stream. A bad body, schema
or grammar gets a 400 with llama-server's error object before any slot is taken or token computed.
Each request is generated on one of ``--parallel`` contexts (slots) of one model, so concurrent requests
never share state; a client that disconnects cancels its generation after the current token and frees the
slot.
"""

import contextlib
import os
import signal
import socket
import sys

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from bankml.sampling.params import SamplerParams
from bankml.serve import gcp
from bankml.serve.agent_routes import AgentRoutes
from bankml.serve.auth import ApiKeyError, ApiKeyMiddleware, api_keys_from_args
from bankml.serve.cors import CorsMiddleware, CorsOptions
from bankml.serve.embeddings import EmbeddingRoutes
from bankml.serve.endpoints import EndpointOptions, Endpoints, model_meta
from bankml.serve.flags import chat_model_options, context_options, model_load_options
from bankml.serve.flags import sleep_idle_seconds as check_sleep_seconds
from bankml.serve.headers import HeaderCaseMiddleware
from bankml.serve.ollama_routes import OllamaRoutes
from bankml.serve.openai_routes import OpenAIRoutes
from bankml.serve.plumbing import FINGERPRINT, Plumbing, http_error, server_error
from bankml.serve.request import ServerDefaults, ServerLimits
from bankml.serve.runtime import Model
from bankml.serve.server_flags import sampler_defaults, verbose
from bankml.serve.sleep import Sleeper, WakeMiddleware

__all__ = ["ServerLimits", "create_app", "serve"]


class _App(OpenAIRoutes, AgentRoutes, OllamaRoutes, Plumbing):
    """The application object: the routes of each wire format over the shared plumbing."""


def create_app(
    model,
    alias=None,
    limits=None,
    api_keys=(),
    endpoints=None,
    defaults=None,
    cors=None,
    tags=None,
    sleep_idle_seconds=-1,
):
    """The Starlette application serving ``model`` (a bankml.serve.runtime.Model) within ``limits`` (a
    ``ServerLimits``; the defaults without); with ``api_keys``, every route but the public ones asks for one
    (bankml.serve.auth); ``endpoints`` (a bankml.serve.endpoints.EndpointOptions) turns /slots, /metrics and
    POST /props on or off; ``defaults`` (a ``ServerDefaults``) are the server's defaults of the request fields
    (``--seed``, ``-n``, ``-v``...); ``cors`` (a bankml.serve.cors.CorsOptions) the CORS answers. ``alias`` and
    ``tags`` are llama-server's ``--alias`` and ``--tags`` (comma-separated; the first alias in sorted order names
    the model). ``sleep_idle_seconds`` (llama-server's ``--sleep-idle-seconds``; -1: never) frees the model after
    that many idle seconds and loads it again for the next request (bankml.serve.sleep)."""
    defaults = defaults or ServerDefaults()
    app = _App(model, alias, limits, defaults, tags)
    app.meta = model_meta(model)  # server_context_meta's, read while the model is loaded
    app.sleeper = None
    if sleep_idle_seconds > 0:
        app.sleeper = Sleeper(model, check_sleep_seconds(sleep_idle_seconds), busy=app.busy)
    default_params = SamplerParams.from_server(dict(defaults.sampler))
    extra = Endpoints(app, app.render_prompt, endpoints, default_params=default_params, build_info=FINGERPRINT)
    routes = (
        [
            Route("/v1/chat/completions", app.chat_completions, methods=["POST"]),
            Route("/chat/completions", app.chat_completions, methods=["POST"]),
            Route("/completion", app.native_completion, methods=["POST"]),
            Route("/v1/completions", app.completions, methods=["POST"]),
            Route("/completions", app.native_completion, methods=["POST"]),
            Route("/v1/chat/completions/control", app.control, methods=["POST"]),
            Route("/v1/chat/completions/input_tokens", app.chat_input_tokens, methods=["POST"]),
            Route("/chat/completions/input_tokens", app.chat_input_tokens, methods=["POST"]),
            Route("/v1/responses", app.responses, methods=["POST"]),
            Route("/responses", app.responses, methods=["POST"]),
            Route("/v1/responses/input_tokens", app.responses_input_tokens, methods=["POST"]),
            Route("/responses/input_tokens", app.responses_input_tokens, methods=["POST"]),
            Route("/v1/messages", app.anthropic_messages, methods=["POST"]),
            Route("/messages", app.anthropic_messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", app.anthropic_count_tokens, methods=["POST"]),
            Route("/v1/models", app.models, methods=["GET"]),
            Route("/models", app.models, methods=["GET"]),
            Route("/health", app.health, methods=["GET"]),
            Route("/v1/health", app.health, methods=["GET"]),
            Route("/api/chat", app.ollama_chat, methods=["POST"]),
            Route("/api/generate", app.ollama_generate, methods=["POST"]),
            Route("/api/tags", app.ollama_tags, methods=["GET"]),
            Route("/api/version", app.ollama_version, methods=["GET"]),
            Route("/api/show", app.ollama_show, methods=["POST"]),
            Route("/api/ps", app.ollama_ps, methods=["GET"]),
        ]
        + extra.routes()
        + EmbeddingRoutes(app).routes()
    )
    routes += gcp.routes(routes, os.environ)  # Vertex AI's AIP_MODE=PREDICTION
    # the header case outermost: every answer's header names, CORS's included, in llama-server's case; then
    # CORS: its headers go on every answer, and a preflight is answered before the API key check; a sleeping
    # model is woken only for a request that passed them
    middleware = [
        Middleware(HeaderCaseMiddleware),
        Middleware(CorsMiddleware, options=cors or CorsOptions()),
        Middleware(ApiKeyMiddleware, keys=list(api_keys or ())),
    ]
    if app.sleeper is not None:
        middleware.append(Middleware(WakeMiddleware, sleeper=app.sleeper, routes=routes))
    starlette = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        middleware=middleware,
        lifespan=_lifespan(app.sleeper),
    )
    starlette.state.bankml = app
    return starlette


def _lifespan(sleeper):
    """The application's lifespan: the sleeper's watcher runs while the server serves."""

    @contextlib.asynccontextmanager
    async def lifespan(_):
        if sleeper is not None:
            sleeper.start()
        try:
            yield
        finally:
            if sleeper is not None:
                sleeper.stop()

    return lifespan


def limits_from_args(args):
    """ServerLimits from ``bankml serve``'s options."""
    base = ServerLimits()
    return ServerLimits(
        max_body_bytes=getattr(args, "max_body_bytes", None) or base.max_body_bytes,
        max_messages=getattr(args, "max_messages", None) or base.max_messages,
        max_grammar_bytes=getattr(args, "max_grammar_bytes", None) or base.max_grammar_bytes,
        prepare_seconds=getattr(args, "prepare_timeout", None) or base.prepare_seconds,
        request_seconds=getattr(args, "request_timeout", None) or base.request_seconds,
        max_preparing=getattr(args, "max_preparing", None) or base.max_preparing,
        reject_unknown_fields=bool(getattr(args, "reject_unknown_fields", False)),
        max_stop=base.max_stop,
        max_stop_bytes=base.max_stop_bytes,
        max_samplers=base.max_samplers,
        max_dry_breakers=base.max_dry_breakers,
        max_dry_breaker_bytes=base.max_dry_breaker_bytes,
    )


def defaults_from_args(args):
    """The request fields' server defaults (ServerDefaults) from llama-server's flags: the sampler flags
    (``--seed``, ``--temp``...; a value a request could not give is refused here, a ValueError), ``-n`` and
    ``-v``/``-lv``."""
    sampler = sampler_defaults(args)
    SamplerParams.from_server(sampler)  # checked as a request's fields are
    return ServerDefaults(
        tuple(sampler.items()),
        getattr(args, "n_predict", -1),
        verbose(args),
        bool(getattr(args, "backend_sampling", False)),
    )


def _load_model(args, options):
    """The Model of ``bankml serve``'s flags: -np -1 is llama-server's auto (4 slots and one KV pool each slot may
    fill, --kv-unified); the request defaults are checked first, before the model is loaded."""
    defaults_from_args(args)
    auto = args.parallel < 0
    kv_unified = getattr(args, "kv_unified", None)
    return Model(
        args.model,
        **model_load_options(args),
        n_parallel=4 if auto else args.parallel,
        kv_unified=auto if kv_unified is None else kv_unified,
        kv_unified_per_slot=getattr(args, "kv_unified_per_slot", 0) or 0,
        cache_prompt=getattr(args, "cache_prompt", True),
        slot_prompt_similarity=getattr(args, "slot_prompt_similarity", 0.1),
        cache_reuse=getattr(args, "cache_reuse", 0),
        embedding=getattr(args, "embedding", False),
        pooling=getattr(args, "pooling", None),
        embd_normalize=getattr(args, "embd_normalize", 2),
        **options,
    )


def _address(args):
    """uvicorn's address of ``--host``: a UNIX socket for a path ending in ``.sock``, as llama-server's."""
    return {"uds": args.host} if args.host.endswith(".sock") else {"host": args.host, "port": args.port}


def _address_text(args, host):
    if host.endswith(".sock"):
        return f"unix:{host}"
    return f"http://[{host}]:{args.port}" if ":" in host else f"http://{host}:{args.port}"


def bind_sockets(hosts, port):
    """The listening sockets of llama-server's ``--host`` list: a UNIX socket for a path ending in ``.sock``,
    else the address's own family on ``port`` (an IPv6 address binds IPv6 only, as llama-server's ``::`` with
    several addresses). OSError naming the address that cannot be bound; the others are closed then."""
    out = []
    try:
        for host in hosts:
            if host.endswith(".sock"):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(host)
                address = host
            else:
                family, kind, proto, _, address = socket.getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
                )[0]
                sock = socket.socket(family, kind, proto)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            out.append(sock)
            try:
                sock.bind(address)
            except OSError as err:
                raise OSError(f"hostname: {host}, port: {port}: {err.strerror or err}") from None
            sock.listen(2048)
    except BaseException:
        for sock in out:
            sock.close()
        raise
    return out


class _CannotStart(Exception):
    """Why ``bankml serve`` stops before it serves: the message it prints and the exit status."""

    def __init__(self, message, status=2):
        super().__init__(message)
        self.message, self.status = message, status


def serve(args):
    """``bankml serve``: load the model, serve until interrupted. SIGTERM or SIGINT refuse new requests,
    cancel every generation (each stops after its current token) and exit within a few seconds."""
    import uvicorn

    try:
        options, api_keys, hosts = _read_flags(args)
        model = _checked_model(args, options)
    except _CannotStart as err:
        print(err.message, file=sys.stderr)
        return err.status
    try:
        starlette = _app_of_flags(model, args, api_keys)
        config = uvicorn.Config(starlette, **_address(args), log_level="warning", timeout_graceful_shutdown=3)
        sockets = _listening_sockets(hosts, args.port)
    except _CannotStart as err:
        model.close()
        print(err.message, file=sys.stderr)
        return err.status
    app = starlette.state.bankml
    _announce(args, model, hosts)
    signals = _run_until_signalled(uvicorn, config, app, sockets)
    return _shut_down(app, model, signals)


def _read_flags(args):
    """(the Model's options, the API keys, the ``--host`` list) of ``bankml serve``'s flags, checked before the
    model is loaded; ``args.host`` becomes the list's first address and ``args.port`` Vertex AI's port where
    ``AIP_HTTP_PORT`` names one. _CannotStart for a flag that cannot be served."""
    try:
        options = chat_model_options(args)
        options.update(context_options(args, "auto"))  # llama-server's default -fa auto
    except ValueError as err:
        raise _CannotStart(f"error: {err}") from None
    if args.chat_template_file is not None and not os.path.isfile(args.chat_template_file):
        raise _CannotStart(f"error: {args.chat_template_file}: no such file")
    try:
        api_keys = api_keys_from_args(args)
    except ApiKeyError as err:
        raise _CannotStart(str(err)) from None
    if args.parallel == 0:
        raise _CannotStart("error: invalid value for n_parallel")
    hosts = [h.strip() for h in args.host.split(",") if h.strip()]  # llama-server's --host: a comma-separated list
    if not hosts:
        raise _CannotStart("error: --host requires at least one address")
    args.host = hosts[0]
    try:
        args.port = gcp.http_port(os.environ, args.port)
    except gcp.GcpError as err:
        raise _CannotStart(f"error: {err}") from None
    if args.port == 0 and sum(not h.endswith(".sock") for h in hosts) > 1:
        raise _CannotStart("error: --port 0 is not supported with multiple TCP addresses")
    return options, api_keys, hosts


def _checked_model(args, options):
    """The loaded Model; _CannotStart for a request default or a context size llama-server refuses too."""
    try:
        return _load_model(args, options)
    except ValueError as err:
        raise _CannotStart(f"error: {err}") from None


def _app_of_flags(model, args, api_keys):
    """The Starlette application of ``bankml serve``'s flags; _CannotStart (status 1) for a Vertex AI predict
    route that is already a route."""
    try:
        return create_app(
            model,
            args.alias,
            limits_from_args(args),
            api_keys=api_keys,
            endpoints=EndpointOptions(
                slots=args.slots,
                metrics=args.metrics,
                props=args.props,
                slot_save_path=getattr(args, "slot_save_path", None),
            ),
            defaults=defaults_from_args(args),
            cors=CorsOptions(args.cors_origins, args.cors_methods, args.cors_headers, args.cors_credentials),
            tags=getattr(args, "model_tags", None),
            sleep_idle_seconds=getattr(args, "sleep_idle_seconds", -1),
        )
    except gcp.GcpError as err:
        raise _CannotStart(f"error: {err}", 1) from None


def _listening_sockets(hosts, port):
    """The sockets of a ``--host`` list of several addresses (llama-server listens on each, on the same port);
    None for one address, which uvicorn binds itself. _CannotStart (status 1) naming one that cannot be bound."""
    if len(hosts) == 1:
        return None
    try:
        return bind_sockets(hosts, port)
    except OSError as err:
        raise _CannotStart(f"error: couldn't bind HTTP server socket: {err}", 1) from None


def _announce(args, model, hosts):
    """The start line: the model, its chat template's source, the addresses and the slots."""
    source = args.chat_template_file or ("the model's" if model.chat_template else "llama.cpp's ChatML")
    if getattr(args, "chat_template", None):
        source = "given by --chat-template"
    if not getattr(args, "jinja", True):
        source += ", libllama's built-in formatting (--no-jinja)"
    print(
        f"bankml: serving {model.path} ({model.n_vocab:,} tokens, chat template {source}) on "
        f"{', '.join(_address_text(args, h) for h in hosts)} with {model.n_parallel} slot(s)",
        flush=True,
    )


def _run_until_signalled(uvicorn, config, app, sockets):
    """Serve with uvicorn (the module is the server extra's, imported as ``serve`` starts) until SIGTERM or
    SIGINT, which first refuse new requests and cancel the generations (``app.shutdown``); the signals uvicorn
    caught, to raise again after the cleanup."""
    signals = []

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            app.shutdown()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            # uvicorn raises the signal again as it leaves: keep it for after the cleanup below
            with super().capture_signals():
                yield
                signals.extend(getattr(self, "_captured_signals", ()))
                if hasattr(self, "_captured_signals"):
                    self._captured_signals.clear()

    _Server(config).run(sockets=sockets)
    return signals


def _shut_down(app, model, signals):
    """Free the model once every generation has stopped, then end the process by the signal it was sent."""
    app.shutdown()
    if app.join(5.0):
        model.close()
        print("bankml: shut down", flush=True)
    else:
        # a generation thread is still inside libllama: freeing its context under it would crash the process
        print("bankml: shut down (a generation did not stop in time: the model is not freed)", flush=True)
    for sig in reversed(signals):
        signal.raise_signal(sig)  # as uvicorn does: the process ends by the signal it was sent
    if not app.join(0):
        os._exit(0)
    return 0
