"""The code's own gate: ruff's lint and format check over bankml, the tests and the benchmarks, and mypy over the
pure-Python packages (the compiled modules through their .pyi stubs). Configured in pyproject.toml."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATHS = ["bankml", "tests", "bench"]


def run(*cmd):
    proc = subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def test_ruff_lint():
    code, out = run("ruff", "check", "--no-cache", *PATHS)
    assert code == 0, out


def test_ruff_format():
    code, out = run("ruff", "format", "--check", "--no-cache", *PATHS)
    assert code == 0, out


def test_mypy():
    code, out = run("mypy")
    assert code == 0, out
