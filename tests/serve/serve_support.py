"""`bankml serve` as a child process for the tests that talk to it over HTTP."""

import contextlib
import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import pytest


class LazyModule:
    """A module imported when a test first uses it: the client SDKs (openai, anthropic, ollama: about 3 s of
    imports) are then paid by the pytest worker that runs their tests, not by every worker's collection."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):  # collection probes module globals (``__test__``...): no import for those
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_serve(args, *, log_prefix="bankml-serve-", cwd=None, env=None, start_timeout=180, stop_timeout=20):
    """``python -m bankml serve ARGS`` on a free loopback port: yields its base URL once ``/health`` answers 200;
    fails the test with the server's log when it exits or does not answer within ``start_timeout`` seconds;
    terminates it (killed after ``stop_timeout``) at the end."""
    cmd = [sys.executable, "-m", "bankml", "serve", *args]
    with _running(cmd, "bankml serve", log_prefix, cwd, env, start_timeout, stop_timeout) as base:
        yield base


@contextlib.contextmanager
def running_llama_server(flags, *, start_timeout=120, stop_timeout=30):
    """The pinned llama-server (tests/oracle/build_server.py's) on SmolLM2-135M-Instruct with ``flags``, on a free
    loopback port: its base URL, as ``running_serve``."""
    from tests.oracle.build_server import build_server
    from tests.oracle_support import smollm2_path

    cmd = [str(build_server()), "-m", str(smollm2_path()), *flags]
    with _running(cmd, "llama-server", "llama-server-", None, None, start_timeout, stop_timeout) as base:
        yield base


@contextlib.contextmanager
def _running(cmd, name, log_prefix, cwd, env, start_timeout, stop_timeout):
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix=log_prefix, suffix=".log", delete=False)
    cmd = [*cmd, "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"{name} exited with {proc.returncode}:\n{log.read()}")
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"{name} did not answer /health:\n{log.read()}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


@contextlib.contextmanager
def smollm2_client(alias="m", *, n_ctx=512, n_threads=1, n_parallel=1, model_options=None, **app_options):
    """A Starlette TestClient over ``create_app`` on SmolLM2-135M-Instruct (``model_options``: Model's,
    ``app_options``: create_app's), in process; the model closed at the end."""
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app
    from bankml.serve.runtime import Model
    from tests.oracle_support import smollm2_path

    model = Model(smollm2_path(), n_ctx=n_ctx, n_threads=n_threads, n_parallel=n_parallel, **(model_options or {}))
    try:
        with TestClient(create_app(model, alias, **app_options)) as c:
            c.bankml_model = model
            yield c
    finally:
        model.close()
