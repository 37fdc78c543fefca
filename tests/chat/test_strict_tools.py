"""Strict tool-call mode (``ChatTemplate.apply(ChatInputs(..., tool_call_mode="strict"))``) on every template of models/templates/.

What it promises, and how each test holds it:

* ``tool_choice`` "required" or naming a function: the grammar is the template's own call syntax from the first
  token after the generation prompt (its reasoning first, where the template reasons): no text. The first
  masks and seeded walks over the Qwen2 vocabulary are judged by llama.cpp's own parser of the request (the
  llama.cpp mode's): no allowed token may give content (``test_forced_grammar_allows_no_text``); llama.cpp's
  "required" grammar fails the same judge (``test_llama_cpp_required_lets_text_first``).
* Every complete text of a forced grammar parses, through the template's parser, into one call (or, with
  ``parallel_tool_calls``, one or more) of an allowed function, no content, arguments valid for the tool's
  schema (jsonschema with its FormatChecker): random walks over each grammar (``tests/grammar_walk.py``).
  Under "auto", every walk from the call's trigger parses into valid calls as well.
* The template's own rendering of a call (its assistant message with ``tool_calls``) is a text of the forced
  grammar: the style is the template's.
* A schema the canonical style cannot write exactly is refused naming the tool, the keyword and the pointer.
"""

import codecs
import json
import pathlib
import random
import zlib

import jsonschema
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab
from bankml.chat.chat_peg import ChatParseError
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatRequestError, ChatTemplate, TemplateError
from bankml.errors import SchemaError

from ..grammar_walk import BYTES, walk
from ..oracle_support import ORACLE_STATS, chat_templates_recording

DATA = pathlib.Path(__file__).parent.parent / "data"
SOURCES = {name: rec["source"] for name, rec in chat_templates_recording()["templates"].items()}
TEMPLATES = sorted(SOURCES)
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2},
        "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]},
    },
    "required": ["city", "days"],
}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "format": "date"}}}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": TIME}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_time"}}
CHOICES = {"required": "required", "named": NAMED}

# templates in which llama.cpp's chat layer finds no tool-call syntax (it builds no tool grammar, llama.cpp mode
# answers text): strict mode refuses a forced call there; Command R+'s template fails on these tools in llama.cpp
# itself ("Function has no builtins")
NO_SYNTAX = {
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "google-gemma-2-2b-it.jinja",
    "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "llama-cpp-rwkv-world.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
}
REFUSED_BY_LLAMA_CPP = {"CohereForAI-c4ai-command-r-plus-tool_use.jinja"}

_TEMPLATES = {}


def template(name):
    if name not in _TEMPLATES:
        _TEMPLATES[name] = ChatTemplate(SOURCES[name], bos_token="<s>", eos_token="</s>")
    return _TEMPLATES[name]


def apply(name, choice, parallel=False, thinking=False, mode="strict", tools=TOOLS, messages=ASK):
    return template(name).apply(
        ChatInputs(
            messages,
            tools=tools,
            tool_choice=choice,
            parallel_tool_calls=parallel,
            tool_call_mode=mode,
            enable_thinking=thinking,
            now=0,
        )
    )


def forced(name, choice, parallel=False, thinking=False):
    """The forced request's ChatPrompt, or None where strict mode refuses it (checked to be for the reason)."""
    try:
        return apply(name, choice, parallel, thinking)
    except ChatRequestError as e:
        assert name in NO_SYNTAX and "no tool-call syntax" in str(e), (name, str(e))
    except TemplateError:
        assert name in REFUSED_BY_LLAMA_CPP, name
    return None


def check_calls(msg, choice, parallel):
    """The parsed message is calls only, of the allowed functions, with valid arguments; a description of
    what is wrong, or None."""
    if msg.content.strip():
        return "content %r" % msg.content[:80]
    if not msg.tool_calls:
        return "no call"
    if not parallel and len(msg.tool_calls) != 1:
        return "%d calls" % len(msg.tool_calls)
    for call in msg.tool_calls:
        if call.name not in SCHEMAS or (choice is NAMED and call.name != "get_time"):
            return "call of %r" % call.name
        try:
            args = json.loads(call.arguments)
        except ValueError:
            return "arguments not JSON: %r" % call.arguments
        if not jsonschema.Draft202012Validator(SCHEMAS[call.name], format_checker=FORMATS).is_valid(args):
            return "invalid arguments %r for %s" % (args, call.name)
    return None


def start(out, rules):
    """A Grammar over BYTES fed the generation prompt (as the runtime prefills an eager grammar), then the
    first of the template's thinking end tags it takes (a walk starts after an empty reasoning)."""
    g = Grammar(rules, BYTES)
    g.accept_bytes(out.generation_prompt.encode("utf-8"))
    for tag in out.thinking_end_tags or []:
        h = g.clone()
        try:
            h.accept_bytes(tag.encode("utf-8"))
        except GrammarError:
            continue
        return h, tag.encode("utf-8")
    return g, b""


@pytest.mark.parametrize("name", TEMPLATES)
def test_forced_answers_are_valid_calls(name):
    """Random complete texts of each forced grammar (required / named x parallel off / on) parse into calls
    only, of the allowed functions, with valid arguments."""
    judged = 0
    for choice_name, choice in CHOICES.items():
        for parallel in (False, True):
            out = forced(name, choice, parallel)
            if out is None:
                continue
            rules = Rules.parse(out.grammar, vocab=BYTES)
            rng = random.Random(zlib.crc32(("%s/%s/%s" % (name, choice_name, parallel)).encode()))
            for _ in range(10):
                g, prefix = start(out, rules)
                text = walk(g, rng, 800)
                if text is None:
                    continue
                try:
                    msg = out.parser.parse((prefix + text).decode("utf-8"), partial=False)
                except ChatParseError as e:
                    pytest.fail("%s %s parallel=%s: the parser refuses %r: %s" % (name, choice_name, parallel, text, e))
                bad = check_calls(msg, choice, parallel)
                assert bad is None, (name, choice_name, parallel, bad, text)
                judged += 1
    if name not in NO_SYNTAX | REFUSED_BY_LLAMA_CPP:
        assert judged >= 12, (name, judged)  # the walks ended: texts were judged, not skipped
    ORACLE_STATS["strict tool calls: random forced answers parsed into valid calls"] += judged


@pytest.mark.parametrize("name", TEMPLATES)
def test_auto_calls_are_whole(name):
    """Under "auto" a call, once its trigger is written, is whole: walks from each trigger word parse into valid
    calls (the text before the trigger is the model's)."""
    try:
        out = apply(name, "auto")
    except TemplateError:
        assert name in REFUSED_BY_LLAMA_CPP
        return
    if not out.grammar:
        assert name in NO_SYNTAX, name
        return
    rules = Rules.parse(out.grammar, vocab=BYTES)
    rng = random.Random(7)
    judged = 0
    if not out.grammar_lazy:
        # gpt-oss and Functionary v3.2: strict mode's "auto" grammar is the template's framing from the first token
        # (a final message or a call; a recipient), so every answer parses: walks after the generation prompt parse
        # into content or valid calls
        assert out.handler in ("gpt-oss", "functionary-v3-2"), (name, out.handler)
        for _ in range(24):
            g = Grammar(rules, BYTES)
            g.accept_bytes(out.generation_prompt.encode("utf-8"))
            text = walk(g, rng, 800)
            if text is None:
                continue
            try:
                msg = out.parser.parse(text.decode("utf-8"), partial=False)
            except ChatParseError as e:
                pytest.fail("%s: the parser refuses %r: %s" % (name, text, e))
            if msg.tool_calls:  # an answer with no call is content, which "auto" allows
                msg.content = ""
                bad = check_calls(msg, "auto", True)
                assert bad is None, (name, bad, text)
            judged += 1
        assert judged >= 12, (name, judged)
        ORACLE_STATS["strict tool calls: random auto calls parsed into valid calls"] += judged
        return
    words = [value for kind, value in out.grammar_triggers if kind == 1]
    for word in words:
        for _ in range(6):
            g = Grammar(rules, BYTES)
            try:
                g.accept_bytes(word.encode("utf-8"))
            except GrammarError:
                pytest.fail("%s: the grammar does not start with its trigger %r" % (name, word))
            text = walk(g, rng, 800)
            if text is None:
                continue
            # after the generation prompt, or after an empty reasoning where the prompt opened one
            for close in [""] + list(out.thinking_end_tags or []):
                answer = close + word + text.decode("utf-8")
                try:
                    msg = out.parser.parse(answer, partial=False)
                except ChatParseError as e:
                    pytest.fail("%s: the parser refuses %r: %s" % (name, answer, e))
                if msg.tool_calls:
                    break
            assert msg.tool_calls, (name, answer)
            msg.content = ""
            bad = check_calls(msg, "auto", True)
            assert bad is None, (name, bad, answer)
            judged += 1
    ORACLE_STATS["strict tool calls: random auto calls parsed into valid calls"] += judged


_QWEN2 = {}


def qwen2():
    if "v" not in _QWEN2:
        v = Vocab.from_gguf(str(DATA / "ggml-vocab-qwen2.gguf"))
        _QWEN2["v"] = (v, [bytes(p) for p in v.pieces])
    return _QWEN2["v"]


def _text(data):
    """The characters of ``data`` (bytes), an incomplete UTF-8 sequence at its end left out (the parser sees
    the text a stream has so far)."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


def texts_first_allowed(out, judge, rng, steps=12, sample=48):
    """Contents the judge's partial parses give along the forced grammar over the Qwen2 vocabulary: every
    allowed first token (a sample of them where there are many) and a seeded walk of ``steps`` tokens."""
    vocab, pieces = qwen2()
    g = Grammar(Rules.parse(out.grammar, vocab=vocab), vocab)
    g.accept_bytes(out.generation_prompt.encode("utf-8"))
    bad = []
    answer = b""
    for step in range(steps):
        allowed = [int(t) for t in g.allowed_ids() if int(t) not in vocab.eog_ids]
        if not allowed:
            break
        probe = allowed if step == 0 and len(allowed) <= sample else rng.sample(allowed, min(sample, len(allowed)))
        for t in probe if step == 0 else probe[:4]:
            try:
                msg = judge.parse(_text(answer + pieces[t]), partial=True)
            except ChatParseError:
                continue  # llama.cpp's parser refuses it: not text it would answer either
            if msg.content.strip():
                bad.append(_text(answer + pieces[t]))
        t = rng.choice(allowed)
        g.accept(t)
        answer += pieces[t]
    return bad


@pytest.mark.parametrize("name", TEMPLATES)
def test_forced_grammar_allows_no_text(name):
    """No token a forced grammar allows, first or along a walk, is text to llama.cpp's own parser of the same
    request (llama.cpp mode, "required"): the call's opening, the reasoning, or whitespace only."""
    rng = random.Random(3)
    for thinking in (False, True):
        for choice in CHOICES.values():
            out = forced(name, choice, False, thinking)
            if out is None:
                continue
            judge = apply(name, "required", False, thinking, mode="llama.cpp").parser
            bad = texts_first_allowed(out, judge, rng)
            assert not bad, (name, thinking, bad[:5])
            ORACLE_STATS["strict tool calls: forced grammars judged by llama.cpp's parser"] += 1


@pytest.mark.parametrize(
    "name",
    ["Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen3.5-4B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja", "GLM-4.6.jinja"],
)
def test_llama_cpp_required_lets_text_first(name):
    """The judge above tells the modes apart: llama.cpp's own "required" grammar lets text come first."""
    out = apply(name, "required", mode="llama.cpp")
    judge = apply(name, "required", mode="llama.cpp").parser
    assert texts_first_allowed(out, judge, random.Random(3))


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_template_renders_in_the_forced_grammar(name):
    """The template's own rendering of an assistant message with one call (thinking off) is a text of the
    forced grammar, up to the end of turn the model ends with an end-of-generation token."""
    out = forced(name, "required")
    if out is None:
        return
    call = {"type": "function", "id": "Ab3dE6gH9", "function": {"name": "get_weather"}}
    call["function"]["arguments"] = json.dumps({"city": "Paris", "days": 3})
    rendered = (
        template(name)
        .apply(
            ChatInputs(
                ASK + [{"role": "assistant", "content": "", "tool_calls": [call]}],
                tools=TOOLS,
                add_generation_prompt=False,
                enable_thinking=False,
                now=0,
            )
        )
        .prompt
    )
    head = len(out.prompt) - len(out.generation_prompt)
    n = 0
    while n < min(len(rendered), len(out.prompt)) and rendered[n] == out.prompt[n]:
        n += 1
    while n > head and out.prompt[n - 1] not in "\n>":
        n -= 1
    if n < head or name in RENDERS_OTHERWISE:
        assert name in RENDERS_OTHERWISE, (name, rendered[head:][:200])
        return
    data = (out.prompt[head:n] + rendered[n:]).encode("utf-8")
    g = Grammar(Rules.parse(out.grammar, vocab=BYTES), BYTES)
    complete_at = None
    for i, b in enumerate(data):
        try:
            g.accept(b)
        except GrammarError:
            break
        if g.complete:
            complete_at = i + 1
    assert complete_at is not None, (name, data)
    assert b"get_weather" in data[:complete_at]


# templates whose history rendering of a call is not what the model writes after the generation prompt: the
# prompt opens a reasoning block the history leaves out, no call is rendered, or the history form differs
RENDERS_OTHERWISE = {
    "Apriel-1.6-15b-Thinker-fixed.jinja",  # the generation prompt opens the reasoning
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
    "LFM2-8B-A1B.jinja",  # renders no call in the history
    "LFM2.5-Instruct.jinja",
    "deepseek-ai-DeepSeek-V3.2.jinja",  # "</think>" alone in the history, "<think></think>" generated
    "openbmb-MiniCPM5-1B.jinja",  # the generation prompt holds an empty reasoning block, the history none
    # llama.cpp's analysis reads the call id after "[ARGS]" ("get_weather[ARGS][CALL_ID]...[ARGS]{...}"): its
    # grammar and parser agree on that form (the walks above), which is not the template's rendering
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "upstage-Solar-Open-100B.jinja",  # llama.cpp's analysis keeps its probe's call id ("call00001") as text
}


@pytest.mark.parametrize(
    "name, schema, keyword, pointer",
    [
        ("Qwen3.5-4B.jinja", {"type": "object", "properties": {"a": {}}, "minProperties": 1}, "minProperties", "#"),
        (
            "Qwen-Qwen2.5-7B-Instruct.jinja",
            {"type": "object", "properties": {"a": {"pattern": "(?<=x)"}}},
            "pattern",
            "#/properties/a",
        ),
        (
            "google-gemma-4-31B-it.jinja",
            {"type": "object", "properties": {"a": {"type": ["string", "integer"]}}},
            "type",
            "#/properties/a",
        ),
    ],
)
def test_a_schema_strict_mode_cannot_write_names_tool_keyword_pointer(name, schema, keyword, pointer):
    tools = [{"type": "function", "function": {"name": "odd", "parameters": schema}}]
    with pytest.raises(SchemaError) as e:
        apply(name, "required", tools=tools)
    message = str(e.value)
    assert message.startswith('tool "odd": '), message  # the tool's schema, not the template, is blamed
    assert e.value.keyword == keyword and e.value.pointer.startswith(pointer), message


def test_named_choice_needs_strict_mode_and_a_known_function():
    with pytest.raises(ChatRequestError, match="strict tool-call mode"):
        apply("Qwen3.5-4B.jinja", NAMED, mode="llama.cpp")
    with pytest.raises(ChatRequestError, match='names the function "nope"'):
        apply("Qwen3.5-4B.jinja", {"type": "function", "function": {"name": "nope"}})
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [NAMED]}}
    assert "get_weather" not in apply("Qwen3.5-4B.jinja", allowed).grammar


def test_no_tools_is_llama_cpp_byte_for_byte():
    """Without tools (or with tool_choice "none") the strict tool-call mode changes nothing."""
    for name in TEMPLATES[::7]:
        try:
            a = apply(name, "none", mode="strict")
            b = apply(name, "none", mode="llama.cpp")
        except (TemplateError, ChatRequestError):
            continue
        assert (a.prompt, a.grammar, a.tool_call_mode) == (b.prompt, b.grammar, "llama.cpp")


@pytest.mark.parametrize("name", TEMPLATES)
def test_auto_trigger_words_are_preserved_tokens(name):
    """A trigger word that is one token of a model's vocabulary must be a preserved token, or the server refuses
    the request (server-schema.cpp): strict mode's own trimmed words (Llama 3.x's ``{``, one token of SmolLM2's
    vocabulary) included."""
    try:
        out = apply(name, "auto")
    except TemplateError:
        return
    words = [value for kind, value in (out.grammar_triggers or ()) if kind == 1]
    assert set(words) <= set(out.preserved_tokens or ()), (name, words, out.preserved_tokens)
