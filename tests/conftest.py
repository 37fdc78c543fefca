import os

# ggml's OpenMP threads wait passively between graphs: the tests run llama-server, bankml serve and the oracle
# programs side by side on few cores, where spinning waits make each decode crawl (numbers are unchanged).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .oracle_support import ORACLE_STATS  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if ORACLE_STATS:
        terminalreporter.section("oracle counts (bankml vs the pinned libllama)")
        for key in sorted(ORACLE_STATS):
            terminalreporter.write_line(f"{key}: {ORACLE_STATS[key]:,}")
