"""The code's own gate: ruff's lint and format check over bankml, the tests and the benchmarks, and mypy over the
pure-Python packages (the compiled modules through their .pyi stubs). Configured in pyproject.toml."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATHS = ["bankml", "tests", "bench"]
# mypy's cache outlives the checkout, as pip's wheel cache does: a fresh clone rechecks only the files whose
# contents changed (mypy compares a file's hash when its mtime differs), not numpy's stubs and every module
MYPY_CACHE = (
    pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    / "bankml"
    / ("mypy-py%d.%d" % sys.version_info[:2])
)


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
    code, out = run("mypy", "--cache-dir", str(MYPY_CACHE))
    assert code == 0, out
