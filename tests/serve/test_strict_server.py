"""``bankml serve --json-schema-mode strict`` (``Model(json_schema_mode="strict")``): every request schema becomes
a strict grammar (OpenAI ``response_format``, the top-level ``json_schema``, ``/v1/completions``' ``json_schema``,
Ollama's ``format``, tools' parameters), a schema strict mode refuses is a 400 naming keyword and pointer, and
the default mode's grammars are llama.cpp's as before. The app runs in process over the real SmolLM2 model."""

import json
import pathlib

import jsonschema
import pytest

from bankml import Grammar, GrammarError
from bankml.chat.constraint import Constraint, from_openai
from bankml.chat.inputs import ChatInputs
from bankml.cli import build_parser
from bankml.schema import json_schema_to_grammar
from bankml.serve.flags import chat_model_options
from bankml.serve.request import Request

from ..oracle_support import recorded_template_file, smollm2_path

DATA = pathlib.Path(__file__).parent.parent / "data"

# schemas where llama.cpp's converter lets invalid output through (it ignores `minLength` beside a
# `pattern`, and `minimum`, `maximum`, `multipleOf` on a number): strict mode's answers must validate.
# `multipleOf: 1` keeps strict numbers finite: a bounded number alone may take a fraction of any length
# before an exponent (1.123...e+1), which a small model can spin forever
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 3, "maxLength": 10},
        "score": {"type": "number", "minimum": 10, "maximum": 99, "multipleOf": 1},
    },
    "required": ["name", "score"],
    "additionalProperties": False,
}
SCORES = {
    "type": "array",
    "items": {"type": "number", "minimum": 5, "maximum": 50, "multipleOf": 1},
    "minItems": 2,
    "maxItems": 3,
}
INVALID = {"PERSON": '{"name": "ab", "score": 1.5}', "SCORES": "[1, 2]"}
SCHEMAS = {"PERSON": PERSON, "SCORES": SCORES}
# a schema strict mode refuses (uniqueItems over strings), where it is refused and why
REFUSED = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
}
REFUSED_AT = "keyword uniqueItems at #/properties/tags/uniqueItems"
ASK = [{"role": "user", "content": "Give a person's name and score as JSON."}]
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def valid(text, schema):
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS).is_valid(json.loads(text))


@pytest.fixture(scope="module")
def models():
    from bankml.serve.runtime import Model

    strict = Model(smollm2_path(), n_ctx=1024, n_threads=1, json_schema_mode="strict")
    default = Model(smollm2_path(), n_ctx=1024, n_threads=1)
    yield strict, default
    strict.close()
    default.close()


@pytest.fixture(scope="module")
def clients(models):
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app

    with TestClient(create_app(models[0], "m")) as strict, TestClient(create_app(models[1], "m")) as default:
        yield strict, default


def accepts(model, grammar, text):
    g = Grammar(model.rules(grammar), model.vocab)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


def _surfaces(schema):
    """(endpoint, body fields, how to read the content) for each place a request's schema becomes a grammar."""
    return [
        ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}),
        ("/v1/chat/completions", {"json_schema": schema}),
        ("/v1/completions", {"json_schema": schema}),
        ("/api/chat", {"format": schema}),
    ]


def _post(client, endpoint, fields, seed=None, max_tokens=200):
    if endpoint == "/api/chat":
        options = {"num_predict": max_tokens, "temperature": 0 if seed is None else 0.9, "seed": seed or 0}
        return client.post(endpoint, json={"messages": ASK, "stream": False, "options": options, **fields})
    body = {"max_tokens": max_tokens, "temperature": 0 if seed is None else 0.9, **fields}
    if seed is not None:
        body["seed"] = seed
    if endpoint == "/v1/completions":
        body["prompt"] = "A person's name and score as JSON: "
    else:
        body["messages"] = ASK
    return client.post(endpoint, json=body)


def _content(endpoint, body):
    if endpoint == "/api/chat":
        return body["message"]["content"], body["done_reason"]
    choice = body["choices"][0]
    if endpoint == "/v1/completions":
        return choice["text"], choice["finish_reason"]
    return choice["message"]["content"], choice["finish_reason"]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_llama_cpp_mode_lets_the_invalid_instance_through(models, name):
    """What makes these schemas worth the strict test: llama.cpp's grammar accepts an invalid instance."""
    strict, default = models
    schema, invalid = SCHEMAS[name], INVALID[name]
    assert not valid(invalid, schema)
    loose = default.complete("x", Constraint("json_schema", schema, None, False)).grammar_text
    exact = strict.complete("x", Constraint("json_schema", schema, None, False)).grammar_text
    assert accepts(default, loose, invalid)
    assert not accepts(strict, exact, invalid)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("seed", [None, 7])
def test_strict_answers_validate_on_every_surface(clients, name, seed):
    strict, _ = clients
    schema = SCHEMAS[name]
    for endpoint, fields in _surfaces(schema):
        r = _post(strict, endpoint, fields, seed)
        assert r.status_code == 200, (endpoint, fields, r.text)
        text, finish = _content(endpoint, r.json())
        assert finish == "stop", (endpoint, text)
        assert valid(text, schema), (endpoint, text)


def test_refused_schema_is_a_400_naming_keyword_and_pointer(clients):
    strict, default = clients
    for endpoint, fields in _surfaces(REFUSED):
        r = _post(strict, endpoint, fields)
        assert r.status_code == 400, (endpoint, r.text)
        body = r.json()
        message = body["error"] if endpoint.startswith("/api/") else body["error"]["message"]
        assert REFUSED_AT in message, (endpoint, message)
        # llama.cpp's mode converts it (ignoring uniqueItems): the refusal is strict mode's (a few tokens show
        # that the grammar was built and sampled with)
        r = _post(default, endpoint, dict(fields), max_tokens=8)
        assert r.status_code == 200, (endpoint, r.text)


def test_default_mode_grammars_are_llama_cpp_and_json_mode_is_unchanged(models):
    """The default model's chat grammar is llama-server's recorded one; strict mode changes a schema's grammar
    only (JSON mode without a schema keeps llama.cpp's)."""
    strict, default = models
    with open(DATA / "llama-server-jsonmode.json", encoding="utf-8") as f:
        recorded = {k: v for k, v in json.load(f).items() if k.startswith("smollm2-chatml/")}
    assert recorded
    for key, case in recorded.items():
        constraint = from_openai(case["request"])
        messages = [{"role": "user", "content": "hi"}]
        assert default.chat(Request.for_chat(ChatInputs(messages), constraint)).grammar_text == case["grammar"], key
        exact = strict.chat(Request.for_chat(ChatInputs(messages), constraint)).grammar_text
        if constraint.kind == "json_schema":
            assert exact != case["grammar"] and "response-format-schema-space ::= " in exact, key
        else:
            assert exact == case["grammar"], key
    # the bare grammar (/v1/completions, Ollama's format) too
    bare = default.complete("x", Constraint("json_schema", PERSON, None, False)).grammar_text
    assert bare == json_schema_to_grammar(PERSON)[0]
    assert (
        strict.complete("x", Constraint("json_schema", PERSON, None, False)).grammar_text
        == json_schema_to_grammar(PERSON, mode="strict")[0]
    )


def test_props_report_the_mode_only_when_strict(clients):
    strict, default = clients
    assert strict.get("/props").json()["json_schema_mode"] == "strict"
    assert strict.get("/props").json()["strict_style"] == "canonical"
    assert "json_schema_mode" not in default.get("/props").json()
    assert "strict_style" not in default.get("/props").json()


def test_cli_flag_reaches_the_model_options():
    for command in ("serve", "generate"):
        args = build_parser().parse_args([command, "x"] if command == "generate" else [command])
        assert chat_model_options(args)["json_schema_mode"] == "llama.cpp"
        extra = ["x"] if command == "generate" else []
        args = build_parser().parse_args([command, *extra, "--json-schema-mode", "strict"])
        assert chat_model_options(args)["json_schema_mode"] == "strict"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--json-schema-mode", "exact"])


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2, "maxLength": 12},
        "days": {"type": "number", "minimum": 1, "maximum": 14, "multipleOf": 1},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}}]


def test_tool_call_arguments_are_strict(tmp_path):
    """A tool's parameters in strict mode (Llama 3.1's template, tool_choice required, the call prefilled): the
    grammar holds the
    strict rule of the parameters inside llama.cpp's wrapping, and the answer's arguments validate."""
    from bankml.serve.runtime import Model

    path = recorded_template_file(tmp_path, "meta-llama-Llama-3.1-8B-Instruct.jinja", "llama31.jinja")
    # SmolLM2 does not start a call by itself: the assistant message opens it (llama-server continues it, as
    # tests/oracle/record_tools.py's prefilled requests)
    messages = [
        {"role": "user", "content": "What is the weather in Paris for the next days?"},
        {"role": "assistant", "content": '{"name": "'},
    ]
    grammars = {}
    for mode in ("strict", "llama.cpp"):
        model = Model(smollm2_path(), n_ctx=2048, n_threads=1, chat_template_file=str(path), json_schema_mode=mode)
        try:
            job = model.chat(
                Request.for_chat(ChatInputs(messages, tools=TOOLS, tool_choice="required"), None, None, 120)
            )
            grammars[mode] = job.grammar_text
            if mode == "strict":
                result = job.run()
                calls = result.message.get("tool_calls") or []
                assert calls and result.finish_reason == "tool_calls", result.content
                for call in calls:
                    assert call["function"]["name"] == "get_weather"
                    arguments = json.loads(call["function"]["arguments"])
                    jsonschema.validate(arguments, WEATHER, format_checker=FORMATS)
        finally:
            model.close()
    strict_rules = dict(line.split(" ::= ", 1) for line in grammars["strict"].splitlines() if line)
    loose_rules = dict(line.split(" ::= ", 1) for line in grammars["llama.cpp"].splitlines() if line)
    assert strict_rules["tool-get-weather-schema"] == "tool-get-weather-schema-v-1 tool-get-weather-schema-space"
    assert "tool-get-weather-schema-space" not in loose_rules
    # the wrapping: every rule outside the schemas' is the same in both modes
    outside = {n for n in loose_rules if not n.startswith("tool-get-weather-schema")} - {
        "integer",
        "number",
        "char",
        "string",
        "decimal-part",
        "integral-part",
        "space",
    }
    assert {n: strict_rules.get(n) for n in outside} == {n: loose_rules[n] for n in outside}


def test_strict_style_flag_reaches_the_model_options():
    """``--strict-style``: canonical unless told exact; with llama.cpp's mode it is an error naming the flags."""
    for command in ("serve", "generate"):
        extra = ["x"] if command == "generate" else []
        args = build_parser().parse_args([command, *extra, "--json-schema-mode", "strict"])
        assert chat_model_options(args)["strict_style"] == "canonical"
        args = build_parser().parse_args([command, *extra, "--json-schema-mode", "strict", "--strict-style", "exact"])
        assert chat_model_options(args)["strict_style"] == "exact"
        args = build_parser().parse_args([command, *extra, "--strict-style", "exact"])
        with pytest.raises(ValueError, match="--strict-style applies to --json-schema-mode strict only"):
            chat_model_options(args)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--json-schema-mode", "strict", "--strict-style", "compact"])


def test_strict_style_on_the_chat_and_bare_grammars(models):
    """A strict model writes the canonical style (the schema's keys as literals in order, no whitespace) in the
    chat grammar and the bare one; ``strict_style="exact"`` the exact one, the model's or a request's own
    (``ChatInputs.strict_style``); a bad name is a ValueError naming the option."""
    from bankml.serve.runtime import Model

    strict, _ = models
    constraint = from_openai({"response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}})

    def chat_grammar(model, **fields):
        return model.chat(Request.for_chat(ChatInputs(ASK, **fields), constraint)).grammar_text

    chat = chat_grammar(strict)
    assert 'response-format-schema-space ::= ""' in chat and '"\\"name\\""' in chat
    bare = strict.complete("x", Constraint("json_schema", PERSON, None, False)).grammar_text
    assert bare == json_schema_to_grammar(PERSON, mode="strict", strict_style="canonical")[0]
    assert chat_grammar(strict) == chat  # cached per style
    assert chat_grammar(strict, strict_style="canonical") == chat
    with pytest.raises(ValueError, match="strict_style must be 'canonical' or 'exact', not 'pretty'"):
        Model(smollm2_path(), n_ctx=256, json_schema_mode="strict", strict_style="pretty")
    with pytest.raises(ValueError, match="strict_style must be 'canonical' or 'exact', not 'pretty'"):
        chat_grammar(strict, strict_style="pretty")
    exact = Model(smollm2_path(), n_ctx=1024, n_threads=2, json_schema_mode="strict", strict_style="exact")
    try:
        exact_chat = chat_grammar(exact)
        assert exact_chat != chat and 'response-format-schema-space ::= ""' not in exact_chat
        assert chat_grammar(strict, strict_style="exact") == exact_chat  # the request's style over the model's
        assert chat_grammar(exact, strict_style="canonical") == chat
        exact_bare = exact.complete("x", Constraint("json_schema", PERSON, None, False)).grammar_text
        assert exact_bare == json_schema_to_grammar(PERSON, mode="strict", strict_style="exact")[0]
    finally:
        exact.close()
