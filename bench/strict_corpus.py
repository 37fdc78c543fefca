#!/usr/bin/env python3
"""The strict compiler's output on a whole corpus, as a manifest of digests: what a change to the compiler that
must not change its output is checked against.

Every MaskBench file (``{"schema": ..., "tests": [...]}``; the public set is the ``maskbench/data/`` folder of
guidance-ai/jsonschemabench) is converted with ``json_schema_to_grammar(schema, mode="strict", strict_style="exact")``; the manifest
keeps, per file, the md5 of the grammar or of the refusal (the SchemaError's keyword, pointer and message), and
a digest of them all::

    python bench/strict_corpus.py MASKBENCH/data --out /tmp/strict.json          # record
    python bench/strict_corpus.py MASKBENCH/data --compare /tmp/strict.json      # check against a record
    python bench/strict_corpus.py MASKBENCH/data --compare /tmp/strict.json --plain
    python bench/strict_corpus.py MASKBENCH/data --names bench/data/maskbench_seed0_500.txt --timing 5

* ``--compare MANIFEST`` prints every file whose outcome differs (and files present on one side only), then a
  summary line; it exits 1 on any difference, 0 otherwise (with ``--limit``/``--names``, against the files run).
* ``--plain`` runs the strict compiler's modules (``bankml.schema.strict*``) from their Python sources, the
  Cython-compiled ``.so`` beside them ignored: the plain-Python path, which must give the same output.
* ``--jobs N`` worker processes (default 2); ``--limit N`` the first N files in sorted order; ``--names FILE``
  the files a list names (bench/data/maskbench_seed0_500.txt), in the list's order.
* ``--timeout S`` (default 300): a conversion that takes longer is recorded as ``timeout`` (its worker is
  restarted). The conversion itself runs with ``SchemaLimits(max_seconds=None)`` (the other limits at their
  defaults), so that no outcome depends on the machine's speed: a compiled conversion of this corpus takes at
  most a few seconds, the plain-Python one about ten times that, both far below the timeout.
* ``--timing K`` converts each file K times in one process (``--jobs`` ignored) and prints the sum over files
  of each file's fastest time, by the wall clock and by the thread's CPU clock, with the median and p99
  (``--timing-out FILE`` keeps each file's); nothing is recorded then. ``--no-gc`` turns Python's
  cyclic collector off for that run (as timeit does), to tell the compiler's own time from the collections its
  allocations trigger.

Outcomes: ``grammar`` (md5 of the GBNF text, UTF-8 with surrogates passed), ``refused`` (md5 of
``keyword NUL pointer NUL message``; the keyword is kept in the manifest too), ``error`` (any other
exception: md5 of its type and message), ``timeout``, ``unreadable`` (the file is not JSON). The digest is the
md5 of the lines ``name TAB outcome TAB md5`` in sorted order of names.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.abc
import importlib.util
import json
import multiprocessing
import pathlib
import statistics
import sys
import time
from multiprocessing.connection import wait

ROOT = pathlib.Path(__file__).resolve().parent.parent
STRICT_PREFIX = "bankml.schema.strict"


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules ``bankml.schema.strict*`` as their Python sources, before the path finder would take
    the compiled extension beside them."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(STRICT_PREFIX):
            return None
        base = ROOT.joinpath(*name.split("."))
        if (base / "__init__.py").is_file():
            return importlib.util.spec_from_file_location(
                name, base / "__init__.py", submodule_search_locations=[str(base)]
            )
        if base.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(name, base.with_suffix(".py"))
        return None


def _setup(plain):
    sys.path.insert(0, str(ROOT))
    if plain:
        sys.meta_path.insert(0, _SourceFinder())
    from bankml.schema import grammar  # noqa: F401 (imports the strict compiler's modules)

    return _module_kinds()


def _module_kinds():
    """{module name: "compiled" or "source"} of the strict compiler's modules now imported."""
    out = {}
    for name, mod in sorted(sys.modules.items()):
        if name.startswith(STRICT_PREFIX) and getattr(mod, "__file__", None):
            out[name] = "source" if mod.__file__.endswith(".py") else "compiled"
    return out


def _digest(text):
    return hashlib.md5(text.encode("utf-8", "surrogatepass")).hexdigest()


def convert(schema):
    """The record of one schema's strict conversion: {"outcome", "md5"[, "keyword"]}."""
    from bankml.errors import SchemaError
    from bankml.schema import SchemaLimits, json_schema_to_grammar

    limits = SchemaLimits(max_seconds=None)
    try:
        grammar, _ = json_schema_to_grammar(schema, limits, mode="strict", strict_style="exact")
    except SchemaError as e:
        return {
            "outcome": "refused",
            "md5": _digest("%s\0%s\0%s" % (e.keyword, e.pointer, e)),
            "keyword": e.keyword,
        }
    except Exception as e:  # a bug, recorded: it must be the same bug on both sides
        return {"outcome": "error", "md5": _digest("%s\0%s" % (type(e).__name__, e)), "keyword": type(e).__name__}
    return {"outcome": "grammar", "md5": _digest(grammar)}


def _load(path):
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["schema"], None
    except (ValueError, KeyError, TypeError) as e:
        return None, {"outcome": "unreadable", "md5": _digest(str(e))}


def _worker(conn, plain):
    conn.send(("ready", _setup(plain)))
    while True:
        job = conn.recv()
        if job is None:
            return
        index, path = job
        schema, bad = _load(path)
        conn.send((index, bad or convert(schema)))


class _Pool:
    """Worker processes, each converting one file at a time; one past the timeout is killed and replaced."""

    def __init__(self, jobs, plain):
        self.plain = plain
        self.ctx = multiprocessing.get_context("spawn")
        self.kinds = None
        self.workers = [self._start() for _ in range(jobs)]

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.plain), daemon=True)
        proc.start()
        child.close()
        tag, kinds = parent.recv()
        self.kinds = kinds
        return {"proc": proc, "conn": parent, "job": None, "since": 0.0}

    def run(self, paths, timeout, done):
        pending = list(enumerate(paths))[::-1]
        while pending or any(w["job"] is not None for w in self.workers):
            for w in self.workers:
                if w["job"] is None and pending:
                    w["job"] = pending.pop()
                    w["since"] = time.monotonic()
                    w["conn"].send(w["job"])
            busy = [w for w in self.workers if w["job"] is not None]
            ready = wait([w["conn"] for w in busy], timeout=1.0)
            for w in busy:
                if w["conn"] in ready:
                    index, record = w["conn"].recv()
                    done(index, record)
                    w["job"] = None
                elif time.monotonic() - w["since"] > timeout:
                    done(w["job"][0], {"outcome": "timeout", "md5": ""})
                    w["proc"].kill()
                    w["proc"].join()
                    w.update(self._start())
                    w["job"] = None

    def close(self):
        for w in self.workers:
            w["conn"].send(None)
            w["proc"].join(timeout=10)


def _paths(folder, limit, names_file):
    paths = sorted(pathlib.Path(folder).glob("*.json"))
    if names_file:
        by_name = {p.name: p for p in paths}
        names = [n.strip() for n in pathlib.Path(names_file).read_text().splitlines() if n.strip()]
        missing = [n for n in names if n not in by_name]
        if missing:
            sys.exit("not in %s: %s" % (folder, ", ".join(missing[:5])))
        paths = [by_name[n] for n in dict.fromkeys(names)]
    if limit:
        paths = paths[:limit]
    return paths


def total_digest(files):
    lines = "".join("%s\t%s\t%s\n" % (n, files[n]["outcome"], files[n]["md5"]) for n in sorted(files))
    return hashlib.md5(lines.encode()).hexdigest()


def _counts(files):
    out = {}
    for rec in files.values():
        out[rec["outcome"]] = out.get(rec["outcome"], 0) + 1
    return dict(sorted(out.items()))


def compare(files, baseline):
    """The lines that say how ``files`` differs from ``baseline`` (both {name: record})."""
    out = []
    for name in sorted(set(files) | set(baseline)):
        got, want = files.get(name), baseline.get(name)
        if got is None or want is None:
            out.append("%s: only in %s" % (name, "the baseline" if got is None else "this run"))
        elif (got["outcome"], got["md5"]) != (want["outcome"], want["md5"]):
            out.append(
                "%s: %s %s (%s) != baseline %s %s (%s)"
                % (
                    name,
                    got["outcome"],
                    got["md5"],
                    got.get("keyword", ""),
                    want["outcome"],
                    want["md5"],
                    want.get("keyword", ""),
                )
            )
    return out


def timing(paths, repeats, plain, collector=True, out=None):
    """Each file's fastest of ``repeats`` conversions, by the wall clock and by the thread's CPU clock (the
    latter is what a loaded machine inflates least); a summary line of each, and ``out`` (a JSON file) gets
    every file's pair in ms."""
    kinds = _setup(plain)
    print("modules: %s; cyclic collector %s" % (_kinds_line(kinds), "on" if collector else "off"))
    if not collector:
        gc.collect()
        gc.disable()
    best = {}
    for path in paths:
        schema, bad = _load(path)
        if bad:
            continue
        wall, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.thread_time()
            convert(schema)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - t0)
        best[path.name] = (min(wall) * 1e3, min(cpu) * 1e3)
    for label, i in (("wall", 0), ("CPU", 1)):
        ms = sorted(v[i] for v in best.values())
        p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
        print(
            "%d files, fastest of %d each, %s: total %.1f ms, median %.3f ms, p99 %.2f ms, max %.1f ms"
            % (len(ms), repeats, label, sum(ms), statistics.median(ms), p99, ms[-1])
        )
    if out:
        pathlib.Path(out).write_text(json.dumps(best, indent=0) + "\n")


def _kinds_line(kinds):
    n = {k: sum(1 for v in kinds.values() if v == k) for k in ("compiled", "source")}
    return "%d compiled, %d from source" % (n["compiled"], n["source"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the MaskBench data folder (*.json)")
    ap.add_argument("--out", help="write the manifest here (JSON)")
    ap.add_argument("--compare", metavar="MANIFEST", help="compare with a recorded manifest; exit 1 on a difference")
    ap.add_argument("--plain", action="store_true", help="the strict compiler's modules from their Python sources")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="the first N files in sorted order")
    ap.add_argument("--names", help="a file listing the files to convert, one name a line")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per schema")
    ap.add_argument("--timing", type=int, default=0, metavar="K", help="time each conversion K times instead")
    ap.add_argument("--no-gc", action="store_true", help="with --timing: the cyclic collector off")
    ap.add_argument("--timing-out", metavar="FILE", help="with --timing: every file's times (JSON)")
    args = ap.parse_args()
    paths = _paths(args.folder, args.limit, args.names)
    if args.timing:
        timing(paths, args.timing, args.plain, collector=not args.no_gc, out=args.timing_out)
        return 0
    files = {}
    t0 = time.monotonic()
    pool = _Pool(max(1, args.jobs), args.plain)
    print("modules: %s" % _kinds_line(pool.kinds), flush=True)

    def done(index, record):
        files[paths[index].name] = record
        if len(files) % 1000 == 0:
            print("  %d / %d" % (len(files), len(paths)), file=sys.stderr, flush=True)

    try:
        pool.run(paths, args.timeout, done)
    finally:
        pool.close()
    manifest = {
        "count": len(files),
        "digest": total_digest(files),
        "outcomes": _counts(files),
        "modules": "source" if args.plain else "as built",
        "files": dict(sorted(files.items())),
    }
    print(
        "%d files in %.0f s: %s; digest %s"
        % (len(files), time.monotonic() - t0, json.dumps(manifest["outcomes"]), manifest["digest"])
    )
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(manifest, indent=0) + "\n")
    if args.compare:
        baseline = json.loads(pathlib.Path(args.compare).read_text())["files"]
        if args.limit or args.names:
            baseline = {name: rec for name, rec in baseline.items() if name in files}  # the files run
        diffs = compare(files, baseline)
        for line in diffs:
            print(line)
        print("%d differences in %d files against %s" % (len(diffs), len(baseline), args.compare))
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
