"""The shortcuts of bankml.chat's arena building and grammar printing give what the plain construction gives.

``bankml.chat.peg_builder.Builder`` resolves a rule's refs as it makes the rule (llama.cpp resolves them all at
the end), ``ChatBuilder.permute`` makes its parsers directly and gives its rules their GBNF as it makes them, and
``Arena.build_grammar`` finds the reachable rules in the walk that prints them. Here, on Qwen3.5's template
(llama.cpp's Qwen3-Coder handler: a permutation rule per set of required parameters) with tools of up to five
required parameters, some with the same name: the grammar equals the one printed from the same arena with every
use of a ref resolved again by ``Arena.resolve_refs`` and no rule's GBNF known beforehand; no use of a rule is
of a rule its name was given away from; answers parse the same through both arenas. The tests of
tests/chat/test_chat_tools.py compare the grammars and parses with llama.cpp's on every template.
"""

import copy
import json
import pathlib
import random
import re

import pytest

from bankml.chat import cache, jinja, peg, request_cache
from bankml.chat.inputs import ChatInputs
from bankml.chat.params import arena_grammar
from bankml.chat.peg_builder import clean_rule_name
from bankml.chat.template import ChatTemplate

DATA = pathlib.Path(__file__).parent.parent / "data"
QWEN35 = (DATA / "templates" / "Qwen3.5-4B.jinja").read_text()
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def _tool(name, n_required, n_optional=1, description="A tool"):
    props = {"p%d_x" % i: {"type": ("string", "integer", "number", "boolean")[i % 4]} for i in range(n_required)}
    props.update({"o%d" % i: {"type": "array", "items": {"type": "string"}} for i in range(n_optional)})
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": ["p%d_x" % i for i in range(n_required)]},
        },
    }


TOOLS = [_tool("tool_%d" % i, i % 6, i % 2) for i in range(18)]
# a name used twice (the second rule of each name replaces the first), and names that clean to the same rule name
DUPLICATES = TOOLS[:4] + [_tool("tool_1", 3, 0, "again"), _tool("tool.1", 2), _tool("tool-1", 4)]


def _plain_grammar(arena, lazy):
    """The grammar of a copy of ``arena`` with its refs resolved as llama.cpp does and no rule GBNF known."""
    plain = copy.deepcopy(arena)
    for p in plain.parsers:
        if p.__class__ is peg.Rule:
            p.gbnf = None
    plain.resolve_refs()
    return arena_grammar(plain, lazy), plain


@pytest.mark.parametrize("tools", [TOOLS, DUPLICATES], ids=["tools", "duplicate-names"])
@pytest.mark.parametrize("tool_choice", ["required", "auto"])
@pytest.mark.parametrize("parallel", [False, True])
def test_grammar_equals_the_plain_construction(tools, tool_choice, parallel):
    cache.clear()
    out = ChatTemplate(QWEN35).apply(
        ChatInputs(USER, tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel, now=0)
    )
    arena = out.parser.arena
    known = [p for p in arena.parsers if p.__class__ is peg.Rule and p.gbnf is not None]
    assert len(known) >= 20  # the permutation rules carry their GBNF
    grammar, plain = _plain_grammar(arena, out.grammar_lazy)
    assert out.grammar == grammar
    assert len(plain.parsers) == len(arena.parsers)
    # every use of a rule is of the rule its name has now
    for p in arena.parsers:
        kids = p.children if p.__class__ in (peg.Sequence, peg.Choice) else [getattr(p, "child", None)]
        for c in kids:
            if c is not None and arena.parsers[c].__class__ is peg.Rule:
                assert arena.rules[arena.parsers[c].name] == c
    calls = [
        "<tool_call>\n<function=tool_3>\n<parameter=p0_x>\nParis\n</parameter>\n<parameter=p1_x>\n3\n"
        "</parameter>\n<parameter=p2_x>\n1.5\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=tool_2>\n<parameter=p1_x>\n7\n</parameter>\n<parameter=p0_x>\nx\n</parameter>\n"
        "</function>\n</tool_call>",
        "Let me see.\n<tool_call>\n<function=tool_1>\n<parameter=p0_x>\nabc",
    ]
    plain_parser = copy.copy(out.parser)
    plain_parser.arena = plain
    for text in calls:
        for partial in (False, True):
            try:
                want = repr(plain_parser.parse(text, partial))
            except Exception as e:  # noqa: BLE001 -- the same error either way
                want = "%s: %s" % (type(e).__name__, e)
            try:
                got = repr(out.parser.parse(text, partial))
            except Exception as e:  # noqa: BLE001
                got = "%s: %s" % (type(e).__name__, e)
            assert got == want, (text, partial)


def test_rule_names_are_cleaned_as_by_the_regex():
    pattern = re.compile(r"[^a-zA-Z0-9-]+")
    rng = random.Random(7)
    alphabet = "ab-_.Z9 é\t_"
    for _ in range(20000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
        assert clean_rule_name(name) == pattern.sub("-", name), name


def test_tools_tojson_texts_are_llama_cpp_s():
    """Each tool's ``tojson`` text kept with the cached tools (the tool's text in the cache key) is what the
    template's ``tojson`` writes for it; a tool with a float gets none (llama.cpp writes floats its own way)."""
    tools = TOOLS[:5] + [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": "ratio 0.5",
                "parameters": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0.5}}},
            },
        },
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {}}}},
    ]
    cache.clear()
    tools_json, tools_render, key = request_cache.cached_tools(tools)
    assert json.loads(key) == tools_json
    primed = 0
    for item in tools_render:
        text = item.json_texts.get((", ", ": "))
        fresh = jinja.to_json(json.loads(json.dumps(item)))
        if item["function"]["name"] == "f":
            assert text is None and "0.5" in fresh
        else:
            assert text == fresh
            primed += 1
    assert primed == 6
    # a NaN is a float too, and read back as json.loads reads it
    nan = copy.deepcopy(tools)
    nan[1]["function"]["parameters"]["properties"]["p0_x"]["default"] = float("nan")
    cache.clear()
    tools_json, tools_render, key = request_cache.cached_tools(nan)
    assert "NaN" in key and tools_render[1].json_texts.get((", ", ": ")) is None
    assert tools_render[0].json_texts.get((", ", ": ")) is not None
