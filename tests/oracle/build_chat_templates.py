"""Test support: the pinned llama.cpp's chat layer (``common_chat_templates_init`` / ``_apply`` /
``common_chat_parse``) run over every template of the sdist's ``models/templates/``.

Built like ``build_chat.py`` (same cache, sdist headers and libllama-common of llama-cpp-python 0.3.36). The
program reads one JSON request per line::

    {"template": PATH, "messages": [OpenAI messages], "json_schema": TEXT, "grammar": TEXT,
     "add_generation_prompt": BOOL, "continue_final_message": BOOL | "content" | "reasoning_content",
     "enable_thinking": BOOL, "reasoning_format": NAME, "kwargs": [[KEY, JSON_TEXT], ...],
     "tools": [OpenAI tools], "tool_choice": "auto" | "none" | "required", "parallel_tool_calls": BOOL,
     "parses": [[TEXT, PARTIAL(0/1)], ...], "streams": [TEXT, ...]}

and answers one JSON object per line, every text hex-encoded (prompts are bytes, not always UTF-8): the
prompt, grammar, ``grammar_lazy``, triggers, preserved tokens, additional stops, generation prompt, format,
``supports_thinking``, thinking tags, and for each ``parses`` entry what ``common_chat_parse`` returns, and for
each ``streams`` entry the message at every code point prefix (partial) then the whole (not partial) with the
``common_chat_msg_diff`` list between consecutive parses, as llama-server streams it -- or the exception text.

``strftime_now`` and the ``datetime`` / ``date_string`` variables read the wall clock in llama.cpp: the program
runs with ``TZ=UTC`` and prints the date it started, and ``run`` returns it, so a recording can be replayed.
"""

import json
import os
import pathlib
import subprocess

from .build_chat import _vendor
from .build_converter import OracleUnavailable, cache_dir, compile_program, libllama_dir, sdist_tarball  # noqa: F401

PROGRAM = r"""
// bankml test support: llama.cpp's chat layer over a template file, one JSON request per line.
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
            in.json_schema = str_of(req, "json_schema");
            in.grammar = str_of(req, "grammar");
            in.use_jinja = true;
            in.add_generation_prompt = bool_of(req, "add_generation_prompt", true);
            if (req.contains("continue_final_message")) {
                in.continue_final_message = common_chat_continuation_parse(req.at("continue_final_message"));
            }
            if (req.contains("tools")) {
                in.tools = common_chat_tools_parse_oaicompat(req.at("tools"));
            }
            if (req.contains("tool_choice")) {
                in.tool_choice = common_chat_tool_choice_parse_oaicompat(str_of(req, "tool_choice"));
            }
            in.parallel_tool_calls = bool_of(req, "parallel_tool_calls", false);
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
                                diffs += "[" + q(ds[d].reasoning_content_delta) + "," + q(ds[d].content_delta) + "]";
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


def templates_dir():
    """The sdist's ``models/templates/`` directory (extracted into the cache)."""
    vendor = _vendor(cache_dir())
    tdir = vendor / "models" / "templates"
    if len(list(tdir.glob("*.jinja"))) < 2:
        import tarfile

        root = cache_dir() / "chat-headers"
        with tarfile.open(sdist_tarball(cache_dir())) as tf:
            members = [m for m in tf.getmembers() if "/vendor/llama.cpp/models/templates/" in m.name]
            tf.extractall(root, members=members, filter="data")
    return tdir


def template_names():
    return sorted(p.name for p in templates_dir().glob("*.jinja"))


def build():
    lib = libllama_dir()
    vendor = _vendor(cache_dir())
    return compile_program(
        "chat-templates-oracle",
        PROGRAM,
        lib,
        [vendor / "common", vendor / "include", vendor / "ggml" / "include"],
        ["llama-common", "llama"],
    )


def _dec(h):
    return bytes.fromhex(h).decode("utf-8", "replace")


def _decode(value):
    if isinstance(value, str):
        return _dec(value)
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return {k: (v if k in ("ok", "grammar_lazy", "supports_thinking") else _decode(v)) for k, v in value.items()}
    return value


def run(requests, exe=None, timeout=1800):
    """requests: dicts of the protocol above (``template`` a path). Returns (started, answers): the UTC time
    the program started (``YYYY-MM-DDTHH:MM:SS``) and one decoded dict per request."""
    exe = exe or build()
    lines = [json.dumps(r, ensure_ascii=True) for r in requests]
    env = dict(os.environ, TZ="UTC")
    proc = subprocess.run(
        [str(exe)], input=("\n".join(lines) + "\n").encode(), capture_output=True, env=env, timeout=timeout
    )
    out_lines = proc.stdout.decode().splitlines()
    if not out_lines:
        raise RuntimeError(
            "the chat templates oracle printed nothing:\n%s" % proc.stderr[-2000:].decode("utf-8", "replace")
        )
    started = json.loads(out_lines[0])["started"]
    out = [_decode(json.loads(line)) for line in out_lines[1:]]
    if len(out) != len(requests):
        raise RuntimeError(
            "the chat templates oracle answered %d of %d requests:\n%s"
            % (len(out), len(requests), proc.stderr[-2000:].decode("utf-8", "replace"))
        )
    return started, out


# -- the request matrix -------------------------------------------------------------------------------------
# Every template gets the same requests; each request is named so that a mismatch reads as "template /
# request". Parses and streams hang off the requests whose parser they exercise.

USER = {"role": "user", "content": "Describe a cat as JSON."}
SYSTEM = {"role": "system", "content": "You are a terse assistant."}
HISTORY = [
    SYSTEM,
    {"role": "user", "content": "Hi."},
    {"role": "assistant", "content": "Hello! How can I help?", "reasoning_content": "The user greets me."},
    USER,
]
SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    },
    "array": {"type": "array", "items": {"type": "number"}, "minItems": 1},
    "enum": {"enum": ["cat", "dog", 3]},
    "ref": {
        "$defs": {"pet": {"type": "object", "properties": {"kind": {"type": "string"}}}},
        "type": "object",
        "properties": {"pet": {"$ref": "#/$defs/pet"}},
    },
}
OUTPUTS = [
    "Hello there.",
    "<think>I think.</think>Hello there.",
    "I think.</think>\n\nHello there.",
    '```json\n{"name": "Tom"}\n```',
    ' {"name": "Tom"} ',
    '<think>\nHmm.\n</think>\n{"a": 1}',
]
STREAMS = ["<think>Hmm, a cat.</think>Hi é!", '```json\n{"a": [1, 2]}\n```']


def _req(messages, thinking, **extra):
    req = {
        "messages": messages,
        "enable_thinking": thinking,
        "kwargs": [["enable_thinking", "true" if thinking else "false"]],
    }
    req.update(extra)
    return req


def matrix():
    """[(name, request without its template)] for every template."""
    parses = [[o, 0] for o in OUTPUTS] + [[o, 1] for o in OUTPUTS]
    out = [
        ("plain/think-off", _req([USER], False, parses=parses, streams=STREAMS)),
        ("plain/think-on", _req([USER], True, parses=parses, streams=STREAMS)),
        ("system/think-on", _req([SYSTEM, USER], True)),
        ("history/think-off", _req(HISTORY, False)),
        ("history/think-on", _req(HISTORY, True)),
        (
            "json_object/think-off",
            _req([USER], False, json_schema='{"type": "object"}', parses=parses, streams=STREAMS),
        ),
        ("json_object/think-on", _req([USER], True, json_schema='{"type": "object"}', parses=parses, streams=STREAMS)),
        ("no-generation-prompt", _req(HISTORY[:3], True, add_generation_prompt=False)),
        (
            "continue/content",
            _req(
                [USER, {"role": "assistant", "content": "The cat is"}],
                True,
                add_generation_prompt=False,
                continue_final_message=True,
            ),
        ),
        (
            "continue/reasoning",
            _req(
                [USER, {"role": "assistant", "content": "", "reasoning_content": "Cats are"}],
                True,
                add_generation_prompt=False,
                continue_final_message=True,
            ),
        ),
        (
            "typed-content",
            _req(
                [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "a cat."}],
                    }
                ],
                False,
            ),
        ),
        ("reasoning-format-none", _req([USER], True, reasoning_format="none", parses=parses)),
    ]
    for name, schema in SCHEMAS.items():
        out.append(("schema-%s/think-off" % name, _req([USER], False, json_schema=json.dumps(schema))))
    out.append(("schema-object/think-on", _req([USER], True, json_schema=json.dumps(SCHEMAS["object"]), parses=parses)))
    return out


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
# one tool call in the syntax of each hand-written handler (and the Hermes one), given to every template
TOOL_OUTPUTS = [
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
    '<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{"city": "Paris"}',
    '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>',
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
    '<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="0"<|sep|>'
    '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>'
    "<|close|>tools<|sep|><|close|>message<|sep|>",
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
    'string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
    '</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="days" '
    'string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
    '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
    '<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", '
    '"parameters": {"city": "Paris"}}]<|END_ACTION|>',
    '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
    ']<]minimax[>[<tool_call>]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>'
    "]<]minimax[>[<days>3]<]minimax[>[</days>]<]minimax[>[</invoke>]<]minimax[>[</tool_call>",
    "</think><tool_call>get_weather<arg_key>city</arg_key>\n<arg_value>Paris</arg_value></tool_call>",
    'get_weather\n{"city": "Paris"}',
    ' to=get_weather<|message|><atem:function_calls><atem:invoke name="get_weather"><atem:parameter '
    'name="city">Paris</atem:parameter></atem:invoke></atem:function_calls>',
    '<function name="get_weather"><param name="city">Paris</param></function>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
]


def tool_matrix():
    """[(name, request)] with tools, for every template: llama.cpp's tool-call prompt, grammar, triggers and
    parser (bankml compares the prompt on every template and the rest on the hand-written handlers)."""
    parses = [[o, 0] for o in TOOL_OUTPUTS] + [[o, 1] for o in TOOL_OUTPUTS]
    return [
        ("tools/auto", _req([USER], True, tools=TOOLS, tool_choice="auto", parses=parses)),
        ("tools/required", _req([USER], False, tools=TOOLS, tool_choice="required")),
        (
            "tools/parallel",
            _req([USER], True, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True, parses=parses),
        ),
    ]


def record(path):
    """Run the matrix over every template and write the answers (and the template texts) to ``path``
    (gzip-compressed JSON)."""
    import gzip

    tdir = templates_dir()
    names = template_names()
    requests, keys = [], []
    for name in names:
        for kind, reqs in (("answers", matrix()), ("tool_answers", tool_matrix())):
            for rname, req in reqs:
                requests.append(dict(req, template=str(tdir / name)))
                keys.append((name, kind, rname))
    started, answers = run(requests)
    data = {"started": started, "version": "llama-cpp-python 0.3.36", "templates": {}}
    for name in names:
        data["templates"][name] = {
            "source": (tdir / name).read_text(encoding="utf-8"),
            "answers": {},
            "tool_answers": {},
        }
    for (name, kind, rname), ans in zip(keys, answers):
        data["templates"][name][kind][rname] = ans
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(data, f, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return data


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--record"]:
        out = pathlib.Path(__file__).parent.parent / "data" / "chat_templates_oracle.json.gz"
        print("recorded", len(record(out)["templates"]), "templates into", out)
    else:
        print(build())
        print(len(template_names()), "templates")
