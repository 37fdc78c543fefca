# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""Google Cloud Vertex AI's prediction protocol, as llama-server serves it (``server-http.cpp``'s ``gcp_params``
and ``register_gcp_compat``), read from the environment a Vertex AI custom container is given:

* ``AIP_MODE=PREDICTION`` turns it on; nothing changes otherwise;
* ``AIP_HTTP_PORT`` (default 8080) replaces ``--port``;
* ``AIP_HEALTH_ROUTE``, when set, answers as ``/health``;
* ``AIP_PREDICT_ROUTE`` (default ``/predict``; a leading ``/`` is added) takes ``{"instances": [...]}`` (an array
  of at most 128 objects). Each instance names a route in ``@requestFormat``, as its path (``/v1/chat/completions``)
  or its camelCase alias (the path without ``/v1`` and without its first ``/``, each ``/``, ``-`` or ``_`` dropped
  and the next letter capitalized: ``chatCompletions``, ``applyTemplate``); the rest of the instance is that
  route's body, ``stream`` forced to false. The answer is ``{"predictions": [...]}``: each route's answer body in
  the order of the instances, whatever its status, or ``{"error": ...}`` for an instance that names no route or
  is no object. A predict route that is already a route is an error at start, as in llama-server.
"""

import asyncio
import json

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

__all__ = ["MAX_INSTANCES", "GcpError", "enabled", "gcp_alias", "http_port", "routes"]

MAX_INSTANCES = 128


class GcpError(ValueError):
    """The Vertex AI environment cannot be served (a predict route that is already a route)."""


def _env(environ, name, default, leading_slash=False):
    value = environ.get(name) or default
    if leading_slash and value and not value.startswith("/"):
        value = "/" + value
    return value


def enabled(environ):
    return environ.get("AIP_MODE", "") == "PREDICTION"


def http_port(environ, port):
    """The port to listen on: ``AIP_HTTP_PORT`` (default 8080) in prediction mode, else ``port``."""
    if not enabled(environ):
        return port
    text = _env(environ, "AIP_HTTP_PORT", "8080")
    try:
        return int(text)
    except ValueError:
        raise GcpError(f"AIP_HTTP_PORT is not a port number: {text!r}") from None


def gcp_alias(path):
    """The camelCase ``@requestFormat`` alias of a route path (path_to_gcp_format)."""
    if path.startswith("/v1"):
        path = path[3:]
    if path.startswith("/"):
        path = path[1:]
    out, cap = [], False
    for ch in path:
        if ch == ":" or ch == "{":  # path parameters
            break
        if ch in "/-_":
            cap = True
        else:
            out.append(ch.upper() if cap else ch)
            cap = False
    return "".join(out)


def _error(message, kind="invalid_request_error", code=400):
    return {"error": {"code": code, "message": message, "type": kind}}


async def _call(route, request, instance):
    """One instance through its route's handler: the answer's body (JSON when it parses)."""
    payload = {k: v for k, v in instance.items() if k != "@requestFormat"}
    if "stream" in payload:
        payload["stream"] = False
    body = json.dumps(payload).encode("utf-8")
    scope = dict(request.scope, path=route.path, raw_path=route.path.encode(), method="POST")
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            await asyncio.Event().wait()  # as a client that keeps the connection: never a disconnect
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    response = await route.endpoint(Request(scope, receive))
    if isinstance(response, StreamingResponse):
        return _error("predict route does not support streaming responses")
    if not response.body:
        return None
    try:
        return json.loads(response.body)
    except ValueError:
        return response.body.decode("utf-8", "replace")


def routes(existing, environ):
    """The routes prediction mode adds to ``existing`` (Starlette routes): none when it is off."""
    if not enabled(environ):
        return []
    predict = _env(environ, "AIP_PREDICT_ROUTE", "/predict", leading_slash=True)
    posts = [r for r in existing if isinstance(r, Route) and "POST" in (r.methods or ())]
    if any(r.path == predict for r in existing if isinstance(r, Route)):
        raise GcpError(f"AIP_PREDICT_ROUTE={predict} conflicts with an existing llama-server route")
    by_name = {}
    for route in posts:
        by_name.setdefault(gcp_alias(route.path), route)  # the first registration wins
        by_name.setdefault(route.path, route)

    async def one(request, instance):
        if not isinstance(instance, dict):
            return _error("each instance must be a JSON object")
        name = instance.get("@requestFormat")
        if not isinstance(name, str):
            return _error("each instance must include a string @requestFormat")
        route = by_name.get(name)
        if route is None:
            return _error("no handler registered for @requestFormat: " + name)
        return await _call(route, request, instance)

    async def predict_handler(request):
        try:
            data = json.loads(await request.body())
        except ValueError as err:
            return JSONResponse(_error(str(err)), status_code=400)
        if not isinstance(data, dict):
            return JSONResponse(_error("request body must be a JSON object"), status_code=400)
        instances = data.get("instances")
        if not isinstance(instances, list):
            return JSONResponse(_error("request body must include an array field named instances"), status_code=400)
        if len(instances) > MAX_INSTANCES:
            message = f"instances array exceeds maximum size of {MAX_INSTANCES}"
            return JSONResponse(_error(message), status_code=400)
        predictions = await asyncio.gather(*(one(request, instance) for instance in instances))
        return JSONResponse({"predictions": list(predictions)})

    out = [Route(predict, predict_handler, methods=["POST"])]
    health = _env(environ, "AIP_HEALTH_ROUTE", "", leading_slash=True)
    if health:
        (route,) = [r for r in existing if isinstance(r, Route) and r.path == "/health"]
        out.append(Route(health, route.endpoint, methods=["GET"]))
    return out
