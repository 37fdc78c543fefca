"""bankml.integrations.structural_tag: XGrammar's structural tags compiled to GBNF (no engine needed).

Each format is compiled and walked, on a byte vocabulary, against texts of its language and texts outside it;
malformed tags are refused naming the field. Where XGrammar is importable (``pip install xgrammar``: vLLM's
environment has 0.2.8), every verdict, and those on random texts built from each tag's own strings, is
compared with XGrammar's own matcher (whole texts: accepted and terminated), and bankml's port of XGrammar's
regex dialect with XGrammar's EBNF for it; the texts where bankml's json_schema language differs on purpose
(``DIVERGES``) must differ as stated."""

import json
import random

import pytest

from bankml import Grammar, GrammarError, Rules, Vocab
from bankml.integrations.spec import Compiler, SpecError, grammar_text
from bankml.integrations.structural_tag import _XML_STYLES, StructuralTagError, structural_tag_to_grammar
from bankml.integrations.xgrammar_lang import XGrammarSyntaxError
from bankml.integrations.xgrammar_regex import regex_to_ebnf

VOCAB = Vocab([bytes([c]) for c in range(1, 256)] + [b"</eos>"], eog_ids=[255])
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
}


def tag(fmt):
    return {"type": "structural_tag", "format": fmt}


_RULES = {}


def rules(structural_tag):
    key = json.dumps(structural_tag, sort_keys=True)
    if key not in _RULES:
        _RULES[key] = Rules.parse(structural_tag_to_grammar(structural_tag), "root", VOCAB)
    return _RULES[key]


def accepts(structural_tag, text):
    g = Grammar(rules(structural_tag), VOCAB)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


def const(value):
    return {"type": "const_string", "value": value}


def triggered(at_least_one, stop_after_first, **extra):
    return dict(
        type="triggered_tags",
        triggers=["A"],
        tags=[{"begin": "A1", "content": const("L1"), "end": "A"}, {"begin": "A2", "content": const("L2"), "end": "A"}],
        at_least_one=at_least_one,
        stop_after_first=stop_after_first,
        **extra,
    )


def separated(at_least_one, stop_after_first, separator=","):
    return {
        "type": "tags_with_separator",
        "tags": [
            {"type": "tag", "begin": "<a>", "content": const("1"), "end": "</a>"},
            {"type": "tag", "begin": "<b>", "content": {"type": "any_text"}, "end": "</b>"},
        ],
        "separator": separator,
        "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
    }


TRIGGERED_TEXTS = ["textA1L1AtextA2L2AText", "A1L1Atext", "A1L1A", "text", "", "AA", "A1L2A", "A1L1A2L2A"]
SEPARATED_TEXTS = ["", "<a>1</a>", "<a>1</a>,<b>x</b>", "<a>1</a><b>x</b>", "<a>1</a>,", "x<a>1</a>", "<b>,</b>"]

# (case, structural tag, texts in its language, texts outside it)
CASES = [
    ("const_string", tag(const("Hello!")), ["Hello!"], ["Hello", "Hello!!", "", "HELLO!"]),
    ("const_string_empty", tag(const("")), [""], ["a"]),
    (
        "json_schema",
        tag({"type": "json_schema", "json_schema": WEATHER}),
        ['{"city": "Paris", "days": 3}', '{"city": "x", "days": 1}'],
        [
            '{"city": "Paris"}',
            '{"city": "Paris", "days": 9}',
            "[]",
            '{"city": 1, "days": 2}',
            # the canonical style (bankml.schema.tool_args): the declared order, each listed key once, no
            # undeclared key (as XGrammar's default), json.dumps's separators (XGrammar takes any whitespace)
            '{"city":"x","days":1}',
            '{"days": 2, "city": "x"}',
            '{"city": "a", "days": 7, "x": 1}',
            '{"city": "P\\u0061ris", "days": 3}',
        ],
    ),
    ("json_schema_true", tag({"type": "json_schema", "json_schema": True}), ["1", '"x"', '{"a": [1, {}]}'], ["", "{"]),
    (
        "json_schema_fields",
        tag(
            {
                "type": "json_schema",
                "json_schema": {"type": "integer"},
                "style": "json",
                "any_order": True,
                "max_whitespace_cnt": None,
            }
        ),
        ["12", "-3"],
        ["1.5", "x"],
    ),
    (
        "grammar",
        tag({"type": "grammar", "grammar": 'root ::= rule_a ("," rule_a)*  # a list\nrule_a ::= "yes" | "no"'}),
        ["yes", "yes,no,no"],
        ["yes,", "maybe", ""],
    ),
    (
        "grammar_escapes_and_classes",
        tag({"type": "grammar", "grammar": 'root ::= "\\x41" [\\u00e9-\\u00ea] [^a-c] "\\t" ()  [a-]{1,2}'}),
        ["A\u00e9d\ta", "A\u00eaz\t-a"],
        ["A\u00ebd\ta", "A\u00e9a\ta", "A\u00e9d\t"],
    ),
    (
        "grammar_tag_dispatch_macro",
        tag(
            {
                "type": "grammar",
                "grammar": 'root ::= TagDispatch(("<a>", r.a), loop_after_dispatch=false, excludes=("!"))\nr.a ::= "1" "</a>"',
            }
        ),
        ["x", "", "x<a>1</a>", "<a"],
        ["x<a>2</a>", "x!", "x<a>1</a>y", "<a>"],
    ),
    (
        "grammar_regex_macro",
        tag({"type": "grammar", "grammar": 'root ::= "id:" Regex("[0-9]{2}")'}),
        ["id:12"],
        ["id:1"],
    ),
    ("regex", tag({"type": "regex", "pattern": "[A-Z]{3}-[0-9]{4}"}), ["ABC-1234"], ["abc-1234", "ABC-123", ""]),
    ("regex_dot", tag({"type": "regex", "pattern": "^a.c$"}), ["abc", "a\nc", "a\u00e9c"], ["ac", "abbc"]),
    (
        "regex_classes",
        tag({"type": "regex", "pattern": "\\d+\\s\\w*(x|)"}),
        ["1 ", "12\u00a0ab_x", "3\tx"],
        ["a ", "1\u2003"],
    ),
    ("any_text", tag({"type": "any_text"}), ["", "anything <at all>\n\u00e9"], []),
    (
        "any_text_excludes",
        tag({"type": "any_text", "excludes": ["<f>", "</s>"]}),
        ["abc <g>", "<", "</", "<f", "</s"],
        ["a<f>b", "</s>", "x</s>y"],
    ),
    (
        "tag_any_text_end",
        tag({"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"}),
        ["<think>abc</think>", "<think></think>", "<think>a</thin</think>"],
        ["<think>a</think>b</think>", "<think>a", "<think>a</think>x"],
    ),
    (
        "tag_end_list",
        tag({"type": "tag", "begin": "<r>", "content": {"type": "any_text"}, "end": ["</r>", "</a>"]}),
        ["<r>x</r>", "<r>x</a>", "<r></a>"],
        ["<r>x</a></r>", "<r>x"],
    ),
    (
        "sequence",
        tag(
            {
                "type": "sequence",
                "elements": [const("A: "), {"type": "json_schema", "json_schema": {"type": "integer"}}],
            }
        ),
        ["A: 12"],
        ["A: x", "A:12"],
    ),
    ("or", tag({"type": "or", "elements": [const("yes"), const("no")]}), ["yes", "no"], ["", "yesno"]),
    (
        "optional",
        tag({"type": "sequence", "elements": [{"type": "optional", "content": const("a")}, const("b")]}),
        ["b", "ab"],
        ["aab"],
    ),
    ("plus", tag({"type": "plus", "content": const("ab")}), ["ab", "abab"], ["", "aba"]),
    ("star", tag({"type": "star", "content": const("ab")}), ["", "ababab"], ["a"]),
    ("repeat", tag({"type": "repeat", "min": 1, "max": 3, "content": const("x")}), ["x", "xxx"], ["", "xxxx"]),
    ("repeat_unbounded", tag({"type": "repeat", "min": 2, "max": -1, "content": const("x")}), ["xx", "xxxxx"], ["x"]),
    (
        "triggered_tags",
        tag(triggered(False, False)),
        ["textA1L1AtextA2L2AText", "A1L1Atext", "text", ""],
        ["AA", "A1L2A"],
    ),
    ("triggered_at_least_one", tag(triggered(True, False)), ["A1L1Atext", "A1L1A"], ["text", "", "textA1L1A"]),
    ("triggered_stop_after_first", tag(triggered(False, True)), ["text", "", "xA1L1A"], ["A1L1Atext", "A1L1AA2L2A"]),
    ("triggered_exactly_one", tag(triggered(True, True)), ["A1L1A", "A2L2A"], ["xA1L1A", "A1L1Ax", ""]),
    ("triggered_excludes", tag(triggered(False, False, excludes=["END"])), ["xA1L1Ay", "EN"], ["xEND", "A1L1AEND"]),
    (
        "triggered_inside_tag",
        tag({"type": "tag", "begin": "begin", "content": triggered(False, False), "end": "end"}),
        ["beginabcA1L1Atextend", "beginend", "beginenA1L1Aend"],
        ["beginA1L1Aendabc", "beginxendyend"],
    ),
    (
        "tags_with_separator",
        tag(separated(False, False)),
        ["", "<a>1</a>", "<a>1</a>,<b>x</b>,<a>1</a>"],
        ["<a>1</a>,", "x<a>1</a>"],
    ),
    ("separator_at_least_one", tag(separated(True, False)), ["<a>1</a>", "<b></b>,<a>1</a>"], [""]),
    ("separator_stop_after_first", tag(separated(False, True)), ["", "<b>,x</b>"], ["<a>1</a>,<a>1</a>"]),
    ("separator_exactly_one", tag(separated(True, True)), ["<a>1</a>"], ["", "<a>1</a>,<a>1</a>"]),
    ("separator_empty", tag(separated(False, False, separator="")), ["<a>1</a><b>y</b>"], ["<a>1</a>,<b>y</b>"]),
    (
        "dispatch",
        tag({"type": "dispatch", "rules": [["<f=", {"type": "sequence", "elements": [const("a>"), const("!")]}]]}),
        ["x<f=a>!y<f=a>!", "", "<f"],
        ["<f=b>", "<f=a>"],
    ),
    (
        "dispatch_once_excludes",
        tag({"type": "dispatch", "rules": [["<f=", const("a>")]], "loop": False, "excludes": ["</end>"]}),
        ["x<f=a>", "x"],
        ["x<f=a>y", "x</end>"],
    ),
    (
        "legacy",
        {
            "type": "structural_tag",
            "structures": [
                {
                    "begin": "<function=f>",
                    "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    "end": "</function>",
                }
            ],
            "triggers": ["<function="],
        },
        ['Let me call. <function=f>{"a": 1}</function> done', "", "no call"],
        ["<function=f>{}</function>", "<function=g>"],
    ),
    (
        "legacy_at_least_one",
        {
            "type": "structural_tag",
            "structures": [{"begin": "<f>", "schema": None, "end": "</f>"}],
            "triggers": ["<f>"],
            "at_least_one": True,
        },
        ['<f>{"any": [1]}</f>', "<f>1</f>tail"],
        ["text", ""],
    ),
    ("untyped_formats", tag({"begin": "<a>", "content": {"value": "x"}, "end": "</a>"}), ["<a>x</a>"], ["<a>y</a>"]),
    (
        "automaton_failure_links",
        tag({"type": "any_text", "excludes": ["bcd", "abce"]}),
        ["abc", "abce"[:3] + "x", "bc"],
        ["abcd", "xbcd", "abce"],
    ),
    (
        "automaton_exclude_as_suffix",
        tag({"type": "any_text", "excludes": ["abcd", "bc"]}),
        ["ab", "abx", "b"],
        ["abc", "abcx", "xbc"],
    ),
    (
        "automaton_trigger_on_its_path_only",
        tag(
            {
                "type": "triggered_tags",
                "triggers": ["bc"],
                "tags": [{"begin": "bc", "content": const("!"), "end": "."}],
                "excludes": ["abcd"],
            }
        ),
        ["abc!", "xbc!.", "abc"],
        ["xbc", "abcd", "xbc!"],
    ),
    (
        "unicode",
        tag(
            {
                "type": "triggered_tags",
                "triggers": ["\u00e9"],
                "tags": [{"begin": "\u00e9\U0001f600", "content": const("\u732b"), "end": "!"}],
            }
        ),
        ["a\u00e9\U0001f600\u732b!b", "\u00ea"],
        ["\u00e9a", "\u00e9\U0001f600x!"],
    ),
]

PARAMS = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
}


def xml(style):
    return tag({"type": "json_schema", "json_schema": PARAMS, "style": style})


DSML = "\uff5cDSML\uff5c"
# XGrammar's XML styles written by bankml.schema.tool_args: a subset of XGrammar's language (schema order, canonical
# JSON for the values that are not strings, a newline at most between parameters)
XML_CASES = [
    (
        "qwen_xml",
        xml("qwen_xml"),
        [
            "<parameter=name>Bob</parameter><parameter=age>100</parameter>",
            "\n<parameter=name>Bob <b>x</b></parameter>\n<parameter=age>-1</parameter>\n",
            '<parameter=name></parameter><parameter=age>0</parameter><parameter=tags>["a", "b"]</parameter>',
            '<parameter=name>"Bob&lt;"\n</parameter><parameter=age>7</parameter>',
        ],
        [
            "<parameter=name>Bob</parameter>",
            "<parameter=age>100</parameter><parameter=name>Bob</parameter>",
            "<parameter=name>a</parameter></parameter><parameter=age>1</parameter>",
            "<parameter=name>Bob</parameter><parameter=age>x</parameter>",
            "<parameter=name>Bob</parameter><parameter=age>1</parameter><parameter=other>1</parameter>",
        ],
    ),
    (
        "qwen_xml_parameter",
        tag({"type": "qwen_xml_parameter", "json_schema": PARAMS}),
        ["<parameter=name>Bob</parameter><parameter=age>1</parameter>"],
        ["<parameter=name>Bob</parameter>"],
    ),
    (
        "minimax_xml",
        xml("minimax_xml"),
        ['<parameter name="name">Bob</parameter>\n<parameter name="age">100</parameter>'],
        ['<parameter name="age">100</parameter>', "<parameter=name>Bob</parameter><parameter=age>100</parameter>"],
    ),
    (
        "deepseek_xml",
        xml("deepseek_xml"),
        [
            f'<{DSML}parameter name="name" string="true">Bob</{DSML}parameter>'
            f'<{DSML}parameter name="age" string="false">1</{DSML}parameter>'
        ],
        [f'<{DSML}parameter name="name" string="true">Bob</{DSML}parameter>'],
    ),
    (
        "glm_xml",
        xml("glm_xml"),
        ["<arg_key>name</arg_key><arg_value>Bob</arg_value><arg_key>age</arg_key><arg_value>100</arg_value>"],
        ["<arg_key>name</arg_key><arg_value>Bob</arg_value>"],
    ),
]

# texts where bankml's json_schema language (jsonschema's, via the strict compiler) is not XGrammar's: XGrammar's
# structural tags compile schemas in its strict mode (declared order, no undeclared properties)
DIVERGES = {
    # bankml writes json.dumps's separators and one spelling per character; XGrammar takes any whitespace and escape
    ("json_schema", '{"city":"x","days":1}'): (False, True),
    ("json_schema", '{"city": "P\\u0061ris", "days": 3}'): (False, True),
}


@pytest.mark.parametrize("case,structural_tag,yes,no", CASES + XML_CASES, ids=[c[0] for c in CASES + XML_CASES])
def test_each_format_accepts_its_language(case, structural_tag, yes, no):
    for text in yes:
        assert accepts(structural_tag, text), (case, text)
    for text in no:
        assert not accepts(structural_tag, text), (case, text)


def test_text_and_dict_forms_compile_alike():
    fmt = triggered(True, False)
    assert structural_tag_to_grammar(tag(fmt)) == structural_tag_to_grammar(json.dumps(tag(fmt)))
    assert structural_tag_to_grammar(tag(fmt)) == structural_tag_to_grammar({"format": fmt})  # type is optional


# -- refusals


def deep(n):
    fmt = const("x")
    for _ in range(n):
        fmt = {"type": "optional", "content": fmt}
    return tag(fmt)


ERRORS = [
    ({"type": "structural_tag"}, "structural_tag", "the field 'format' is required"),
    ({"type": "tag", "format": const("a")}, "structural_tag.type", 'must be "structural_tag"'),
    ("{not json", "structural_tag", "not valid JSON"),
    ([1], "structural_tag", "must be an object, got an array"),
    (tag({"type": "foo"}), "structural_tag.format.type", "unknown format type 'foo'"),
    (tag({"type": 3}), "structural_tag.format.type", "must be a string, got a number"),
    (tag({"type": "const_string"}), "structural_tag.format", "the field 'value' is required"),
    (tag(const(3)), "structural_tag.format.value", "must be a string, got a number"),
    (tag({"type": "sequence", "elements": []}), "structural_tag.format.elements", "at least one format"),
    (tag({"type": "or", "elements": [const("a"), 5]}), "structural_tag.format.elements[1]", "must be an object"),
    (tag({"type": "tag", "begin": "a", "content": const("b")}), "structural_tag.format", "the field 'end' is required"),
    (
        tag({"type": "tag", "begin": "a", "content": const("b"), "end": []}),
        "structural_tag.format.end",
        "cannot be empty",
    ),
    (
        tag({"type": "tag", "begin": "a", "content": const("b"), "end": ["x", 1]}),
        "structural_tag.format.end[1]",
        "must be a string",
    ),
    (tag(triggered("yes", False)), "structural_tag.format.at_least_one", "must be a boolean"),
    (tag(dict(triggered(False, False), triggers=[""])), "structural_tag.format.triggers[0]", "non-empty"),
    (tag(dict(triggered(False, False), tags=[])), "structural_tag.format.tags", "at least one tag"),
    (
        tag({"type": "tags_with_separator", "tags": [{"begin": "a", "content": const("b"), "end": "c"}]}),
        "structural_tag.format",
        "the field 'separator' is required",
    ),
    (tag({"type": "json_schema"}), "structural_tag.format", "the field 'json_schema' is required"),
    (tag({"type": "json_schema", "json_schema": "{}"}), "structural_tag.format.json_schema", "got a string"),
    (tag({"type": "json_schema", "json_schema": {}, "style": "yaml"}), "structural_tag.format.style", "must be one of"),
    (
        tag({"type": "json_schema", "json_schema": {}, "style": "kimi_k3_xml"}),
        "structural_tag.format.style",
        "not supported yet",
    ),
    (
        tag({"type": "json_schema", "json_schema": {}, "style": "cohere_xml"}),
        "structural_tag.format.style",
        "not supported yet",
    ),
    (tag({"type": "qwen_xml_parameter", "json_schema": {}}), "structural_tag.format.json_schema", "listed properties"),
    (
        tag({"type": "json_schema", "json_schema": {"properties": {"a": {}}, "minProperties": 1}, "style": "qwen_xml"}),
        "structural_tag.format.json_schema",
        "minProperties",
    ),
    (
        tag({"type": "json_schema", "json_schema": {}, "excludes": ["x"]}),
        "structural_tag.format.excludes",
        "not supported",
    ),
    (
        tag({"type": "json_schema", "json_schema": {}, "max_whitespace_cnt": 2}),
        "structural_tag.format.max_whitespace_cnt",
        "not supported",
    ),
    (tag({"type": "any_text", "max_tokens": 10}), "structural_tag.format.max_tokens", "token budget is not supported"),
    (
        tag({"type": "any_text", "max_chars": 10}),
        "structural_tag.format.max_chars",
        "character budget is not supported",
    ),
    (tag({"type": "any_text", "max_chars": -1}), "structural_tag.format.max_chars", "non-negative"),
    (tag({"type": "token", "token": 3}), "structural_tag.format.type", "token-level format 'token' is not supported"),
    (
        tag({"type": "tag", "begin": {"type": "token", "token": 1}, "content": const("x"), "end": "e"}),
        "structural_tag.format.begin",
        "token begin",
    ),
    (tag({"type": "repeat", "min": 3, "max": 1, "content": const("x")}), "structural_tag.format", "min must be <= max"),
    (tag({"type": "repeat", "min": 0, "max": 5000, "content": const("x")}), "structural_tag.format.max", "past 2000"),
    (tag({"type": "grammar", "grammar": ""}), "structural_tag.format.grammar", "non-empty"),
    (
        tag({"type": "grammar", "grammar": 'root ::= "a" (= "b")'}),
        "structural_tag.format.grammar",
        "lookahead assertions",
    ),
    (
        tag({"type": "grammar", "grammar": "root ::= other"}),
        "structural_tag.format.grammar",
        'Rule "other" is not defined',
    ),
    (
        tag({"type": "grammar", "grammar": 'start ::= "a"'}),
        "structural_tag.format.grammar",
        'root rule with name "root"',
    ),
    (
        tag({"type": "grammar", "grammar": 'root[max_tokens=3] ::= "a"'}),
        "structural_tag.format.grammar",
        "rule attributes",
    ),
    (tag({"type": "grammar", "grammar": "root ::= Token(1)"}), "structural_tag.format.grammar", "Token macro"),
    (tag({"type": "grammar", "grammar": "root ::= [\\d]"}), "structural_tag.format.grammar", "Character class escape"),
    (tag({"type": "regex", "pattern": "(?=a)b"}), "structural_tag.format.pattern", "Lookahead is not supported"),
    (tag({"type": "regex", "pattern": "(ab"}), "structural_tag.format.pattern", "The parenthesis is not closed"),
    (
        tag({"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": ""}),
        "structural_tag.format.end",
        "unlimited",
    ),
    (tag(dict(triggered(False, False), triggers=["B"])), "structural_tag.format.tags[0].begin", "matches no trigger"),
    (
        tag(dict(triggered(False, False), triggers=["A", "A1"])),
        "structural_tag.format.tags[0].begin",
        "more than one trigger",
    ),
    (tag({"type": "dispatch", "rules": [["x"]]}), "structural_tag.format.rules[0]", "[pattern, format] pair"),
    (
        {"structures": [{"begin": "a", "schema": [], "end": "b"}], "triggers": ["a"]},
        "structural_tag.structures[0].schema",
        "must be a JSON schema",
    ),
    ({"structures": [{"begin": "a", "end": "b"}]}, "structural_tag", "the field 'triggers' is required"),
    (tag(const("\ud800")), "structural_tag.format.value", "lone surrogate"),
    (deep(300), "structural_tag.format" + ".content" * 100, "nest deeper than 100"),
    ("[" * 100000 + "]" * 100000, "structural_tag", "nests deeper than 512 levels"),
    (
        tag({"type": "any_text", "excludes": ["".join(chr(0x4E00 + i) for i in range(2000))]}),
        "structural_tag.format",
        "too large to compile",
    ),
    (
        tag({"type": "grammar", "grammar": "root ::= " + "(" * 150 + '"a"' + ")" * 150}),
        "structural_tag.format.grammar",
        "Nest layer",
    ),
]


@pytest.mark.parametrize("structural_tag,path,reason", ERRORS, ids=[e[1][:60] + ":" + e[2] for e in ERRORS])
def test_malformed_tags_are_refused_naming_the_field(structural_tag, path, reason):
    with pytest.raises(StructuralTagError) as info:
        structural_tag_to_grammar(structural_tag)
    assert info.value.path == path, str(info.value)
    assert reason in info.value.reason, str(info.value)
    assert str(info.value).startswith(path + ": ")


def test_refused_schema_names_the_tag_path_keyword_and_pointer():
    refused = {"type": "object", "properties": {"q": {"type": "string", "pattern": "(?=x)"}}}
    fmt = dict(triggered(False, False))
    fmt["tags"] = [
        fmt["tags"][0],
        {"begin": "A2", "content": {"type": "json_schema", "json_schema": refused}, "end": "A"},
    ]
    with pytest.raises(StructuralTagError) as info:
        structural_tag_to_grammar(tag(fmt))
    e = info.value
    assert e.path == "structural_tag.format.tags[1].content.json_schema"
    assert e.keyword == "pattern" and e.pointer.startswith("#/properties/q")
    assert "pattern" in e.reason and "#/properties/q" in e.reason
    legacy = {"structures": [{"begin": "<f>", "schema": refused, "end": "</f>"}], "triggers": ["<f>"]}
    with pytest.raises(StructuralTagError) as info:
        structural_tag_to_grammar(legacy)
    assert info.value.path == "structural_tag.structures[0].schema" and info.value.keyword == "pattern"


def test_spec_compiles_structural_tags_and_caches_them():
    fmt = tag(triggered(True, True))
    assert grammar_text("structural_tag", fmt) == structural_tag_to_grammar(fmt)
    compiler = Compiler(VOCAB)
    first = compiler.matcher("structural_tag", fmt)
    compiler.matcher("structural_tag", json.loads(json.dumps(fmt)))
    assert compiler.compiled == 1
    first.accept_bytes(b"A2L2A")
    assert first.complete
    with pytest.raises(SpecError, match="structural_tag.format.type: unknown format type"):
        grammar_text("structural_tag", tag({"type": "nope"}))


# -- XGrammar, where it is installed


def _xgrammar():
    return pytest.importorskip("xgrammar", reason="XGrammar is not installed here (pip install xgrammar)")


def xgrammar_accepts(xgr, structural_tag, text):
    from xgrammar.testing import _is_grammar_accept_string

    if "structures" in structural_tag:  # the legacy form, as SGLang's XGrammar backend compiles it
        items = [
            xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"] or {}), end=s["end"])
            for s in structural_tag["structures"]
        ]
        legacy = xgr.StructuralTag.from_legacy_structural_tag(items, structural_tag["triggers"])
        legacy.format.at_least_one = structural_tag.get("at_least_one", False)
        grammar = xgr.Grammar.from_structural_tag(legacy)
    else:
        grammar = xgr.Grammar.from_structural_tag(json.dumps(structural_tag))
    return _is_grammar_accept_string(grammar, text)


def tag_strings(structural_tag):
    """The tag's own strings: begins, ends, triggers, values, separators and excludes."""
    found = set()

    def collect(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("begin", "end", "value", "separator") and isinstance(value, str):
                    found.add(value)
                elif key in ("triggers", "excludes", "end") and isinstance(value, list):
                    found.update(v for v in value if isinstance(v, str))
                elif key != "json_schema" and key != "schema":
                    collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    collect(structural_tag)
    return found


def random_texts(structural_tag, yes, no, rng, n=40):
    """Texts built from the tag's own strings (begins, ends, triggers, values, excludes) and a few characters,
    and single-character edits of the known texts: where the automata and the dispatch go wrong."""
    pieces = {"x", "1", "<", "/", ">", "A", " "} | tag_strings(structural_tag)
    pieces = sorted(p for p in pieces if p)
    out = set()
    for _ in range(n):
        out.add("".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))))
    for text in yes + no:
        for _ in range(3):
            if text:
                i = rng.randrange(len(text))
                out.add(text[:i] + text[i + 1 :])
                out.add(text[:i] + rng.choice(pieces) + text[i:])
    return sorted(out)


def test_verdicts_equal_xgrammars():
    xgr = _xgrammar()
    rng = random.Random(45)
    compared = diverged = 0
    for case, structural_tag, yes, no in CASES:
        texts = list(yes) + list(no)
        if "json_schema" not in case and "legacy" not in case and case != "sequence":
            texts += random_texts(structural_tag, yes, no, rng)
        for text in texts:
            ours, theirs = accepts(structural_tag, text), xgrammar_accepts(xgr, structural_tag, text)
            if (case, text) in DIVERGES:
                assert (ours, theirs) == DIVERGES[(case, text)], (case, text)
                diverged += 1
                continue
            assert ours == theirs, (case, text, ours, theirs)
            compared += 1
    assert diverged == len(DIVERGES)
    assert compared > 1500


def test_xml_styles_are_a_subset_of_xgrammars():
    """Every text bankml's XML styles accept, XGrammar's accept too (the texts of the table and random edits of
    them); the table's texts outside bankml's language are XGrammar's verdicts' business."""
    xgr = _xgrammar()
    rng = random.Random(7)
    checked = 0
    for case, structural_tag, yes, no in XML_CASES:
        for text in yes + random_texts(structural_tag, yes, no, rng, n=0):
            if accepts(structural_tag, text):
                assert xgrammar_accepts(xgr, structural_tag, text), (case, text)
                checked += 1
    assert checked >= len([t for c in XML_CASES for t in c[2]])


BUILTIN_MODELS = [
    "llama",
    "qwen_3",
    "qwen_3_5",
    "qwen_3_coder",
    "kimi",
    "deepseek_r1",
    "deepseek_v3_1",
    "harmony",
    "deepseek_v3_2",
    "minimax",
    "glm_4_7",
    "deepseek_v4",
    "exaone",
]
# XGrammar's builtin tags bankml refuses, and the field named: an XML style it does not write, a json_schema excludes
BUILTIN_REFUSED = {
    "kimi_k3": "excludes",
    "cohere": "'cohere_xml' is not supported yet",
    "deepseek_v4_1": "'deepseek_v4_1_xml' is not supported yet",
    "minimax_m3": "'minimax_m3_xml' is not supported yet",
}
ONE_PARAM = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def walks(structural_tag, rng, n):
    """``n`` random texts of bankml's grammar for the tag: each step a random token the mask allows (a third of
    the time one of the tag's own strings, when one is allowed: how free text and raw values end), on a
    vocabulary of the ASCII bytes, each other character of the tag and the tag's strings, ending where the
    grammar may end."""
    strings = tag_strings(structural_tag)
    for opening, closing in _XML_STYLES.values():  # the XML styles' own tags, for the one parameter
        strings.update((opening("city", True), opening("city", False), closing))
    strings = sorted(s for s in strings if len(s) > 1)
    extra = sorted({c for c in json.dumps(structural_tag, ensure_ascii=False) if ord(c) > 127})
    pieces = [bytes([b]) for b in range(1, 128)] + [c.encode() for c in extra] + [t.encode() for t in strings]
    vocab = Vocab(pieces + [b"</eos>"], eog_ids=[len(pieces)])
    whole = set(range(127 + len(extra), len(pieces)))
    grammar_rules = Rules.parse(structural_tag_to_grammar(structural_tag), "root", vocab)
    out = []
    while len(out) < n:
        g = Grammar(grammar_rules, vocab)
        text = b""
        while len(text) < 3000:
            if g.complete and rng.random() < 0.15:
                out.append(text.decode("utf-8"))
                break
            # no backslash: a key spelled with an escape is bankml's json_schema language, not XGrammar's
            ids = [int(i) for i in g.allowed_ids() if not vocab.is_eog(int(i)) and vocab.piece(int(i)) != b"\\"]
            if not ids:
                out.append(text.decode("utf-8"))
                break
            preferred = [i for i in ids if i in whole]
            token = rng.choice(preferred if preferred and rng.random() < 0.33 else ids)
            g.accept(token)
            text += vocab.piece(token)
    return out


def test_xgrammars_builtin_tags():
    """The tags XGrammar's get_model_structural_tag builds (what SGLang sends for a model's tool calls, expanded
    into formats) for each builtin model, tool_choice auto, required and named, reasoning on and off: bankml
    compiles them (or refuses naming the field, for the styles it does not write), and every random text of
    bankml's grammar is one XGrammar accepts (a tool with one string parameter: no order or undeclared-member
    divergence)."""
    xgr = _xgrammar()
    rng = random.Random(3)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": ONE_PARAM, "strict": True}}]
    choices = ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}]
    walked = 0
    for model in BUILTIN_MODELS + sorted(BUILTIN_REFUSED):
        for choice in choices:
            for reasoning in (False, True):
                built = xgr.get_model_structural_tag(model, tools=tools, tool_choice=choice, reasoning=reasoning)
                structural_tag = json.loads(built.model_dump_json())
                if model in BUILTIN_REFUSED:
                    with pytest.raises(StructuralTagError, match=BUILTIN_REFUSED[model]):
                        structural_tag_to_grammar(structural_tag)
                    continue
                for text in walks(structural_tag, rng, 4):
                    assert xgrammar_accepts(xgr, structural_tag, text), (model, choice, reasoning, text)
                    walked += 1
    assert walked == len(BUILTIN_MODELS) * len(choices) * 2 * 4


REGEXES = [
    "[A-Z]{3}-[0-9]{4}",
    "a|",
    "|a",
    "(|a)",
    "a||b",
    "[\\u00e9a]",
    "\\x41B",
    "[a\\-z]",
    "[\\d-z]",
    "a{2,}",
    "\\cA",
    "\\u{1F600}",
    "[^\\]x]",
    "a*?",
    "(?<name>ab)",
    "(?:a)",
    "\\/",
    "\\-",
    "\\q",
    "\\.",
    "[.]",
    "$a^",
    "\\0",
    "[\\s]\\S+\\W",
    "[\\W\\d]",
    "\u00e9+",
    "\\U0001F600",
    "\\xff",
    "\\d+(\\.\\d+)?([eE][-+]?\\d+)?",
    "",
    "a{,3}",
    "(?=a)",
    "(?i)a",
    "a**",
    "[]",
    "\\1",
    "\\b",
]


def test_regex_dialect_is_xgrammars():
    _xgrammar()
    from xgrammar.testing import _regex_to_ebnf

    same = 0
    for pattern in REGEXES:
        try:
            theirs = _regex_to_ebnf(pattern)
        except Exception as e:  # XGrammar raises RuntimeError from C++
            theirs = "refused: " + str(e).rsplit(": ", 1)[-1].strip()
        try:
            ours = regex_to_ebnf(pattern)
        except XGrammarSyntaxError as e:
            ours = "refused: " + str(e).rsplit(": ", 1)[-1].strip()
        assert ours == theirs, pattern
        same += 1
    assert same == len(REGEXES)
