"""bankml.chat.cache: what ChatTemplate.apply takes from its caches is what it computes without them.

On the 70 templates of the chat tools oracle (tests/data/chat_tools_oracle.json.gz, whose other tests compare
bankml with llama.cpp) and its tool requests, each request is applied with the caches emptied (a miss: the
result is computed and stored) and again (a hit), and every field of the two answers is compared, as are the
parses of the template's recorded tool-call outputs by both parsers (whole and partial). A hit must happen,
so the comparison is not between two misses. Then what a caller may change afterwards (the returned lists, its
own tools and schema) must not change a later answer, requests that must not be cached (prefilled answers,
values that are not JSON) are not, and the caches keep to their bounds.
"""

import copy
import gzip
import json
import pathlib

import pytest

from bankml.chat import cache
from bankml.chat.cache import LRUCache
from bankml.chat.chat_peg import ChatParseError
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatRequestError, ChatTemplate, TemplateError

from ..oracle import build_chat_tools as oracle_tools

DATA = pathlib.Path(__file__).parent.parent / "data"
with gzip.open(DATA / "chat_tools_oracle.json.gz", "rt", encoding="utf-8") as _f:
    RECORDED = json.load(_f)
TEMPLATES = sorted(RECORDED["templates"])
REQUESTS = [
    (name, req)
    for name, req in oracle_tools.matrix()
    if req.get("tools") and req.get("add_generation_prompt", True) and not name.startswith("render/")
]
QWEN35 = (DATA / "templates" / "Qwen3.5-4B.jinja").read_text()
FIELDS = (
    "prompt",
    "generation_prompt",
    "format",
    "supports_thinking",
    "thinking_start_tag",
    "thinking_end_tags",
    "preserved_tokens",
    "additional_stops",
    "delimiters",
    "handler",
    "grammar",
    "grammar_lazy",
    "grammar_triggers",
    "caps",
    "json_schema_mode",
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather of a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                    "ratio": {"type": "number", "minimum": 0.5},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(autouse=True)
def _empty_caches():
    cache.clear()
    yield
    cache.clear()


_TEMPLATE_OBJECTS = {}


def _template(name):
    if name not in _TEMPLATE_OBJECTS:
        _TEMPLATE_OBJECTS[name] = ChatTemplate(RECORDED["templates"][name]["source"])
    return _TEMPLATE_OBJECTS[name]


def _apply(tmpl, req):
    return tmpl.apply(
        ChatInputs(
            req["messages"],
            tools=req.get("tools"),
            enable_thinking=req.get("enable_thinking", True),
            chat_template_kwargs=dict(req.get("kwargs", [])),
            json_schema=req.get("json_schema"),
            tool_choice=req.get("tool_choice", "auto"),
            parallel_tool_calls=req.get("parallel_tool_calls", False),
            now=0,
        )
    )


def _answer(tmpl, req):
    try:
        return _apply(tmpl, req)
    except (ChatRequestError, TemplateError, ValueError) as e:
        return "%s: %s" % (type(e).__name__, e)


def _fields(out):
    return {name: getattr(out, name) for name in FIELDS}


def _parses(out, outputs):
    """The parser's answers (whole and partial) on the template's recorded tool-call outputs."""
    got = []
    for text in outputs:
        for partial in (False, True):
            try:
                got.append(repr(out.parser.parse(text, partial=partial)))
            except ChatParseError as e:
                got.append("ChatParseError: %s" % e)
    return got


def test_the_matrix():
    # the counts docs/modules/chat.md gives
    assert len(TEMPLATES) == 70 and len(REQUESTS) == 16


@pytest.mark.parametrize("name", TEMPLATES)
def test_hit_equals_miss(name):
    tmpl = _template(name)
    outputs = list(RECORDED["templates"][name]["outputs"].values())
    compared = 0
    for request, req in REQUESTS:
        cache.clear()
        miss = _answer(tmpl, req)
        hits = cache.PARAMS.hits
        hit = _answer(tmpl, req)
        if isinstance(miss, str):
            assert hit == miss, request
            continue
        assert cache.PARAMS.hits == hits + 1, "%s: the second apply did not hit the cache" % request
        assert _fields(hit) == _fields(miss), request
        assert hit.parser is not miss.parser and hit.parser.arena is miss.parser.arena
        assert _parses(hit, outputs) == _parses(miss, outputs), request
        compared += 1
    assert compared >= 1


def test_hit_equals_miss_on_qwen35_with_many_tools():
    tools = [
        {"type": "function", "function": dict(t["function"], name="%s_%d" % (t["function"]["name"], i))}
        for i in range(20)
        for t in TOOLS
    ]
    tmpl = ChatTemplate(QWEN35)
    for kwargs in (
        {"tool_choice": "required"},
        {"tool_choice": "auto", "parallel_tool_calls": True},
        {"tool_choice": "auto", "json_schema_mode": "strict"},
        {"tool_choice": "none"},
        {"reasoning_format": "none", "enable_thinking": False},
    ):
        cache.clear()
        miss = tmpl.apply(ChatInputs(USER, tools=tools, now=0, **kwargs))
        hit = tmpl.apply(ChatInputs(USER, tools=copy.deepcopy(tools), now=0, **kwargs))
        assert cache.PARAMS.hits == 1 and cache.TOOLS.hits == 1
        assert _fields(hit) == _fields(miss)
        call = "<tool_call>\n<function=search_3>\n<parameter=query>\nparis\n</parameter>\n</function>\n</tool_call>"
        assert repr(hit.parser.parse(call)) == repr(miss.parser.parse(call))
        assert "search_3" in repr(hit.parser.parse(call))


def test_a_request_that_differs_gets_its_own_entry():
    tmpl = ChatTemplate(QWEN35)
    base = tmpl.apply(ChatInputs(USER, tools=TOOLS, tool_choice="required", now=0))
    other_tools = copy.deepcopy(TOOLS)
    other_tools[0]["function"]["parameters"]["properties"]["days"]["maximum"] = 8
    changed = {
        "tools": tmpl.apply(ChatInputs(USER, tools=other_tools, tool_choice="required", now=0)),
        "tool_choice": tmpl.apply(ChatInputs(USER, tools=TOOLS, tool_choice="auto", now=0)),
        "parallel": tmpl.apply(ChatInputs(USER, tools=TOOLS, tool_choice="required", parallel_tool_calls=True, now=0)),
        "mode": tmpl.apply(ChatInputs(USER, tools=TOOLS, tool_choice="required", json_schema_mode="strict", now=0)),
        "reasoning": tmpl.apply(ChatInputs(USER, tools=TOOLS, tool_choice="required", reasoning_format="none", now=0)),
    }
    assert cache.PARAMS.hits == 0 and len(cache.PARAMS) == 6
    for name, out in changed.items():
        assert (out.grammar, out.grammar_lazy) != (base.grammar, base.grammar_lazy), name
    # key order is content too: the template prints the tools' parameters as they are written
    reordered = copy.deepcopy(TOOLS)
    params = reordered[0]["function"]["parameters"]
    params["properties"] = dict(reversed(list(params["properties"].items())))
    tmpl.apply(ChatInputs(USER, tools=reordered, tool_choice="required", now=0))
    assert cache.TOOLS.hits == 4  # the four requests above with the same tools; not the reordered ones
    # but not what llama.cpp's parse of the tools drops or puts in its own order (the tool's keys, a field
    # of the tool other than its function's name, description and parameters): the same answer, one entry
    same = [dict(reversed(list(TOOLS[0].items())), strict=True)] + TOOLS[1:]
    assert tmpl.apply(ChatInputs(USER, tools=same, tool_choice="required", now=0)).grammar == base.grammar
    assert cache.TOOLS.hits == 5


def test_changing_what_was_returned_or_passed_changes_no_later_answer():
    tmpl = ChatTemplate(QWEN35)
    tools = copy.deepcopy(TOOLS)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    first = tmpl.apply(ChatInputs(USER, tools=tools, tool_choice="auto", now=0))
    expected = copy.deepcopy(_fields(first))
    first.grammar_triggers.append([1, "x"])
    first.grammar_triggers[0][1] = "changed"
    first.preserved_tokens.clear()
    first.delimiters[0][0] = "changed"
    first.thinking_end_tags.append("x")
    first.parser.generation_prompt = "changed"
    tools[0]["function"]["name"] = "changed"
    tools[0]["function"]["parameters"]["properties"]["city"]["type"] = "integer"
    again = tmpl.apply(ChatInputs(USER, tools=copy.deepcopy(TOOLS), tool_choice="auto", now=0))
    assert cache.PARAMS.hits == 1
    assert _fields(again) == expected
    assert again.parser.generation_prompt == expected["generation_prompt"]
    # a response format: the caller's schema changed after the call changes nothing cached
    out = tmpl.apply(ChatInputs(USER, json_schema=schema, now=0))
    grammar = out.grammar
    schema["properties"]["a"]["type"] = "integer"
    assert tmpl.apply(
        ChatInputs(USER, json_schema={"type": "object", "properties": {"a": {"type": "string"}}}, now=0)
    ).grammar == (grammar)


def test_uncached_requests():
    tmpl = ChatTemplate(QWEN35)
    # a prefilled answer: its parser starts from the message, so nothing is kept
    prefilled = USER + [{"role": "assistant", "content": "<tool_call>\n"}]
    a = tmpl.apply(ChatInputs(prefilled, tools=TOOLS, continue_final_message=True, now=0))
    b = tmpl.apply(ChatInputs(prefilled, tools=TOOLS, continue_final_message=True, now=0))
    assert len(cache.PARAMS) == 0 and cache.PARAMS.hits == 0
    assert _fields(a) == _fields(b)
    # tools that are not JSON are rendered as before and not cached
    assert len(cache.TOOLS) == 1  # the prefilled requests' tools (they do not depend on the messages)
    odd = copy.deepcopy(TOOLS)
    odd[1]["function"]["description"] = {"not", "json"}
    out = tmpl.apply(ChatInputs(USER, tools=odd, tool_choice="required", now=0))
    assert len(cache.TOOLS) == 1 and len(cache.PARAMS) == 0
    assert "search" in out.grammar


def test_the_caches_keep_to_their_bounds():
    tmpl = ChatTemplate(QWEN35)
    saved = [(c, c.max_entries, c.max_weight) for c in (cache.TOOLS, cache.PARAMS)]
    try:
        cache.TOOLS.resize(max_entries=3)
        cache.PARAMS.resize(max_entries=2)
        outs = []
        for i in range(6):
            tools = [{"type": "function", "function": dict(TOOLS[1]["function"], name="search_%d" % i)}]
            outs.append(tmpl.apply(ChatInputs(USER, tools=tools, tool_choice="required", now=0)))
            assert len(cache.TOOLS) <= 3 and len(cache.PARAMS) <= 2
        assert cache.TOOLS.evictions == 3 and cache.PARAMS.evictions == 4
        # the least recently used went first: the last two are hits, the first one a miss again
        hits = cache.PARAMS.hits
        tools = [{"type": "function", "function": dict(TOOLS[1]["function"], name="search_5")}]
        assert tmpl.apply(ChatInputs(USER, tools=tools, tool_choice="required", now=0)).grammar == outs[5].grammar
        assert cache.PARAMS.hits == hits + 1
        tools = [{"type": "function", "function": dict(TOOLS[1]["function"], name="search_0")}]
        assert tmpl.apply(ChatInputs(USER, tools=tools, tool_choice="required", now=0)).grammar == outs[0].grammar
        assert cache.PARAMS.hits == hits + 1
        # a weight bound: entries go until the total fits
        cache.PARAMS.resize(max_entries=100, max_weight=cache.PARAMS.weight // 2 + 1)
        assert len(cache.PARAMS) == 1
    finally:
        for c, entries, weight in saved:
            c.resize(entries, weight)


def test_lru_cache():
    c = LRUCache(max_entries=3, max_weight=10)
    for key, weight in (("a", 2), ("b", 3), ("c", 4)):
        c.put(key, key.upper(), weight)
    assert c.get("a") == "A"  # a is now the most recently used
    c.put("d", "D", 1)  # four entries: b (least recently used) goes
    assert c.get("b") is None and len(c) == 3 and c.weight == 7
    c.put("e", "E", 5)  # weight 12 > 10: c goes, then the weight is 8
    assert c.get("c") is None and c.get("a") == "A" and c.weight == 8
    c.put("huge", "H", 11)  # heavier than the bound: not kept
    assert c.get("huge") is None and len(c) == 3
    c.put("a", "A2", 1)  # a new value replaces the old one and its weight
    assert c.get("a") == "A2" and c.weight == 7
    assert c.stats()["evictions"] == 2
    with pytest.raises(ValueError, match="cache bounds"):
        LRUCache(-1, 10)
    c.clear()
    assert len(c) == 0 and c.weight == 0
