"""``--sleep-idle-seconds`` (bankml.serve.sleep): after the idle seconds the model's weights and contexts are freed
and ``/props`` says ``is_sleeping``; ``/health``, ``/props``, ``/models`` and ``/metrics`` answer without waking
it, every other route wakes it (the model loaded again) before it answers, as llama-server's
``create_response``; a request in flight, or a generation that outlives its request, is not idle. The Sleeper
alone over a stand-in model, then the application in process on SmolLM2."""

import threading
import time

import pytest

from bankml import cli
from bankml.serve.endpoints import EndpointOptions
from bankml.serve.sleep import Sleeper

from .serve_support import smollm2_client


class _Weights:
    """A stand-in for Model's unload/reload: counts them."""

    def __init__(self):
        self.loaded = True
        self.unloads = self.reloads = 0

    def unload(self):
        assert self.loaded
        self.loaded = False
        self.unloads += 1

    def reload(self):
        assert not self.loaded
        self.loaded = True
        self.reloads += 1


def _until(condition, timeout=20.0):
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_the_sleeper_frees_the_model_when_idle_and_loads_it_for_a_request():
    weights = _Weights()
    states = []
    sleeper = Sleeper(weights, 0.2)
    sleeper.on_state(lambda asleep: states.append((asleep, weights.loaded)))
    sleeper.start()
    try:
        assert _until(lambda: sleeper.sleeping)
        assert weights.unloads == 1 and not weights.loaded
        sleeper.enter()  # a request: the model is loaded before it goes on
        assert weights.loaded and not sleeper.sleeping and weights.reloads == 1
        sleeper.leave()
        assert _until(lambda: sleeper.sleeping) and weights.unloads == 2
        # the callbacks see the model before it is freed and after it is loaded again
        assert states == [(True, True), (False, True), (True, True)]
        assert sleeper.awake(lambda: "live") is None
    finally:
        sleeper.stop()


def test_a_request_in_flight_or_a_running_generation_is_not_idle():
    weights = _Weights()
    running = threading.Event()
    sleeper = Sleeper(weights, 0.1, busy=running.is_set)
    sleeper.start()
    try:
        sleeper.enter()
        time.sleep(0.5)  # five times the idle seconds: still awake, the request is in flight
        assert not sleeper.sleeping and weights.unloads == 0
        running.set()  # the request ends, its generation goes on (a client that went away)
        sleeper.leave()
        time.sleep(0.5)
        assert not sleeper.sleeping and weights.unloads == 0
        assert sleeper.awake(lambda: "live") == "live"
        running.clear()
        assert _until(lambda: sleeper.sleeping)
    finally:
        sleeper.stop()


@pytest.mark.parametrize("value", ["0", "-2"])
def test_the_idle_seconds_are_checked_as_llama_server_checks_them(value, capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--sleep-idle-seconds", value])
    assert "--sleep-idle-seconds: invalid value: cannot be 0 or less than -1" in capsys.readouterr().err
    assert cli.build_parser().parse_args(["serve", "--sleep-idle-seconds", "-1"]).sleep_idle_seconds == -1


def _metric(text, name):
    prefix = f"llamacpp:{name} "
    (line,) = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    return float(line[len(prefix) :])


def _sleeping(c):
    return c.get("/props").json()["is_sleeping"]


def test_serve_sleeps_answers_read_only_routes_asleep_and_wakes_for_the_others():
    with smollm2_client(sleep_idle_seconds=2, endpoints=EndpointOptions(metrics=True)) as c:
        model = c.app.state.bankml.model
        body = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0}
        awake = c.post("/completion", json=body).json()
        assert not _sleeping(c)
        props = c.get("/props").json()
        c.get("/metrics")  # the scrape resets the rate window
        metrics = c.get("/metrics").text
        assert _until(lambda: _sleeping(c))
        assert not model.loaded
        # the read-only routes answer asleep, from what the server was on entering sleep
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/models").json()["data"][0]["id"] == "m"
        assert c.get("/metrics").text == metrics
        assert c.get("/props").json() == {**props, "is_sleeping": True}
        assert c.post("/no-such-route", json={}).status_code == 404  # no route: nothing wakes
        assert c.get("/tools").status_code == 403  # llama-server's res_403: no server route
        assert not model.loaded and _sleeping(c)
        # a route of the model wakes it, and the reloaded model answers as before
        assert c.post("/tokenize", json={"content": "Hello"}).json() == {"tokens": [19556]}
        assert model.loaded and not _sleeping(c)
        assert _until(lambda: _sleeping(c))
        again = c.post("/completion", json=body).json()
        assert again["content"] == awake["content"] and again["tokens_cached"] == awake["tokens_cached"]
        assert model.loaded


def test_the_rate_window_of_the_last_generation_is_reported_once():
    with smollm2_client(sleep_idle_seconds=2, endpoints=EndpointOptions(metrics=True)) as c:
        assert c.post("/completion", json={"prompt": "Hello", "n_predict": 8}).status_code == 200
        assert _until(lambda: _sleeping(c))
        assert _metric(c.get("/metrics").text, "predicted_tokens_seconds") > 0
        assert _metric(c.get("/metrics").text, "predicted_tokens_seconds") == 0
        assert c.post("/tokenize", json={"content": "Hello"}).status_code == 200
        assert not _sleeping(c)
        assert _metric(c.get("/metrics").text, "predicted_tokens_seconds") == 0


@pytest.mark.parametrize(
    "path, body",
    [
        ("/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "Hello world"}]}),
        ("/v1/responses/input_tokens", {"input": "Hello world"}),
        ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "Hello world"}]}),
        ("/apply-template", {"messages": [{"role": "user", "content": "Hello world"}]}),
    ],
)
def test_counting_tokens_wakes_the_server(path, body):
    with smollm2_client(sleep_idle_seconds=2) as c:
        assert _until(lambda: _sleeping(c))
        r = c.post(path, json=body)
        assert r.status_code == 200, r.text
        assert not _sleeping(c) and c.app.state.bankml.model.loaded
