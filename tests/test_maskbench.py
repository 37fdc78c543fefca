"""bench/maskbench.py on MaskBench-shaped files: it runs, its verdicts are the instances' own, and along every
instance bankml's whole-vocabulary masks are libllama's (the runner's oracle comparison)."""

import json
import pathlib
import re
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"

pytestmark = pytest.mark.oracle


@pytest.fixture()
def maskbench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("maskbench", None)
    import maskbench

    return maskbench


def test_runner_against_libllama(tmp_path, maskbench, capsys):
    for name in ("bounded_strings.json", "enums_and_arrays.json"):
        shutil.copy(BENCH / "data" / "maskbench" / name, tmp_path / name)
    out = tmp_path / "out.json"
    maskbench.main(
        [
            str(tmp_path),
            "--engines",
            "bankml",
            "--libllama",
            "2",
            "--vocab",
            "qwen2",
            "--timeout",
            "300",
            "--out",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    # 6 instances: 2 valid (accepted), 4 invalid (rejected), by bankml and by libllama alike
    row = [line for line in text.splitlines() if line.startswith("| bankml |")][0].split("|")
    assert [c.strip() for c in row[3:11]] == ["2", "2", "0", "0", "0", "6", "0", "0"]
    m = re.search(
        r"verdicts equal on \*\*(\d+) of (\d+)\*\* instances; whole-vocabulary masks identical: "
        r"\*\*([\d,]+) of ([\d,]+)\*\*",
        text,
    )
    assert m and m.group(1) == m.group(2) == "6" and m.group(3) == m.group(4) and int(m.group(3).replace(",", "")) > 50
    results = json.loads(out.read_text())["results"]
    assert all(r["status"] == "ok" for r in results["bankml"].values())
    assert "differs:" not in text


def test_runner_reports_compile_errors_and_timeouts(tmp_path, maskbench, capsys):
    # a schema llama.cpp's converter refuses is a compile error, counted, not a crash of the run
    (tmp_path / "bad.json").write_text(
        json.dumps(
            {
                "schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}},
                "tests": [{"valid": True, "data": {"a": 1}}],
            }
        )
    )
    maskbench.main([str(tmp_path), "--engines", "bankml", "--libllama", "0"])
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| bankml |")][0].split("|")
    assert [c.strip() for c in row[3:7]] == ["1", "0", "1", "0"]


def test_a_misspelled_or_missing_engine_is_an_error(tmp_path, maskbench, capsys):
    with pytest.raises(SystemExit) as exit_:
        maskbench.main([str(tmp_path), "--engines", "bankml,xgramar"])
    assert exit_.value.code == 2
    assert "--engines: unknown engine 'xgramar'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        maskbench.main([str(tmp_path), "--engines", ","])
    assert exit_.value.code == 2 and "no engine named" in capsys.readouterr().err


def test_an_accepted_prefix_is_reported_incomplete(tmp_path, maskbench, capsys):
    """MaskBench's verdict accepts an invalid instance whose every token is allowed; the column beside it says
    the grammar may not end there: 1 under minimum 10 is a prefix of 12 (bankml and libllama alike)."""
    (tmp_path / "prefix.json").write_text(
        json.dumps(
            {
                "schema": {"type": "integer", "minimum": 10},
                "tests": [{"valid": False, "data": 1}, {"valid": True, "data": 12}, {"valid": False, "data": "a"}],
            }
        )
    )
    maskbench.main([str(tmp_path), "--engines", "bankml", "--libllama", "1"])
    lines = capsys.readouterr().out.splitlines()
    for engine in ("bankml", "libllama"):
        row = [c.strip() for c in [x for x in lines if x.startswith(f"| {engine} |")][0].split("|")]
        # instances, valid rejected, invalid accepted, of them incomplete, valid incomplete, passing, passing (end)
        assert row[8:15] == ["3", "0", "1", "1", "0", "0", "1"], (engine, row)
