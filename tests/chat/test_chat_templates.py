"""bankml.chat.template compared with the pinned llama.cpp's chat layer on every template of the sdist's models/templates/.

tests/oracle/build_chat_templates.py builds a program against libllama-common of llama-cpp-python 0.3.36 that
runs llama.cpp's own ``common_chat_templates_init`` / ``common_chat_templates_apply`` / ``common_chat_parse``
over a matrix of requests (``matrix()`` there). Its answers for the 70 templates are recorded in
``tests/data/chat_templates_oracle.json.gz`` (with the template texts, so the comparison below runs without
the sdist); ``test_live_oracle_*`` runs the program again and checks that bankml still agrees with it under
today's clock (it must be built: a missing oracle fails, it is not skipped).

Every (template, request) pair is compared field by field: the prompt and generation prompt, the format,
thinking support and tags, preserved tokens, additional stops, message delimiters, the grammar with its lazy
flag and triggers, and, on the requests that carry them, the recorded parses (whole and partial) and streams
(every code point prefix, with the msg diffs). Pairs listed in KNOWN_DIFF are ``xfail(strict=True)``, so that
a fix that makes one pass fails the run until the list is updated. Requests llama.cpp itself refuses (the
exception text is recorded) must be refused by bankml too.
"""

import calendar
import collections
import json
import pathlib
import time

import pytest

from bankml.chat.answers import msg_diffs
from bankml.chat.chat_peg import ChatMessage, ChatParseError
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatRequestError, ChatTemplate, TemplateError
from bankml.serve.request import Request

from ..oracle import build_chat_templates as oracle_chat
from ..oracle.build_converter import OracleUnavailable
from ..oracle_support import ORACLE_STATS, OraclePieces, chat_template, chat_templates_recording

RECORDED = chat_templates_recording()
MATRIX = dict(oracle_chat.matrix())
# (template, request) pairs whose prompt or generation prompt bankml does not reproduce yet (none today; a
# pair listed here is expected to differ, and the run fails when it stops differing)
KNOWN_DIFF = set()

ANALYSIS_FIELDS = (
    "format",
    "supports_thinking",
    "thinking_start_tag",
    "thinking_end_tags",
    "additional_stops",
    "delimiters",
)


def _stamp(started):
    return calendar.timegm(time.strptime(started, "%Y-%m-%dT%H:%M:%S"))


NOW = _stamp(RECORDED["started"])


@pytest.fixture(scope="module")
def templates():
    return {name: chat_template(rec["source"]) for name, rec in RECORDED["templates"].items()}


def _apply(tmpl, req, now):
    return tmpl.apply(
        ChatInputs(
            req["messages"],
            add_generation_prompt=req.get("add_generation_prompt", True),
            continue_final_message=req.get("continue_final_message"),
            enable_thinking=req.get("enable_thinking", True),
            chat_template_kwargs=dict(req.get("kwargs", [])),
            json_schema=req.get("json_schema"),
            reasoning_format=req.get("reasoning_format", "deepseek"),
            now=now,
        )
    )


def compare(tmpl, req, answer, now):
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


CASES = [(t, r) for t in sorted(RECORDED["templates"]) for r in sorted(MATRIX)]


@pytest.mark.parametrize(
    "template,request_name",
    [
        pytest.param(t, r, marks=pytest.mark.xfail(strict=True, reason="known difference"))
        if (t, r) in KNOWN_DIFF
        else (t, r)
        for t, r in CASES
    ],
)
def test_recorded_prompt(templates, template, request_name):
    tmpl, req = templates[template], MATRIX[request_name]
    res = compare(tmpl, req, RECORDED["templates"][template]["answers"][request_name], NOW)
    assert res in ("same", "refused-both"), res


@pytest.mark.parametrize("template", sorted(RECORDED["templates"]))
def test_recorded_analysis(templates, template):
    """Format, thinking support and tags, stops and message delimiters of every template (analysed or with a
    hand-written handler), on every request, and the preserved tokens in full (on the analysed templates the
    tool-call markers come from the tool-call analysis)."""
    tmpl = templates[template]
    answers = RECORDED["templates"][template]["answers"]
    for name, req in MATRIX.items():
        got, want = _apply(tmpl, req, NOW), answers[name]
        for field in ANALYSIS_FIELDS:
            assert getattr(got, field) == want[field], (name, field)
        assert got.preserved_tokens == want["preserved_tokens"], name


ANALYSED = sorted(RECORDED["templates"])


def _parse(parser, text, partial):
    try:
        m = parser.parse(text, partial)
        return {
            "ok": True,
            "msg": {
                "content": m.content,
                "reasoning": m.reasoning_content,
                "tool_calls": [[t.name, t.arguments, t.id] for t in m.tool_calls],
            },
        }, m
    except ChatParseError as e:
        return {"ok": False, "error": str(e)}, None


@pytest.mark.parametrize("template", ANALYSED)
def test_recorded_grammar_and_parses(templates, template):
    """On every template (analysed or with a hand-written handler): the grammar (and lazy flag, triggers) of every
    request, the
    parse of each recorded output (whole and partial), and every code point prefix of the streamed outputs
    with the msg diffs between consecutive parses."""
    tmpl = templates[template]
    counts = collections.Counter()
    for name, req in MATRIX.items():
        want = RECORDED["templates"][template]["answers"][name]
        got = _apply(tmpl, req, NOW)
        assert (got.grammar or "") == want["grammar"], name
        assert bool(got.grammar_lazy) == want["grammar_lazy"] and (got.grammar_triggers or []) == want["triggers"]
        for (text, partial), w in zip(req.get("parses", []), want["parses"]):
            assert _parse(got.parser, text, bool(partial))[0] == w, (name, text, partial)
            counts["parses"] += 1
        for text, steps in zip(req.get("streams", []), want["streams"]):
            assert len(steps) == len(text)
            prev = ChatMessage()
            for k, w in enumerate(steps):
                g, msg = _parse(got.parser, text[: k + 1], k + 1 < len(text))
                assert {key: g[key] for key in w if key != "diffs"} == {key: w[key] for key in w if key != "diffs"}
                if msg is not None:
                    assert [list(d) for d in msg_diffs(prev, msg)] == w["diffs"], (name, text[: k + 1])
                    prev = msg
                counts["stream steps"] += 1
    ORACLE_STATS["chat parses (recorded)"] += counts["parses"]
    ORACLE_STATS["chat stream steps (recorded)"] += counts["stream steps"]


TOOL_MATRIX = dict(oracle_chat.tool_matrix())


@pytest.mark.parametrize("template", sorted(RECORDED["templates"]))
def test_recorded_tool_requests(templates, template):
    """Requests with a tool (tool_choice auto, required, and parallel calls), on every template (hand-written
    handler or auto-parser): the prompt, generation prompt, every other field, the grammar (lazy flag,
    triggers), the preserved tokens and the parses of one tool call in each handler's syntax, whole and
    partial."""
    tmpl = templates[template]
    for name, req in TOOL_MATRIX.items():
        want = RECORDED["templates"][template]["tool_answers"][name]
        got = tmpl.apply(
            ChatInputs(
                req["messages"],
                tools=req["tools"],
                enable_thinking=req["enable_thinking"],
                chat_template_kwargs=dict(req["kwargs"]),
                tool_choice=req["tool_choice"],
                parallel_tool_calls=req.get("parallel_tool_calls", False),
                now=NOW,
            )
        )
        assert want["ok"]
        assert got.prompt == want["prompt"], name
        assert got.generation_prompt == want["generation_prompt"], name
        for field in ANALYSIS_FIELDS + ("preserved_tokens",):
            assert getattr(got, field) == want[field], (name, field)
        assert (got.grammar or "") == want["grammar"], name
        assert bool(got.grammar_lazy) == want["grammar_lazy"] and (got.grammar_triggers or []) == want["triggers"]
        for (text, partial), w in zip(req.get("parses", []), want["parses"]):
            assert _parse(got.parser, text, bool(partial))[0] == w, (name, text, partial)
            ORACLE_STATS["chat tool-call parses (recorded)"] += 1


def test_deep_nesting_is_a_parse_error_not_a_crash():
    """The arena's executor recurses per nesting level: 1,000 levels of JSON parse; far deeper input is a
    ChatParseError (streamed: a partial parse that sends nothing), not a RecursionError."""
    from bankml.chat.answers import ChatStream

    out = ChatTemplate("chatml").apply(ChatInputs([{"role": "user", "content": "x"}], json_schema={"type": "object"}))
    assert out.parser.parse("[" * 1000 + "]" * 1000).content == "[" * 1000 + "]" * 1000
    with pytest.raises(ChatParseError, match="nests too deeply"):
        out.parser.parse("[" * 100000)
    assert ChatStream(out.parser).push("[" * 100000) == ""


def test_stream_shrink_is_refused_as_llama_cpp_does():
    assert msg_diffs(ChatMessage("ab"), ChatMessage("a")) == [("", "")]
    with pytest.raises(ChatParseError, match="^Invalid diff: 'ab' not found at start of 'b'$"):
        msg_diffs(ChatMessage("ab"), ChatMessage("b"))


def test_recording_covers_every_template():
    assert len(RECORDED["templates"]) == 70
    for rec in RECORDED["templates"].values():
        assert set(rec["answers"]) == set(MATRIX)
        assert set(rec["tool_answers"]) == set(oracle_chat.tool_matrix()[i][0] for i in range(3))


def test_handlers_are_llama_cpps():
    """bankml picks a hand-written handler exactly where the recorded llama.cpp answers show one: the
    templates the analysis handles get only assistant/user delimiters, and their thinking tags come from
    the analysis."""
    handlers = {name for name, rec in RECORDED["templates"].items() if chat_template(rec["source"]).handler is not None}
    assert len(handlers) == 26
    for name, rec in RECORDED["templates"].items():
        roles = {d[0] for d in rec["answers"]["plain/think-on"]["delimiters"]}
        if name not in handlers:
            assert roles <= {"assistant", "user"}, name


def test_bad_messages_are_refused_with_llama_cpps_message(templates):
    tmpl = templates["Qwen-Qwen3-0.6B.jinja"]
    with pytest.raises(ChatRequestError, match="^Failed to parse messages: Missing 'role' in message"):
        tmpl.apply(ChatInputs([{"content": "x"}]))
    with pytest.raises(ChatRequestError, match="Expected 'content' or 'tool_calls'"):
        tmpl.apply(ChatInputs([{"role": "user"}]))
    with pytest.raises(ChatRequestError, match="Unsupported content part type"):
        tmpl.apply(ChatInputs([{"role": "user", "content": [{"type": "image_url", "text": "x"}]}]))


def test_template_errors_are_clear():
    with pytest.raises(TemplateError, match="syntax error"):
        ChatTemplate("{% for m in messages %}{{ m.content }}")
    tmpl = ChatTemplate("{{ raise_exception('System role not supported') }}")
    with pytest.raises(TemplateError, match="^Jinja Exception: System role not supported$"):
        tmpl.render([{"role": "user", "content": "x"}])


def test_jinja_is_as_strict_as_llama_cpps():
    """Where llama.cpp's Jinja raises and jinja2 would give undefined or false (found on Command R+ and
    Seed-OSS with tools): a member of a function value, and an undefined value on the left of ``in``. An
    undefined right operand stays false, and a defined left one is looked up as before."""
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(TemplateError, match="^Function has no builtins$"):
        ChatTemplate("{% set d = {'a': 1} %}{{ d.items.type }}").render(msgs)
    with pytest.raises(TemplateError, match="^Cannot perform operation in on undefined values$"):
        ChatTemplate("{{ nothing in ('a', 'b') }}").render(msgs)
    with pytest.raises(TemplateError, match="^Cannot perform operation not in on undefined values$"):
        ChatTemplate("{{ nothing not in ['a'] }}").render(msgs)
    out = ChatTemplate(
        "{{ 'a' in nothing }} {{ 'a' not in nothing }} {{ 'user' in messages[0].role }} "
        "{{ 2 not in [1] }} {{ messages[0].content is defined }}"
    ).render(msgs)
    assert out == "False True True True True"


@pytest.mark.oracle
def test_live_oracle_agrees_with_bankml(templates):
    """The pinned llama.cpp run now on every template and request: bankml, rendered at the oracle's clock,
    gives the same prompts and generation prompts, with the same known differences as on the recording."""
    try:
        exe = oracle_chat.build()
        tdir = oracle_chat.templates_dir()
    except OracleUnavailable as e:
        pytest.fail(
            "the pinned llama.cpp chat oracle could not be built (the test extra installs what it needs): %s" % e
        )
    names = sorted(RECORDED["templates"])
    requests, keys = [], []
    for name in names:
        assert (tdir / name).read_text(encoding="utf-8") == RECORDED["templates"][name]["source"]
        for r, req in oracle_chat.matrix():
            requests.append(dict(req, template=str(tdir / name)))
            keys.append((name, r))
    unexpected = []
    # answered by two programs at a time, each piece compared here while the next ones are answered
    with OraclePieces(oracle_chat.run, requests, exe) as pieces:
        for offset, started, answers in pieces:
            now = _stamp(started)
            for (name, r), ans in zip(keys[offset : offset + len(answers)], answers):
                tmpl, req = templates[name], MATRIX[r]
                res = compare(tmpl, req, ans, now)
                if (res in ("same", "refused-both")) == ((name, r) in KNOWN_DIFF):
                    unexpected.append((name, r, res))
                ORACLE_STATS["chat template requests compared live"] += 1
                # everything else the recording holds (all but the prompt, which may show today's date) is what
                # llama.cpp answers today: the recorded comparisons above stand for the live oracle
                rec = RECORDED["templates"][name]["answers"][r]
                assert {k: v for k, v in ans.items() if k != "prompt"} == {
                    k: v for k, v in rec.items() if k != "prompt"
                }, (name, r)
    assert not unexpected, unexpected[:20]


def test_stream_and_message_agree_with_the_two_template_content_rule(templates):
    """ChatStream / chat_message (llama-server's update_chat_msg and final message) give what bankml.chat.content
    gives on the two templates it models, which tests/chat/test_chat_oracle.py checks against llama.cpp: streamed
    in pieces of 1, 3 and 7 characters and whole, JSON mode or not, over the recorded server answers and
    hand-made ones (fences, padding, an escape cut short, reasoning, the raw fallback)."""
    from bankml.chat.answers import ChatStream, chat_message
    from bankml.chat.constraint import Constraint
    from bankml.chat.content import ContentStream, json_message

    recorded = json.loads(
        (pathlib.Path(__file__).parent.parent / "data" / "llama-server-jsonmode.json").read_text("utf-8")
    )
    texts = [
        '{"a": 1}',
        '```json\n{"a": [1, 2, "x\\u00e9"]}\n```',
        '  {"name": "Tom", "age": 3}  ',
        "hello",
        '<think>hm</think>{"a":1}',
        "```",
        "",
        '{"a": "x\\',
        'é{"a":1}',
    ] + [c["content"] for c in recorded.values()]

    def run(fn):
        try:
            return fn(), None
        except ValueError as e:
            return None, str(e)

    cases = 0
    for kind, tmpl, thinkings in (
        ("qwen3", templates["Qwen-Qwen3-0.6B.jinja"], (False, True)),
        ("chatml", ChatTemplate("chatml"), (False,)),
    ):
        for thinking in thinkings:
            for json_mode in (True, False):
                con = Constraint("json_object", {"type": "object"}) if json_mode else Constraint()
                out = tmpl.apply(
                    ChatInputs(
                        [{"role": "user", "content": "x"}],
                        enable_thinking=thinking,
                        chat_template_kwargs={"enable_thinking": "true" if thinking else "false"},
                        json_schema={"type": "object"} if json_mode else None,
                    )
                )
                for text in texts:
                    for size in (1, 3, 7):

                        def stream(s):
                            got = "".join(s.push(text[i : i + size]) for i in range(0, len(text), size))
                            return got + s.finish()

                        want = run(lambda: stream(ContentStream(con, kind, thinking, incremental=False)))
                        assert run(lambda: stream(ChatStream(out.parser))) == want, (kind, thinking, text, size)
                        cases += 1
                    want = run(lambda: json_message(text, kind, thinking, con))
                    assert run(lambda: chat_message(out.parser, text)) == want, (kind, thinking, text)
                    cases += 1
    assert cases == 360


@pytest.mark.parametrize("template", ["Qwen3.5-4B.jinja", "HuggingFaceTB-SmolLM3-3B.jinja", "Qwen-Qwen3-0.6B.jinja"])
def test_model_chat_uses_the_template_file(tmp_path, template):
    """SmolLM2 given another template with chat_template_file (llama-server's --chat-template-file): the
    Job's prompt, grammar and prefill are what the pinned llama.cpp gave for that template (recorded above:
    JSON mode, thinking off; these templates do not use bos_token, so SmolLM2's does not matter), and the
    answer goes through that template's parser."""
    from bankml import SamplerParams
    from bankml.chat.constraint import Constraint
    from bankml.serve.runtime import Model

    from ..oracle_support import smollm2_path

    path = tmp_path / template
    path.write_text(RECORDED["templates"][template]["source"], encoding="utf-8")
    want = RECORDED["templates"][template]["answers"]["json_object/think-off"]
    model = Model(smollm2_path(), n_ctx=1024, n_threads=1, chat_template_file=str(path))
    try:
        job = model.chat(
            Request.for_chat(
                ChatInputs(MATRIX["json_object/think-off"]["messages"], enable_thinking=False),
                Constraint("json_object", {"type": "object"}),
                SamplerParams(seed=3),
                40,
            )
        )  # the think-off request
        assert job.prompt == want["prompt"]
        assert job.grammar_text == want["grammar"]
        assert job.prefill_tokens == model.tokenize(want["generation_prompt"], False, True)
        result = job.run()
        parsed = (
            model.chat_layer()
            .apply(
                ChatInputs(
                    MATRIX["json_object/think-off"]["messages"], json_schema={"type": "object"}, enable_thinking=False
                )
            )
            .parser.parse(result.text, partial=False)
        )
        assert result.content == (parsed.content or result.text)
    finally:
        model.close()
