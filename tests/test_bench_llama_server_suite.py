"""bench/llama_server_suite.py's own logic (the run itself starts hundreds of servers and is not run here): how
the wrappers rewrite the suite's command lines, how junit results are read, and the verdicts of ``--check``."""

import json
import pathlib
import sys
import tarfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))

import llama_server_suite as lss  # noqa: E402

MODEL = "/models/smol.gguf"
SUITE_ARGS = ["--port", "8700", "--temp", "0.8", "--seed", "42", "--host", "127.0.0.1", "--offline",
              "--hf-repo", "ggml-org/test-model-stories260K", "--threads", "4", "--no-slots", "--alias",
              "tinyllama-2", "--ctx-size", "512", "--n-predict", "-1", "--no-jinja"]  # fmt: skip


def test_the_model_sources_and_threads_are_replaced_every_other_flag_kept_in_order():
    args, replaced, dropped = lss.rewrite_args(SUITE_ARGS, MODEL)
    assert args == ["--port", "8700", "--temp", "0.8", "--seed", "42", "--host", "127.0.0.1", "--no-slots",
                    "--alias", "tinyllama-2", "--ctx-size", "512", "--n-predict", "-1", "--no-jinja",
                    "-m", MODEL, "-t", "1", "-tb", "1"]  # fmt: skip
    assert replaced == ["--offline", "--hf-repo", "ggml-org/test-model-stories260K", "--threads", "4"]
    assert dropped == []


def test_a_negative_value_stays_with_its_flag():
    assert lss.split_flags(["--n-predict", "-1", "--no-jinja", "--seed", "-1"]) == [
        ("--n-predict", "-1"),
        ("--no-jinja", None),
        ("--seed", "-1"),
    ]


def test_without_a_model_source_no_model_is_added_as_in_router_mode():
    args, replaced, _ = lss.rewrite_args(["--port", "1", "--offline", "--models-max", "2"], MODEL)
    assert "-m" not in args and args[:4] == ["--port", "1", "--models-max", "2"]
    assert replaced == ["--offline"]


def test_a_draft_model_is_replaced_by_the_model_and_kept():
    args, replaced, _ = lss.rewrite_args(["--model", "a.gguf", "--model-draft", "./tmp/draft.gguf"], MODEL)
    assert args == ["--model-draft", MODEL, "-m", MODEL, "-t", "1", "-tb", "1"]
    assert replaced == ["--model", "a.gguf", "--model-draft", "./tmp/draft.gguf"]


def test_dropped_flags_are_removed_with_their_value_and_reported():
    args, _, dropped = lss.rewrite_args(SUITE_ARGS, MODEL, drop={"--seed", "--no-jinja"})
    assert "--seed" not in args and "42" not in args and "--no-jinja" not in args
    assert dropped == ["--seed", "42", "--no-jinja"]


def test_the_wrapper_logs_the_start_and_execs_the_rewritten_command(tmp_path, monkeypatch):
    exe = lss.write_wrapper(tmp_path, "bankml", ["/bin/echo", "served"], MODEL, env={"PYTHONPATH": "/x"})
    config = json.loads((tmp_path / "bankml.json").read_text())
    assert exe.read_text().startswith("#!" + sys.executable) and config["target"] == ["/bin/echo", "served"]
    calls = []
    monkeypatch.setattr(lss.os, "execv", lambda path, argv: calls.append((path, argv)))
    monkeypatch.setattr(lss.os, "dup2", lambda a, b: None)
    monkeypatch.setattr(sys, "argv", ["wrapper", "--hf-repo", "x/y", "--seed", "1"])
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "unit/test_basic.py::test_a[p q] (call)")
    lss.wrapper_main(str(tmp_path / "bankml.json"))
    assert calls == [("/bin/echo", ["/bin/echo", "served", "--seed", "1", "-m", MODEL, "-t", "1", "-tb", "1"])]
    (start,) = lss.read_starts(tmp_path / "starts.jsonl")
    assert start["test"] == "unit/test_basic.py::test_a[p q]" and start["replaced"] == ["--hf-repo", "x/y"]
    assert lss.os.environ["PYTHONPATH"] == "/x"


def _sdist(tmp_path, conftest):
    llama_cpp = tmp_path / "llama_cpp_python-0.3.36" / lss.LLAMA_CPP_IN_SDIST
    root = llama_cpp / lss.SUITE_IN_LLAMA_CPP
    (root / "unit").mkdir(parents=True)
    (root / "conftest.py").write_text(conftest)
    (root / "unit" / "test_basic.py").write_text("")
    (root / "unit" / "test_tools_builtin.py").write_text("")
    (llama_cpp / "models" / "templates").mkdir(parents=True)
    (llama_cpp / "models" / "templates" / "a.jinja").write_text("{{ x }}")
    return tmp_path / "llama_cpp_python-0.3.36"


CONFTEST = "def load_server_presets():\n    with lock:\n        ServerPreset.load_all()\n"


@pytest.mark.parametrize("packed", [False, True])
def test_the_suite_is_copied_from_a_tree_or_a_tarball_without_the_model_downloads(tmp_path, packed):
    sdist = _sdist(tmp_path, CONFTEST)
    if packed:
        with tarfile.open(tmp_path / "sdist.tar.gz", "w:gz") as tar:
            tar.add(sdist, arcname=sdist.name)
        sdist = tmp_path / "sdist.tar.gz"
    suite = lss.copy_suite(sdist, tmp_path / "copy")
    assert suite == tmp_path / "copy" / "tools" / "server" / "tests" and (suite / "tmp").is_dir()
    assert "load_all()" not in (suite / "conftest.py").read_text()
    assert lss.suite_files(suite) == ["test_basic.py"]
    # the templates where the suite names them: ../../../models/templates from the suite's folder
    assert (suite / ".." / ".." / ".." / "models" / "templates" / "a.jinja").read_text() == "{{ x }}"


def test_a_conftest_that_changed_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="load_all"):
        lss.copy_suite(_sdist(tmp_path, "def f():\n    pass\n"), tmp_path / "copy")


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="unit.test_x" name="test_ok" file="unit/test_x.py" line="1" time="0.1"/>
<testcase classname="unit.test_x" name="test_bad[a b]" file="unit/test_x.py" line="2" time="0.1">
<failure message="AssertionError: Server returned error: 404&#10;assert 404 == 200">def test():
&gt;       assert res.status_code == 200
E       AssertionError: Server returned error: 404
E       assert 404 == 200
</failure></testcase>
<testcase classname="unit.test_x" name="test_died" file="unit/test_x.py" line="3" time="0.1">
<error message="failed on setup with &quot;RuntimeError: Server process died with return code 2&quot;">fixture
E   RuntimeError: Server process died with return code 2
</error></testcase>
<testcase classname="unit.test_x" name="test_skip" file="unit/test_x.py" line="4" time="0">
<skipped type="pytest.skip" message="needs a vision model">skip</skipped></testcase>
<testcase classname="unit.test_x" name="test_teardown" file="unit/test_x.py" line="5" time="0"/>
<testcase classname="unit.test_x" name="test_teardown" file="unit/test_x.py" line="5" time="0">
<error message="failed on teardown">E   OSError: gone
</error></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_and_first_error_lines():
    tests = lss.parse_junit(JUNIT)
    assert tests["test_ok"] == {"outcome": "passed", "error": None}
    assert tests["test_bad[a b]"] == {"outcome": "failed", "error": "AssertionError: Server returned error: 404"}
    assert tests["test_died"] == {"outcome": "error", "error": "RuntimeError: Server process died with return code 2"}
    assert tests["test_skip"]["outcome"] == "skipped"
    assert tests["test_teardown"] == {"outcome": "error", "error": "OSError: gone"}


def _starts(tmp_path, test, argv, log_text):
    log = tmp_path / ("%d.log" % len(list(tmp_path.glob("*.log"))))
    log.write_text(log_text)
    return {"test": "unit/test_x.py::" + test, "exec": argv, "dropped": [], "log": str(log)}


REFUSED = "usage: bankml serve ...\nbankml: error: unrecognized arguments: --temp 0.8 --tools all\n"


def test_a_server_that_died_at_start_gives_its_error_line_as_the_cause(tmp_path):
    tests = lss.parse_junit(JUNIT)
    starts = [
        _starts(tmp_path, "test_died", ["bankml", "--tools", "all"], REFUSED),
        _starts(tmp_path, "test_bad[a b]", ["bankml"], "error: not a start error\n"),
    ]
    lss.attach_starts(tests, starts)
    assert tests["test_died"]["start_error"] == "bankml: error: unrecognized arguments: --temp 0.8 --tools all"
    assert lss.cause(tests["test_died"]) == tests["test_died"]["start_error"]
    assert "start_error" not in tests["test_bad[a b]"]  # it did not die: its own error line is the cause
    assert lss.cause(tests["test_bad[a b]"]) == "AssertionError: Server returned error: 404"
    assert tests["test_bad[a b]"]["argv"] == [["bankml"]]


def test_a_refusal_needs_the_flag_in_the_command_line_and_an_error_naming_it():
    died = {"outcome": "error", "argv": [["bankml", "--tools", "all"]], "start_error": REFUSED.splitlines()[1]}
    assert lss.refusal_of(died) is lss.REFUSALS[0]
    assert lss.refusal_of(dict(died, argv=[["bankml", "--tools-runtime", "x"]])) is None  # --tools not asked
    assert lss.refusal_of(dict(died, start_error="error: unrecognized arguments: --temp 0.8")) is None
    assert lss.refusal_of({"outcome": "failed", "argv": [["bankml", "--lora", "a"]], "error": "assert 1"}) is None
    lora = {"outcome": "error", "argv": [["bankml", "--lora", "a"]], "start_error": "error: --lora: no LoRA"}
    assert lss.refusal_of(lora).name == "LoRA"


def test_a_start_without_a_model_is_router_mode_only_in_the_router_file():
    start = ["/usr/bin/python", "-m", "bankml", "serve", "--port", "8080"]  # python's -m is not a model
    modelless = {"outcome": "failed", "argv": [start], "error": "assert 405 == 200"}
    assert lss.refusal_of(modelless, "test_router.py").name == "router mode"
    assert lss.refusal_of(modelless, "test_security.py") is None  # CORS tests start without a model too
    with_model = dict(modelless, argv=[start, start + ["-m", "x.gguf"]])
    assert lss.refusal_of(with_model, "test_router.py") is None
    assert lss.refusal_of(dict(modelless, argv=[]), "test_router.py") is None


def _record(llama, bank, dropped=()):
    def run(tests, drop=()):
        return {f: {"wall_s": 1.0, "rc": 0, "tests": t, "dropped_flags": list(drop)} for f, t in tests.items()}

    return {"runs": {"llama-server": run(llama), "bankml": run(bank, dropped)}}


OK = {"outcome": "passed", "error": None}
BAD = {"outcome": "failed", "error": "assert 404 == 200", "argv": [["bankml"]]}
TOOLS = {"outcome": "error", "error": "RuntimeError: Server process died with return code 2",
         "argv": [["bankml", "--tools", "all"]], "start_error": "bankml: error: unrecognized arguments: --tools all"}  # fmt: skip


def test_the_table_counts_passes_on_each_server_and_on_both():
    record = _record({"a.py": {"t1": OK, "t2": OK, "t3": BAD}}, {"a.py": {"t1": OK, "t2": BAD, "t3": OK}})
    rows, regressions = lss.compare(record)
    assert rows == [("a.py", 3, 2, 2, 1)]
    assert [(f, n) for f, n, _, _ in regressions] == [("a.py", "t2")]


def test_check_passes_when_only_refusals_fail():
    record = _record({"a.py": {"t1": OK, "t2": OK}}, {"a.py": {"t1": OK, "t2": TOOLS}})
    assert lss.check_failures(record) == []


def test_check_fails_on_a_regression_a_missing_file_or_dropped_flags():
    record = _record(
        {"a.py": {"t1": OK}, "b.py": {"t": OK}, "c.py": {"t": BAD}}, {"a.py": {"t1": BAD}}, dropped=["--seed"]
    )
    reasons = lss.check_failures(record)
    assert reasons[0].endswith("--seed") and reasons[1] == "b.py: not run on bankml"
    assert reasons[2] == "a.py::t1 passes on llama-server, fails on bankml: assert 404 == 200"
    assert len(reasons) == 3


def test_a_test_missing_from_bankml_s_results_counts_as_failing():
    record = _record({"a.py": {"t1": OK}}, {"a.py": {}})
    ((_, _, entry, refusal),) = lss.compare(record)[1]
    assert entry["outcome"] == "not run" and refusal is None


def test_causes_are_grouped_largest_first():
    record = _record({"a.py": {"t1": OK, "t2": OK, "t3": OK}}, {"a.py": {"t1": BAD, "t2": TOOLS, "t3": BAD}})
    groups = lss.by_cause(lss.compare(record)[1])
    assert list(groups.items())[0] == ("assert 404 == 200", [("a.py", "t1"), ("a.py", "t3")])


def test_the_report_prints_the_table_and_the_unexplained_failures(capsys):
    record = _record({"a.py": {"t1": OK, "t2": OK}}, {"a.py": {"t1": BAD, "t2": TOOLS}})
    lss.report(record)
    out = capsys.readouterr().out
    assert "a.py" in out and "[1] assert 404 == 200" in out and "a.py::t1" in out
    assert "refused by design, server-side tools and MCP (/tools, /cors-proxy): 1" in out


@pytest.mark.parametrize(
    "argv, message",
    [(["--servers", "vllm"], "unknown server"), (["--drop-flag", "seed"], "--drop-flag takes a flag")],
)
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        lss.parse_args(argv)
    assert message in capsys.readouterr().err


def test_run_file_runs_only_the_named_tests_and_reads_their_outcomes(tmp_path):
    suite = tmp_path / "suite"
    (suite / "unit").mkdir(parents=True)
    (suite / "unit" / "test_x.py").write_text(
        "import pytest\n\n"
        "def test_a():\n    pass\n\n"
        "def test_b():\n    assert 1 == 2\n\n"
        "@pytest.mark.parametrize('v', ['p q', 'r'])\n"
        "def test_c(v):\n    assert v == 'r'\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    some = lss.run_file(suite, work, tmp_path / "unused", "test_x.py", 1, 120, only={"test_a", "test_b", "test_c[p q]"})
    assert {n: t["outcome"] for n, t in some["tests"].items()} == {
        "test_a": "passed",
        "test_b": "failed",
        "test_c[p q]": "failed",
    }
    assert some["tests"]["test_b"]["error"] == "assert 1 == 2"


def test_a_file_not_run_on_bankml_has_no_count():
    record = _record({"a.py": {"t1": OK}, "b.py": {"t": OK}}, {"a.py": {"t1": OK}})
    assert lss.compare(record)[0] == [("a.py", 1, 1, 1, 1), ("b.py", 1, 1, None, None)]


def test_refusals_by_a_flag_spelled_with_underscores():
    proxy = {
        "outcome": "error",
        "argv": [["bankml", "--ui_mcp_proxy"]],
        "start_error": "bankml serve: error: llama-server's --ui-mcp-proxy is not served by bankml serve: ...",
    }
    assert lss.refusal_of(proxy).name == "server-side tools and MCP (/tools, /cors-proxy)"
    answered = {"outcome": "failed", "argv": [["bankml"]], "error": "ServerError: (400, 'tools would be ignored')"}
    assert lss.refusal_of(answered) is None  # a request bankml answered is never refused by design
    lora = {"outcome": "error", "argv": [["bankml", "--lora", "a.gguf"]], "start_error": "error: --lora: no"}
    assert lss.refusal_of(lora).name == "LoRA"
    # embeddings and reranking are served: a test that fails with --embedding is a failure, not a refusal
    embed = {"outcome": "error", "argv": [["bankml", "--embedding"]], "start_error": "error: --embedding: no"}
    assert lss.refusal_of(embed) is None
