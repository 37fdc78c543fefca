"""`bankml convert`: llama.cpp's grammar for a schema file on stdout, warnings and errors on stderr."""
import io
import json
import sys

import pytest

from bankml import json_schema_to_grammar
from bankml.cli import main


def _write(tmp_path, text, name="schema.json"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return str(path)


def test_convert_prints_the_grammar(tmp_path, capsys):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
              "required": ["name"]}
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
    assert err == ("WARNING: JSON schema conversion was incomplete: pattern ^\\w+$ is not supported "
                   "(unsupported escape: \\w), accepting any string\n")
    assert out.startswith("char ::=") and "root ::=" in out


def test_convert_error_names_the_pointer(tmp_path, capsys):
    path = _write(tmp_path, '{"type": "object", "properties": {"x": {"type": "nope"}}}')
    assert main(["convert", path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"{path}: error at #/properties/x: JSON schema conversion failed:\n"
                   "JSON schema error at #/properties/x: unrecognized type nope\n")


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
