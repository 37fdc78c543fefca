"""Serve SmolLM2-135M-Instruct with vLLM's OpenAI server (CPU), bankml as its structured-output backend, and send
strict tool calls; write the requests and answers as JSON.

    VLLM_CPU_KVCACHE_SPACE=1 python tests/engines_vllm_tools_run.py answers.json [server.log]

The server is ``python -m vllm.entrypoints.openai.api_server`` with ``--enable-auto-tool-choice
--tool-call-parser hermes`` (vLLM builds the hermes structural tag for ``tool_choice`` required or named, and
for ``strict`` functions) and ``BANKML_VLLM_STRUCTURED_OUTPUTS=1`` (bankml's ``vllm.general_plugins`` entry
point puts bankml's backend in the engine and its check in the frontend). Each answer keeps the output token
ids (``return_token_ids``) so that a test can replay them through bankml's grammar for the same tag. Used by
tests/integrations/test_engine_vllm_tools.py (in a child process: vLLM starts its own engine processes)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import engines_support  # noqa: E402

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
    "required": ["timezone"],
    "additionalProperties": False,
}


def tools(strict=True):
    return [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather forecast for a city",
                "parameters": WEATHER,
                "strict": strict,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "description": "Current time in a timezone",
                "parameters": TIME,
                "strict": strict,
            },
        },
    ]


USER = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]
NAMED = {"type": "function", "function": {"name": "get_time"}}
# a structural tag bankml refuses (an XML style it does not write, which XGrammar compiles): the frontend's 400
# names the field
REFUSED = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": WEATHER, "style": "kimi_k3_xml"}}

# (name, body fields beyond model/messages)
REQUESTS = [
    ("required", {"tools": tools(), "tool_choice": "required", "temperature": 0}),
    ("named", {"tools": tools(), "tool_choice": NAMED, "temperature": 0}),
    ("required_sampled_1", {"tools": tools(), "tool_choice": "required", "temperature": 1.0, "seed": 1}),
    ("required_sampled_2", {"tools": tools(), "tool_choice": "required", "temperature": 1.0, "seed": 2}),
    ("required_sampled_3", {"tools": tools(), "tool_choice": "required", "temperature": 1.0, "seed": 3}),
    ("named_sampled", {"tools": tools(), "tool_choice": NAMED, "temperature": 1.0, "seed": 4}),
    ("required_single", {"tools": tools(), "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0}),
    ("required_not_strict", {"tools": tools(strict=False), "tool_choice": "required", "temperature": 0}),
    ("auto_strict", {"tools": tools(), "tool_choice": "auto", "temperature": 0}),
    ("refused", {"response_format": REFUSED}),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def main(out_path, log_path=None):
    gguf = engines_support.smollm2_gguf()
    port = free_port()
    env = dict(os.environ, BANKML_VLLM_STRUCTURED_OUTPUTS="1", BANKML_VOCAB_GGUF=gguf)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        engines_support.smollm2_hf_dir(),
        "--served-model-name",
        "smollm2",
        "--enforce-eager",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "4",
        "--port",
        str(port),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    log_path = log_path or out_path + ".server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 900
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server exited ({server.returncode}); see {log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit(f"the server did not start in 900 s; see {log_path}") from None
                time.sleep(2)
        answers = []
        for name, fields in REQUESTS:
            body = dict(model="smollm2", messages=USER, max_tokens=200, return_token_ids=True, **fields)
            status, answer = post(f"http://127.0.0.1:{port}/v1/chat/completions", body)
            answers.append({"name": name, "request": body, "status": status, "answer": answer})
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's own session: it and the engine processes it started
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
