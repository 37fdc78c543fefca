import collections
import gc
import os
import pathlib
import types

import pytest

# ggml's OpenMP threads wait passively between graphs: the tests run llama-server, bankml serve and the oracle
# programs side by side on few cores, where spinning waits make each decode crawl (numbers are unchanged).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import oracle_gate  # noqa: E402
from .oracle_support import ORACLE_CONDITIONS, ORACLE_STATS  # noqa: E402

# what the gate needs to know of this run (tests/oracle_gate.py), gathered from the workers under pytest-xdist
_RUN = {
    "deselected": set(),
    "full_modules": set(),
    "producers": collections.defaultdict(set),
    "conditions": {},
    "skips": [],
    "engine_skipped": set(),
    "outcome": None,
}


def _module(nodeid):
    return nodeid.split("::")[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # the counts a test adds (its module-scoped fixtures' too) are its module's
    ORACLE_STATS.module = _module(item.nodeid)
    yield
    ORACLE_STATS.module = None


# The heaviest modules, heaviest first (per-module seconds summed from `python -m pytest --durations=0` with the
# cores free, session 31 at one ggml thread per model: 124, 100, 81, 58, 57, 41, 40, 37, 34, 33, 25, 24, 23 s).
# pytest-xdist's --dist loadfile hands modules out in collection order, so these go first and the light ones fill
# in after them: no worker is left alone at the end with a two-minute module. The order within a module is
# unchanged.
HEAVY_FIRST = (
    "tests/serve/test_e2e_tools.py",
    "tests/serve/test_strict_tool_calls.py",
    "tests/engine/test_fast_path.py",
    "tests/sampling/test_sampler_oracle.py",
    "tests/serve/test_reliability_server.py",
    "tests/chat/test_chat_tools.py",
    "tests/chat/test_strict_tools.py",
    "tests/serve/test_e2e_templates.py",
    "tests/serve/test_e2e_oracle.py",
    "tests/chat/test_chat_malformed.py",
    "tests/serve/test_e2e_agent_routes.py",
    "tests/engine/test_grammar_oracle.py",
    "tests/serve/test_server.py",
)


def pytest_collection_modifyitems(items):
    rank = {module: i for i, module in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(HEAVY_FIRST)))  # stable: the rest keep their order


def pytest_deselected(items):
    _RUN["deselected"].update(_module(item.nodeid) for item in items)


def pytest_collection_finish(session):
    config = session.config
    narrowed = set()
    for arg in config.args:
        if "::" in arg:  # path::test narrows its module
            path = pathlib.Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
            try:
                narrowed.add(path.relative_to(config.rootpath).as_posix())
            except ValueError:
                pass
    collected = {_module(item.nodeid) for item in session.items}
    _RUN["full_modules"] = collected - _RUN["deselected"] - narrowed


def _skip_of(report):
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, _, reason = report.longrepr
        return str(path), str(reason)
    return "", str(report.longrepr)


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _RUN["skips"].append((report.nodeid, *_skip_of(report)))


def pytest_collectreport(report):
    if report.skipped:
        path, reason = _skip_of(report)
        _RUN["skips"].append((report.nodeid, path, reason))
        if oracle_gate.engine_skip(path, reason) is not None:
            _RUN["engine_skipped"].add(_module(report.nodeid))


def pytest_sessionfinish(session):
    # The run is over: what it holds (every module's recordings and tables, millions of objects) is frozen out of
    # the collector's reach, so pytest's closing passes (unraisableexception's gc_collect_harder: five full
    # collections) walk nothing: they took about 12 s at the end of every worker. A finalizer's exception in a cycle
    # still alive then goes unreported (during the run the collector's own passes report them as they come).
    # Freezing after collection instead made the collector's full passes during the run more frequent (the frozen
    # objects leave its count of long-lived ones) and the run slower.
    gc.freeze()
    # under pytest-xdist each worker counts its own oracle comparisons: hand them to the controller
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["oracle_stats"] = dict(ORACLE_STATS)
        workeroutput["oracle_producers"] = {k: sorted(v) for k, v in ORACLE_STATS.producers.items()}
        workeroutput["oracle_full_modules"] = sorted(_RUN["full_modules"])
        workeroutput["oracle_deselected"] = sorted(_RUN["deselected"])
        workeroutput["oracle_conditions"] = dict(ORACLE_CONDITIONS)
        return
    if session.config.option.collectonly or getattr(session, "testscollected", 0) == 0:
        return
    # without pytest-xdist this process ran the tests (under it, the controller's own are empty)
    _RUN["conditions"].update(ORACLE_CONDITIONS)
    for key, modules in ORACLE_STATS.producers.items():
        _RUN["producers"][key].update(modules)
    full_collection = session.config.args_source == pytest.Config.ArgsSource.TESTPATHS and not _RUN["deselected"]
    failures, enforced, not_enforced = oracle_gate.evaluate(
        dict(ORACLE_STATS),
        oracle_gate.load(),
        full_collection=full_collection,
        full_modules=_RUN["full_modules"],
        engine_skipped_modules=_RUN["engine_skipped"],
        producers=_RUN["producers"],
        conditions=_RUN["conditions"],
    )
    bad = oracle_gate.bad_skips(_RUN["skips"])
    failures += [f"skipped: {nodeid}: {reason}" for nodeid, reason in bad]
    _RUN["outcome"] = (failures, enforced, not_enforced, full_collection)
    if failures and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook (absent with -p no:xdist)
def pytest_testnodedown(node, error):
    out = getattr(node, "workeroutput", {})
    for key, count in out.get("oracle_stats", {}).items():
        ORACLE_STATS[key] += count
    for key, modules in out.get("oracle_producers", {}).items():
        _RUN["producers"][key].update(modules)
    _RUN["full_modules"].update(out.get("oracle_full_modules", ()))
    _RUN["deselected"].update(out.get("oracle_deselected", ()))
    for name, value in out.get("oracle_conditions", {}).items():
        _RUN["conditions"][name] = _RUN["conditions"].get(name, True) and value


def pytest_terminal_summary(terminalreporter):
    minimums = oracle_gate.load()
    if ORACLE_STATS:
        for kind in oracle_gate.KINDS:
            keys = sorted(k for k in ORACLE_STATS if minimums.get(k, {}).get("kind", "reference") == kind)
            if keys:
                terminalreporter.section(f"oracle counts: {oracle_gate.KIND_TITLES[kind]}", sep="-")
                for key in keys:
                    terminalreporter.write_line(f"{key}: {ORACLE_STATS[key]:,}")
    outcome = _RUN["outcome"]
    if outcome is None:
        return
    failures, enforced, not_enforced, full_collection = outcome
    terminalreporter.section("oracle gate (tests/oracle_minimums.json)", sep="=", red=bool(failures))
    scope = "the whole default collection" if full_collection else "a partial run: modules collected in full only"
    terminalreporter.write_line(f"{len(enforced)} of {len(minimums)} counts held to their minimum ({scope})")
    by_why = collections.defaultdict(list)
    for key, why in not_enforced:
        by_why[why].append(key)
    for why, keys in sorted(by_why.items()):
        terminalreporter.write_line(
            f"not enforced ({why}): " + (repr(keys[0]) if len(keys) == 1 else f"{len(keys)} counts")
        )
    engines = sorted({e for _, p, r in _RUN["skips"] if (e := oracle_gate.engine_skip(p, r)) is not None})
    if engines:
        terminalreporter.write_line(f"skipped, engines not installed here: {', '.join(engines)}")
    for failure in failures:
        terminalreporter.write_line(f"GATE FAILED: {failure}", red=True)
    if failures:
        # the run's closing line says it too ("..., N oracle gate failures in ...")
        terminalreporter.stats.setdefault("oracle gate failures", []).extend(
            types.SimpleNamespace(message=failure) for failure in failures
        )
