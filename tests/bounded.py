"""Run a reproducer in a child process under a hang guard and an address-space limit.

A hang or a blow-up then fails the test with a clear message (the child is killed at the hang guard; an
allocation past the memory limit raises MemoryError in it, or kills it), instead of taking the test run
with it. The child imports the same bankml as the test (its package directory goes first on PYTHONPATH).

``HANG_SECONDS`` is a hang guard, not a speed check: the tests assert no wall-clock time (how fast a thing is
is measured in bench/, side by side), so the guard is set far above what any of these children takes on a
loaded machine (a few seconds), and a child that reaches it is stuck. Every child-process test of the suite
uses it (tests/engine/test_reliability_engine.py, tests/sampling/test_sampler_limits.py).
"""

import os
import resource
import subprocess
import sys
import textwrap

import bankml

HANG_SECONDS = 120.0
MEMORY_LIMIT = 4 * 1024**3


def _limit(memory):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return apply


def run_bounded(code, timeout=HANG_SECONDS, memory=MEMORY_LIMIT):
    """Run ``code`` (Python source) in a child; its stdout, stripped. Fails (AssertionError) when the child
    does not finish within ``timeout`` seconds or exits non-zero (a MemoryError, a signal)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(bankml.__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            preexec_fn=_limit(memory),
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the reproducer did not finish within {timeout} s") from None
    assert proc.returncode == 0, (
        f"the reproducer failed (exit {proc.returncode}) under {memory / 1024**3:.0f} GiB:\n{proc.stderr[-3000:]}"
    )
    return proc.stdout.strip()
