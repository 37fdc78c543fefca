"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama-server's ``--sleep-idle-seconds N`` for ``bankml serve`` (``tools/server/server-queue.cpp``'s
``start_loop`` and ``wait_until_no_sleep``, ``server-context.cpp``'s ``handle_sleeping_state`` and
``create_response``): after N seconds with no request in flight, no generation running and none being prepared,
the ``Sleeper`` frees the model's weights and its slots' contexts (``Model.unload``) and the server sleeps. A
request on any route wakes it (``Model.reload``, the caches empty) before it is answered, except the read-only
routes llama-server answers while it sleeps (``create_response(true)``: ``/health``, ``GET /props``,
``/models``, ``/metrics``) and bankml's Ollama listings that read no weights (``/api/tags``, ``/api/version``);
a route that does not exist wakes nothing, nor do ``/tools`` and ``/cors-proxy`` (llama-server's 403 while they
are disabled) or a request the API key or CORS middleware answers. ``GET /props`` says ``is_sleeping``.
"""

import threading
import time

from starlette.concurrency import run_in_threadpool
from starlette.routing import Match

__all__ = ["READ_ONLY", "Sleeper", "WakeMiddleware"]

#: (path, method) of the routes answered while the server sleeps, without waking it
READ_ONLY = frozenset(
    {
        ("/health", "GET"),
        ("/v1/health", "GET"),
        ("/props", "GET"),
        ("/models", "GET"),
        ("/v1/models", "GET"),
        ("/metrics", "GET"),
        ("/api/tags", "GET"),
        ("/api/version", "GET"),
        # llama-server's answers for the disabled server-side tools and CORS proxy (res_403): no server route
        ("/tools", "GET"),
        ("/tools", "POST"),
        ("/cors-proxy", "GET"),
        ("/cors-proxy", "POST"),
    }
)


class Sleeper:
    """Puts ``model`` to sleep after ``seconds`` idle and wakes it for a request. ``busy()`` says whether work
    that outlives its request runs (a generation whose client went away, a preparation past its deadline): that
    is not idle either. ``on_state(callback)`` adds a callback called with True before the model is freed and
    with False after it is loaded again (llama-server's ``on_sleeping_state``), under the sleeper's lock."""

    def __init__(self, model, seconds, busy=None):
        self.model = model
        self.seconds = float(seconds)
        self._busy = busy or (lambda: False)
        self._cond = threading.Condition()
        self._sleeping = False
        self._in_flight = 0
        self._last = time.monotonic()
        self._callbacks = []
        self._stop = False
        self._thread = None

    @property
    def sleeping(self):
        return self._sleeping

    def on_state(self, callback):
        self._callbacks.append(callback)

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, daemon=True, name="bankml-sleep")
            self._thread.start()
        return self

    def stop(self, timeout=5.0):
        """End the watcher (the model stays as it is: asleep or awake)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def enter(self):
        """A request that needs the model begins: the model is loaded again first if it sleeps (the caller waits,
        as llama-server's ``wait_until_no_sleep``); it is not idle until ``leave``."""
        with self._cond:
            if self._sleeping:
                self.model.reload()
                for callback in reversed(self._callbacks):
                    callback(False)
                self._sleeping = False
            self._in_flight += 1
            self._last = time.monotonic()

    def leave(self):
        with self._cond:
            self._in_flight -= 1
            self._last = time.monotonic()
            self._cond.notify_all()

    def awake(self, read):
        """``read()`` while the model is awake, under the lock (no sleep begins meanwhile); None while it
        sleeps."""
        with self._cond:
            return None if self._sleeping else read()

    def _watch(self):
        with self._cond:
            while not self._stop:
                if self._sleeping:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                if self._in_flight or self._busy():
                    self._last = now
                    self._cond.wait(0.1)
                    continue
                left = self._last + self.seconds - now
                if left > 0:
                    self._cond.wait(min(left, 1.0))
                    continue
                for callback in self._callbacks:
                    callback(True)
                self.model.unload()
                self._sleeping = True


class WakeMiddleware:
    """ASGI middleware that wakes the ``sleeper`` for every request on one of ``routes`` (Starlette routes)
    but the ``READ_ONLY`` ones, and keeps it awake until the answer (its whole stream) is sent."""

    def __init__(self, app, sleeper, routes):
        self.app = app
        self.sleeper = sleeper
        self.routes = list(routes)

    def _wakes(self, scope):
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        for route in self.routes:
            if route.matches(scope)[0] == Match.FULL:
                return (route.path, method) not in READ_ONLY
        return False

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self._wakes(scope):
            await self.app(scope, receive, send)
            return
        await run_in_threadpool(self.sleeper.enter)
        try:
            await self.app(scope, receive, send)
        finally:
            self.sleeper.leave()
