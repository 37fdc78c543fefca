"""The agent APIs and the native completion, answered by the pinned llama-server and by ``bankml serve``, compared.

Starts both servers on loopback with SmolLM2-135M-Instruct and Llama 3.1's template (which renders tools), one
slot each and llama-server's prompt cache off (bankml evaluates every prompt anew), sends each request of
``CASES`` to both (greedy; the streamed ones twice: whole and streamed) and prints, per request, SAME or the
first difference. Ids, timestamps, ``timings``, ``id_slot`` and the Responses stream's ``output_index`` /
``content_index`` (OpenAI's fields, which llama-server leaves out) are not compared. Exits 1 on a difference.

    PYTHONPATH=. python bench/agent_api_identity.py [NAME-SUBSTRING...]

Needs the pinned llama-server (``python -m tests.oracle.build_server`` builds it) and the test extra.
"""

import contextlib
import gzip
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import httpx

from tests.oracle.build_server import build_server
from tests.oracle.record_agent_routes import normalize
from tests.oracle.record_server import _free_port, model_path

REPO = pathlib.Path(__file__).resolve().parents[1]
TEMPLATE = "meta-llama-Llama-3.1-8B-Instruct.jinja"
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
}
FUNCTION = {
    "type": "function",
    "name": WEATHER["name"],
    "description": WEATHER["description"],
    "parameters": WEATHER["input_schema"],
}
QUESTION = {"role": "user", "content": "What is the weather in Berlin?"}
PREFILL = '{"name": "'
CALL = {"type": "tool_use", "id": "abc", "name": "get_weather", "input": {"location": "Berlin"}}
RESULT = {"type": "tool_result", "tool_use_id": "abc", "content": "Sunny"}
FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"location": "B"}'}
GREEDY = {"model": "smol", "temperature": 0}
CASES = {
    "messages/plain": (
        "/v1/messages",
        {"max_tokens": 12, "system": "Be brief", "messages": [{"role": "user", "content": "Say hello"}]},
    ),
    "messages/stop": (
        "/v1/messages",
        {"max_tokens": 30, "stop_sequences": [","], "messages": [{"role": "user", "content": "Count to ten"}]},
    ),
    "messages/tool_use": (
        "/v1/messages",
        {
            "max_tokens": 40,
            "tools": [WEATHER],
            "tool_choice": {"type": "any"},
            "messages": [QUESTION, {"role": "assistant", "content": PREFILL}],
        },
    ),
    "messages/tool_result": (
        "/v1/messages",
        {
            "max_tokens": 12,
            "tools": [WEATHER],
            "messages": [QUESTION, {"role": "assistant", "content": [CALL]}, {"role": "user", "content": [RESULT]}],
        },
    ),
    "messages/count_tokens": ("/v1/messages/count_tokens", {"tools": [WEATHER], "messages": [QUESTION]}),
    "responses/plain": ("/v1/responses", {"max_output_tokens": 12, "instructions": "Be brief", "input": "Say hello"}),
    "responses/function_call": (
        "/v1/responses",
        {
            "max_output_tokens": 40,
            "tools": [FUNCTION],
            "tool_choice": "required",
            "input": [QUESTION, {"type": "message", "role": "assistant", "content": PREFILL}],
        },
    ),
    "responses/function_call_output": (
        "/v1/responses",
        {
            "max_output_tokens": 12,
            "tools": [FUNCTION],
            "input": [QUESTION, FUNCTION_CALL, {"type": "function_call_output", "call_id": "c1", "output": "Sunny"}],
        },
    ),
    "responses/input_tokens": ("/v1/responses/input_tokens", {"input": "Say hello", "instructions": "Be brief"}),
    "chat/input_tokens": ("/v1/chat/completions/input_tokens", {"messages": [QUESTION]}),
    "completion/plain": ("/completion", {"prompt": "Hi there", "n_predict": 5}),
    "completion/schema": (
        "/completion",
        {"prompt": "A cat:", "n_predict": 12, "json_schema": {"type": "object"}, "stop": ["}"], "n_probs": 2},
    ),
}


def stream(base, path, body):
    """The (event name, data) pairs of a streamed answer."""
    out, name = [], None
    with httpx.stream("POST", base + path, json=dict(body, stream=True), timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[6:])))
    return out


@contextlib.contextmanager
def serving(cmd, log):
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    port = cmd[cmd.index("--port") + 1]
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{cmd[0]} exited with {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"{cmd[0]} did not answer /health")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        proc.wait(20)


def compare(name, a, b):
    same = a == b
    print(f"{name}: {'SAME' if same else 'DIFF'}", flush=True)
    if not same:
        if isinstance(a, list) and isinstance(b, list):
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            a, b = a[at : at + 1], b[at : at + 1]
            print(f"  first difference at event {at}")
        print("  llama-server:", json.dumps(a)[:1500])
        print("  bankml:      ", json.dumps(b)[:1500])
    return same


def main(names):
    with gzip.open(REPO / "tests" / "data" / "chat_templates_oracle.json.gz", "rt", encoding="utf-8") as f:
        source = json.load(f)["templates"][TEMPLATE]["source"]
    work = pathlib.Path(tempfile.mkdtemp(prefix="agent-api-"))
    template = work / TEMPLATE
    template.write_text(source, encoding="utf-8")
    common = ["-t", "2", "-np", "1", "-a", "smol", "--chat-template-file", str(template)]
    llama = [str(build_server()), "-m", str(model_path()), "--jinja", "--no-cache-prompt", "--port", str(_free_port())]
    bankml = [sys.executable, "-m", "bankml", "serve", "--host", "127.0.0.1", "--port", str(_free_port())]
    ok = True
    with open(work / "llama-server.log", "w") as l1, open(work / "bankml.log", "w") as l2:
        with serving(llama + common, l1) as ls, serving(bankml + common, l2) as bm:
            for name, (path, body) in CASES.items():
                if names and not any(n in name for n in names):
                    continue
                body = dict(GREEDY, **body)
                a, b = (httpx.post(base + path, json=body, timeout=300) for base in (ls, bm))
                ok &= compare(name, [a.status_code, normalize(a.json())], [b.status_code, normalize(b.json())])
                if not path.endswith(("tokens", "count_tokens")):
                    ok &= compare(
                        name + " (streamed)", normalize(stream(ls, path, body)), normalize(stream(bm, path, body))
                    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
