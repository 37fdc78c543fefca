"""Strict tool arguments in the canonical style (bankml.schema.tool_args): every text the grammar lets through is
valid for the schema (jsonschema with its FormatChecker is the judge), in the one spelling the style writes;
what a non-JSON syntax cannot carry exactly is refused naming the keyword and the pointer.

The soundness checks draw random complete texts from each grammar (tests/grammar_walk.py) and judge them all;
hypothesis draws the schemas from the keywords tool schemas use (objects of listed properties, arrays, strings
with enums, patterns, formats and lengths, bounded numbers, anyOf, $ref to $defs)."""

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bankml import Grammar, GrammarError, Rules
from bankml.errors import SchemaError
from bankml.schema import tool_args
from bankml.schema.converter import build_grammar

from ..grammar_walk import BYTES, random_texts
from ..oracle_support import ORACLE_STATS

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}},
    },
    "required": ["city", "days"],
}


def grammar(schema, style=None, pointer="#"):
    def cb(b):
        b.add_rule("root", tool_args.write(schema, pointer, "args", b.add_rule, style))

    return build_grammar(cb)


def accepts(gbnf, text):
    g = Grammar(Rules.parse(gbnf, vocab=BYTES), BYTES)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


def valid(schema, value):
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS).is_valid(value)


@pytest.mark.parametrize(
    "text, ok",
    [
        ('{"city": "Paris", "days": 3}', True),
        ('{"city": "Paris", "unit": "celsius", "days": 3, "tags": ["a", "bc"], "opts": {"x": true}}', True),
        ('{"city": "Paris", "days": 3, "opts": {}}', True),
        ('{"city": "paris", "days": 3}', False),  # the pattern
        ('{"days": 3, "city": "Paris"}', False),  # canonical: schema order
        ('{"city": "Paris", "days": 8}', False),  # maximum
        ('{"city":"Paris","days":3}', False),  # canonical: json.dumps's separators
        ('{"city": "Paris", "days": 3, "tags": ["a", "b", "c"]}', False),  # maxItems
        ('{"city": "Paris", "days": 3, "tags": ["abcde"]}', False),  # maxLength of an item
        ('{"city": "Paris", "days": 3, "other": 1}', False),  # listed properties: others only where said
        ('{"city": "P\\u0061ris", "days": 3}', False),  # no needless escape
        ('{"city": "Paris"}', False),  # required
    ],
)
def test_json_style(text, ok):
    assert accepts(grammar(WEATHER), text) is ok
    if ok:
        assert valid(WEATHER, json.loads(text))


def test_other_keys_where_the_schema_says_so():
    """Other keys come after the listed ones where ``additionalProperties`` allows them explicitly, or in an
    object that lists no property (the field's convention for generation: llama.cpp's, XGrammar's, OpenAI's)."""
    open_ = dict(WEATHER, additionalProperties=True)
    assert accepts(grammar(open_), '{"city": "Paris", "days": 3, "other": 1}')
    assert not accepts(grammar(open_), '{"other": 1, "city": "Paris", "days": 3}')
    assert not accepts(grammar(open_), '{"city": "Paris", "days": 3, "city": "Rome"}')
    typed = dict(WEATHER, additionalProperties={"type": "integer"})
    assert accepts(grammar(typed), '{"city": "Paris", "days": 3, "n": 1}')
    assert not accepts(grammar(typed), '{"city": "Paris", "days": 3, "n": "x"}')
    assert accepts(grammar({"type": "object"}), '{"a": [1, {"b": null}], "c": "d", "e": -0.25}')


def test_json_strings_escape_only_what_json_requires():
    g = grammar({"type": "string"})
    assert accepts(g, json.dumps('a "quoted" \\ line\nend\u0001é😀', ensure_ascii=False))
    assert not accepts(g, '"\\u0061"')  # an escape JSON does not require
    assert not accepts(g, '"\\/"')
    g = grammar({"type": "string"}, tool_args.JsonStyle(forbid="<"))
    assert accepts(g, '"a\\u003cb"') and not accepts(g, '"a<b"')


@pytest.mark.parametrize(
    "text, ok",
    [
        ('{city:<|"|>Paris<|"|>,days:3}', True),
        ('{city:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>,days:3,tags:[<|"|>a<|"|>],opts:{x:true}}', True),
        ('{city: <|"|>Paris<|"|>, days: 3}', False),
        ('{"city":"Paris","days":3}', False),
        ('{city:<|"|>Paris<|"|>,days:0}', False),
    ],
)
def test_gemma_style(text, ok):
    assert accepts(grammar(WEATHER, tool_args.GemmaStyle()), text) is ok


def test_raw_style_reads_back_whole():
    """A raw-text value is one the parser gives back whole: never holding its delimiter, nor ending so that the
    delimiter after it would be found earlier (Qwen3-Coder's ``\\n</parameter>\\n`` begins and ends with a line
    break), nor one the parser would read as JSON of the types it tries first."""
    delim = "\n</parameter>\n"
    g = grammar({"type": "string"}, tool_args.RawStyle(delim, frozenset({"null", "number"})))
    assert accepts(g, "Paris") and accepts(g, "x\n</parameter") and accepts(g, "nul") and accepts(g, "12a")
    for text in ("x\n</parameter>", "a\n</parameter>\nb", "null", "12", "-1.5e3"):
        assert not accepts(g, text), text
    g = grammar(WEATHER, tool_args.RawStyle(delim), "#/properties/unit")
    assert accepts(g, "celsius") and not accepts(g, '"celsius"') and not accepts(g, "kelvin")
    g = grammar({"type": "string"}, tool_args.RawStyle("</param>", exclude_prefix="<![CDATA["))
    assert accepts(g, "<![CDATA") and not accepts(g, "<![CDATA[x")


@pytest.mark.parametrize(
    "schema, style, keyword, pointer",
    [
        ({"type": "object", "properties": {"a": {}}, "minProperties": 1}, None, "minProperties", "#"),
        ({"type": "object", "patternProperties": {"^a": {}}}, None, "patternProperties", "#"),
        ({"type": "array"}, None, "type", "#"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)"}}},
            "json",
            "pattern",
            "#/properties/a",
        ),
        ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}, "gemma", "type", "#/properties/a"),
        ({"type": "object", "properties": {"a:b": {"type": "integer"}}}, "gemma", "type", "#"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, "json", "enum", "#/properties/a"),
    ],
)
def test_refusals_name_keyword_and_pointer(schema, style, keyword, pointer):
    with pytest.raises(SchemaError) as e:
        if style is None:
            tool_args.params(schema)
        else:
            grammar(schema, tool_args.GemmaStyle() if style == "gemma" else None)
    assert e.value.keyword == keyword and e.value.pointer == pointer, (e.value.keyword, e.value.pointer, str(e.value))
    named = tool_args.named("get_weather", e.value)
    assert str(named).startswith('tool "get_weather": ') and named.keyword == keyword


def test_params_in_schema_order():
    assert [(p.name, p.pointer, p.required) for p in tool_args.params(WEATHER)] == [
        ("city", "#/properties/city", True),
        ("unit", "#/properties/unit", False),
        ("days", "#/properties/days", True),
        ("tags", "#/properties/tags", False),
        ("opts", "#/properties/opts", False),
    ]
    doc = {"$defs": {"c": {"type": "string"}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/c"}}}
    assert tool_args.kind(doc, "#/properties/a") == "string"


# -- soundness: every text a grammar lets through is valid ---------------------------------------------------------

_STRINGS = st.fixed_dictionaries(
    {"type": st.just("string")},
    optional={
        "enum": st.lists(st.sampled_from(["a", "bc", "Paris", "x y", 'q"t', "é"]), min_size=1, max_size=4, unique=True),
        "pattern": st.sampled_from(["^[a-z]+$", "^[A-Z]", "\\d", "^(ab|cd)*$", "^.{2,5}$"]),
        "format": st.sampled_from(["date", "email", "ipv4", "uuid", "time"]),
        "minLength": st.integers(0, 3),
        "maxLength": st.integers(2, 8),
    },
)
_NUMBERS = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["integer", "number"])},
        optional={"minimum": st.integers(-5, 5), "maximum": st.integers(5, 50), "multipleOf": st.sampled_from([2, 5])},
    ),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.just({"enum": [1, "a", None]}),
)


def _schemas(leaf):
    def extend(inner):
        props = st.dictionaries(st.sampled_from(["a", "b", "city", "x_y", "n"]), inner, min_size=1, max_size=4)
        obj = props.flatmap(
            lambda p: st.fixed_dictionaries(
                {"type": st.just("object"), "properties": st.just(p)},
                optional={
                    "required": st.lists(st.sampled_from(sorted(p)), unique=True, max_size=len(p)),
                    "additionalProperties": st.booleans(),
                },
            )
        )
        arr = st.fixed_dictionaries(
            {"type": st.just("array"), "items": inner},
            optional={"minItems": st.integers(0, 2), "maxItems": st.integers(2, 4)},
        )
        any_of = st.lists(inner, min_size=2, max_size=3).map(lambda xs: {"anyOf": xs})
        return st.one_of(obj, arr, any_of)

    return st.recursive(leaf, extend, max_leaves=6)


def _huge_float(value):
    if isinstance(value, float):
        return abs(value) >= 2**53
    if isinstance(value, list):
        return any(_huge_float(v) for v in value)
    if isinstance(value, dict):
        return any(_huge_float(v) for v in value.values())
    return False


def _texts_valid(schema, style, n=6, canonical=False):
    try:
        gbnf = grammar(schema, style)
    except SchemaError as e:
        assert e.keyword, e
        return 0
    texts = random_texts(gbnf, n, seed=len(gbnf))
    for raw in texts:
        text = raw.decode("utf-8")
        value = json.loads(text)
        if _huge_float(value):
            # strict mode's number policy (bankml.schema.strict): bounds and multipleOf are exact on the text's
            # decimal value, while jsonschema divides floats, inexact past 2**53 ("-4927...675.00")
            continue
        assert valid(schema, value), (schema, text)
        if canonical:
            assert json.dumps(value, ensure_ascii=False) == text, ("not canonical", text)
    ORACLE_STATS["strict tool arguments: random texts valid (jsonschema)"] += len(texts)
    return len(texts)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(_schemas(st.one_of(_STRINGS, _NUMBERS)))
def test_every_json_text_is_valid(schema):
    _texts_valid(schema, None)


_ENUMS = st.lists(st.sampled_from([1, 2.5, "a", None, True, [1, "b"], {"k": "v"}]), min_size=1, max_size=3).map(
    lambda vs: {"enum": vs}
)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(_schemas(st.one_of(_STRINGS, _ENUMS)))
def test_every_text_of_strings_and_enums_is_valid_and_canonical(schema):
    """Objects, arrays, strings and enums are written by the canonical style itself (no exact leaf): each text
    is ``json.dumps`` of its value."""
    _texts_valid(schema, None, canonical=True)


def test_canonical_texts_are_drawn():
    """The property test above judges texts, not refusals: a fixed set of schemas yields its texts."""
    total = sum(_texts_valid(s, None, 8) for s in (WEATHER, {"type": "array", "items": WEATHER, "maxItems": 2}))
    assert total >= 12


def test_gemma_texts_are_valid():
    """Gemma 4's syntax, read back as its parser reads it (bare keys quoted, ``<|"|>`` strings as JSON strings)
    and judged."""
    texts = random_texts(grammar(WEATHER, tool_args.GemmaStyle()), 10, seed=3)
    assert len(texts) >= 8
    for raw in texts:
        value = json.loads(_gemma_to_json(raw.decode("utf-8")))
        assert valid(WEATHER, value), raw


def _gemma_to_json(text):
    out, i = [], 0
    while i < len(text):
        if text.startswith('<|"|>', i):
            j = text.index('<|"|>', i + 5)
            out.append(json.dumps(text[i + 5 : j], ensure_ascii=False))
            i = j + 5
        elif text[i] in "{,":
            out.append(text[i])
            j = i + 1
            if text[i] == "{" and text[j : j + 1] == "}":
                i = j
                continue
            k = text.index(":", j)
            if text[j:k].strip() and text[j] not in "[{<" and not text[j].isdigit() and text[j] != "-":
                out.append(json.dumps(text[j:k]) + ":")
                i = k + 1
            else:
                i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
