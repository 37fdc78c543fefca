import os

# ggml's OpenMP threads wait passively between graphs: the tests run llama-server, bankml serve and the oracle
# programs side by side on few cores, where spinning waits make each decode crawl (numbers are unchanged).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .oracle_support import ORACLE_STATS  # noqa: E402


def pytest_sessionfinish(session):
    # under pytest-xdist each worker counts its own oracle comparisons: hand them to the controller
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["oracle_stats"] = dict(ORACLE_STATS)


try:
    import xdist  # noqa: F401
except ImportError:  # pragma: no cover - the test extra installs pytest-xdist
    pass
else:

    def pytest_testnodedown(node, error):
        for key, count in getattr(node, "workeroutput", {}).get("oracle_stats", {}).items():
            ORACLE_STATS[key] += count


def pytest_terminal_summary(terminalreporter):
    if ORACLE_STATS:
        terminalreporter.section("oracle counts (bankml vs the pinned libllama)")
        for key in sorted(ORACLE_STATS):
            terminalreporter.write_line(f"{key}: {ORACLE_STATS[key]:,}")
