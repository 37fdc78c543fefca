"""bankml.chat.constraint: llama-server's reading of response_format / json_schema / grammar, Ollama's format, and
the chat grammars, checked against the pinned llama-server's recorded grammars and prompts
(tests/data/llama-server-jsonmode.json) and the rules and messages of tools/server/server-common.cpp."""

import json
import pathlib

import pytest

from bankml import Grammar, Rules, SchemaError, Vocab, json_schema_to_grammar
from bankml.chat.constraint import (
    Constraint,
    RequestError,
    chat_grammar,
    from_ollama,
    from_ollama_text,
    from_openai,
    from_openai_text,
    generation_prompt,
    json_object_grammar,
)

DATA = pathlib.Path(__file__).parent.parent / "data" / "llama-server-jsonmode.json"
RECORDED = json.loads(DATA.read_text(encoding="utf-8"))
TEMPLATE = {"smollm2-chatml": "chatml", "qwen3": "qwen3"}
MESSAGES = [{"role": "user", "content": "hi"}]


def _req(**fields):
    return dict(messages=MESSAGES, **fields)


# --- the recorded grammars and generation prompts, byte for byte ----------------------------------------


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_recorded_grammar_and_prompt(key):
    case = RECORDED[key]
    template = TEMPLATE[key.split("/")[0]]
    constraint = from_openai(case["request"])
    grammar, prompt = constraint.to_grammar(template)
    assert grammar == case["grammar"]
    assert prompt == case["generation_prompt"]


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_recorded_grammar_parses_and_accepts_the_prompt_and_answer(key):
    case = RECORDED[key]
    template = TEMPLATE[key.split("/")[0]]
    grammar, prompt = from_openai(case["request"]).to_grammar(template)
    if key.endswith("/grammar"):
        return  # a user grammar: llama-server does not feed it the generation prompt
    g = Grammar(Rules.parse(grammar), Vocab([b"x"], []))
    g.accept_bytes(prompt.encode("utf-8"))
    g.accept_bytes(case["content"].encode("utf-8"))
    assert g.complete == (case["finish_reason"] == "stop")


@pytest.mark.parametrize("template", ["chatml", "qwen3"])
def test_chat_grammar_functions(template):
    schema = RECORDED["qwen3/json_schema"]["request"]["response_format"]["json_schema"]["schema"]
    key = "smollm2-chatml" if template == "chatml" else "qwen3"
    assert chat_grammar(schema, template) == (
        RECORDED[key + "/json_schema"]["grammar"],
        RECORDED[key + "/json_schema"]["generation_prompt"],
    )
    assert json_object_grammar(template) == (
        RECORDED[key + "/json_object"]["grammar"],
        RECORDED[key + "/json_object"]["generation_prompt"],
    )


def test_generation_prompts():
    assert generation_prompt("chatml") == "<|im_start|>assistant\n"
    assert generation_prompt("qwen3") == "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert generation_prompt("qwen3", thinking=True) == "<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="unknown template"):
        generation_prompt("llama3")


def test_chat_grammar_with_thinking_keeps_the_grammar():
    g_off, p_off = json_object_grammar("qwen3")
    g_on, p_on = json_object_grammar("qwen3", thinking=True)
    assert g_on == g_off and p_on == "<|im_start|>assistant\n"
    Grammar(Rules.parse(g_on), Vocab([b"x"], [])).accept_bytes(b"<|im_start|>assistant\n<think>\nhm</think>\n{}")


def test_chat_grammar_schema_error_has_the_auto_parser_prefix():
    with pytest.raises(SchemaError) as info:
        chat_grammar({"type": "object", "properties": {"x": {"type": "nope"}}}, "chatml")
    # the reader's error comes without json_schema_to_grammar()'s "JSON schema conversion failed:" line
    assert str(info.value) == (
        "Unable to generate parser for this template. Automatic parser generation failed: "
        "JSON schema error at #/properties/x: unrecognized type nope"
    )
    assert info.value.pointer == "#/properties/x"
    with pytest.raises(SchemaError) as info:
        chat_grammar({"type": "integer", "maximum": -9223372036854775808}, "qwen3")
    assert str(info.value) == (
        "Unable to generate parser for this template. Automatic parser generation failed: "
        "At least one of min_value or max_value must be set"
    )
    # the converter's own errors (check_errors) keep it
    with pytest.raises(SchemaError) as info:
        chat_grammar({"type": "string", "pattern": "^(a$"}, "chatml")
    assert str(info.value).startswith(
        "Unable to generate parser for this template. Automatic parser generation "
        "failed: JSON schema conversion failed:\n"
    )


# --- response_format --------------------------------------------------------------------------------------


def test_json_object():
    c = from_openai(_req(response_format={"type": "json_object"}))
    assert c == Constraint("json_object", {"type": "object"}, None, True, "response_format")
    assert c.is_json


def test_json_object_with_schema():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    c = from_openai(_req(response_format={"type": "json_object", "schema": schema}))
    assert (c.kind, c.schema, c.chat) == ("json_schema", schema, True)


@pytest.mark.parametrize("schema", [{}, None])
def test_json_object_with_empty_or_null_schema_is_any_object(schema):
    c = from_openai(_req(response_format={"type": "json_object", "schema": schema}))
    assert (c.kind, c.schema) == ("json_object", {"type": "object"})


def test_json_object_keeps_a_top_level_json_schema():
    # `if (response_format.contains("schema") || json_schema.empty())`
    top = {"type": "array"}
    c = from_openai(_req(json_schema=top, response_format={"type": "json_object"}))
    assert (c.kind, c.schema, c.source) == ("json_schema", top, "json_schema")
    c = from_openai(_req(json_schema={}, response_format={"type": "json_object"}))
    assert (c.kind, c.schema) == ("json_object", {"type": "object"})


def test_json_schema_wrapper():
    schema = {"type": "string"}
    c = from_openai(_req(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
    assert (c.kind, c.schema, c.chat, c.source) == ("json_schema", schema, True, "response_format")


def test_json_schema_wrapper_overrides_top_level_json_schema():
    c = from_openai(
        _req(
            json_schema={"type": "array"},
            response_format={"type": "json_schema", "json_schema": {"schema": {"type": "string"}}},
        )
    )
    assert c.schema == {"type": "string"}


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"name": "x"}},
        {"type": "json_schema", "json_schema": "nope"},
        {"type": "json_schema", "json_schema": {"schema": {}}},
    ],
)
def test_json_schema_without_schema_is_any_object(response_format):
    c = from_openai(_req(response_format=response_format))
    assert (c.kind, c.schema) == ("json_object", {"type": "object"})


@pytest.mark.parametrize(
    "response_format", [{"type": "text"}, {}, {"type": None}, {"type": 5}, "json_object", None, []]
)
def test_no_constraint(response_format):
    assert from_openai(_req(response_format=response_format)) == Constraint()


def test_bad_type_message():
    with pytest.raises(RequestError) as info:
        from_openai(_req(response_format={"type": "yaml"}))
    # llama-server's message, then the type it leaves out
    assert str(info.value) == (
        'response_format type must be one of "text" or "json_object", but got: yaml '
        '(bankml and llama-server also take "json_schema")'
    )


def test_a_strict_refusal_on_the_chat_path_blames_the_schema_not_the_template():
    with pytest.raises(SchemaError) as info:
        chat_grammar({"type": "array", "uniqueItems": True}, "chatml", json_schema_mode="strict")
    assert str(info.value).startswith("strict JSON schema conversion failed:\nuniqueItems")
    assert "Unable to generate parser" not in str(info.value)
    assert (info.value.keyword, info.value.pointer) == ("uniqueItems", "#/uniqueItems")


def test_an_ollama_format_error_names_format():
    with pytest.raises(SchemaError) as info:
        from_ollama({"type": "array", "uniqueItems": True}).to_grammar(json_schema_mode="strict")
    assert str(info.value).startswith("Field 'format': strict JSON schema conversion failed:")
    assert info.value.keyword == "uniqueItems"
    with pytest.raises(SchemaError) as info:
        from_ollama({"type": "nope"}).to_grammar()
    assert str(info.value).startswith("Field 'format': JSON schema conversion failed:") and "json_schema" not in str(
        info.value
    )


def test_response_format_schema_that_is_not_an_object_is_dropped():
    c = from_openai(_req(response_format={"type": "json_schema", "json_schema": {"schema": True}}))
    assert c == Constraint()


# --- json_schema and grammar ---------------------------------------------------------------------------


def test_top_level_json_schema():
    c = from_openai(_req(json_schema={"type": "integer"}))
    assert (c.kind, c.schema, c.chat, c.source) == ("json_schema", {"type": "integer"}, True, "json_schema")
    assert from_openai(_req(json_schema={})).kind == "json_object"


@pytest.mark.parametrize("schema", [{"type": "integer"}, {}, True, "x", []])
def test_json_schema_with_grammar_is_refused(schema):
    with pytest.raises(RequestError) as info:
        from_openai(_req(json_schema=schema, grammar='root ::= "a"'))
    assert str(info.value) == "Cannot use both json_schema and grammar"


def test_null_json_schema_with_grammar():
    c = from_openai(_req(json_schema=None, grammar='root ::= "a"'))
    assert c == Constraint("gbnf", None, 'root ::= "a"', True, "grammar")


def test_grammar():
    c = from_openai(_req(grammar='root ::= "a"'))
    assert (c.kind, c.grammar) == ("gbnf", 'root ::= "a"')
    assert c.to_grammar("qwen3") == ('root ::= "a"', generation_prompt("qwen3"))
    assert c.to_grammar() == ('root ::= "a"', None)
    assert not c.is_json


@pytest.mark.parametrize("grammar", ["", 5, None, ["root"]])
def test_empty_or_non_string_grammar_is_ignored(grammar):
    assert from_openai(_req(grammar=grammar)) == Constraint()


def test_response_format_wins_over_grammar():
    # the chat template's grammar replaces the user's: llama_params["grammar"] is set before the body is copied
    c = from_openai(_req(response_format={"type": "json_object"}, grammar='root ::= "a"'))
    assert c.kind == "json_object"
    assert c.to_grammar("chatml") == json_object_grammar("chatml")


def test_top_level_json_schema_that_is_not_an_object():
    # no chat grammar; the /completion field handler converts it directly
    c = from_openai(_req(json_schema=True))
    assert (c.kind, c.schema, c.chat) == ("json_schema", True, False)
    assert not c.is_json
    for schema in (True, "abc", [1]):
        c = from_openai(_req(json_schema=schema))
        with pytest.raises(SchemaError) as info:
            c.to_grammar("chatml")
        assert str(info.value) == (
            "Field 'json_schema': \"json_schema\": JSON schema conversion failed:\n"
            "JSON schema error at #: schema must be an object"
        )


def test_top_level_non_object_json_schema_with_a_grammar_key_is_unconstrained():
    assert from_openai(_req(json_schema=True, grammar="")) == Constraint()


def test_to_grammar_without_template_is_the_bare_schema_grammar():
    c = from_openai(_req(response_format={"type": "json_object"}))
    assert c.to_grammar() == (json_schema_to_grammar({"type": "object"})[0], None)
    assert Constraint().to_grammar("chatml") == (None, "<|im_start|>assistant\n")


def test_constraint_kind_is_checked():
    with pytest.raises(ValueError):
        Constraint("xml")


# --- the _text variants ---------------------------------------------------------------------------------


def test_openai_text_keeps_literal_types_and_order():
    body = (
        '{"messages": [], "response_format": {"type": "json_schema", "json_schema": {"schema": '
        '{"type": "object", "properties": {"z": {"const": 2.0}, "a": {"const": 1}}}}}}'
    )
    c = from_openai_text(None, body)
    z = c.schema["properties"]["z"]["const"]
    assert isinstance(z, float) and list(c.schema["properties"]) == ["z", "a"]
    grammar, _ = c.to_grammar("chatml")
    assert '"2.0"' in grammar and '"1"' in grammar
    assert from_openai_text(None, body.encode("utf-8")) == c


def test_openai_text_refuses_bad_json():
    with pytest.raises(RequestError):
        from_openai_text(None, '{"messages": ')


def test_openai_text_without_body_uses_the_request():
    assert from_openai_text(_req(grammar='root ::= "a"'), None).kind == "gbnf"


# --- Ollama format --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [None, ""])
def test_ollama_missing(fmt):
    assert from_ollama(fmt) == Constraint()


def test_ollama_json_and_empty_object():
    for fmt in ("json", {}):
        c = from_ollama(fmt)
        assert (c.kind, c.schema, c.chat, c.source) == ("json_object", {"type": "object"}, False, "format")


def test_ollama_schema():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    c = from_ollama(schema)
    assert (c.kind, c.schema, c.chat) == ("json_schema", schema, False)
    assert c.to_grammar() == (json_schema_to_grammar(schema)[0], None)


@pytest.mark.parametrize(
    "fmt,quoted",
    [("X", '"\\"X\\""'), ("yaml", '"\\"yaml\\""'), (5, '"5"'), ([1], '"[1]"'), ("a\nb", '"\\"a\\\\nb\\""')],
)
def test_ollama_invalid_format_message(fmt, quoted):
    with pytest.raises(RequestError) as info:
        from_ollama(fmt)
    assert str(info.value) == f'invalid format: {quoted}; expected "json" or a valid JSON Schema object'


def test_ollama_text():
    assert from_ollama_text(None, '{"model": "m", "format": "json"}').kind == "json_object"
    assert from_ollama_text(None, '{"model": "m", "format": null}') == Constraint()
    assert from_ollama_text(None, '{"model": "m", "format": ""}') == Constraint()
    assert from_ollama_text(None, '{"model": "m"}') == Constraint()
    c = from_ollama_text(None, '{"format": {"const": 2.0}, "model": "m"}')
    assert isinstance(c.schema["const"], float)
    # Ollama compares the raw bytes: an escaped "json" is not "json"
    with pytest.raises(RequestError) as info:
        from_ollama_text(None, '{"format": "j\\u0073on"}')
    assert str(info.value) == 'invalid format: "\\"j\\\\u0073on\\""; expected "json" or a valid JSON Schema object'
    assert from_ollama_text({"format": "json"}, None).kind == "json_object"
