"""Hostile and edge-case schemas: each ends in a grammar or a clear SchemaError, never a hang or a crash, within
the converter's counted limits (no clock: ``_bounded``). (Where llama.cpp also converts them,
tests/schema/test_schema_oracle.py compares the output.)"""

import json

import pytest

from bankml import GrammarError, Rules, SchemaError, json_schema_to_grammar, json_schema_to_rules
from bankml.schema import converter, reader
from bankml.schema.converter import build_grammar, gbnf_format_literal
from bankml.schema.jsontext import MAX_JSON_DEPTH, load_schema
from bankml.schema.limits import _COMPILED_MAX_DEPTH, SchemaLimits
from bankml.schema.reader import INTEGER, SchemaDocument

# the converter's counted limits only (nodes, grammar bytes, rule text built), without its wall-clock one: a
# conversion under them ends in a grammar or a SchemaError naming the limit, whatever the machine's load, so
# these tests bound the work of each hostile schema without timing it
_COUNTED = SchemaLimits(max_seconds=None)


def _bounded(convert, schema):
    """``convert(schema)`` (json_schema_to_grammar or json_schema_to_rules) under the counted limits only."""
    return convert(schema, limits=_COUNTED)


def _nested_properties(levels):
    root = {}
    cur = root
    for _ in range(levels):
        cur["properties"] = {"a": {}}
        cur = cur["properties"]["a"]
    return root


def _ref_chain(n, wrap=lambda ref: {"$ref": ref}):
    defs = {"d%d" % i: wrap("#/$defs/d%d" % (i + 1)) for i in range(n)}
    defs["d%d" % n] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"a":' * 100000 + "1" + "}" * 100000])
def test_deep_json_text_is_refused(text):
    with pytest.raises(SchemaError, match="nesting deeper than 512") as info:
        _bounded(json_schema_to_grammar, text)
    assert info.value.pointer == "#"


def test_depth_limit_is_512():
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    load_schema(ok)
    with pytest.raises(SchemaError):
        load_schema("[" + ok + "]")
    with pytest.raises(SchemaError, match="nesting deeper"):
        json_schema_to_grammar(_nested_properties(300))
    grammar, _ = _bounded(json_schema_to_grammar, _nested_properties(250))
    Rules.parse(grammar)


def test_reader():
    assert load_schema('{"a": 2.0, "b": 2, "a": 3}') == {"a": 3, "b": 2}
    assert list(load_schema('{"z": 1, "a": 2, "z": 3}')) == ["z", "a"]
    assert type(load_schema('{"a": 2.0}')["a"]) is float
    assert type(load_schema('{"a": 123456789012345678901234567890}')["a"]) is float
    assert type(load_schema('{"a": 18446744073709551615}')["a"]) is int
    for bad in ['{"a": NaN}', '{"a": 1e400}', '{"a": "\\ud800"}', "{", "", '{"a": 1} x']:
        with pytest.raises(SchemaError):
            load_schema(bad)
    with pytest.raises(SchemaError):
        load_schema({"a": object()})


def test_schema_must_be_an_object():
    for schema in ["[]", "true", "5", '"x"', "null"]:
        with pytest.raises(SchemaError) as info:
            json_schema_to_grammar(schema)
        assert str(info.value) == "JSON schema conversion failed:\nJSON schema error at #: schema must be an object"


def test_error_pointer():
    with pytest.raises(SchemaError) as info:
        json_schema_to_grammar(
            {"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"type": "nope"}}}}}
        )
    assert info.value.pointer == "#/properties/x/properties/y"
    with pytest.raises(SchemaError) as info:
        json_schema_to_grammar({"type": "object", "properties": {"p": {"type": "string", "pattern": "^(a$"}}})
    assert info.value.pointer == "#/properties/p"
    assert str(info.value) == "JSON schema conversion failed:\nInvalid pattern ^(a$: unbalanced parentheses"
    with pytest.raises(SchemaError) as info:
        json_schema_to_grammar({"$ref": "#/$defs/a", "$defs": {"a": {"type": "integer", "maximum": -(2**63)}}})
    assert info.value.pointer == "#/$defs/a"
    assert isinstance(info.value, ValueError)


def test_recursive_refs_convert():
    for schema in [
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
        {"$ref": "#/$defs/a", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}},
        {"type": "object", "properties": {"self": {"$ref": "#/properties/self"}}},
    ]:
        _bounded(json_schema_to_grammar, schema)


def test_allof_through_a_ref_cycle():
    # llama.cpp's converter overflows its stack here (a segmentation fault); bankml refuses
    schema = {"allOf": [{"$ref": "#/$defs/A"}], "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}}
    with pytest.raises(SchemaError, match="cycle of \\$refs") as info:
        _bounded(json_schema_to_grammar, schema)
    assert info.value.pointer.startswith("#")
    # a chain of $refs that ends converts
    grammar, _ = json_schema_to_grammar(
        {
            "allOf": [{"$ref": "#/$defs/A"}],
            "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        }
    )
    assert "x-kv" in grammar


def test_allof_recursing_through_a_property():
    # merging A's properties into the allOf visits the allOf again, one level deeper each time: llama.cpp
    # overflows its stack (a segmentation fault); bankml refuses
    schema = {
        "$ref": "#/$defs/A",
        "$defs": {"A": {"type": "object", "properties": {"b": {"allOf": [{"$ref": "#/$defs/A"}]}}}},
    }
    with pytest.raises(SchemaError, match="recurses through allOf"):
        _bounded(json_schema_to_grammar, schema)


def test_long_ref_chains():
    grammar, _ = _bounded(json_schema_to_grammar, _ref_chain(2000))
    Rules.parse(grammar)
    # far past what the stack allows: a clear refusal, not a crash
    for wrap in [
        lambda r: {"$ref": r},
        lambda r: {"anyOf": [{"$ref": r}, {"type": "null"}]},
        lambda r: {"type": "object", "properties": {"x": {"$ref": r}}},
    ]:
        with pytest.raises(SchemaError, match="nests too deeply"):
            _bounded(json_schema_to_grammar, _ref_chain(50000, wrap))


def _nested_arrays(levels, leaf):
    schema = leaf
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def _nested_arrays_grammar(levels):
    """The grammar of _nested_arrays(levels, {"type": "integer"}), written out: one rule a level."""
    names = ["root"] + ["-".join(["item"] * k) for k in range(1, levels)] + ["integer"]
    rules = {
        name: '"[" space (%s ("," space %s)*)? space "]"' % (inner, inner) for name, inner in zip(names, names[1:])
    }
    rules["integer"] = '("-"? integral-part)'
    rules["integral-part"] = "[0] | [1-9] [0-9]{0,15}"
    rules["space"] = '| " " | "\\n"{1,2} [ \\t]{0,20}'
    return "".join("%s ::= %s\n" % (name, rules[name]) for name in sorted(rules))


@pytest.mark.parametrize("levels", [3, _COMPILED_MAX_DEPTH + 50])
def test_nesting_past_the_compiled_depth(levels):
    # past _COMPILED_MAX_DEPTH levels the compiled reader and converter stop, and the conversion, the document or the
    # build_grammar() is redone by their sources run as plain Python (the reader's nodes and errors shared): the
    # same answers, and the same refusal with its pointer
    schema = _nested_arrays(levels, {"type": "integer"})
    assert json_schema_to_grammar(schema) == (_nested_arrays_grammar(levels), [])
    assert build_grammar(lambda builder: builder.add_schema("root", schema)) == _nested_arrays_grammar(levels)
    node = SchemaDocument(schema).root
    assert build_grammar(lambda builder: builder.add_schema("root", node)) == _nested_arrays_grammar(levels)
    for _ in range(levels):
        node = node.items
    assert node.kind == INTEGER
    bogus = _nested_arrays(levels, {"type": "bogus"})
    for call in (
        json_schema_to_grammar,
        SchemaDocument,
        lambda s: build_grammar(lambda builder: builder.add_schema("root", s)),
    ):
        with pytest.raises(SchemaError, match="unrecognized type bogus") as info:
            call(bogus)
        assert info.value.pointer == "#" + "/items" * levels
    if converter._COMPILED and levels > _COMPILED_MAX_DEPTH:
        # the plain-Python modules were used, and the converter's reads with the plain reader
        assert reader._PYTHON_MODULE is not None and converter._PYTHON_MODULE is not None
        assert converter._PYTHON_MODULE._Builder is reader._PYTHON_MODULE._Builder
        assert not converter._PYTHON_MODULE._COMPILED and not reader._PYTHON_MODULE._COMPILED


def test_huge_counts():
    grammar, _ = _bounded(json_schema_to_grammar, {"type": "string", "maxLength": 10**9})
    assert "char{0,1000000000}" in grammar
    Rules.parse(grammar)  # llama.cpp's parser takes a maximum past 2000 as no maximum
    for schema in [
        {"type": "array", "minItems": 10**9},
        {"type": "string", "minLength": 5000},
        {"type": "string", "pattern": "^a{1000000}$"},
    ]:
        json_schema_to_grammar(schema)
        with pytest.raises(SchemaError, match="refused by the GBNF parser") as info:
            _bounded(json_schema_to_rules, schema)
        assert isinstance(info.value.__cause__, GrammarError)


@pytest.mark.parametrize(
    "pattern",
    [
        "^" + "ab" * 200000 + "$",
        "^" + "(" * 100000 + "$",
        "^" + "|".join(["a.b"] * 20000) + "$",
        "^" + "(ab){2}" * 10000 + "$",
        "^" + "[a-z]" * 50000 + "$",
        "^" + "\\" * 100000 + "$",
        "^" + "(?:a)" * 50000 + "$",
    ],
    ids=[
        "long-literal",
        "deep-parens",
        "wide-alternation",
        "many-repeats",
        "many-classes",
        "backslashes",
        "many-groups",
    ],
)
def test_pathological_patterns(pattern):
    grammar, warnings = _bounded(json_schema_to_grammar, {"type": "string", "pattern": pattern})
    assert grammar


def test_wide_schemas():
    props = {"p%d" % i: {"type": "string", "pattern": "^\\w$"} for i in range(5000)}
    grammar, warnings = _bounded(json_schema_to_grammar, {"type": "object", "properties": props})
    assert len(warnings) == 5000
    _bounded(
        json_schema_to_grammar,
        {"type": "object", "properties": {"p%d" % i: {} for i in range(10000)}, "additionalProperties": True},
    )
    _bounded(json_schema_to_grammar, {"enum": list(range(100000))})
    _bounded(json_schema_to_grammar, {"type": "object", "properties": {"k" * 5000: {}}, "additionalProperties": False})


def test_long_property_name_with_additional_properties():
    # the exclusion trie is walked as deep as the name is long
    _bounded(json_schema_to_grammar, {"type": "object", "properties": {"k" * 5000: {}}, "additionalProperties": True})
    grammar, _ = json_schema_to_grammar({"type": "object", "properties": {"k" * 200: {}}, "additionalProperties": True})
    Rules.parse(grammar)


def test_pattern_splitting_a_character():
    # llama.cpp works on bytes: "é*" repeats the last byte of é only; the grammar text is not UTF-8 then
    grammar, _ = json_schema_to_grammar({"type": "string", "pattern": "^é*$"})
    assert grammar.encode("utf-8", "surrogateescape").startswith(b'root ::= "\\"" ("\xc3" "\xa9"*) "\\""')


def test_format_literal():
    assert gbnf_format_literal('a"b\\c\nd\re') == '"a\\"b\\\\c\\nd\\re"'


def test_schema_as_text_and_dict_agree():
    schema = {"type": "object", "properties": {"a": {"const": 2.5}, "b": {"enum": [1, "x", None]}}}
    assert json_schema_to_grammar(schema) == json_schema_to_grammar(json.dumps(schema))
    assert json_schema_to_grammar(schema) == json_schema_to_grammar(json.dumps(schema).encode())


# ---------------------------------------------------------------------------------------------------------
# conversions that grow exponentially: refused by bankml.schema.limits.SchemaLimits while they are built, in a child
# process with a time and a memory limit (llama.cpp's converter has no bound and builds them whole)

_EXPONENTIAL = r"""
import json
from bankml import SchemaError, json_schema_to_grammar
from bankml.chat.constraint import chat_grammar


def allof_levels(n, copies=1):
    # each level's properties take the level below through allOf/$ref: the grammar doubles per level
    defs = {"l0": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}}
    for i in range(1, n + 1):
        ref = {"allOf": [{"$ref": "#/$defs/l%d" % (i - 1)}] * copies}
        defs["l%d" % i] = {"type": "object", "properties": {"a": ref, "b": ref}}
    return {"$ref": "#/$defs/l%d" % n, "$defs": defs}


def one_property(n):
    # the same rules rebuilt twice per level: the grammar stays small, the work doubles
    defs = {"l0": {"type": "object", "properties": {"a": {"type": "string"}}}}
    for i in range(1, n + 1):
        defs["l%d" % i] = {"type": "object", "properties": {
            "a": {"allOf": [{"$ref": "#/$defs/l%d" % (i - 1)}] * 2}}}
    return {"$ref": "#/$defs/l%d" % n, "$defs": defs}


def shared(n):
    x = {"type": "string"}
    for _ in range(n):
        x = {"anyOf": [x, x]}
    return x


def type_lists(n):
    x = {"type": "string"}
    for _ in range(n):
        x = {"type": ["object", "object"], "properties": {"a": x}}
    return x


def run(convert, schema):
    try:
        grammar = convert(schema)
    except SchemaError as e:
        return "SchemaError " + str(e).splitlines()[-1].split(";")[0] + " @ " + e.pointer[:40]
    return "grammar %d" % len(grammar)
"""


@pytest.mark.parametrize(
    "case, limit",
    [
        ("json.dumps(allof_levels(19))", "SchemaLimits.max_grammar_bytes"),
        ("allof_levels(16)", "SchemaLimits.max_grammar_bytes"),
        ("one_property(40)", "SchemaLimits.max_work_bytes"),
        ("shared(40)", "SchemaLimits.max_nodes"),
        ("json.dumps(type_lists(40))", "SchemaLimits.max_work_bytes"),
    ],
    ids=["allof-levels-text", "allof-levels-dict", "allof-rebuilt", "shared-subdicts", "type-lists"],
)
@pytest.mark.parametrize(
    "convert",
    [
        "lambda s: json_schema_to_grammar(s)[0]",
        "lambda s: chat_grammar(json.loads(s) if isinstance(s, str) else s, 'chatml')[0]",
    ],
    ids=["direct", "chat"],
)
def test_exponential_conversions_are_refused(case, limit, convert):
    from ..bounded import run_bounded

    out = run_bounded(_EXPONENTIAL + f"\nprint(run({convert}, {case}))\n")
    assert out.startswith("SchemaError ") and limit in out, out


def test_exponential_growth_below_the_limits_converts():
    # the same construction, smaller: converted whole, as llama.cpp does (its size doubles per level)
    from ..bounded import run_bounded

    out = run_bounded(
        _EXPONENTIAL + "\nprint(run(lambda s: json_schema_to_grammar(s)[0], allof_levels(8)), "
        "run(lambda s: json_schema_to_grammar(s)[0], allof_levels(9)))\n"
    )
    small, larger = [int(x) for x in out.replace("grammar", "").split()]
    assert 1.8 * small < larger < 2.6 * small


def test_limits_are_configurable_and_named():
    from bankml.schema.limits import budget

    schema = {"type": "object", "properties": {"p%d" % i: {"type": "string"} for i in range(50)}}
    grammar, _ = json_schema_to_grammar(schema)
    with pytest.raises(SchemaError, match="max_grammar_bytes") as info:
        json_schema_to_grammar(schema, SchemaLimits(max_grammar_bytes=len(grammar) // 2))
    assert info.value.pointer.startswith("#")
    assert json_schema_to_grammar(schema, SchemaLimits(max_grammar_bytes=len(grammar) + 100))[0] == grammar
    with pytest.raises(SchemaError, match="max_nodes"):
        json_schema_to_grammar(schema, SchemaLimits(max_nodes=20))
    with pytest.raises(SchemaError, match="max_work_bytes"):
        json_schema_to_grammar(schema, SchemaLimits(max_work_bytes=100))
    import threading
    import time as _time

    cancel = threading.Event()
    cancel.set()
    big = {"type": "object", "properties": {"p%d" % i: {"type": "string"} for i in range(1000)}}
    with budget(cancel=cancel), pytest.raises(SchemaError, match="cancelled"):
        json_schema_to_grammar(big, SchemaLimits())
    with budget(deadline=_time.monotonic() - 1), pytest.raises(SchemaError, match="time budget"):
        json_schema_to_grammar(big, SchemaLimits())
    # outside the block the same conversion runs
    assert json_schema_to_grammar(big, SchemaLimits())[0] == json_schema_to_grammar(big)[0]
