"""Strict tool-call mode end to end: bankml serve (``--tool-call-mode strict``, the app over a Model) answering
tool requests with SmolLM2-135M-Instruct, a small and weak tool caller, on a template of each tool-call format
(``record_tools.FORMATS``' twelve and Qwen3.5's).

Seeded and greedy ``tool_choice: "required"`` and named-function requests must answer with calls only
(``finish_reason: "tool_calls"``, no content) whose arguments validate against the tool's schema (jsonschema with
its FormatChecker); streamed, the deltas assemble into valid calls too. llama.cpp mode, the default, answers the
same "required" request in prose on Qwen3.5's template (the issue's case). The official openai client drives
one server process started with the flag.
"""

import json
import pathlib

import jsonschema
import pytest

from ..oracle.record_tools import CLOCK_TIME, FORMATS
from ..oracle_support import ORACLE_STATS, fix_clock, recorded_template_file

DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "a city name, capitalised", "pattern": "^[A-Z][a-z]+$"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
}
FLIGHT = {
    "type": "object",
    "properties": {
        "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "date": {"type": "string", "format": "date"},
        "passengers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0}},
                "required": ["name"],
            },
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["origin", "destination", "date"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "book_flight", "description": "Book a flight", "parameters": FLIGHT}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]
TEMPLATES = sorted(FORMATS) + ["Qwen3.5-4B.jinja"]


class _Clients(dict):
    """bankml serve in strict tool-call mode (the app over a Model, ``--reasoning off``), one per template, made
    when first asked for."""

    def __init__(self, tmp, mode):
        super().__init__()
        self.tmp, self.mode, self.open = tmp, mode, []

    def __missing__(self, template):
        from starlette.testclient import TestClient

        from bankml.serve.app import create_app
        from bankml.serve.runtime import Model, default_model_path

        path = recorded_template_file(self.tmp, template)
        m = Model(
            default_model_path(),
            n_ctx=4096,
            n_threads=1,  # a validity test: one ggml thread, none spinning against the other pytest worker
            n_parallel=1,
            cache_prompt=True,  # llama-server's default: a template's requests share their prompt's evaluation
            reasoning="off",
            chat_template_file=str(path),
            chat_template_kwargs={"date_string": "01 Dec 2026"},
            tool_call_mode=self.mode,
        )
        fix_clock(m, CLOCK_TIME)  # gpt-oss's template writes the date
        c = TestClient(create_app(m, "SmolLM2-135M-Instruct"))
        self.open.append((c, m))
        self[template] = c.__enter__()
        return self[template]

    def close(self):
        for c, m in self.open:
            c.__exit__(None, None, None)
            m.close()


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    out = _Clients(tmp_path_factory.mktemp("strict"), "strict")
    yield out
    out.close()


def valid_calls(calls, only=None):
    """The calls are of known functions (``only``: that one) with arguments valid for its schema."""
    assert calls, "no call"
    for call in calls:
        fn = call["function"]
        assert fn["name"] in PARAMS and (only is None or fn["name"] == only), fn["name"]
        args = json.loads(fn["arguments"])
        jsonschema.Draft202012Validator(PARAMS[fn["name"]], format_checker=FORMAT_CHECKER).validate(args)


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_forced_answers_are_valid_calls(strict, template, choice):
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "book_flight"}}
    body = {
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "parallel_tool_calls": False,
        "max_tokens": 256,
        "temperature": 0 if choice == "required" else 0.8,
        "seed": 3,
    }
    r = strict[template].post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]
    message = answer["message"]
    assert answer["finish_reason"] == "tool_calls", (template, message)
    assert not (message.get("content") or "").strip(), message
    assert len(message["tool_calls"]) == 1
    valid_calls(message["tool_calls"], None if choice == "required" else "book_flight")
    ORACLE_STATS["strict tool calls: SmolLM2 answers that are valid calls"] += 1


def test_streamed_forced_answer_is_valid_calls(strict):
    body = {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 256, "seed": 5, "stream": True}
    body["parallel_tool_calls"] = False
    r = strict["Qwen3.5-4B.jinja"].post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    calls, finish, content = {}, None, ""
    for line in r.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        choice = (json.loads(line[6:]).get("choices") or [None])[0]
        if choice is None:
            continue
        finish = choice.get("finish_reason") or finish
        delta = choice.get("delta") or {}
        content += delta.get("content") or ""
        for d in delta.get("tool_calls") or ():
            call = calls.setdefault(d["index"], {"function": {"name": "", "arguments": ""}})
            call["function"]["name"] += (d.get("function") or {}).get("name") or ""
            call["function"]["arguments"] += (d.get("function") or {}).get("arguments") or ""
    assert finish == "tool_calls" and not content.strip()
    valid_calls(list(calls.values()))


def test_llama_cpp_mode_answers_required_in_prose(tmp_path):
    """The issue's case, in the default mode: llama-server's "required" grammar lets SmolLM2 talk."""
    clients = _Clients(tmp_path, "llama.cpp")
    try:
        body = {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 48, "temperature": 0}
        r = clients["Qwen3.5-4B.jinja"].post("/v1/chat/completions", json=body)
        message = r.json()["choices"][0]["message"]
        assert r.status_code == 200 and not message.get("tool_calls") and message["content"].strip()
        named = dict(body, tool_choice={"type": "function", "function": {"name": "get_weather"}})
        r = clients["Qwen3.5-4B.jinja"].post("/v1/chat/completions", json=named)
        assert r.status_code == 400 and "strict tool-call mode" in r.json()["error"]["message"]
    finally:
        clients.close()


def test_a_schema_strict_mode_cannot_write_is_a_400(strict):
    tools = [{"type": "function", "function": {"name": "odd", "parameters": {"type": "object", "minProperties": 1}}}]
    body = {"messages": ASK, "tools": tools, "tool_choice": "required", "max_tokens": 8}
    r = strict["Qwen3.5-4B.jinja"].post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert 'tool "odd"' in message and "minProperties" in message, message


def test_openai_client_against_bankml_serve_strict(tmp_path):
    """The official client against a ``bankml serve --tool-call-mode strict`` process: a named function."""
    from openai import OpenAI

    from .test_server import _serve

    path = recorded_template_file(tmp_path, "Qwen3.5-4B.jinja")
    with _serve("--chat-template-file", str(path), "--tool-call-mode", "strict", "--reasoning", "off") as base:
        client = OpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=600)
        answer = client.chat.completions.create(
            model="m",
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            max_tokens=128,
            temperature=0,
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        valid_calls([c.model_dump() for c in choice.message.tool_calls], "get_weather")
