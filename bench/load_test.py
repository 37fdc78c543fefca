"""Load test of ``bankml serve``: a real server process on 127.0.0.1, driven from this (second) process.

Starts ``python -m bankml serve --parallel N -t THREADS`` on a free loopback port (PYTHONPATH as this
process has it), warms it up, then sends ``--requests`` mixed requests at ``--concurrency`` at once —
JSON mode, schemas, GBNF grammars, streaming (SSE and Ollama NDJSON), raw completions, clients that
disconnect (mid-stream, and before a non-streamed answer), and hostile bodies (an exponential schema, a
100,000-deep JSON body, a body past the size limit, 200,000 messages, a prompt of special tokens far past
the context, ``"samplers": "k" * 100000``, bad field types, invalid UTF-8, an unknown path, ``repeat_last_n``
at INT32_MAX, a left-recursive grammar, GBNF repetition amplification, a token id past the vocabulary) — each bounded
by a client timeout, the whole run by ``--time-limit``. Then it sends SIGTERM during a generation and
times the exit.

Reports served / refused / disconnected / failed, latency p50/p99 per outcome, and the server's resident
memory after the warm-up, after the run and at its peak (VmHWM). A request *fails* when the answer is not
what it must be: a 5xx, an error that is not llama-server's JSON error object, a refusal of a valid
request, a served hostile request, a dropped connection, a timeout.

    PYTHONPATH=. python bench/load_test.py --requests 200 --concurrency 8 --parallel 2 --json load.json
"""

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

ASK = [{"role": "user", "content": "Describe a cat in a few words."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
    },
    "required": ["name", "age"],
}
NEVER_ENDS = 'root ::= "a" root'


def _allof_levels(n):
    defs = {"l0": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}}
    for i in range(1, n + 1):
        ref = {"allOf": [{"$ref": "#/$defs/l%d" % (i - 1)}]}
        defs["l%d" % i] = {"type": "object", "properties": {"a": ref, "b": ref}}
    return {"$ref": "#/$defs/l%d" % n, "$defs": defs}


# -- the request mix: (name, kind, send) where send(client, base) returns an outcome


def _json(r):
    try:
        return r.json()
    except ValueError:
        return None


def _is_error_object(r, ollama=False):
    body = _json(r)
    if not isinstance(body, dict) or set(body) != {"error"}:
        return False
    if ollama:
        return isinstance(body["error"], str)
    e = body["error"]
    if not isinstance(e, dict) or e.get("code") != r.status_code:
        return False
    # the context-size error also gives the prompt's tokens and the slot's context, as llama-server's
    sizes = {"n_prompt_tokens", "n_ctx"} if e.get("type") == "exceed_context_size_error" else set()
    return set(e) - sizes == {"code", "message", "type"}


def _served_chat(r, check=None):
    if r.status_code != 200:
        return "failed", f"{r.status_code}: {r.text[:200]}"
    body = _json(r)
    try:
        content = body["choices"][0]["message"]["content"]
    except (TypeError, KeyError, IndexError):
        return "failed", f"not a chat completion: {r.text[:200]}"
    if check is not None and not check(content, body):
        return "failed", f"content does not match its constraint: {content!r}"
    return "served", ""


def _refused(r, codes=(400,), ollama=False):
    if r.status_code in codes and _is_error_object(r, ollama):
        return "refused", ""
    return "failed", f"expected a refusal {codes}, got {r.status_code}: {r.text[:200]}"


def _post(client, base, path, body, timeout=120.0, raw=None):
    content = raw if raw is not None else json.dumps(body)
    return client.post(base + path, content=content, headers={"Content-Type": "application/json"}, timeout=timeout)


def chat_json_mode(client, base, rng):
    r = _post(
        client,
        base,
        "/v1/chat/completions",
        {"messages": ASK, "response_format": {"type": "json_object"}, "max_tokens": 24, "seed": rng.randrange(1000)},
    )
    return _served_chat(r)


def chat_schema(client, base, rng):
    r = _post(
        client,
        base,
        "/v1/chat/completions",
        {
            "messages": ASK,
            "response_format": {"type": "json_schema", "json_schema": {"name": "cat", "schema": SCHEMA}},
            "max_tokens": 40,
            "seed": rng.randrange(1000),
            "temperature": 0.7,
        },
    )
    return _served_chat(r)


def chat_grammar(client, base, rng):
    r = _post(
        client,
        base,
        "/v1/chat/completions",
        {"messages": ASK, "grammar": 'root ::= [a-z]+ (" " [a-z]+)?', "max_tokens": 8, "seed": rng.randrange(1000)},
    )
    return _served_chat(r, lambda content, _b: all(part.isalpha() for part in content.split(" ")) or not content)


def chat_stream(client, base, rng):
    body = {
        "messages": ASK,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 12,
        "seed": rng.randrange(1000),
    }
    with client.stream("POST", base + "/v1/chat/completions", json=body, timeout=120.0) as r:
        if r.status_code != 200:
            r.read()
            return "failed", f"{r.status_code}: {r.text[:200]}"
        for line in r.iter_lines():
            if line == "data: [DONE]":
                return "served", ""
            if line.startswith("data: ") and "error" in json.loads(line[6:]):
                return "failed", line[:200]
    return "failed", "the stream ended without [DONE]"


def completion_grammar(client, base, rng):
    r = _post(
        client,
        base,
        "/v1/completions",
        {
            "prompt": "The colors are",
            "grammar": 'root ::= " red" | " blue"',
            "max_tokens": 4,
            "seed": rng.randrange(1000),
        },
    )
    if r.status_code == 200 and (_json(r) or {}).get("choices", [{}])[0].get("text") in (" red", " blue"):
        return "served", ""
    return "failed", f"{r.status_code}: {r.text[:200]}"


def ollama_chat(client, base, rng):
    r = _post(
        client,
        base,
        "/api/chat",
        {
            "messages": ASK,
            "format": "json",
            "stream": False,
            "options": {"num_predict": 16, "seed": rng.randrange(1000)},
        },
    )
    if r.status_code == 200 and (_json(r) or {}).get("done") is True:
        return "served", ""
    return "failed", f"{r.status_code}: {r.text[:200]}"


def ollama_generate_stream(client, base, rng):
    with client.stream(
        "POST", base + "/api/generate", json={"prompt": "Hi", "options": {"num_predict": 6}}, timeout=120.0
    ) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]
    if r.status_code == 200 and lines and lines[-1].get("done") is True:
        return "served", ""
    return "failed", f"{r.status_code}: {lines[-1:]}"


def disconnect_mid_stream(client, base, rng):
    body = {"messages": ASK, "grammar": NEVER_ENDS, "stream": True, "max_tokens": 100000}
    with client.stream("POST", base + "/v1/chat/completions", json=body, timeout=120.0) as r:
        if r.status_code != 200:
            return "failed", f"{r.status_code}"
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content":"a' in line.replace(" ", ""):
                return "disconnected", ""  # leaving the block closes the connection
    return "failed", "the never-ending stream ended"


def disconnect_before_answer(client, base, rng):
    try:
        _post(
            client,
            base,
            "/v1/chat/completions",
            {"messages": ASK, "grammar": NEVER_ENDS, "max_tokens": 100000},
            timeout=httpx.Timeout(120.0, read=1.0),
        )
    except httpx.ReadTimeout:
        return "disconnected", ""
    return "failed", "a never-ending generation answered"


def hostile_exponential_schema(client, base, rng):
    return _refused(
        _post(
            client,
            base,
            "/v1/chat/completions",
            {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {"schema": _allof_levels(19)}}},
        )
    )


def hostile_deep_json(client, base, rng):
    return _refused(_post(client, base, "/v1/chat/completions", None, raw="[" * 100000 + "]" * 100000))


def hostile_large_body(client, base, rng):
    text = "x" * (9 * 1024 * 1024)
    return _refused(_post(client, base, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}))


def hostile_many_messages(client, base, rng):
    return _refused(
        _post(client, base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}] * 200000})
    )


def hostile_special_tokens(client, base, rng):
    # far past the context: refused by the prompt-size bound before libllama's tokenizer sees it
    text = "<|im_start|>" * 500000
    r = _post(client, base, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}]})
    if r.status_code == 400 and _is_error_object(r) and r.json()["error"]["type"] == "exceed_context_size_error":
        return "refused", ""
    return "failed", f"{r.status_code}: {r.text[:200]}"


def hostile_samplers(client, base, rng):
    return _refused(_post(client, base, "/v1/chat/completions", {"messages": ASK, "samplers": "k" * 100000}))


def hostile_stream_type(client, base, rng):
    return _refused(_post(client, base, "/v1/chat/completions", {"messages": ASK, "stream": "x"}))


def stream_options_not_an_object(client, base, rng):
    # llama-server ignores stream_options that is not an object: served, and its slot freed
    body = {"messages": ASK, "stream": True, "stream_options": "x", "max_tokens": 4}
    with client.stream("POST", base + "/v1/chat/completions", json=body, timeout=120.0) as r:
        done = any(line == "data: [DONE]" for line in r.iter_lines())
    return ("served", "") if r.status_code == 200 and done else ("failed", f"{r.status_code}")


def hostile_invalid_utf8(client, base, rng):
    return _refused(_post(client, base, "/v1/chat/completions", None, raw=b'{"messages": "\xff\xfe"}'))


def hostile_bad_schema(client, base, rng):
    return _refused(_post(client, base, "/api/chat", {"messages": ASK, "format": {"type": "nope"}}), ollama=True)


def hostile_repeat_last_n(client, base, rng):
    # used to abort the process (a 2^31-entry history); llama-server clamps it to the context: served
    r = _post(
        client,
        base,
        "/v1/chat/completions",
        {"messages": ASK, "repeat_last_n": 2147483647, "repeat_penalty": 1.1, "max_tokens": 4},
    )
    return _served_chat(r)


def hostile_left_recursion(client, base, rng):
    # used to loop forever in the engine, holding a preparation thread
    return _refused(
        _post(
            client,
            base,
            "/v1/chat/completions",
            {"messages": ASK, "grammar": 'root ::= ("x" | b)+ root*\nb ::= ', "max_tokens": 4},
        )
    )


def hostile_amplification(client, base, rng):
    # used to build 200M elements (3.6 GB) before any size check
    return _refused(
        _post(
            client,
            base,
            "/v1/chat/completions",
            {"messages": ASK, "grammar": 'root ::= "' + "a" * 100000 + '"{0,2000}', "max_tokens": 4},
        )
    )


def hostile_token_id(client, base, rng):
    return _refused(
        _post(
            client, base, "/v1/chat/completions", {"messages": ASK, "grammar": "root ::= <[999999]>", "max_tokens": 4}
        )
    )


def hostile_unknown_path(client, base, rng):
    return _refused(client.get(base + "/v1/nothing-here", timeout=30.0), codes=(404,))


MIX = [
    ("chat-json-mode", chat_json_mode, 3),
    ("chat-schema", chat_schema, 3),
    ("chat-grammar", chat_grammar, 2),
    ("chat-stream", chat_stream, 2),
    ("completion-grammar", completion_grammar, 2),
    ("ollama-chat", ollama_chat, 2),
    ("ollama-generate-stream", ollama_generate_stream, 1),
    ("stream-options-string", stream_options_not_an_object, 1),
    ("disconnect-mid-stream", disconnect_mid_stream, 1),
    ("disconnect-before-answer", disconnect_before_answer, 1),
    ("hostile-exponential-schema", hostile_exponential_schema, 1),
    ("hostile-deep-json", hostile_deep_json, 1),
    ("hostile-large-body", hostile_large_body, 1),
    ("hostile-many-messages", hostile_many_messages, 1),
    ("hostile-special-tokens", hostile_special_tokens, 1),
    ("hostile-samplers", hostile_samplers, 1),
    ("hostile-stream-type", hostile_stream_type, 1),
    ("hostile-invalid-utf8", hostile_invalid_utf8, 1),
    ("hostile-bad-schema", hostile_bad_schema, 1),
    ("hostile-unknown-path", hostile_unknown_path, 1),
    ("hostile-repeat-last-n", hostile_repeat_last_n, 1),
    ("hostile-left-recursion", hostile_left_recursion, 1),
    ("hostile-amplification", hostile_amplification, 1),
    ("hostile-token-id", hostile_token_id, 1),
]


def plan(n, seed=0):
    """``n`` request kinds: every kind at least once (when n allows), the rest drawn by weight, shuffled."""
    rng = random.Random(seed)
    names = [name for name, _fn, _w in MIX]
    chosen = names[:n]
    weights = [w for _name, _fn, w in MIX]
    chosen += rng.choices(names, weights, k=max(0, n - len(chosen)))
    rng.shuffle(chosen)
    return chosen


# -- the server process


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


@contextlib.contextmanager
def server(parallel=2, threads=1, ctx=2048, extra=(), startup=300.0, env=None):
    """A ``bankml serve`` process on a free loopback port: yields ``(base_url, process)``. ``env``: variables
    set for the process besides this one's."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="bankml-load-", suffix=".log", delete=False)
    cmd = [
        sys.executable,
        "-m",
        "bankml",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(threads),
        "--parallel",
        str(parallel),
        "-c",
        str(ctx),
        "--alias",
        "load",
        *extra,
    ]
    # faulthandler: a crash of the server prints every thread's Python stack into its log
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONFAULTHANDLER="1", **(env or {}))
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"bankml serve exited with {proc.returncode}:\n{log.read()}")
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("bankml serve did not answer /health")
            time.sleep(0.2)
        proc.log_path = log.name
        try:
            yield base, proc
        except BaseException as err:
            # what the server did meanwhile: a test that fails on a dropped connection says whether the
            # process died (and of what) or is still up, with the end of its log
            time.sleep(0.5)
            state = "still running" if proc.poll() is None else f"exited with {proc.returncode}"
            if hasattr(err, "add_note"):  # Python 3.11+
                with open(log.name, errors="replace") as handle:  # its own offset: the server may still write
                    text = handle.read()
                fatal = text.rfind("Fatal Python error")  # faulthandler's dump, from its first line
                err.add_note(
                    f"bankml serve (pid {proc.pid}) {state}; its log:\n"
                    + (text[max(0, fatal - 2000) : fatal + 12000] if fatal >= 0 else text[-4000:])
                )
            raise
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        os.unlink(log.name)


def threads_and_fds(pid, settle=2.0):
    """The process's threads and open file descriptors (Linux /proc), each the fewest seen over ``settle``
    seconds: a connection the client just closed is closed by the server a moment later."""
    fewest = None
    end = time.monotonic() + settle
    while True:
        now = len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))
        fewest = now if fewest is None else (min(fewest[0], now[0]), min(fewest[1], now[1]))
        if time.monotonic() >= end:
            return fewest
        time.sleep(0.1)


def _percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(q / 100 * (len(values) - 1)))))
    return values[k]


def run_load(base, pid, n_requests, concurrency=8, time_limit=1800.0, seed=0, warmup=2):
    """Send the mix; a summary dict (counts, latencies, memory, failures). The warm-up sends every kind of
    request ``warmup`` times, ``concurrency`` at once, first: the allocators' high-water mark for this mix
    is reached there, and the memory after the run is compared with the memory after it."""
    functions = {name: fn for name, fn, _w in MIX}
    rng_lock = threading.Lock()
    rng = random.Random(seed)

    def warm(name):
        with httpx.Client() as client:
            return functions[name](client, base, random.Random(1))[0]

    with ThreadPoolExecutor(concurrency) as pool:
        warm_outcomes = list(pool.map(warm, [name for name, _fn, _w in MIX] * warmup))
    time.sleep(1.0)
    rss_before = rss_kib(pid)
    hwm_before = rss_kib(pid, "VmHWM")
    handles_before = threads_and_fds(pid)
    deadline = time.monotonic() + time_limit
    results = []

    def one(name):
        if time.monotonic() > deadline:
            return name, "skipped", 0.0, "the run's time limit"
        with rng_lock:
            local = random.Random(rng.random())
        t0 = time.perf_counter()
        try:
            with httpx.Client() as client:
                outcome, detail = functions[name](client, base, local)
        except Exception as e:  # noqa: BLE001 - a dropped connection, a timeout: a failure
            outcome, detail = "failed", f"{type(e).__name__}: {e}"
        return name, outcome, time.perf_counter() - t0, detail

    t_start = time.perf_counter()
    peak = [rss_before]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.2):
            try:
                peak[0] = max(peak[0], rss_kib(pid))
            except OSError:
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(concurrency) as pool:
        for item in pool.map(one, plan(n_requests, seed)):
            results.append(item)
    elapsed = time.perf_counter() - t_start
    time.sleep(2.0)  # disconnected generations stop after their current token
    stop.set()
    sampler.join()
    # the slots are free again: one more short request is served
    with httpx.Client() as client:
        after_ok = chat_json_mode(client, base, random.Random(2))[0] == "served"
    rss_after = rss_kib(pid)
    handles_after = threads_and_fds(pid)
    counts = {}
    latencies = {}
    for name, outcome, seconds, _detail in results:
        counts[outcome] = counts.get(outcome, 0) + 1
        latencies.setdefault(outcome, []).append(seconds)
    by_kind = {}
    for name, outcome, _s, _d in results:
        by_kind.setdefault(name, {}).setdefault(outcome, 0)
        by_kind[name][outcome] += 1
    return {
        "requests": len(results),
        "concurrency": concurrency,
        "elapsed_s": round(elapsed, 1),
        "warmup_requests": len(warm_outcomes),
        "warmup_failed": warm_outcomes.count("failed"),
        "counts": counts,
        "by_kind": by_kind,
        "latency_s": {
            k: {"p50": round(_percentile(v, 50), 3), "p99": round(_percentile(v, 99), 3)} for k, v in latencies.items()
        },
        "all_latency_s": {
            "p50": round(_percentile([r[2] for r in results], 50), 3),
            "p99": round(_percentile([r[2] for r in results], 99), 3),
        },
        # resident memory: after the warm-up and after the run, and the high-water mark (VmHWM) at both
        "rss_mib": {
            "after_warmup": round(rss_before / 1024, 1),
            "after_run": round(rss_after / 1024, 1),
            "peak_after_warmup": round(hwm_before / 1024, 1),
            "peak_after_run": round(rss_kib(pid, "VmHWM") / 1024, 1),
            "peak_sampled_during_run": round(peak[0] / 1024, 1),
        },
        # threads and open descriptors after the warm-up and after the run (every request has ended)
        "threads": {"after_warmup": handles_before[0], "after_run": handles_after[0]},
        "open_fds": {"after_warmup": handles_before[1], "after_run": handles_after[1]},
        "served_after_run": after_ok,
        "failures": [(n, d) for n, o, _s, d in results if o == "failed"][:20],
    }


def sigterm_during_generation(base, proc, limit=30.0):
    """SIGTERM while a never-ending generation streams: seconds until the process exits, and its code."""
    body = {"messages": ASK, "grammar": NEVER_ENDS, "stream": True, "max_tokens": 100000}
    with httpx.Client() as client, client.stream("POST", base + "/v1/chat/completions", json=body, timeout=60.0) as r:
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: ") and '"content":"a' in line.replace(" ", ""):
                break
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            for _ in lines:
                pass
        except httpx.HTTPError:
            pass
        try:
            code = proc.wait(limit)
        except subprocess.TimeoutExpired:
            return None, None
    return time.monotonic() - t0, code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--time-limit", type=float, default=1800.0, help="seconds for the whole run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the summary there too")
    args = parser.parse_args(argv)
    with server(args.parallel, args.threads, args.ctx) as (base, proc):
        summary = run_load(base, proc.pid, args.requests, args.concurrency, args.time_limit, args.seed)
        seconds, code = sigterm_during_generation(base, proc)
        summary["sigterm_exit_s"] = None if seconds is None else round(seconds, 2)
        summary["sigterm_exit_code"] = code
    summary["command"] = " ".join(["python bench/load_test.py"] + (argv if argv is not None else sys.argv[1:]))
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(summary, handle, indent=2)
    ok = summary["counts"].get("failed", 0) == 0 and summary["served_after_run"] and code == -signal.SIGTERM
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
