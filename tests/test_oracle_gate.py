"""The gate on the oracle counts (tests/oracle_gate.py, tests/conftest.py, tests/oracle_minimums.json): a count
below its minimum, missing, without an entry, or from a module the file does not name fails the run; a partial
run holds only the counts of the modules it collected in full; the only skip allowed is an engine not installed.
The last test runs pytest on a copy of a small oracle module with its walks cut to zero and sees the run fail."""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

from . import oracle_gate

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIN = {
    "a compared": {"min": 10, "kind": "reference", "modules": ["tests/x/test_a.py"]},
    "b compared": {"min": 5, "kind": "reference", "modules": ["tests/x/test_a.py", "tests/x/test_b.py"]},
    "c replayed": {"min": 3, "kind": "source", "modules": ["tests/x/test_b.py"], "when": "replayed"},
    "d differences": {"max": 0, "kind": "reference", "modules": ["tests/x/test_b.py"]},
    "e engine": {"min": 7, "kind": "reference", "modules": ["tests/x/test_vllm.py"]},
}
ALL = {"tests/x/test_a.py", "tests/x/test_b.py", "tests/x/test_vllm.py"}
GOOD = {"a compared": 10, "b compared": 6, "c replayed": 3, "e engine": 7}


def run(counts, full=True, modules=ALL, skipped=(), producers=None, conditions=None):
    return oracle_gate.evaluate(
        counts,
        MIN,
        full_collection=full,
        full_modules=set(modules),
        engine_skipped_modules=set(skipped),
        producers=producers or {},
        conditions={"replayed": True} if conditions is None else conditions,
    )


def test_every_count_at_its_minimum_passes():
    failures, enforced, not_enforced = run(GOOD)
    assert failures == [] and sorted(enforced) == sorted(MIN) and not_enforced == []


def test_a_count_below_its_minimum_or_missing_fails():
    failures, _, _ = run(dict(GOOD, **{"a compared": 9}))
    assert failures == ["'a compared' = 9, below its minimum 10"]
    failures, _, _ = run({k: v for k, v in GOOD.items() if k != "b compared"})
    assert len(failures) == 1 and failures[0].startswith("'b compared' is missing (minimum 5")


def test_a_count_without_an_entry_or_from_another_module_fails():
    failures, _, _ = run(dict(GOOD, **{"new count": 1}))
    assert failures == ["'new count' = 1 has no entry in tests/oracle_minimums.json (add its minimum)"]
    failures, _, _ = run(GOOD, producers={"a compared": {"tests/x/test_a.py", "tests/x/test_c.py"}})
    assert failures == ["'a compared' came from tests/x/test_c.py, not among its modules in the minimums file"]


def test_a_difference_count_above_its_maximum_fails():
    failures, _, _ = run(dict(GOOD, **{"d differences": 1}))
    assert failures == ["'d differences' = 1, above its maximum 0"]


def test_a_partial_run_holds_the_modules_it_collected_in_full():
    # only test_a.py ran in full: "a" is held (and fails at 0), "b" (test_a and test_b) is not
    failures, enforced, not_enforced = run({}, full=False, modules={"tests/x/test_a.py"})
    assert failures == ["'a compared' is missing (minimum 10; from tests/x/test_a.py)"]
    assert dict(not_enforced)["b compared"] == "not collected in full: tests/x/test_b.py"
    # the whole default collection holds every count, whether or not its module turned up
    failures, _, _ = run(GOOD, full=True, modules={"tests/x/test_a.py"})
    assert failures == []
    failures, _, _ = run({"a compared": 10}, full=True, modules={"tests/x/test_a.py"})
    assert any(f.startswith("'b compared' is missing") for f in failures)


def test_conditions_and_engines_not_installed():
    failures, _, not_enforced = run({k: v for k, v in GOOD.items() if k != "c replayed"}, conditions={})
    assert failures == [] and dict(not_enforced)["c replayed"] == "condition 'replayed' does not hold here"
    failures, _, not_enforced = run(
        {k: v for k, v in GOOD.items() if k != "e engine"}, skipped={"tests/x/test_vllm.py"}
    )
    assert failures == [] and "engine not installed" in dict(not_enforced)["e engine"]


def test_only_an_engine_not_installed_may_skip():
    engine = (
        "tests/integrations/test_engine_vllm.py",
        str(ROOT / "tests" / "engines_support.py"),
        "Skipped: vLLM is not importable here (ModuleNotFoundError: No module named 'vllm'); install bankml[vllm]",
    )
    other = ("tests/x/test_a.py::t", str(ROOT / "tests" / "x" / "test_a.py"), "Skipped: recordings do not hold")
    assert oracle_gate.engine_skip(engine[1], engine[2]) == "vLLM"
    assert oracle_gate.bad_skips([engine, other]) == [(other[0], other[2])]


def _literal_keys(path):
    """The ORACLE_STATS["..."] keys written as plain string literals in a module."""
    keys = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "ORACLE_STATS"
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            keys.add(node.slice.value)
    return keys


def test_the_minimums_file_names_every_literal_count_and_real_modules():
    minimums = oracle_gate.load()
    for key, entry in minimums.items():
        for module in entry["modules"]:
            assert (ROOT / module).is_file(), (key, module)
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for key in _literal_keys(path):
            assert key in minimums, f"{path.relative_to(ROOT)}: {key!r} has no entry in tests/oracle_minimums.json"


MUTANT = """
from .oracle_support import ORACLE_STATS

WALKS = 0  # the mutation: the module's oracle walks cut to zero


def test_walks():
    for _ in range(WALKS):
        ORACLE_STATS["reasoning budget walks compared"] += 1
"""


def test_walks_cut_to_zero_turn_the_gate_red(tmp_path):
    """A module that produces a held count, its walks cut to zero: pytest passes its tests and the gate fails the
    run (exit 1), naming the count. The module is written into a copy of tests/ in place of the one that
    produces the count, so that the minimums file's module name matches."""
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("__init__.py", "conftest.py", "oracle_gate.py", "oracle_support.py", "oracle_minimums.json"):
        (tests / name).write_bytes((ROOT / "tests" / name).read_bytes())
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['tests']\n")
    (tests / "sampling").mkdir()
    (tests / "sampling" / "__init__.py").write_text("")
    (tests / "sampling" / "test_sampler_reasoning_budget.py").write_text(MUTANT.replace("from .", "from .."))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q"]
    out = subprocess.run(
        cmd + ["tests/sampling/test_sampler_reasoning_budget.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 passed" in out.stdout
    assert "GATE FAILED: 'reasoning budget walks compared' is missing (minimum" in out.stdout
    # the same module with its walks back: the count is there (the other counts of that module stay short)
    mutant = tests / "sampling" / "test_sampler_reasoning_budget.py"
    mutant.write_text(mutant.read_text().replace("WALKS = 0", "WALKS = 100"))
    out = subprocess.run(
        cmd + ["tests/sampling/test_sampler_reasoning_budget.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "'reasoning budget walks compared'" not in out.stdout, out.stdout


@pytest.mark.parametrize("arg", ["tests/sampling/test_sampler_reasoning_budget.py::test_walks", "-k walks"])
def test_a_narrowed_module_is_not_held(tmp_path, arg):
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("__init__.py", "conftest.py", "oracle_gate.py", "oracle_support.py", "oracle_minimums.json"):
        (tests / name).write_bytes((ROOT / "tests" / name).read_bytes())
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['tests']\n")
    (tests / "sampling").mkdir()
    (tests / "sampling" / "__init__.py").write_text("")
    (tests / "sampling" / "test_sampler_reasoning_budget.py").write_text(
        MUTANT.replace("from .", "from ..") + "\n\ndef test_other():\n    pass\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", *arg.split()]
    if arg.startswith("-k"):
        cmd.append("tests/sampling/test_sampler_reasoning_budget.py")
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not collected in full: tests/sampling/test_sampler_reasoning_budget.py" in out.stdout
