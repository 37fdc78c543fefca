from .oracle_support import ORACLE_STATS


def pytest_terminal_summary(terminalreporter):
    if ORACLE_STATS:
        terminalreporter.section("oracle counts (bankml vs the pinned libllama)")
        for key in sorted(ORACLE_STATS):
            terminalreporter.write_line(f"{key}: {ORACLE_STATS[key]:,}")
