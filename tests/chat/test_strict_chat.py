"""The chat layer's grammars in strict JSON schema mode (``json_schema_mode="strict"``): a response format's and
the tools' parameters' schemas are compiled by bankml.schema.strict inside the template family's wrapping, which
stays llama.cpp's rule for rule; the default mode is llama.cpp's grammar unchanged."""

import json
import pathlib
import re

import pytest

from bankml import Grammar, GrammarError, Rules, Vocab
from bankml.chat.constraint import chat_grammar, from_openai
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatTemplate
from bankml.errors import SchemaError
from bankml.schema.strict import strict_schema_rules

from ..oracle_support import chat_templates_recording

DATA = pathlib.Path(__file__).parent.parent / "data"

# what llama.cpp's converter lets through and strict mode does not: `minimum` on a number, `minLength` beside
# a `pattern`, `additionalProperties` absent (llama.cpp forbids extra keys, jsonschema allows them)
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Z][a-z]+$", "minLength": 4},
        "days": {"type": "number", "minimum": 1},
    },
    "required": ["city", "days"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]

# a JSON-arguments family (the auto-parser), hand-written handlers with JSON arguments and with one
# schema per parameter (XML-style values), and MiniMax's nested values
TEMPLATES = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "tool-get_weather-schema",
    "Kimi-K2-Instruct.jinja": "tool-get_weather-schema",
    "Qwen3-Coder.jinja": "tool-get_weather-arg-days-schema",
    "MiniMax-M3.jinja": "tool-get_weather-arg-days-schema",
}

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{[^}]*\}|[a-zA-Z0-9-]+|\s+|.', re.S)


def rules_of(gbnf):
    out = {}
    for line in gbnf.splitlines():
        if line.strip():
            name, body = line.split(" ::= ", 1)
            out[name] = body
    return out


def same_wrapping(strict, loose):
    """The rules reachable from root, walked in both grammars side by side, are the same token for token, except
    where the strict grammar refers to a schema rule (``...-schema``): there the llama.cpp grammar may refer to
    its converter's rule (or a primitive such as ``number``), and neither is entered. Returns the schema rules
    met, each with the llama.cpp grammar's reference in its place."""
    a, b = rules_of(strict), rules_of(loose)
    seen, todo, schemas = set(), ["root"], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        ta = [t for t in _TOKEN.findall(a[name]) if not t.isspace()]
        tb = [t for t in _TOKEN.findall(b[name]) if not t.isspace()]
        assert len(ta) == len(tb), (name, a[name], b[name])
        for x, y in zip(ta, tb):
            if x in a and x.endswith("-schema"):
                schemas[x] = y
                continue
            assert x == y, (name, a[name], b[name])
            if x in a:
                todo.append(x)
    return schemas


_TINY = Vocab([bytes([c]) for c in range(32, 127)] + [b"\n", b"</s>"], eog_ids=[96])


def accepts(gbnf, rule, text):
    g = Grammar(Rules.parse(gbnf, rule, _TINY), _TINY)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


@pytest.fixture(scope="module")
def sources():
    return {t: rec["source"] for t, rec in chat_templates_recording()["templates"].items() if t in TEMPLATES}


def apply(source, **kw):
    return ChatTemplate(source).apply(ChatInputs(ASK, tools=TOOLS, tool_choice="required", **kw))


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_tool_parameters_strict_inside_the_same_wrapping(sources, template):
    default = apply(sources[template])
    loose = apply(sources[template], json_schema_mode="llama.cpp")
    strict = apply(sources[template], json_schema_mode="strict", strict_style="exact")
    canonical = apply(sources[template], json_schema_mode="strict")  # strict mode's default style
    assert default.grammar == loose.grammar and default.json_schema_mode == "llama.cpp"  # the default: unchanged
    assert canonical.strict_style == "canonical" and strict.strict_style == "exact"
    assert strict.json_schema_mode == "strict" and strict.grammar != loose.grammar
    schemas = same_wrapping(strict.grammar, loose.grammar)
    name = re.sub(r"[^a-zA-Z0-9-]+", "-", TEMPLATES[template])
    assert name in schemas
    assert (strict.grammar_lazy, strict.grammar_triggers) == (loose.grammar_lazy, loose.grammar_triggers)
    assert same_wrapping(canonical.grammar, loose.grammar) == schemas
    if name.endswith("arg-days-schema"):
        # one schema per parameter: the value of `days` compiled at #/properties/days of the tool's parameters
        expected = strict_schema_rules(WEATHER, name, pointer="#/properties/days")
        expected_canonical = strict_schema_rules(WEATHER, name, pointer="#/properties/days", style="canonical")
        good, bad = "7", "0.5"
        compact = good
    else:
        expected = strict_schema_rules(WEATHER, name)
        expected_canonical = strict_schema_rules(WEATHER, name, style="canonical")
        good, bad = '{"city": "Paris", "days": 3}', '{"city": "Nice", "days": 0}'  # days below the minimum
        compact = '{"city":"Paris","days":3}'
        assert not accepts(canonical.grammar, name, good) and not accepts(
            canonical.grammar, name, '{"days":3,"city":"Paris"}'
        )
        assert accepts(strict.grammar, name, '{"city": "Paris", "days": 3, "note": "x"}')  # extra keys: valid
        assert not accepts(strict.grammar, name, '{"city": "Lyo", "days": 3}')  # minLength with the pattern
    rules = rules_of(strict.grammar)
    for rule, body in expected.items():
        assert rules[rule] == body  # the strict rules, embedded as strict_schema_rules names them
    canonical_rules = rules_of(canonical.grammar)
    for rule, body in expected_canonical.items():
        assert canonical_rules[rule] == body
    assert accepts(canonical.grammar, name, compact) and not accepts(canonical.grammar, name, bad)
    assert accepts(strict.grammar, name, good)
    assert not accepts(strict.grammar, name, bad)
    assert accepts(loose.grammar, schemas[name], bad)  # what llama.cpp's converter lets through


def test_response_format_strict_and_default_unchanged():
    strict, prompt = chat_grammar(WEATHER, "chatml", json_schema_mode="strict", strict_style="exact")
    loose, prompt2 = chat_grammar(WEATHER, "chatml")
    canonical, _ = chat_grammar(WEATHER, "chatml", json_schema_mode="strict")
    assert same_wrapping(canonical, loose) == {"response-format-schema": "response-format-schema"}
    assert accepts(canonical, "response-format-schema", '{"city":"Nice","days":1,"x":null}')
    assert not accepts(canonical, "response-format-schema", '{"city": "Nice", "days": 1}')  # whitespace
    with pytest.raises(ValueError, match="strict_style must be 'canonical' or 'exact', not 'pretty'"):
        chat_grammar(WEATHER, "chatml", json_schema_mode="strict", strict_style="pretty")
    assert prompt == prompt2
    assert same_wrapping(strict, loose) == {"response-format-schema": "response-format-schema"}
    assert accepts(loose, "response-format-schema", '{"city": "Nice", "days": 0}')
    assert not accepts(strict, "response-format-schema", '{"city": "Nice", "days": 0}')
    assert accepts(strict, "response-format-schema", '{"city": "Nice", "days": 1, "x": null}')


RECORDED = json.loads((DATA / "llama-server-jsonmode.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_recorded_grammars_default_mode_and_strict(key):
    """The pinned llama-server's recorded chat grammars: the default mode (and "llama.cpp") gives them byte for
    byte; strict mode gives another grammar for a schema, the same for JSON mode without one."""
    case = RECORDED[key]
    template = {"smollm2-chatml": "chatml", "qwen3": "qwen3"}[key.split("/")[0]]
    constraint = from_openai(case["request"])
    assert constraint.to_grammar(template)[0] == case["grammar"]
    assert constraint.to_grammar(template, json_schema_mode="llama.cpp")[0] == case["grammar"]
    strict = constraint.to_grammar(template, json_schema_mode="strict")[0]
    if constraint.kind == "json_schema":
        assert strict != case["grammar"] and "response-format-schema-space ::= " in strict
    else:
        assert strict == case["grammar"]


def test_refusal_names_keyword_and_pointer():
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(SchemaError) as e:
        chat_grammar(schema, "chatml", json_schema_mode="strict")
    assert e.value.keyword == "uniqueItems" and e.value.pointer == "#/properties/tags/uniqueItems"
    assert "keyword uniqueItems at #/properties/tags/uniqueItems" in str(e.value)
    chat_grammar(schema, "chatml")  # llama.cpp's mode converts it
    with pytest.raises(ValueError, match="json_schema_mode"):
        chat_grammar(WEATHER, "chatml", json_schema_mode="exact")


def test_strict_rules_do_not_clash_across_schemas(sources):
    """Two tools whose parameters compile to rules of the same local names: each under its own prefix."""
    other = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}, "required": ["n"]}
    tools = TOOLS + [{"type": "function", "function": {"name": "count", "parameters": other}}]
    source = sources["meta-llama-Llama-3.1-8B-Instruct.jinja"]
    out = ChatTemplate(source).apply(
        ChatInputs(ASK, tools=tools, tool_choice="required", json_schema_mode="strict", strict_style="exact")
    )
    assert accepts(out.grammar, "tool-count-schema", '{"n": 3}')
    assert not accepts(out.grammar, "tool-count-schema", '{"n": 4}')
    assert not accepts(out.grammar, "tool-count-schema", '{"city": "Paris", "days": 3}')
    assert accepts(out.grammar, "tool-get-weather-schema", '{"city": "Paris", "days": 3}')
