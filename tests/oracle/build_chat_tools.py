"""Test support: the pinned llama.cpp's chat layer with tools (issue 13): ``common_chat_templates_apply`` with
``tools`` / ``tool_choice`` / ``parallel_tool_calls`` and ``common_chat_parse`` of tool-call outputs, over every
template of the sdist's ``models/templates/``.

Built like ``build_chat_templates.py`` (same cache, sdist headers and libllama-common of llama-cpp-python 0.3.36),
as a program of its own so that the no-tools oracle and its recording stay as they are. Its protocol is that
program's, plus three request fields::

    {"tools": [OpenAI tools], "tool_choice": "auto" | "none" | "required", "parallel_tool_calls": BOOL}

(read with ``common_chat_tools_parse_oaicompat`` / ``common_chat_tool_choice_parse_oaicompat``, as llama-server
reads them), and each parsed message carries its ``tool_calls`` as ``[name, arguments, id]`` and each
``common_chat_msg_diff`` of a stream is ``[reasoning_delta, content_delta, tool_call_index (-1: none),
name_delta, arguments_delta, id_delta]``. ``common_chat_parser_params`` keep their default
``parse_tool_calls = true`` (llama-server's, which it also sets when there are tools and a tool choice other than
``none``).

The tool-call outputs parsed are each template's own syntax, derived from the template itself: the oracle first
renders, per template, the user turn with the generation prompt, and the same conversation with an assistant
message holding tool calls (one call; two calls; content then a call; reasoning then a call) and with a plain
text assistant message; the assistant part of each rendering (what follows the generation prompt), with the
template's end-of-turn text cut off (what follows the plain text in its own rendering), is the output
(``derive_outputs``). Then the tool matrix runs with those outputs as parses (whole and partial) and streams
(cut at every code point, with the msg diffs).

Recording (a few minutes on 2 cores; builds the program first if needed)::

    python -m tests.oracle.build_chat_tools --record     # writes tests/data/chat_tools_oracle.json.gz

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors (tests/data/LICENSE-llama.cpp.txt);
the recorded answers are its output.
"""

import json
import os
import pathlib
import subprocess

from .build_chat import _vendor
from .build_chat_templates import _decode, template_names, templates_dir
from .build_converter import OracleUnavailable, cache_dir, compile_program, libllama_dir  # noqa: F401

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "chat_tools_oracle.json.gz"

PROGRAM = r"""
// bankml test support: llama.cpp's chat layer with tools over a template file, one JSON request per line.
#include "chat.h"
#include "json.h"
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static std::string hex(const std::string & s) {
    static const char * d = "0123456789abcdef";
    std::string o;
    for (unsigned char c : s) { o += d[c >> 4]; o += d[c & 15]; }
    return o;
}
static std::string q(const std::string & s) { return "\"" + hex(s) + "\""; }
static std::string qs(const std::vector<std::string> & v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); i++) { if (i) o += ","; o += q(v[i]); }
    return o + "]";
}
static std::string msg_json(const common_chat_msg & m) {
    std::string o = "{\"content\":" + q(m.content) + ",\"reasoning\":" + q(m.reasoning_content) + ",\"tool_calls\":[";
    for (size_t i = 0; i < m.tool_calls.size(); i++) {
        if (i) o += ",";
        o += "[" + q(m.tool_calls[i].name) + "," + q(m.tool_calls[i].arguments) + "," + q(m.tool_calls[i].id) + "]";
    }
    return o + "]}";
}
static std::string str_of(const common_json & j, const char * key) {
    return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : std::string();
}
static bool bool_of(const common_json & j, const char * key, bool def) {
    return j.contains(key) && j.at(key).is_boolean() ? j.at(key).get<bool>() : def;
}
// code point boundaries of s (lead bytes), then s.size()
static std::vector<size_t> cuts(const std::string & s) {
    std::vector<size_t> out;
    for (size_t i = 1; i < s.size(); i++) if ((((unsigned char) s[i]) & 0xC0) != 0x80) out.push_back(i);
    out.push_back(s.size());
    return out;
}

int main() {
    char date[64];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", std::localtime(&now));
    std::cout << "{\"started\":\"" << date << "\"}" << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::string out;
        try {
            auto req = common_json::parse(line);
            std::ifstream tf(str_of(req, "template")); std::stringstream ss; ss << tf.rdbuf();
            auto tmpls = common_chat_templates_init(nullptr, ss.str(), str_of(req, "bos"), str_of(req, "eos"));
            common_chat_templates_inputs in;
            in.messages = common_chat_msgs_parse_oaicompat(req.at("messages"));
            if (req.contains("tools")) in.tools = common_chat_tools_parse_oaicompat(req.at("tools"));
            if (req.contains("tool_choice")) in.tool_choice = common_chat_tool_choice_parse_oaicompat(str_of(req, "tool_choice"));
            in.parallel_tool_calls = bool_of(req, "parallel_tool_calls", false);
            in.json_schema = str_of(req, "json_schema");
            in.grammar = str_of(req, "grammar");
            in.use_jinja = true;
            in.add_generation_prompt = bool_of(req, "add_generation_prompt", true);
            if (req.contains("continue_final_message")) {
                in.continue_final_message = common_chat_continuation_parse(req.at("continue_final_message"));
            }
            in.reasoning_format = common_reasoning_format_from_name(
                req.contains("reasoning_format") ? str_of(req, "reasoning_format") : std::string("deepseek"));
            in.enable_thinking = bool_of(req, "enable_thinking", true);
            if (req.contains("kwargs")) {
                const auto & kw = req.at("kwargs");
                for (size_t i = 0; i < kw.size(); i++) {
                    in.chat_template_kwargs[kw.at(i).at(0).get<std::string>()] = kw.at(i).at(1).get<std::string>();
                }
            }
            auto p = common_chat_templates_apply(tmpls.get(), in);
            out = "{\"ok\":true,\"prompt\":" + q(p.prompt) + ",\"grammar\":" + q(p.grammar)
                + ",\"grammar_lazy\":" + (p.grammar_lazy ? "true" : "false")
                + ",\"generation_prompt\":" + q(p.generation_prompt)
                + ",\"format\":" + q(common_chat_format_name(p.format))
                + ",\"supports_thinking\":" + (p.supports_thinking ? "true" : "false")
                + ",\"thinking_start_tag\":" + q(p.thinking_start_tag)
                + ",\"thinking_end_tags\":" + qs(p.thinking_end_tags)
                + ",\"preserved_tokens\":" + qs(p.preserved_tokens)
                + ",\"additional_stops\":" + qs(p.additional_stops)
                + ",\"triggers\":[";
            for (size_t i = 0; i < p.grammar_triggers.size(); i++) {
                if (i) out += ",";
                out += "[" + std::to_string((int) p.grammar_triggers[i].type) + "," + q(p.grammar_triggers[i].value) + "]";
            }
            out += "],\"delimiters\":[";
            for (size_t i = 0; i < p.message_delimiters.delimiters.size(); i++) {
                if (i) out += ",";
                out += "[" + q(common_chat_role_to_string(p.message_delimiters.delimiters[i].role)) + ","
                    + q(p.message_delimiters.delimiters[i].delimiter) + "]";
            }
            out += "],\"parses\":[";
            common_chat_parser_params pp(p);
            pp.reasoning_format = in.reasoning_format;
            if (!p.parser.empty()) pp.parser.load(p.parser);
            const common_json none = common_json::array();
            const auto & parses = req.contains("parses") ? req.at("parses") : none;
            for (size_t i = 0; i < parses.size(); i++) {
                if (i) out += ",";
                try {
                    auto msg = common_chat_parse(parses.at(i).at(0).get<std::string>(), parses.at(i).at(1).get<int>() != 0, pp);
                    out += "{\"ok\":true,\"msg\":" + msg_json(msg) + "}";
                } catch (const std::exception & e) {
                    out += "{\"ok\":false,\"error\":" + q(e.what()) + "}";
                }
            }
            out += "],\"streams\":[";
            const auto & streams = req.contains("streams") ? req.at("streams") : none;
            for (size_t i = 0; i < streams.size(); i++) {
                if (i) out += ",";
                std::string text = streams.at(i).get<std::string>();
                auto ends = cuts(text);
                common_chat_msg prev;
                out += "[";
                for (size_t k = 0; k < ends.size(); k++) {
                    if (k) out += ",";
                    bool partial = k + 1 < ends.size();
                    try {
                        auto msg = common_chat_parse(text.substr(0, ends[k]), partial, pp);
                        std::string diffs = "[";
                        try {
                            auto ds = common_chat_msg_diff::compute_diffs(prev, msg);
                            for (size_t d = 0; d < ds.size(); d++) {
                                if (d) diffs += ",";
                                diffs += "[" + q(ds[d].reasoning_content_delta) + "," + q(ds[d].content_delta) + ","
                                    + (ds[d].tool_call_index == std::string::npos ? std::string("-1") : std::to_string(ds[d].tool_call_index))
                                    + "," + q(ds[d].tool_call_delta.name) + "," + q(ds[d].tool_call_delta.arguments)
                                    + "," + q(ds[d].tool_call_delta.id) + "]";
                            }
                            diffs += "]";
                        } catch (const std::exception & e) {
                            diffs = "{\"error\":" + q(e.what()) + "}";
                        }
                        prev = msg;
                        out += "{\"ok\":true,\"msg\":" + msg_json(msg) + ",\"diffs\":" + diffs + "}";
                    } catch (const std::exception & e) {
                        out += "{\"ok\":false,\"error\":" + q(e.what()) + "}";
                    }
                }
                out += "]";
            }
            out += "]}";
        } catch (const std::exception & e) {
            out = "{\"ok\":false,\"error\":" + q(e.what()) + "}";
        }
        std::cout << out << std::endl;
    }
}
"""


def build():
    lib = libllama_dir()
    vendor = _vendor(cache_dir())
    return compile_program(
        "chat-tools-oracle",
        PROGRAM,
        lib,
        [vendor / "common", vendor / "include", vendor / "ggml" / "include"],
        ["llama-common", "llama"],
    )


def run(requests, exe=None, timeout=3600):
    """requests: dicts of the protocol above (``template`` a path). Returns (started, answers)."""
    exe = exe or build()
    lines = [json.dumps(r, ensure_ascii=True) for r in requests]
    env = dict(os.environ, TZ="UTC")
    proc = subprocess.run(
        [str(exe)], input=("\n".join(lines) + "\n").encode(), capture_output=True, env=env, timeout=timeout
    )
    out_lines = proc.stdout.decode().splitlines()
    if not out_lines:
        raise RuntimeError(
            "the chat tools oracle printed nothing:\n%s" % proc.stderr[-2000:].decode("utf-8", "replace")
        )
    started = json.loads(out_lines[0])["started"]
    out = [_decode(json.loads(line)) for line in out_lines[1:]]
    if len(out) != len(requests):
        raise RuntimeError(
            "the chat tools oracle answered %d of %d requests:\n%s"
            % (len(out), len(requests), proc.stderr[-2000:].decode("utf-8", "replace"))
        )
    return started, out


# -- the request matrix -------------------------------------------------------------------------------------


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
FLIGHTS = _tool(
    "search_flights",
    "Search flights between two airports.",
    {
        "type": "object",
        "properties": {
            "route": {
                "type": "object",
                "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                "required": ["from", "to"],
            },
            "dates": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
            "cabin": {"type": "string", "enum": ["economy", "business"]},
            "passengers": {"type": "integer", "minimum": 1},
        },
        "required": ["route", "dates"],
    },
)
UNTYPED = _tool("set_mode", "Set the mode.", {"type": "object", "properties": {"mode": {"enum": ["eco", 2, None]}}})
CLOCK = _tool("get_time", "The current time.", {"type": "object", "properties": {}})
ONE = [WEATHER]
MANY = [WEATHER, FLIGHTS, CLOCK]

SYSTEM = {"role": "system", "content": "You are a helpful assistant with tools."}
USER = {"role": "user", "content": "What is the weather in Paris?"}
# ids of nine letters and digits: Mistral's templates refuse others
ID1, ID2 = "Ab3dE6gH9", "Zy8xW7vU6"
ARGS1 = '{"location": "Paris", "unit": "celsius"}'
ARGS2 = '{"route": {"from": "CDG", "to": "FCO"}, "dates": ["2026-12-24"]}'


def _call(cid, name, arguments):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


CALL1 = [_call(ID1, "get_weather", ARGS1)]
CALL2 = [_call(ID1, "get_weather", ARGS1), _call(ID2, "search_flights", ARGS2)]
TEXT = "It is sunny."
# the assistant messages rendered to derive each template's tool-call outputs: name -> (message, thinking)
ASSISTANT = {
    "text": ({"role": "assistant", "content": TEXT}, False),
    "call": ({"role": "assistant", "content": None, "tool_calls": CALL1}, False),
    "two-calls": ({"role": "assistant", "content": None, "tool_calls": CALL2}, False),
    "content-then-call": ({"role": "assistant", "content": "Let me check.", "tool_calls": CALL1}, False),
    "text/think-on": ({"role": "assistant", "content": TEXT}, True),
    "reasoning-then-call": (
        {"role": "assistant", "content": None, "reasoning_content": "The user wants the weather.", "tool_calls": CALL1},
        True,
    ),
}
HISTORY = [
    USER,
    {"role": "assistant", "content": None, "tool_calls": CALL1},
    {"role": "tool", "tool_call_id": ID1, "content": '{"temperature": 21, "sky": "sunny"}'},
]
HISTORY2 = [
    USER,
    {"role": "assistant", "content": None, "tool_calls": CALL2},
    {"role": "tool", "tool_call_id": ID1, "content": '{"temperature": 21, "sky": "sunny"}'},
    {"role": "tool", "tool_call_id": ID2, "content": '{"flights": ["AF1404"]}'},
    {"role": "user", "content": "Book the first one."},
]


def _req(messages, thinking, tools=None, tool_choice=None, parallel=None, **extra):
    req = {
        "messages": messages,
        "enable_thinking": thinking,
        "kwargs": [["enable_thinking", "true" if thinking else "false"]],
    }
    if tools is not None:
        req["tools"] = tools
    if tool_choice is not None:
        req["tool_choice"] = tool_choice
    if parallel is not None:
        req["parallel_tool_calls"] = parallel
    req.update(extra)
    return req


def render_requests():
    """[(name, request)]: the renders ``derive_outputs`` reads (they are in the recorded matrix too)."""
    out = [("render/user/think-off", _req([USER], False, MANY)), ("render/user/think-on", _req([USER], True, MANY))]
    for name, (msg, thinking) in ASSISTANT.items():
        out.append(("render/" + name, _req([USER, msg], thinking, MANY, add_generation_prompt=False)))
    return out


def _common_prefix(a, b):
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


# the calls each output holds, and the request whose parser picks the output
EXPECTED = {
    "call": ["get_weather"],
    "two-calls": ["get_weather", "search_flights"],
    "content-then-call": ["get_weather"],
    "reasoning-then-call": ["get_weather"],
}
PICKER = {False: "many/auto/parallel/think-off", True: "many/auto/parallel/think-on"}


def candidate_outputs(renders):
    """{render name: answer} of one template -> {output name: [candidate texts]}: each assistant message's part
    of its rendering (after the user turn and the generation prompt), without the end-of-turn text (what
    follows the plain text in its own rendering); where the rendering does not start with the generation
    prompt, from the common prefix, and also from the first grammar trigger word in it. ``pick_outputs``
    keeps the candidate (cut short at its end if needed) that llama.cpp parses into the expected calls."""
    out = {}
    tails = {}
    for thinking, suffix in ((False, ""), (True, "/think-on")):
        base, text = (
            renders["render/user" + ("/think-on" if thinking else "/think-off")],
            renders["render/text" + suffix],
        )
        if base["ok"] and text["ok"]:
            end = text["prompt"].rfind(TEXT)
            tails[thinking] = text["prompt"][end + len(TEXT) :] if end >= 0 else ""
    for name, (msg, thinking) in ASSISTANT.items():
        base = renders["render/user" + ("/think-on" if thinking else "/think-off")]
        ans = renders["render/" + name]
        if name.startswith("text") or not base["ok"] or not ans["ok"] or thinking not in tails:
            continue
        prompt = ans["prompt"]
        start = len(base["prompt"]) if prompt.startswith(base["prompt"]) else _common_prefix(prompt, base["prompt"])
        text = prompt[start:]
        tail = tails[thinking]
        if tail and text.endswith(tail):
            text = text[: -len(tail)]
        elif tail.strip() and text.endswith(tail.rstrip()):
            text = text[: -len(tail.rstrip())]
        cands = [text] if text.strip() else []
        for kind, word in base.get("triggers", []):
            pos = text.find(word)
            if kind == 1 and word and pos > 0 and name != "content-then-call":
                cands.append(text[pos:])
        if cands:
            out[name] = cands
    return out


def _cuts(text):
    """Code point prefixes of text, longest first (the whole text included)."""
    return [text[:i] for i in range(len(text), 0, -1)]


def pick_requests(cands):
    """[(output name, thinking, [texts])] whose whole parses ``pick_outputs`` reads."""
    out = []
    for name, texts in cands.items():
        thinking = ASSISTANT[name][1]
        out.append((name, thinking, [c for t in texts for c in _cuts(t)]))
    return out


def pick_outputs(cands, parsed):
    """cands: ``candidate_outputs``; parsed: for each ``pick_requests`` entry, the parse answers of its texts.
    -> {output name: text}: the first candidate, cut at its longest prefix, that llama.cpp parses (whole) into
    the expected calls; else the first candidate as rendered (its parse error is then part of the record)."""
    outputs = {"text": TEXT}
    for (name, _, texts), answers in zip(pick_requests(cands), parsed):
        chosen = None
        for text, ans in zip(texts, answers):
            if ans["ok"] and [c[0] for c in ans["msg"]["tool_calls"]] == EXPECTED[name]:
                chosen = text
                break
        outputs[name] = chosen if chosen is not None else cands[name][0]
    return outputs


def derive_outputs(renders, exe=None, template=None):
    """One template's outputs, derived from its renders and checked by llama.cpp's parse (``template``: path)."""
    cands = candidate_outputs(renders)
    picks = pick_requests(cands)
    if not picks:
        return {"text": TEXT}
    reqs = dict(matrix())
    _, answers = run(
        [
            dict(reqs[PICKER[thinking]], template=template, parses=[[t, 0] for t in texts])
            for _, thinking, texts in picks
        ],
        exe,
    )
    return pick_outputs(
        cands, [a["parses"] if a["ok"] else [{"ok": False}] * len(t) for a, (_, _, t) in zip(answers, picks)]
    )


PARSED = ("text", "call", "two-calls", "content-then-call", "reasoning-then-call")
STREAMED = {
    "many/auto/parallel/think-off": ("call", "content-then-call"),
    "many/auto/parallel/think-on": ("reasoning-then-call",),
    "many/required/parallel/think-off": ("two-calls",),
}


def matrix(outputs=None):
    """[(name, request without its template)]; ``outputs`` (``derive_outputs`` of the template) adds the
    parses and streams."""
    out = list(render_requests())
    out += [
        ("one/auto/think-off", _req([USER], False, ONE)),
        ("one/auto/think-on", _req([USER], True, ONE)),
        ("one/system/auto/think-off", _req([SYSTEM, USER], False, ONE, "auto")),
        ("one/required/think-off", _req([USER], False, ONE, "required")),
        ("one/auto/json_object/think-off", _req([USER], False, ONE, json_schema='{"type": "object"}')),
        ("many/auto/think-off", _req([USER], False, MANY, "auto", False)),
        ("many/auto/parallel/think-off", _req([USER], False, MANY, "auto", True)),
        ("many/auto/parallel/think-on", _req([USER], True, MANY, "auto", True)),
        ("many/required/think-off", _req([USER], False, MANY, "required", False)),
        ("many/required/think-on", _req([USER], True, MANY, "required", False)),
        ("many/required/parallel/think-off", _req([USER], False, MANY, "required", True)),
        ("many/none/think-off", _req([USER], False, MANY, "none")),
        ("history/one/think-off", _req(HISTORY, False, ONE)),
        ("history/one/think-on", _req(HISTORY, True, ONE)),
        ("history/two-calls/parallel/think-off", _req(HISTORY2, False, MANY, "auto", True)),
        ("history/no-tools/think-off", _req(HISTORY, False)),
        # an enum without a type, of mixed values (some templates read every parameter's type)
        ("untyped-enum/auto/think-off", _req([USER], False, [WEATHER, UNTYPED])),
    ]
    if outputs is None:
        return out
    parsed = [o for o in PARSED if o in outputs]
    parses = [[outputs[o], 0] for o in parsed] + [[outputs[o], 1] for o in parsed]
    with_parses = {
        "many/auto/parallel/think-off",
        "many/auto/parallel/think-on",
        "many/auto/think-off",
        "many/required/think-off",
        "many/none/think-off",
        "one/auto/think-off",
    }
    for i, (name, req) in enumerate(out):
        if name in with_parses:
            req = dict(req, parses=parses)
        if name in STREAMED:
            req = dict(req, streams=[outputs[o] for o in STREAMED[name] if o in outputs])
        out[i] = (name, req)
    return out


def parse_names(outputs):
    """The (output name, partial) of each entry of ``parses``, in order."""
    parsed = [o for o in PARSED if o in outputs]
    return [(o, 0) for o in parsed] + [(o, 1) for o in parsed]


def record(path=DATA, exe=None):
    """Derive every template's outputs, run the matrix over every template and write the answers (with the
    template texts and the derived outputs) to ``path`` (gzip-compressed JSON)."""
    import gzip

    exe = exe or build()
    tdir = templates_dir()
    names = template_names()
    first = [dict(req, template=str(tdir / name)) for name in names for _, req in render_requests()]
    _, renders = run(first, exe)
    k = len(render_requests())
    outputs = {
        name: derive_outputs(
            {r: a for (r, _), a in zip(render_requests(), renders[i * k : (i + 1) * k])}, exe, str(tdir / name)
        )
        for i, name in enumerate(names)
    }
    requests, keys = [], []
    for name in names:
        for rname, req in matrix(outputs[name]):
            requests.append(dict(req, template=str(tdir / name)))
            keys.append((name, rname))
    started, answers = run(requests, exe)
    data = {"started": started, "version": "llama-cpp-python 0.3.36", "templates": {}}
    for name in names:
        data["templates"][name] = {
            "source": (tdir / name).read_text(encoding="utf-8"),
            "outputs": outputs[name],
            "answers": {},
        }
    for (name, rname), ans in zip(keys, answers):
        data["templates"][name]["answers"][rname] = ans
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(data, f, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return data


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--record"]:
        rec = record()
        print("recorded", len(rec["templates"]), "templates into", DATA)
    else:
        print(build())
        print(len(template_names()), "templates")
