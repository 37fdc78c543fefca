"""What ``ChatTemplate.apply`` takes from ``bankml.chat.cache`` and gives back to it: the request's tools made once
for the template (``cached_tools``: each tool's JSON text computed once, keyed by that text), the cache's own
copy of a schema (``private_schema``), and the fields a handler or the auto-parser derives from the template,
tools and options, kept immutable and handed out fresh (``derived_fields``). ``bankml.chat.cache`` holds the bounded
maps; this module decides what goes in them and what comes out.
"""

import copy
import json
import pickle

from bankml.chat import cache
from bankml.chat.jinja import memo_json, prime_tojson, tojson_text
from bankml.chat.messages import tools_json_oaicompat

UNCACHED = object()  # the tools_key of tools that are not JSON (their request is not cached)


def cached_tools(tools):
    """``(tools_json, tools_render, tools_key)``: the request's tools as llama.cpp passes them (``tools_json_oaicompat``),
    the same made of ``JSONDict`` / ``JSONList`` for the template (each tool's JSON text computed once), and their
    JSON text (None: no tools; ``UNCACHED``: not JSON). The key is the ``tojson`` text of ``tools_json_oaicompat``'s
    tools (all that the answer depends on), ``[`` and each tool's ``tojson`` text joined by ``, ``; both values
    are cached by it and built from its parse, so they are the cache's own (a caller changing its tools
    afterwards changes nothing) and a hit is built from exactly what a miss is."""
    if not tools:
        return None, None, None
    tools_json = tools_json_oaicompat(tools)
    try:
        key = tojson_text(tools_json)
    except (TypeError, ValueError, RecursionError):
        return tools_json, tools_json, UNCACHED
    hit = cache.TOOLS.get(key)
    if hit is not None:
        return hit[0], hit[1], key
    floats, constants = [], []

    def parse_float(text):  # what json.loads does with a number with a point or an exponent, noted
        floats.append(text)
        return float(text)

    decode = json.JSONDecoder(parse_float=parse_float, parse_constant=constants.append).raw_decode
    with cache.gc_paused():
        # each tool read from its own text in the key, which is its tojson text
        tools_json, texts, pos = [], [], 1
        for _ in range(len(tools)):
            tool, end = decode(key, pos)
            tools_json.append(tool)
            texts.append(key[pos:end])
            pos = end + 2
        if constants:  # NaN or an infinity: read again as json.loads does (a float too)
            tools_json = json.loads(key)
            floats += constants
        tools_render = memo_json(tools_json)
        prime_tojson(tools_render, floats=bool(floats), texts=texts)
        entry = (tools_json, tools_render)
    cache.TOOLS.put(key, entry, weight=len(key))
    return entry[0], entry[1], key


def private_schema(json_schema, schema_key):
    """The cache's own copy of a response format's schema (from its pickle: the same structure)."""
    if isinstance(json_schema, (dict, list)):
        return pickle.loads(schema_key)
    return json_schema


# the ChatPrompt fields a handler or the auto-parser derives (besides the prompt's suffix and the parser)
_DERIVED_FIELDS = (
    "format",
    "supports_thinking",
    "thinking_start_tag",
    "thinking_end_tags",
    "preserved_tokens",
    "additional_stops",
    "delimiters",
    "grammar",
    "grammar_lazy",
    "grammar_triggers",
    "generation_prompt",
)


def _frozen(value):
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value):
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


def derived_fields(out, key, derive):
    """``derive(out)`` (which sets the derived fields of the ChatPrompt ``out`` and may append to its prompt), or
    its result for ``key`` from ``bankml.chat.cache.PARAMS``: immutable copies are kept, fresh lists and a fresh
    parser (over the same arena, which nothing changes once built) are given."""
    if key is None:
        with cache.gc_paused():
            derive(out)
        return
    hit = cache.PARAMS.get(key)
    if hit is not None:
        fields, suffix, parser = hit
        for name, value in fields:
            setattr(out, name, _thawed(value))
        out.prompt += suffix
        out.parser = copy.copy(parser)
        return
    before = out.prompt
    with cache.gc_paused():
        derive(out)
    if not out.prompt.startswith(before):
        return
    parser = copy.copy(out.parser)
    fields = tuple((name, _frozen(getattr(out, name))) for name in _DERIVED_FIELDS)
    weight = len(key[1] or "") + len(key[2] or b"") + len(out.grammar or "")
    if parser is not None:
        weight += 200 * len(parser.arena.parsers)
    cache.PARAMS.put(key, (fields, out.prompt[len(before) :], parser), weight)
