"""``--no-jinja``: llama-server's legacy chat formatting (common_chat_templates_apply_legacy) through libllama's
built-in templates, and ``--chat-template`` (bankml.serve.legacy_chat)."""

import llama_cpp
import pytest

from bankml import cli
from bankml.chat.constraint import RequestError
from bankml.serve.legacy_chat import apply_builtin_template, check_legacy_request, legacy_messages, verify_override

BOOK = [("system", "Book"), ("user", "What is the best book")]


def test_messages_join_the_text_parts_with_newlines():
    messages = [
        {"role": "system", "content": "Book"},
        {"role": "user", "content": [{"type": "text", "text": "Wh"}, {"type": "image_url"}, {"type": "text", "text": "at"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]  # fmt: skip
    assert legacy_messages(messages) == [("system", "Book"), ("user", "Wh\nat"), ("assistant", "")]


def test_builtin_templates_by_name():
    assert apply_builtin_template(llama_cpp, "chatml", BOOK, True) == (
        "<|im_start|>system\nBook<|im_end|>\n<|im_start|>user\nWhat is the best book<|im_end|>\n<|im_start|>assistant\n"
    )
    # tools/server/tests' test_apply_chat_template expects this text of llama-server
    chat = [("system", "You are a test."), ("user", "Hi there")]
    assert apply_builtin_template(llama_cpp, "command-r", chat, True) == (
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
        "<|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    )
    without = apply_builtin_template(llama_cpp, "llama3", BOOK, False)
    assert without.endswith("What is the best book<|eot_id|>")
    assert apply_builtin_template(llama_cpp, "llama3", BOOK, True) == (
        without + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_builtin_template_detected_from_a_jinja_text():
    jinja = "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}"
    assert apply_builtin_template(llama_cpp, jinja, BOOK, True) == apply_builtin_template(
        llama_cpp, "llama3", BOOK, True
    )
    assert apply_builtin_template(llama_cpp, "This is not a chat template", BOOK, True) is None
    assert verify_override(llama_cpp, "gemma") and not verify_override(llama_cpp, "no-such-template")


def test_a_long_chat_is_formatted_whole():
    long = [("user", "x" * 5000), ("assistant", "y" * 3000)]
    out = apply_builtin_template(llama_cpp, "chatml", long, True)
    assert out.count("x") == 5000 and out.count("y") == 3000 and out.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "tools, tool_choice, message",
    [
        ([{"type": "function", "function": {"name": "f"}}], None, "tools param requires --jinja flag"),
        (None, "required", "tool_choice param requires --jinja flag"),
        (None, "none", "tool_choice param requires --jinja flag"),
    ],
)
def test_tools_require_jinja(tools, tool_choice, message):
    with pytest.raises(RequestError, match=message):
        check_legacy_request(tools, tool_choice)


def test_no_tools_and_auto_pass():
    check_legacy_request(None, None)
    check_legacy_request([], "auto")
    check_legacy_request(None, {"type": "function", "function": {"name": "f"}})  # json_value reads it as "auto"


def test_flags():
    parse = cli.build_parser().parse_args
    assert parse(["serve"]).jinja is True
    assert parse(["serve", "--no-jinja"]).jinja is False
    assert parse(["serve", "--no-jinja", "--jinja"]).jinja is True  # the last one given, as llama-server
    assert parse(["serve", "--chat-template", "llama3"]).chat_template == "llama3"


@pytest.fixture(scope="module")
def legacy_client():
    from starlette.testclient import TestClient

    from bankml.serve.app import create_app
    from bankml.serve.runtime import Model
    from tests.oracle_support import smollm2_path

    model = Model(smollm2_path(), n_ctx=512, n_threads=1, use_jinja=False, chat_template="command-r")
    try:
        with TestClient(create_app(model, "m")) as c:
            yield c
    finally:
        model.close()


def test_served_without_jinja(legacy_client):
    messages = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi there"}]
    prompt = legacy_client.post("/apply-template", json={"messages": messages}).json()["prompt"]
    assert prompt == apply_builtin_template(llama_cpp, "command-r", legacy_messages(messages), True)
    assert legacy_client.get("/props").json()["chat_template"] == "command-r"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    r = legacy_client.post("/v1/chat/completions", json={"messages": messages, "tools": [tool]})
    assert r.status_code == 400 and r.json()["error"]["message"] == "tools param requires --jinja flag"
    body = {"messages": messages, "max_tokens": 12, "response_format": {"type": "json_object"}, "temperature": 0}
    content = legacy_client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert content.startswith("{")  # the schema's grammar, read as plain content
    r = legacy_client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200 and "reasoning_content" not in r.json()["choices"][0]["message"]


def test_an_unknown_builtin_name_stops_the_load():
    from bankml.serve.runtime import Model
    from tests.oracle_support import smollm2_path

    with pytest.raises(ValueError, match="the supplied chat template is not supported: not-a-template"):
        Model(smollm2_path(), n_ctx=256, n_threads=1, use_jinja=False, chat_template="not-a-template")


def test_a_response_format_schema_that_is_no_object(legacy_client):
    """llama-server's chat layer without Jinja converts the schema it is given (refusing 123); with Jinja it is
    ignored (Constraint.ignored_schema)."""
    from bankml.chat.constraint import from_openai

    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    r = legacy_client.post(
        "/v1/chat/completions", json=dict(body, response_format={"type": "json_object", "schema": 123})
    )
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("JSON schema conversion failed")
    assert from_openai(dict(body, response_format={"type": "json_object", "schema": 123})).ignored_schema == 123
    assert from_openai(dict(body, response_format={"type": "json_object"})).ignored_schema is None


def test_environment_variables(monkeypatch):
    for name, value in {
        "LLAMA_ARG_JINJA": "false",
        "LLAMA_ARG_CHAT_TEMPLATE": "llama3",
        "LLAMA_ARG_TAGS": "a,b",
    }.items():
        monkeypatch.setenv(name, value)
    args = cli.build_parser().parse_args(["serve"])
    assert (args.jinja, args.chat_template, args.model_tags) == (False, "llama3", "a,b")
    assert cli.build_parser().parse_args(["serve", "--jinja"]).jinja is True  # the command line wins
    monkeypatch.setenv("LLAMA_ARG_JINJA", "maybe")
    assert '"LLAMA_ARG_JINJA": invalid boolean value' in cli.build_parser().parse_args(["serve"]).env_error
