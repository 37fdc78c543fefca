"""bankml's parse of broken tool calls and of reasoning, each in the template's own syntax, compared with the
pinned llama.cpp's ``common_chat_parse`` on every template of models/templates/ (issue 29).

tests/oracle/build_chat_malformed.py makes the texts from each template's own outputs (its rendering of an
assistant message with tool calls, or with ``reasoning_content``) and breaks them (an undeclared parameter or
function, a value outside the enum or full of quotes and tags, JSON missing a colon or a quote, the call cut
inside a value, after it and inside its closing, text around it, the call twice, a prefilled call continued,
reasoning cut or left unclosed); llama.cpp parses every code point prefix of each (partial) and the whole (not
partial), with the msg diffs between consecutive parses, and its answers are recorded in
``tests/data/chat_malformed_oracle.json.gz``. Here bankml's ``ChatTemplate.apply`` for the same request gives
the parser, which parses the same prefixes; every answer -- content, reasoning, tool calls (name, arguments,
id), the exception text where llama.cpp throws, and the diffs -- must be llama.cpp's. The ``oracle``-marked test
runs the program again and requires the recorded answers.
"""

import calendar
import collections
import gzip
import json
import pathlib
import time

import pytest

from bankml.chat.answers import ChatStream, answer_message, msg_diffs_with_tools
from bankml.chat.chat_peg import ChatMessage, ChatParseError, ChatToolCall
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatRequestError, TemplateError

from ..oracle import build_chat_malformed as oracle_malformed
from ..oracle import build_chat_tools as oracle_tools
from ..oracle.build_converter import OracleUnavailable
from ..oracle_support import ORACLE_LIVE, ORACLE_STATS, OraclePieces, chat_template
from .test_chat_tools import _diff, _parse

DATA = pathlib.Path(__file__).parent.parent / "data" / "chat_malformed_oracle.json.gz"
with gzip.open(DATA, "rt", encoding="utf-8") as _f:
    RECORDED = json.load(_f)
TEMPLATES = sorted(RECORDED["templates"])
NOW = calendar.timegm(time.strptime(RECORDED["started"], "%Y-%m-%dT%H:%M:%S"))


@pytest.fixture(scope="module")
def templates():
    return {}


def _template(cache, name):
    if name not in cache:
        cache[name] = chat_template(RECORDED["templates"][name]["source"])
    return cache[name]


def _apply(tmpl, req):
    return tmpl.apply(
        ChatInputs(
            req["messages"],
            tools=req.get("tools"),
            add_generation_prompt=req.get("add_generation_prompt", True),
            continue_final_message=req.get("continue_final_message"),
            enable_thinking=req.get("enable_thinking", True),
            chat_template_kwargs=dict(req.get("kwargs", [])),
            reasoning_format=req.get("reasoning_format", "deepseek"),
            tool_choice=req.get("tool_choice", "auto"),
            parallel_tool_calls=req.get("parallel_tool_calls", False),
            now=NOW,
        )
    )


def stream_steps(parser, text):
    """What the oracle records for one stream: the parse of every code point prefix (partial) and of the whole
    (not partial), each with the msg diffs from the previous message parsed."""
    steps, prev = [], ChatMessage()
    for k in range(len(text)):
        got, msg = _parse(parser, text[: k + 1], k + 1 < len(text))
        if msg is not None:
            try:
                got["diffs"] = [_diff(d) for d in msg_diffs_with_tools(prev, msg)]
            except ChatParseError as e:
                got["diffs"] = {"error": str(e)}
            prev = msg
        steps.append(got)
    return steps


def compare_template(cache, name):
    """Counter of (kind, outcome) over the template's recorded streams, and the differences found."""
    counts, bad = collections.Counter(), []
    rec = RECORDED["templates"][name]
    built = oracle_malformed.requests_for(rec["outputs"], rec["reasoning"], rec["triggers"], rec["source"])
    assert sorted(b[0] for b in built) == sorted(rec["requests"]), name
    for rname, req, pairs, texts in built:
        entry = rec["requests"][rname]
        assert [list(c) for c in pairs] == entry["cases"], (name, rname)
        entry = dict(entry, request=req, texts=texts)
        want = entry["answer"]
        kind = "reasoning" if rname.startswith("reasoning/") else "tool"
        if not want["ok"]:
            try:
                _apply(_template(cache, name), entry["request"])
                bad.append((rname, "llama.cpp refused the request, bankml did not: " + want["error"][-200:]))
            except (ChatRequestError, TemplateError):
                counts[kind, "requests refused by both"] += 1
            continue
        try:
            got = _apply(_template(cache, name), entry["request"])
        except (ChatRequestError, TemplateError) as e:
            bad.append((rname, "bankml refused: %s" % e))
            continue
        if got.generation_prompt != want["generation_prompt"]:
            bad.append((rname, "generation prompt differs"))
            continue
        for (text, partial), theirs in zip(req.get("parses", []), want["parses"]):
            counts[kind, "parses"] += 1
            if _parse(got.parser, text, bool(partial))[0] == theirs:
                counts[kind, "parses identical"] += 1
            else:
                bad.append((rname, "parse of %r differs" % text))
        for (output, mutation), text, runs in zip(entry["cases"], entry["texts"], want["streams"]):
            theirs = oracle_malformed.unpack(runs)
            mine = stream_steps(got.parser, text)
            assert len(mine) == len(theirs) == len(text), (name, rname, output, mutation)
            same = sum(a == b for a, b in zip(mine, theirs))
            counts[kind, "parses"] += len(theirs)
            counts[kind, "parses identical"] += same
            counts[kind, "llama.cpp throws"] += sum(not b["ok"] for b in theirs)
            counts[kind, "streams"] += 1
            if same == len(theirs):
                counts[kind, "streams identical"] += 1
            else:
                k = next(i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b)
                bad.append((rname, output, mutation, k + 1 < len(text), text[: k + 1], mine[k], theirs[k]))
    return counts, bad


@pytest.mark.parametrize("name", TEMPLATES)
def test_malformed_and_reasoning_parses(templates, name):
    """Every prefix of every broken tool call and of every reasoning output of one template parses (or fails)
    as llama.cpp's common_chat_parse does."""
    counts, bad = compare_template(templates, name)
    assert not bad, bad[:3]
    for (kind, what), n in counts.items():
        ORACLE_STATS["chat %s parses: %s (recorded)" % (kind, what)] += n


# -- the answer llama-server gives a broken call -------------------------------------------------------------


def _message_json(msg):
    """An oracle message as chat_message shapes it (the raw text aside): content, reasoning, calls."""
    return msg["content"], msg["reasoning"], [(c[0], c[1]) for c in msg["tool_calls"]]


def _chat_message(msg):
    return ChatMessage(msg["content"], msg["reasoning"], [ChatToolCall(*c) for c in msg["tool_calls"]])


def _llama_server_answer(initial, steps, raw, streamed):
    """What llama-server answers, from llama.cpp's own parses: task_result_state starts from ``initial`` and is
    updated at every partial result when streaming and at the final one always (update_chat_msg): a parse that
    throws, or a non-empty message it cannot diff from the one it holds (compute_diffs, here through bankml's
    port ``msg_diffs_with_tools``, compared with llama.cpp's on every stream above), is an error; an empty one
    leaves the message it holds; an empty message is answered as the raw text (to_json_oaicompat_chat)."""
    held = initial
    for step in steps if streamed else steps[-1:]:
        if not step["ok"]:
            return "error", step["error"]
        msg = step["msg"]
        if msg["content"] or msg["reasoning"] or msg["tool_calls"]:
            try:
                msg_diffs_with_tools(_chat_message(held), _chat_message(msg))
            except ChatParseError as e:
                return "error", str(e)
            held = msg
    if not (held["content"] or held["reasoning"] or held["tool_calls"]):
        return raw, "", []
    return _message_json(held)


def _bankml_answer(parser, text, tools, initial, streamed):
    """bankml serve's answer (bankml.serve.runtime: a strict ChatStream fed every piece when streamed, then
    answer_message)."""
    stream = None
    try:
        if streamed:
            stream = ChatStream(parser, tools=tools, initial=initial, strict=True)
            for k in range(len(text)):
                stream.push(text[k])
        m = answer_message(parser, text, tools, initial, stream)
    except ChatParseError as e:
        return "error", str(e)
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls", [])]
    return m["content"], m.get("reasoning_content", ""), calls


def test_prefilled_broken_calls_answer_as_llama_server():
    """The issue's case and its kin: every prefilled call (whole and broken) of every template answered, streamed
    and not, as llama-server answers it from llama.cpp's recorded parses. A broken call that the partial parses
    took for a call (Qwen3.5-4B prefilled with "<tool_call>\n", then an undeclared parameter) is text when not
    streamed."""
    counts = collections.Counter()
    cache = {}
    for name, rec in RECORDED["templates"].items():
        built = oracle_malformed.requests_for(rec["outputs"], rec["reasoning"], rec["triggers"], rec["source"])
        for rname, req, pairs, texts in built:
            want = rec["requests"][rname]["answer"]
            if not rname.startswith("prefill/") or not want["ok"]:
                continue
            got = _apply(_template(cache, name), req)
            initial_msg = got.parser.parse("", True)
            assert _message_json(want["parses"][0]["msg"]) == (
                initial_msg.content,
                initial_msg.reasoning_content,
                [(c.name, c.arguments) for c in initial_msg.tool_calls],
            )
            for (_, mutation), text, runs in zip(pairs, texts, want["streams"]):
                steps = oracle_malformed.unpack(runs)
                for streamed in (False, True):
                    theirs = _llama_server_answer(want["parses"][0]["msg"], steps, text, streamed)
                    mine = _bankml_answer(got.parser, text, True, initial_msg, streamed)
                    assert mine == theirs, (name, rname, mutation, streamed)
                    counts["answers identical"] += 1
                    if streamed and theirs != _llama_server_answer(want["parses"][0]["msg"], steps, text, False):
                        counts["answers that streaming changes"] += 1
    assert counts == {"answers identical": 940, "answers that streaming changes": 10}, counts
    # the issue's case itself: the partial parses take it for a call, the answer is the text
    rec = RECORDED["templates"]["Qwen3.5-4B.jinja"]
    built = dict((b[0], b) for b in oracle_malformed.requests_for(rec["outputs"], {}, rec["triggers"], rec["source"]))
    _, req, pairs, texts = built["prefill/think-off"]
    i = pairs.index(("prefill", "undeclared-parameter"))
    steps = oracle_malformed.unpack(rec["requests"]["prefill/think-off"]["answer"]["streams"][i])
    assert any(s["ok"] and s["msg"]["tool_calls"] for s in steps[:-1])
    got = _apply(_template(cache, "Qwen3.5-4B.jinja"), req)
    assert _bankml_answer(got.parser, texts[i], True, got.parser.parse("", True), False) == (texts[i], "", [])


# -- the recording itself -----------------------------------------------------------------------------------


def recording_counts():
    """What the recording holds (no bankml involved): streams, parses, llama.cpp's exceptions, per kind; the
    templates with a prefilled call; the templates whose rendering of ``reasoning_content`` carries it, and
    those whose reasoning llama.cpp's whole parse of that rendering gives back as ``reasoning_content``."""
    counts = collections.Counter()
    reasoning = oracle_malformed.REASONING
    for name, rec in RECORDED["templates"].items():
        counts["templates"] += 1
        if any(r.startswith("prefill/") for r in rec["requests"]):
            counts["templates with a prefilled call"] += 1
        if reasoning in rec["reasoning"].get("reasoning-then-text", ""):
            counts["templates rendering reasoning_content"] += 1
        for rname, entry in rec["requests"].items():
            kind = "reasoning" if rname.startswith("reasoning/") else "tool"
            ans = entry["answer"]
            if not ans["ok"]:
                counts[kind, "requests refused"] += 1
                continue
            for runs in ans["streams"]:
                steps = oracle_malformed.unpack(runs)
                counts[kind, "streams"] += 1
                counts[kind, "parses"] += len(steps)
                counts[kind, "llama.cpp throws"] += sum(not s["ok"] for s in steps)
            if rname == "reasoning/no-tools/think-on":
                last = oracle_malformed.unpack(ans["streams"][0])[-1]
                if last["ok"] and last["msg"]["reasoning"].strip() == reasoning:
                    counts["templates whose own reasoning syntax llama.cpp extracts"] += 1
    return counts


def test_recording_covers_the_issue():
    """Every template; broken calls of every tool-call format and reasoning in each template's own syntax,
    every prefix parsed; the counts docs/modules/chat-tools.md gives."""
    counts = recording_counts()
    assert counts == {
        "templates": 70,
        "templates with a prefilled call": 47,
        "templates rendering reasoning_content": 28,
        "templates whose own reasoning syntax llama.cpp extracts": 27,
        ("tool", "streams"): 2428,
        ("tool", "parses"): 380108,
        ("tool", "llama.cpp throws"): 9781,
        ("tool", "requests refused"): 4,
        ("reasoning", "streams"): 378,
        ("reasoning", "parses"): 26250,
        ("reasoning", "llama.cpp throws"): 143,
    }, counts
    # the issue's case is in: Qwen3.5-4B prefilled with "<tool_call>\n", continued with an undeclared parameter
    rec = RECORDED["templates"]["Qwen3.5-4B.jinja"]
    assert rec["requests"]["prefill/think-off"]["cases"][1] == ["prefill", "undeclared-parameter"]
    split = oracle_malformed.prefill_case(rec["outputs"], rec["triggers"])
    assert split is not None and split[0] == "<tool_call>\n"


@pytest.mark.oracle
def test_live_oracle_gives_the_recording():
    """The pinned llama.cpp run now gives the recorded answers: the same reasoning outputs derived from the
    templates' renders, and the same message (or exception) at every prefix of every stream. Every third
    template in the gate (about a third of the time), all of them with BANKML_ORACLE_LIVE=1."""
    try:
        exe = oracle_tools.build()
        tdir = oracle_tools.templates_dir()
    except OracleUnavailable as e:
        pytest.fail("the pinned llama.cpp chat tools oracle could not be built: %s" % e)
    requests, keys = [], []
    renders = []
    live = TEMPLATES if ORACLE_LIVE else TEMPLATES[::3]
    ORACLE_STATS["chat templates whose malformed-call parses ran live"] += len(live)
    for name in live:
        rec = RECORDED["templates"][name]
        assert (tdir / name).read_text(encoding="utf-8") == rec["source"]
        renders += [dict(r, template=str(tdir / name)) for _, r in oracle_malformed.render_requests(rec["source"])]
        for rname, req, _, texts in oracle_malformed.requests_for(
            rec["outputs"], rec["reasoning"], rec["triggers"], rec["source"]
        ):
            requests.append(dict(req, template=str(tdir / name), streams=texts))
            keys.append((name, rname))
    with OraclePieces(oracle_tools.run, requests, exe) as pieces:
        _, answers = oracle_tools.run(renders, exe)
        k = len(oracle_malformed.REASONING_RENDERS) + 1
        for i, name in enumerate(live):
            rec = RECORDED["templates"][name]
            names = [r for r, _ in oracle_malformed.render_requests(rec["source"])]
            derived = oracle_malformed.reasoning_outputs(dict(zip(names, answers[i * k : (i + 1) * k])))
            assert derived == rec["reasoning"], name
        for offset, _, answers in pieces:
            for (name, rname), ans in zip(keys[offset : offset + len(answers)], answers):
                want = RECORDED["templates"][name]["requests"][rname]["answer"]
                if not want["ok"]:
                    assert not ans["ok"] and ans["error"] == want["error"], (name, rname)
                    continue
                assert ans["ok"], (name, rname, ans.get("error"))
                assert ans["generation_prompt"] == want["generation_prompt"], (name, rname)
                assert ans["parses"] == want["parses"], (name, rname)
                assert ans["streams"] == [oracle_malformed.unpack(r) for r in want["streams"]], (name, rname)
