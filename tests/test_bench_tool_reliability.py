"""bench/tool_reliability.py's verdicts (the bench itself runs three servers per template and is not run here):
what it counts as a valid call, a malformed one and a refusal, and the acceptance it checks with ``--check``."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))

import tool_reliability as tr  # noqa: E402

from bankml.chat.families.common import TRIGGER_PATTERN_FULL, TRIGGER_WORD  # noqa: E402

TRIGGERS = tr.trigger_regexes([(TRIGGER_WORD, "<tool_call>"), (TRIGGER_PATTERN_FULL, r"^\s*\{\s*\"name\".*")])


def answer(content=None, calls=()):
    tool_calls = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    return {"choices": [{"message": {"content": content, "tool_calls": tool_calls or None}}]}


WEATHER_OK = ("get_weather", json.dumps({"city": "Paris", "days": 3}))


def test_a_valid_call_is_valid():
    assert tr.judge(200, answer(calls=[WEATHER_OK]), None, TRIGGERS) == (True, 0)
    assert tr.judge(200, answer(calls=[WEATHER_OK]), "get_weather", TRIGGERS) == (True, 0)


def test_a_call_of_another_function_than_the_named_one_is_not_valid_nor_malformed():
    assert tr.judge(200, answer(calls=[WEATHER_OK]), "book_flight", TRIGGERS) == (False, 0)


@pytest.mark.parametrize(
    "call",
    [
        ("get_weather", json.dumps({"city": "paris", "days": 3})),  # pattern
        ("get_weather", json.dumps({"city": "Paris", "days": 9})),  # maximum
        ("get_weather", json.dumps({"city": "Paris"})),  # required
        ("get_weather", '{"city": "Paris", "days": 3'),  # not JSON
        ("book_flight", json.dumps({"origin": "LHR", "destination": "JFK", "date": "2026-13-45"})),  # format
        ("no_such_tool", "{}"),
    ],
)
def test_a_broken_call_is_malformed(call):
    assert tr.judge(200, answer(calls=[call]), None, TRIGGERS) == (False, 1)


def test_prose_is_neither_valid_nor_malformed():
    assert tr.judge(200, answer("The weather in Paris is sunny."), None, TRIGGERS) == (False, 0)


def test_a_call_left_in_the_content_is_malformed():
    assert tr.judge(200, answer('Sure. <tool_call>\n{"name": "get_weather", "argu'), None, TRIGGERS) == (False, 1)
    assert tr.judge(200, answer('{"name": "get_weather", "arguments": {'), None, TRIGGERS) == (False, 1)


def test_a_server_error_is_malformed_and_a_refusal_is_not():
    assert tr.judge(500, {"error": {"message": "Failed to parse input"}}, None, TRIGGERS) == (False, 1)
    assert tr.judge(400, {"error": {"message": "strict tool-call mode"}}, None, TRIGGERS) == (False, 0)


def test_acceptance_fails_on_an_invalid_forced_answer_or_a_malformed_auto_one():
    def rows(required_valid, auto_malformed):
        base = {"n": 4, "refused": 0, "tokens_per_call": None, "us_per_token": None}
        return [
            {"template": "t", "choice": "required", "strict": dict(base, valid=required_valid, malformed=0)},
            {"template": "t", "choice": "auto", "strict": dict(base, valid=0, malformed=auto_malformed)},
        ]

    assert tr.acceptance(rows(4, 0)) == []
    assert tr.acceptance(rows(3, 0)) == ["t required: 3 of 4 valid"]
    assert tr.acceptance(rows(4, 1)) == ["t auto: 1 malformed"]
    refused = rows(4, 0)
    refused[1]["strict"]["refused"] = 4
    assert tr.acceptance(refused) == ["t auto: 4 refused"]


def test_unknown_names_are_errors():
    with pytest.raises(SystemExit, match="unknown column: strcit"):
        tr.parse_list("strict,strcit", tr.COLUMNS, "column")
    assert tr.parse_list("strict, llama-server", tr.COLUMNS, "column") == ["strict", "llama-server"]


def test_the_bench_covers_the_issue_s_formats_and_tools():
    assert len(tr.TEMPLATES) >= 12 and len(set(tr.TEMPLATES)) == len(tr.TEMPLATES)
    assert set(tr.TEMPLATES) <= set(tr.template_sources())
    assert 3 <= len(tr.TOOLS) <= 5 and len(tr.QUESTIONS) == len(tr.TOOLS)


def test_identical_answers_compares_the_llama_cpp_column_with_llama_server_and_ignores_call_ids():
    def rec(column, choice, content, calls=(), seed=None):
        tool_calls = [{"id": column, "function": {"name": n, "arguments": a}} for n, a in calls]
        return {"template": "t", "column": column, "choice": choice, "seed": seed, "status": 200}, {
            "finish_reason": "stop",
            "content": content,
            "tool_calls": tool_calls,
        }

    records = []
    for args in [
        ("llama-server", "required", "", [WEATHER_OK]),
        ("llama.cpp", "required", "", [WEATHER_OK]),
        ("llama-server", "auto", "hello"),
        ("llama.cpp", "auto", "hullo"),
        ("llama-server", "named", "x"),
        ("llama.cpp", "named", "y"),
    ]:
        head, body = rec(*args)
        records.append({**head, **body})
    assert tr.identical_answers(records) == (1, 2)
