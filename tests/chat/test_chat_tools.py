"""bankml.chat.template with tools compared with the pinned llama.cpp's chat layer on every template of models/templates/.

tests/oracle/build_chat_tools.py builds a program against libllama-common of llama-cpp-python 0.3.36 that runs
llama.cpp's own ``common_chat_templates_apply`` with ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` and
``common_chat_parse`` over a matrix of tool requests (``matrix()`` there): one tool, three tools (nested objects,
arrays, enums, no parameters), each tool choice, parallel calls on and off, thinking off and on, a history with an
assistant ``tool_calls`` message and ``role: "tool"`` results, a response format beside tools, an enum without a
type; and parses (whole and partial) and streams (cut at every code point, with ``common_chat_msg_diff``) of
tool-call outputs written in each template's own syntax (derived from the template's rendering of an assistant
message with tool calls, see ``candidate_outputs``). Its answers are recorded in
``tests/data/chat_tools_oracle.json.gz`` with the template texts and the derived outputs; the ``oracle``-marked
test runs the program again and requires the same answers.

Every (template, request) prompt is compared (``test_tool_prompt``), and the rest -- format, grammar, lazy flag
and triggers, preserved tokens, stops, thinking tags, parses and stream diffs with tool calls -- per template
and field (``test_tool_field``); the (template, field) pairs where bankml does not give llama.cpp's answer yet
are listed in KNOWN_FIELD_DIFF and marked ``xfail(strict=True)``, so a
port that makes one pass fails the run until the list is updated (the convention of test_chat_templates.py).
"""

import calendar
import collections
import dataclasses
import gzip
import json
import pathlib
import time

import pytest

from bankml.chat.answers import msg_diffs_with_tools
from bankml.chat.chat_peg import ChatMessage, ChatParseError
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatRequestError, TemplateError

from ..oracle import build_chat_tools as oracle_tools
from ..oracle.build_converter import OracleUnavailable
from ..oracle_support import ORACLE_STATS, OraclePieces, chat_template

DATA = pathlib.Path(__file__).parent.parent / "data" / "chat_tools_oracle.json.gz"
with gzip.open(DATA, "rt", encoding="utf-8") as _f:
    RECORDED = json.load(_f)
TEMPLATES = sorted(RECORDED["templates"])
MATRIX = {name: dict(oracle_tools.matrix(rec["outputs"])) for name, rec in RECORDED["templates"].items()}
REQUESTS = [name for name, _ in oracle_tools.matrix()]


def _stamp(started):
    return calendar.timegm(time.strptime(started, "%Y-%m-%dT%H:%M:%S"))


NOW = _stamp(RECORDED["started"])

# template -> the requests whose prompt bankml does not give as llama.cpp does (or which llama.cpp refuses while
# building the tool-call parser, "Unable to generate parser for this template. Automatic parser generation
# failed: ...", where bankml's Jinja renders the template), with the cause found.
# Expected to differ; the run fails when one stops differing.
KNOWN_PROMPT_DIFF = {}

FIELDS = (
    "format",
    "grammar",
    "grammar_lazy",
    "grammar_triggers",
    "preserved_tokens",
    "additional_stops",
    "thinking",
    "parses",
    "streams",
)
# field -> templates on which bankml does not give llama.cpp's answer for that field on every request of the
# matrix (none left)
KNOWN_FIELD_DIFF = {}


@pytest.fixture(scope="module")
def templates():
    return {name: chat_template(rec["source"]) for name, rec in RECORDED["templates"].items()}


_APPLY_PARAMS = {f.name for f in dataclasses.fields(ChatInputs)}


def _apply(tmpl, req, now):
    """ChatTemplate.apply for a recorded request. ``tool_choice`` and ``parallel_tool_calls`` are passed once
    bankml takes them; until then the prompt (which llama.cpp renders the same for every tool choice) is
    compared without them, and the fields they shape fail as they should."""
    kwargs = {}
    for key in ("tool_choice", "parallel_tool_calls"):
        if key in req and key in _APPLY_PARAMS:
            kwargs[key] = req[key]
    return tmpl.apply(
        ChatInputs(
            req["messages"],
            tools=req.get("tools"),
            add_generation_prompt=req.get("add_generation_prompt", True),
            enable_thinking=req.get("enable_thinking", True),
            chat_template_kwargs=dict(req.get("kwargs", [])),
            json_schema=req.get("json_schema"),
            reasoning_format=req.get("reasoning_format", "deepseek"),
            now=now,
            **kwargs,
        )
    )


def compare_prompt(tmpl, req, answer, now):
    """ "same", "refused-both" or a description of the difference (prompt and generation prompt)."""
    try:
        got = _apply(tmpl, req, now)
    except (ChatRequestError, TemplateError) as e:
        got = e
    if not answer["ok"]:
        err = answer["error"]
        if not isinstance(got, Exception):
            return "llama.cpp refused, bankml did not: " + err[-300:]
        if "Jinja Exception: " in err:
            want = err[err.index("Jinja Exception: ") :]
            if want not in str(got):
                return "both refused, messages differ: %r vs %r" % (str(got), want)
        return "refused-both"
    if isinstance(got, Exception):
        return "bankml refused: %s" % got
    if got.prompt != answer["prompt"]:
        return "prompt differs"
    if got.generation_prompt != answer["generation_prompt"]:
        return "generation prompt differs: %r vs %r" % (got.generation_prompt, answer["generation_prompt"])
    return "same"


PROMPT_CASES = [(t, r) for t in TEMPLATES for r in REQUESTS]


@pytest.mark.parametrize(
    "template,request_name",
    [
        pytest.param(t, r, marks=pytest.mark.xfail(strict=True, reason="known prompt difference"))
        if r in KNOWN_PROMPT_DIFF.get(t, ())
        else (t, r)
        for t, r in PROMPT_CASES
    ],
)
def test_tool_prompt(templates, template, request_name):
    """The prompt and generation prompt of every tool request, or a refusal where llama.cpp refuses."""
    res = compare_prompt(
        templates[template],
        MATRIX[template][request_name],
        RECORDED["templates"][template]["answers"][request_name],
        NOW,
    )
    assert res in ("same", "refused-both"), res
    ORACLE_STATS["chat tool prompts identical (recorded)"] += 1


# -- the other fields ---------------------------------------------------------------------------------------


def _calls(msg):
    out = []
    for call in getattr(msg, "tool_calls", None) or []:
        if isinstance(call, dict):
            out.append([call.get("name", ""), call.get("arguments", ""), call.get("id", "")])
        elif isinstance(call, (list, tuple)):
            out.append(list(call))
        else:
            out.append([call.name, call.arguments, call.id])
    return out


def _parse(parser, text, partial):
    if parser is None:
        return {"ok": False, "error": "bankml has no parser for this template"}, None
    try:
        m = parser.parse(text, partial)
    except ChatParseError as e:
        return {"ok": False, "error": str(e)}, None
    return {"ok": True, "msg": {"content": m.content, "reasoning": m.reasoning_content, "tool_calls": _calls(m)}}, m


def _diff(d):
    """One msg diff as the oracle records it: [reasoning, content, tool_call_index (-1: none), name, arguments, id]."""
    if isinstance(d, (list, tuple)):
        d = list(d)
        return d if len(d) == 6 else d + [-1, "", "", ""]
    index = d.tool_call_index
    call = d.tool_call_delta
    return [
        d.reasoning_content_delta,
        d.content_delta,
        -1 if index is None else index,
        call.name,
        call.arguments,
        call.id,
    ]


def _field(got, want, field, req):
    """(bankml's value, llama.cpp's) of one field of one answer."""
    if field == "grammar":
        return got.grammar or "", want["grammar"]
    if field == "grammar_lazy":
        return bool(got.grammar_lazy), want["grammar_lazy"]
    if field == "grammar_triggers":
        return [list(t) for t in (got.grammar_triggers or [])], want["triggers"]
    if field == "thinking":
        return (
            (got.supports_thinking, got.thinking_start_tag, got.thinking_end_tags),
            (want["supports_thinking"], want["thinking_start_tag"], want["thinking_end_tags"]),
        )
    if field == "parses":
        mine = [_parse(got.parser, text, bool(partial))[0] for text, partial in req.get("parses", [])]
        return mine, want["parses"]
    if field == "streams":
        mine = []
        for text in req.get("streams", []):
            steps, prev = [], ChatMessage()
            for k in range(len(text)):
                g, msg = _parse(got.parser, text[: k + 1], k + 1 < len(text))
                if msg is not None:
                    try:
                        g["diffs"] = [_diff(d) for d in msg_diffs_with_tools(prev, msg)]
                    except ChatParseError as e:
                        g["diffs"] = {"error": str(e)}
                    prev = msg
                steps.append(g)
            mine.append(steps)
        return mine, want["streams"]
    return getattr(got, field), want[field]


def field_differences(tmpl, template, field, now=NOW):
    """The requests of the matrix (llama.cpp answered them) on which bankml's ``field`` differs."""
    bad = []
    for name, req in MATRIX[template].items():
        want = RECORDED["templates"][template]["answers"][name]
        if not want["ok"]:
            continue
        try:
            got = _apply(tmpl, req, now)
        except (ChatRequestError, TemplateError) as e:
            bad.append((name, "bankml refused: %s" % e))
            continue
        mine, theirs = _field(got, want, field, req)
        if mine != theirs:
            bad.append((name, field))
    return bad


FIELD_CASES = [(t, f) for f in FIELDS for t in TEMPLATES]


@pytest.mark.parametrize(
    "template,field",
    [
        pytest.param(t, f, marks=pytest.mark.xfail(strict=True, reason="tool calls not ported yet"))
        if t in KNOWN_FIELD_DIFF.get(f, ())
        else (t, f)
        for t, f in FIELD_CASES
    ],
)
def test_tool_field(templates, template, field):
    """One field of every tool request of one template: the format, the grammar (byte for byte), the lazy
    flag, the triggers (type and value), the preserved tokens, the additional stops, the thinking support and
    tags, the parses of the template's tool-call outputs (content, reasoning, tool calls: name, arguments, id;
    or the exception text) and every prefix of the streamed outputs with the msg diffs (tool call index, name,
    id and argument deltas)."""
    bad = field_differences(templates[template], template, field)
    assert not bad, bad[:5]
    ORACLE_STATS["chat tool fields identical (template x field, recorded)"] += 1


# -- the recording itself -----------------------------------------------------------------------------------


def test_recording_covers_the_issue():
    """Every template, every request; tool-call outputs that llama.cpp itself parses into the expected calls on
    most templates (the derivation picks them by llama.cpp's own parse)."""
    assert len(RECORDED["templates"]) == 70
    counts = collections.Counter()
    for name, rec in RECORDED["templates"].items():
        assert set(rec["answers"]) == set(REQUESTS), name
        answers = rec["answers"]
        for req_name, ans in answers.items():
            counts["ok" if ans["ok"] else "refused"] += 1
            req = MATRIX[name][req_name]
            if ans["ok"]:
                assert len(ans["parses"]) == len(req.get("parses", []))
                assert len(ans["streams"]) == len(req.get("streams", []))
                for text, steps in zip(req.get("streams", []), ans["streams"]):
                    assert len(steps) == len(text)
        pick = answers["many/auto/parallel/think-off"]
        if pick["ok"]:
            names = oracle_tools.parse_names(rec["outputs"])
            for (out, partial), p in zip(names, pick["parses"]):
                if (
                    out in oracle_tools.EXPECTED
                    and not partial
                    and p["ok"]
                    and [c[0] for c in p["msg"]["tool_calls"]] == oracle_tools.EXPECTED[out]
                ):
                    counts["well-formed tool-call outputs"] += 1
    assert counts == {"ok": 1720, "refused": 30, "well-formed tool-call outputs": 199}, counts
    # the tool requests are shaped as llama-server takes them
    req = MATRIX[TEMPLATES[0]]
    assert {r.get("tool_choice") for r in req.values()} >= {"auto", "none", "required"}
    assert {r.get("parallel_tool_calls") for r in req.values()} >= {True, False}
    assert any(m.get("role") == "tool" and m.get("tool_call_id") for r in req.values() for m in r["messages"])


@pytest.mark.oracle
def test_live_oracle_gives_the_recording(templates):
    """The pinned llama.cpp run now: the same outputs derived from the templates, the same answers on every
    template and request (the prompt aside, which may show today's date), and bankml's prompts at the oracle's
    clock the same as on the recording."""
    try:
        exe = oracle_tools.build()
        tdir = oracle_tools.templates_dir()
    except OracleUnavailable as e:
        pytest.fail(
            "the pinned llama.cpp chat tools oracle could not be built (the test extra installs what it needs): %s" % e
        )
    names = TEMPLATES
    requests, keys = [], []
    for name in names:
        for r, req in MATRIX[name].items():
            requests.append(dict(req, template=str(tdir / name)))
            keys.append((name, r))
    unexpected = []
    # the matrix is answered by two programs at a time while the outputs are derived and compared here
    with OraclePieces(oracle_tools.run, requests, exe) as pieces:
        renders_req = oracle_tools.render_requests()
        _, renders = oracle_tools.run([dict(r, template=str(tdir / n)) for n in names for _, r in renders_req], exe)
        k = len(renders_req)
        for i, name in enumerate(names):
            assert (tdir / name).read_text(encoding="utf-8") == RECORDED["templates"][name]["source"]
            outputs = oracle_tools.derive_outputs(
                {r: a for (r, _), a in zip(renders_req, renders[i * k : (i + 1) * k])}, exe, str(tdir / name)
            )
            assert outputs == RECORDED["templates"][name]["outputs"], name
        for offset, started, answers in pieces:
            now = _stamp(started)
            for (name, r), ans in zip(keys[offset : offset + len(answers)], answers):
                rec = RECORDED["templates"][name]["answers"][r]
                assert {k: v for k, v in ans.items() if k != "prompt"} == {
                    k: v for k, v in rec.items() if k != "prompt"
                }, (name, r)
                res = compare_prompt(templates[name], MATRIX[name][r], ans, now)
                if (res in ("same", "refused-both")) == (r in KNOWN_PROMPT_DIFF.get(name, ())):
                    unexpected.append((name, r, res))
                ORACLE_STATS["chat tool requests compared live"] += 1
    assert not unexpected, unexpected[:20]
