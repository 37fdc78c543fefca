"""`bankml convert`: llama.cpp's grammar for a schema file on stdout, warnings and errors on stderr; `bankml generate
--tools`: the parsed tool calls."""

import io
import json
import sys

import pytest

from bankml import json_schema_to_grammar
from bankml.cli import main

from .oracle_support import recorded_template_file
from .serve.test_e2e_tools import ID, KWARGS_FLAGS, _tools_of, reference


def _write(tmp_path, text, name="schema.json"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return str(path)


def test_convert_prints_the_grammar(tmp_path, capsys):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name"],
    }
    path = _write(tmp_path, json.dumps(schema))
    assert main(["convert", path]) == 0
    out, err = capsys.readouterr()
    assert out == json_schema_to_grammar(schema)[0]
    assert err == ""


def test_convert_reads_the_text_as_llama_cpp_does(tmp_path, capsys):
    # 2.0 stays a float: llama.cpp writes the literal back as 2.0
    path = _write(tmp_path, '{"const": 2.0}')
    assert main(["convert", path]) == 0
    out, _ = capsys.readouterr()
    assert 'root ::= "2.0"\n' in out


def test_convert_warnings_go_to_stderr(tmp_path, capsys):
    path = _write(tmp_path, '{"type": "string", "pattern": "^\\\\w+$"}')
    assert main(["convert", path]) == 0
    out, err = capsys.readouterr()
    assert err == (
        "WARNING: JSON schema conversion was incomplete: pattern ^\\w+$ is not supported "
        "(unsupported escape: \\w), accepting any string\n"
    )
    assert out.startswith("char ::=") and "root ::=" in out


def test_convert_error_names_the_pointer(tmp_path, capsys):
    path = _write(tmp_path, '{"type": "object", "properties": {"x": {"type": "nope"}}}')
    assert main(["convert", path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"{path}: error at #/properties/x: JSON schema conversion failed:\n"
        "JSON schema error at #/properties/x: unrecognized type nope\n"
    )


def test_convert_refuses_text_that_is_not_json(tmp_path, capsys):
    path = _write(tmp_path, '{"type": ')
    assert main(["convert", path]) == 1
    _, err = capsys.readouterr()
    assert "error at #: JSON schema conversion failed:\nJSON schema error at #: invalid JSON" in err


def test_convert_from_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"type": "boolean"}')))
    assert main(["convert", "-"]) == 0
    out, _ = capsys.readouterr()
    assert out == json_schema_to_grammar({"type": "boolean"})[0]


def test_convert_missing_file(tmp_path, capsys):
    assert main(["convert", str(tmp_path / "absent.json")]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("error: ")


def test_convert_is_a_subcommand():
    with pytest.raises(SystemExit):
        main(["convert"])


def test_generate_tools_prints_the_parsed_call(tmp_path, capsys):
    """bankml generate --tools FILE.json --tool-choice required: the parsed call, one JSON line (name, arguments
    as an object, id); with the recording's settings, llama-server's own call for this request."""
    import jsonschema

    name = "llama3.1/required/seed4"
    r = reference(name)  # the recording, or where its kernels are not this machine's, llama-server here
    tools, params = _tools_of(name)
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    template = str(recorded_template_file(tmp_path, r["template"]))
    q = r["request"]
    code = main(
        [
            "generate",
            "-t",
            "2",
            "-c",
            "2048",
            "--chat-template-file",
            template,
            *KWARGS_FLAGS,
            "--tools",
            str(path),
            "--tool-choice",
            "required",
            "--seed",
            str(q["seed"]),
            "--temperature",
            str(q["temperature"]),
            "-n",
            str(q["max_tokens"]),
            q["messages"][0]["content"],
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    # the content (here llama-server's text before the call, several lines), then one JSON line per call. On
    # kernels other than the recordings' (AVX-512 here), SmolLM2 answers this request in text alone, cut by
    # the token limit: then the text is what must be printed, and no call.
    n = len(r["tool_calls"])
    calls = [json.loads(line) for line in out.splitlines()[-n:]] if n else []
    assert out == r["content"] + "\n" + "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in calls)
    for call in calls:
        jsonschema.validate(call["arguments"], params[call["name"]])
        assert ID.match(call["id"])
    assert [[c["name"], c["arguments"]] for c in calls] == [[fn, json.loads(a)] for fn, a, _ in r["tool_calls"]]
    assert "finish %s" % r["finish_reason"] in err


def test_generate_tools_refusals(tmp_path, capsys):
    """--tool-choice without --tools, a tools file that is not an array of tools, a tool whose parameters the
    converter refuses (before any token): clear errors, no traceback."""
    assert main(["generate", "--tool-choice", "required", "hi"]) == 2
    assert "--tool-choice needs --tools" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("[]", encoding="utf-8")
    assert main(["generate", "--tools", str(bad), "hi"]) == 2
    assert "--tools needs a JSON array of tools" in capsys.readouterr().err
    refused = tmp_path / "refused.json"
    refused.write_text(
        json.dumps(
            [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "parameters": {"type": "object", "properties": {"a": {"$ref": "#/definitions/missing"}}},
                    },
                }
            ]
        ),
        encoding="utf-8",
    )
    template = str(recorded_template_file(tmp_path, "Qwen-Qwen2.5-7B-Instruct.jinja"))
    assert (
        main(
            [
                "generate",
                "-t",
                "2",
                "--chat-template-file",
                template,
                "--tools",
                str(refused),
                "--tool-choice",
                "required",
                "hi",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("error") and "Traceback" not in err


def _actions(parser, path=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, path + (name,))
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_argument_has_help_and_the_description_is_whole():
    from bankml.cli import build_parser

    parser = build_parser()
    assert parser.description.endswith("over a real vocabulary."), parser.description
    missing = [(path, a.option_strings or a.dest) for path, a in _actions(parser) if not a.help]
    assert missing == []


def test_check_gives_an_undefined_rule_its_line_and_column(tmp_path, capsys):
    path = tmp_path / "g.gbnf"
    # the name in a comment, a string and a character class is no use of the rule; the first use is on line 3
    path.write_text('root ::= "a" x # foo\nx ::= ("foo" [foo]\n  | "b" foo)\n', encoding="utf-8")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err == f"{path}:3:9: error: Undefined rule identifier 'foo'\n"
    # an error llama.cpp places keeps its place
    path.write_text('root ::= "a" (', encoding="utf-8")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"{path}:1:15: error: expecting ')'")


def test_convert_lenient_without_strict_is_refused(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text('{"type": "array", "uniqueItems": true}', encoding="utf-8")
    assert main(["convert", "--lenient", "uniqueItems", str(path)]) == 2
    assert "--lenient KEYWORD applies to --strict only" in capsys.readouterr().err


def test_convert_strict_style(tmp_path, capsys):
    """``convert --strict`` writes the canonical style unless ``--strict-style exact``; the flag needs
    ``--strict``; a bad name is argparse's error."""
    from bankml.schema.strict import strict_schema_to_grammar

    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema), encoding="utf-8")
    for extra, style in (
        ([], "canonical"),
        (["--strict-style", "canonical"], "canonical"),
        (["--strict-style", "exact"], "exact"),
    ):
        assert main(["convert", "--strict", *extra, str(path)]) == 0
        assert capsys.readouterr().out == strict_schema_to_grammar(schema, style=style)
    assert main(["convert", "--strict-style", "exact", str(path)]) == 2
    assert "--strict-style applies to --strict only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["convert", "--strict", "--strict-style", "pretty", str(path)])
