#!/usr/bin/env python3
"""MaskBench-style runner: compile each JSON schema with every engine, walk every valid and invalid
instance token by token, and report coverage, compile and time-to-first-mask percentiles, mask
percentiles cold and warm, the verdicts against libllama, and the slowest masks and compiles.

The files are MaskBench's (``{"schema": ..., "tests": [{"valid": bool, "data": ...}, ...]}``; the public set
is the ``maskbench/data/`` folder of guidance-ai/jsonschemabench, which the project cannot carry)::

    python bench/maskbench.py /path/to/maskbench/data --limit 600 --seed 0 --vocab llama3
    python bench/maskbench.py                 # the project's own schemas (bench/data), no download

What each engine is given, as its users give it:

* bankml: bankml's port of llama.cpp's ``json_schema_to_grammar`` -> ``Rules.parse`` -> ``Grammar``
  (its context: the vocabulary tables and a new context; by default nothing is built ahead: each segment
  entry is built on first use); ``--engines bankml-bg`` adds bankml with 30 ms of segment cache built in
  a background thread the constructor starts and does not wait for (``precompute=0.03``);
  ``--engines bankml-strict`` adds bankml with ``json_schema_to_grammar(schema, mode="strict", strict_style="exact")`` (every schema
  compiled exactly or refused, bankml.schema.strict) in place of the llama.cpp port;
* llguidance: ``LLMatcher.grammar_from_json_schema`` + ``LLMatcher`` (defaults: flexible whitespace);
* XGrammar: ``GrammarCompiler.compile_json_schema`` (defaults) + ``GrammarMatcher``;
* libllama (the oracle, on the first ``--libllama`` schemas): the pinned llama.cpp's GBNF of the schema
  (bankml's converter is byte-identical to it) in llama.cpp's grammar sampler, one
  ``llama_sampler_apply`` over the whole vocabulary per mask.

The instance is serialised as MaskBench does (``json.dumps(data, ensure_ascii=False)``) and tokenized once by
the pinned libllama's tokenizer; every engine walks the same ids. At each token the engine fills a
whole-vocabulary mask (timed: wall clock and the thread's CPU clock), the token is checked against the mask,
then accepted (timed apart). An instance is accepted when every token is allowed (MaskBench's verdict); the
coverage table also says, untimed, whether the grammar may end after the last token (``_complete``): an invalid
instance that is a prefix of a valid one (``1`` under ``minimum: 10``) is accepted by MaskBench's verdict and
counted in the column beside it as incomplete at the end. ``--engines`` takes bankml, libllama, xgrammar,
llguidance, bankml-bg and bankml-strict; an unknown name, or an engine that does not import here, is an error
(exit 2).

* compile: schema in -> the engine's compiled grammar and a first matcher; **TTFM** (time to first mask):
  compile plus the first mask at the start;
* cold masks: every mask of the first pass over a schema's instances, on the freshly compiled schema (as a
  server sees a new schema: its first request and those after it); warm masks: two more passes over the same
  instances with new matchers of the same compiled grammar, each mask the faster of its two (a warm mask can
  be measured again, and on these virtual machines one in ~10^5 takes a 1-3 ms hiccup: a 5 µs mask read
  3,243 µs of CPU once, and 6 µs wall with 223 µs of CPU another time; bench/summary.py's warm is the
  fastest of 3 walks for the same reason). A cold mask happens once and is taken as measured.

Python's cyclic garbage collector runs (``gc.collect()``) before each schema's compile, outside the timed spans,
for every engine alike: the previous schema's records (a tuple per mask) otherwise build up until a full
collection of the worker's heap (10-15 ms with a vocabulary loaded) lands in whichever timed span allocates next
(Github_hard---o90712's conversion read 30 ms in the bench and takes 11 ms; timeit turns the collector off for
the same reason). Not before each walk: a collection touches the whole heap, and the warm masks after it read
cold caches (warm p99 4 -> 21 µs).

Engines run in worker processes (one per engine, single-threaded), the schemas round-robin between them so
that machine noise falls on all of them alike; a schema that passes ``--timeout`` seconds is a timeout and
its worker restarts. Nothing here is asserted: it prints tables (and ``--out FILE`` keeps every number).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import pathlib
import random
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECT_DIR = HERE / "data" / "maskbench"
SLOW_MASK_US = 1000.0
BANKML_BUILD_AHEAD = "bankml-bg"  # --engines name of bankml building its segment cache ahead (precompute=0.03)
BANKML_STRICT = "bankml-strict"  # --engines name of bankml with its strict converter (bankml.schema.strict)


# --- the workload -------------------------------------------------------------------------------


def project_files():
    """The project's MaskBench-shaped cases: bench/data/maskbench/*.json (hand-made, with invalid
    instances) and the 22 schemas of bench/data/schemas.json with their valid instance."""
    cases = []
    for path in sorted(PROJECT_DIR.glob("*.json")):
        cases.append((path.name, json.loads(path.read_text(encoding="utf-8"))))
    entries = json.loads((HERE / "data" / "schemas.json").read_text(encoding="utf-8"))["schemas"]
    for e in entries:
        cases.append(
            (
                "schemas.json:" + e["name"],
                {"schema": e["schema"], "tests": [{"valid": True, "data": json.loads(e["instance"])}]},
            )
        )
    return cases


def folder_files(folder, limit, seed, names=None):
    paths = sorted(pathlib.Path(folder).glob("*.json"))
    if names:
        # in the file's order (a saved draw: its first schemas are the libllama subset, as in the draw)
        by_name = {p.name: p for p in paths}
        missing = [n for n in names if n not in by_name]
        if missing:
            print(
                f"not in {folder}, left out: {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}",
                file=sys.stderr,
            )
        paths = [by_name[n] for n in dict.fromkeys(names) if n in by_name]
    else:
        random.Random(seed).shuffle(paths)
        if limit:
            paths = paths[:limit]
    cases = []
    for p in paths:
        try:
            cases.append((p.name, json.loads(p.read_text(encoding="utf-8"))))
        except ValueError as e:
            print(f"skipped {p.name}: {e}", file=sys.stderr)
    return cases


def instance_text(data) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


# --- the workers --------------------------------------------------------------------------------


def _compile(eng, schema):
    """(compiled, first matcher, phases in µs) of the schema for engine ``eng`` (walks.Engine)."""
    clock = time.perf_counter_ns
    t0 = clock()
    phases = {}
    if eng.name in ("bankml", "libllama"):
        from bankml import Grammar, Rules, json_schema_to_grammar

        if getattr(eng, "strict", False):
            text, _ = json_schema_to_grammar(schema, mode="strict", strict_style="exact")
        else:
            text, _ = json_schema_to_grammar(schema)  # a dict: no text cache on this path
        t1 = clock()
        phases["convert"] = (t1 - t0) / 1e3
        if eng.name == "bankml":
            rules = Rules.parse(text, vocab=eng.vocab)
            t2 = clock()
            matcher = Grammar(rules, eng.vocab, **getattr(eng, "grammar_kwargs", {}))
            t3 = clock()
            phases.update(parse=(t2 - t1) / 1e3, context=(t3 - t2) / 1e3)
            return rules, matcher, phases
        compiled = eng.compile(text)
        return compiled, eng.matcher(compiled), phases
    if eng.name == "llguidance":
        grammar = eng.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        matcher = eng.llg.LLMatcher(eng.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        return grammar, matcher, phases
    if eng.name == "xgrammar":
        compiled = eng.compiler.compile_json_schema(json.dumps(schema))
        return compiled, eng.xgr.GrammarMatcher(compiled), phases
    raise ValueError(eng.name)


def _new_matcher(eng, compiled):
    if eng.name == "llguidance":
        return eng.llg.LLMatcher(eng.tokenizer, compiled, log_level=0)
    if eng.name == "xgrammar":
        return eng.xgr.GrammarMatcher(compiled)
    return eng.matcher(compiled)


def _allowed(eng, out, token):
    if eng.name == "libllama":
        return bool(out[0][token])
    row = out.numpy() if hasattr(out, "numpy") else out
    row = row.reshape(-1)
    return bool((int(row[token >> 5]) >> (token & 31)) & 1)


def _accept(eng, matcher, token):
    if eng.name == "libllama":
        matcher.accept_unchecked(token)
        matcher._mask = None
    elif eng.name == "llguidance":
        if not matcher.consume_token(token) or matcher.is_error():
            raise RuntimeError(matcher.get_error())
    elif eng.name == "xgrammar":
        if not matcher.accept_token(token):
            raise RuntimeError("rejected an allowed token")
    else:
        matcher.accept(token)


def _complete(eng, matcher):
    """Whether the grammar may end here (its end-of-generation token allowed), asked without filling a mask, so
    that no engine's mask cache is warmed by the question: bankml ``Grammar.complete``, llguidance
    ``is_accepting()``, XGrammar a fork that accepts a stop token; libllama (the oracle, untimed) its mask's
    end-of-generation bit."""
    if eng.name == "llguidance":
        return bool(matcher.is_accepting())
    if eng.name == "xgrammar":
        return bool(matcher.fork().accept_token(eng.vocab.eog_ids[0]))
    if eng.name == "libllama":
        return bool(matcher.is_allowed(eng.vocab.eog_ids[0]))
    return bool(matcher.complete)


def _walk(eng, matcher, tokens, out, hashes, first_done=False):
    """Mask, check and accept each token; returns (accepted, masks [(wall µs, cpu µs, index)], accepts µs,
    hashes)."""
    import walks

    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    masks, accept_us, digests = [], 0.0, []
    for i, token in enumerate(tokens):
        if not (first_done and i == 0):
            w0, c0 = wall(), cpu()
            eng.fill(matcher, out)
            masks.append(((wall() - w0) / 1e3, (cpu() - c0) / 1e3, i))
        if hashes:
            digests.append("%d:%016x" % walks.ids_hash(eng.allowed_ids(matcher, out)))
        if not _allowed(eng, out, token):
            return False, masks, accept_us, digests
        w0 = wall()
        _accept(eng, matcher, token)
        accept_us += (wall() - w0) / 1e3
    return True, masks, accept_us, digests


def run_schema(eng, schema, tests, hashes):
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    out = eng.new_mask()
    gc.collect()  # the harness's garbage collected outside the timed span (see the module docstring)
    w0, c0 = wall(), cpu()
    try:
        compiled, matcher, phases = _compile(eng, schema)
    except Exception as e:  # the engine refuses the schema: a compile error, as MaskBench counts it
        return {"status": "compile_error", "message": ("%s: %s" % (type(e).__name__, e))[:300]}
    compile_us, compile_cpu = (wall() - w0) / 1e3, (cpu() - c0) / 1e3
    eng.fill(matcher, out)
    ttfm_us, ttfm_cpu = (wall() - w0) / 1e3, (cpu() - c0) / 1e3
    first_mask = ttfm_us - compile_us
    result = {
        "status": "ok",
        "compile_us": compile_us,
        "compile_cpu_us": compile_cpu,
        "ttfm_us": ttfm_us,
        "ttfm_cpu_us": ttfm_cpu,
        "phases": dict(phases, first_mask=first_mask),
        "tests": [],
    }
    for passno in ("cold", "warm", "warm again"):
        for k, test in enumerate(tests):
            first = passno == "cold" and k == 0
            m = matcher if first else _new_matcher(eng, compiled)
            try:
                ok, masks, accept_us, digests = _walk(
                    eng, m, test["tokens"], out, hashes and passno == "cold", first_done=first
                )
                error = None
            except Exception as e:
                ok, masks, accept_us, digests, error = False, [], 0.0, [], "%s: %s" % (type(e).__name__, e)
            if first:
                masks.insert(0, (first_mask, ttfm_cpu - compile_cpu, 0))
            if passno == "cold":
                # MaskBench's verdict (every token allowed) beside whether the grammar may end there: an instance
                # that is a prefix of a valid one (1 under minimum 10) is accepted but incomplete
                complete = _complete(eng, m) if ok else None
                result["tests"].append(
                    {
                        "accepted": ok,
                        "complete": complete,
                        "cold": masks,
                        "accept_us": accept_us,
                        "hashes": digests,
                        "error": error,
                    }
                )
            elif passno == "warm":
                result["tests"][k]["warm"] = masks
            else:
                # each warm mask the faster of its two passes (wall and CPU clock alike)
                before = result["tests"][k]["warm"]
                result["tests"][k]["warm"] = [
                    (min(a[0], b[0]), min(a[1], b[1]), a[2]) for a, b in zip(before, masks)
                ] + before[len(masks) :]
    if eng.name == "bankml":
        # bankml-bg: the background build goes on after the walk when the walk was shorter than its budget;
        # waited for here, so that it never runs beside the next engine's job (a no-op when none was started)
        matcher.context.wait_precompute()
    return result


def worker(engine_name, vocab_name, conn):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT))
    import walks

    if engine_name == BANKML_BUILD_AHEAD:
        # bankml with 30 ms of segment cache built in a background thread beside the walk (Grammar(...,
        # precompute=0.03); the default builds nothing ahead)
        eng = walks.engine("bankml", vocab_name)
        eng.grammar_kwargs = {"precompute": 0.03}
        engine_name = "bankml"
    elif engine_name == BANKML_STRICT:
        eng = walks.engine("bankml", vocab_name)
        eng.strict = True
        engine_name = "bankml"
    else:
        eng = walks.engine(engine_name, vocab_name)
    conn.send({"ready": True, "version": walks.engine_version(engine_name), "prepare_ms": eng.prepare_ms})
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            conn.send(run_schema(eng, job["schema"], job["tests"], job["hashes"]))
        except Exception:
            conn.send({"status": "crash", "message": traceback.format_exc()[-600:]})


class Worker:
    def __init__(self, ctx, engine_name, vocab_name):
        self.ctx, self.engine_name, self.vocab_name = ctx, engine_name, vocab_name
        self.version = "?"
        self.start()

    def start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=worker, args=(self.engine_name, self.vocab_name, child), daemon=True)
        self.proc.start()
        hello = self.conn.recv()
        self.version = hello["version"]

    def run(self, job, timeout):
        self.conn.send(job)
        if self.conn.poll(timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        else:
            self.proc.kill()
            self.proc.join()
            self.start()
            return {"status": "timeout"}
        code = self.proc.exitcode
        self.proc.join()
        self.start()
        return {"status": "crash", "message": "worker died (exit code %s)" % code}

    def close(self):
        try:
            self.conn.send(None)
            self.proc.join(5)
        except (BrokenPipeError, OSError):
            pass
        if self.proc.is_alive():
            self.proc.kill()


# --- statistics ---------------------------------------------------------------------------------


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100.0 * len(values)))]


def fmt(v, digits=1):
    if v != v:
        return "—"
    return f"{v:,.{digits}f}"


def times_row(e, rs, clock):
    """One engine's row of a times table: clock 0 the wall clock (the cold masks' CPU max beside theirs), 1 the
    thread's CPU clock."""
    suffix = "_us" if clock == 0 else "_cpu_us"
    comp = [r["compile" + suffix] / 1e3 for r in rs]
    ttfm = [r["ttfm" + suffix] / 1e3 for r in rs]
    cold = [m for r in rs for t in r["tests"] for m in t["cold"]]
    warm = [m[clock] for r in rs for t in r["tests"] for m in t.get("warm", [])]
    cv = [m[clock] for m in cold]
    nan = float("nan")
    cells = [
        " / ".join(fmt(pct(comp, q), 2) for q in (50, 90, 99)) + f" / {fmt(max(comp, default=nan), 2)}",
        " / ".join(fmt(pct(ttfm, q), 2) for q in (50, 75, 99)) + f" / {fmt(max(ttfm, default=nan), 2)}",
        f"{fmt(pct(cv, 50))} / {fmt(pct(cv, 99))} / {fmt(max(cv, default=nan))}"
        + (f" ({fmt(max((m[1] for m in cold), default=nan))})" if clock == 0 else "")
        + f" / {fmt(sum(cv) / len(cv) if cv else nan)}",
        f"{fmt(pct(warm, 50))} / {fmt(pct(warm, 99))} / {fmt(max(warm, default=nan))} / "
        f"{fmt(sum(warm) / len(warm) if warm else nan)}",
    ]
    return f"| {e} | " + " | ".join(cells) + f" | {sum(1 for v in cv if v > SLOW_MASK_US)} of {len(cv)} |"


def summarise(cases, results, engines, oracle_names):
    lines = []
    add = lines.append
    ok_sets = {e: {n for n, r in results[e].items() if r["status"] == "ok"} for e in engines}
    timed = [e for e in engines if e != "libllama"]  # libllama runs only the oracle subset
    common = set.intersection(*(ok_sets[e] for e in timed)) if timed else set()
    valid_of = {name: [t["valid"] for t in case["tests"]] for name, case in cases}

    add("### Coverage\n")
    add(
        "| engine | version | schemas | compiled | compile errors | timeouts | crashes | instances | "
        "valid rejected | invalid accepted | of them incomplete at the end | valid incomplete at the end | "
        "schemas passing | schemas passing, end complete |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for e in engines:
        rs = results[e]
        counts = {
            s: sum(1 for r in rs.values() if r["status"] == s) for s in ("ok", "compile_error", "timeout", "crash")
        }
        inst = rejected = accepted_bad = bad_incomplete = good_incomplete = passing = passing_complete = 0
        for name, r in rs.items():
            if r["status"] != "ok":
                continue
            good = good_complete = True
            for t, valid in zip(r["tests"], valid_of[name]):
                inst += 1
                ended = t["accepted"] and t.get("complete") is not False  # accepted and the grammar may end
                if valid and not t["accepted"]:
                    rejected += 1
                    good = False
                if not valid and t["accepted"]:
                    accepted_bad += 1
                    bad_incomplete += not ended
                    good = False
                if valid and t["accepted"] and not ended:
                    good_incomplete += 1
                good_complete &= ended == valid
            passing += good
            passing_complete += good_complete
        add(
            f"| {e} | {versions[e]} | {len(rs)} | {counts['ok']} | {counts['compile_error']} | {counts['timeout']} | "
            f"{counts['crash']} | {inst} | {rejected} | {accepted_bad} | {bad_incomplete} | {good_incomplete} | "
            f"{passing} | {passing_complete} |"
        )
    add(
        "\n(MaskBench's verdict: an instance is accepted when every token is allowed. *Of them incomplete at the "
        "end*: invalid instances so accepted where the grammar may not end after the last token (a prefix of a "
        "valid instance, `1` under `minimum: 10`); *end complete*: a schema passes when each instance is "
        "accepted and may end exactly when it is valid.)"
    )

    for label, names_of in (
        ("each engine on the schemas it compiled", lambda e: ok_sets[e]),
        (f"the {len(common)} schemas every engine compiled", lambda e: common),
    ):
        for clock, title in ((0, f"Times: {label}"), (1, f"The same, on the thread's CPU clock ({label})")):
            add(f"\n### {title}\n")
            add(
                "| engine | compile ms p50 / p90 / p99 / max | TTFM ms p50 / p75 / p99 / max | cold mask µs p50 / p99 / max"
                + (" (CPU max)" if clock == 0 else "")
                + " / mean | warm mask µs p50 / p99 / max / mean | masks > 1 ms cold |"
            )
            add("|---|---|---|---|---|---|")
            for e in timed:
                add(times_row(e, [results[e][n] for n in names_of(e)], clock))

    if "bankml" in engines:
        rs = [results["bankml"][n] for n in ok_sets["bankml"]]
        add("\n### bankml's time to first mask, by phase (ms)\n")
        add("| phase | p50 | p90 | p99 | max |")
        add("|---|---|---|---|---|")
        for phase in ("convert", "parse", "context", "first_mask"):
            v = [r["phases"][phase] / 1e3 for r in rs]
            add(
                f"| {phase} | {fmt(pct(v, 50), 3)} | {fmt(pct(v, 90), 3)} | {fmt(pct(v, 99), 3)} | "
                f"{fmt(max(v, default=float('nan')), 3)} |"
            )

    if "libllama" in engines and "bankml" in engines:
        agree = total = masks_same = masks_total = 0
        differ = []
        for name in oracle_names:
            a, b = results["bankml"].get(name), results["libllama"].get(name)
            if not a or not b or a["status"] != "ok" or b["status"] != "ok":
                if a and b and a["status"] != b["status"]:
                    differ.append(f"{name}: bankml {a['status']}, libllama {b['status']}")
                continue
            for k, (ta, tb) in enumerate(zip(a["tests"], b["tests"])):
                total += 1
                agree += ta["accepted"] == tb["accepted"]
                n = min(len(ta["hashes"]), len(tb["hashes"]))
                masks_total += max(len(ta["hashes"]), len(tb["hashes"]))
                same = sum(1 for x, y in zip(ta["hashes"][:n], tb["hashes"][:n]) if x == y)
                masks_same += same
                if same != max(len(ta["hashes"]), len(tb["hashes"])) or ta["accepted"] != tb["accepted"]:
                    differ.append(
                        f"{name} test {k}: {same} of {masks_total} masks, verdicts {ta['accepted']}/{tb['accepted']}"
                    )
        add(f"\n### Against libllama ({len(oracle_names)} schemas)\n")
        add(
            f"* verdicts equal on **{agree:,} of {total:,}** instances; whole-vocabulary masks identical: "
            f"**{masks_same:,} of {masks_total:,}**"
        )
        for d in differ[:20]:
            add(f"* differs: {d}")

    add("\n### Slowest cold masks\n")
    add("| engine | wall µs | CPU µs | schema | instance | token | text before |")
    add("|---|---|---|---|---|---|---|")
    for e in timed:
        slow = []
        for name, r in results[e].items():
            if r["status"] != "ok":
                continue
            for k, t in enumerate(r["tests"]):
                for wall_us, cpu_us, i in t["cold"]:
                    slow.append((wall_us, cpu_us, name, k, i))
        for wall_us, cpu_us, name, k, i in sorted(slow, reverse=True)[:5]:
            prefix = tokens_text(name, k, i)
            add(f"| {e} | {fmt(wall_us)} | {fmt(cpu_us)} | {name} | {k} | {i} | `{prefix}` |")
    add("\n### Slowest compiles (ms)\n")
    add("| engine | compile | TTFM | schema |")
    add("|---|---|---|---|")
    for e in timed:
        rs = sorted(
            ((r["compile_us"], r["ttfm_us"], n) for n, r in results[e].items() if r["status"] == "ok"), reverse=True
        )[:5]
        for c, t, n in rs:
            add(f"| {e} | {fmt(c / 1e3, 2)} | {fmt(t / 1e3, 2)} | {n} |")
    return "\n".join(lines)


versions = {}
_token_texts = {}


def tokens_text(name, k, i):
    pieces, ids = _token_texts.get((name, k), (None, None))
    if pieces is None:
        return "?"
    text = b"".join(pieces[t] for t in ids[:i]).decode("utf-8", "replace")
    text = text[-40:].replace("|", "\\|").replace("`", "'").replace("\n", "\\n")
    return text


# --- main ---------------------------------------------------------------------------------------


def check_engines(ap, text, walks):
    """The ``--engines`` list, checked: a name that is no engine, or an engine that does not import here, is an
    error (``ap.error``: exit 2), never a note on stderr and a run without it."""
    engines = [e.strip() for e in text.split(",") if e.strip()]
    known = list(walks.ENGINES) + [BANKML_BUILD_AHEAD, BANKML_STRICT]
    unknown = [e for e in engines if e not in known]
    if unknown:
        ap.error(f"--engines: unknown engine {', '.join(map(repr, unknown))} (the engines: {', '.join(known)})")
    installed = walks.available_engines() + [BANKML_BUILD_AHEAD, BANKML_STRICT]
    missing = [e for e in engines if e not in installed]
    if missing:
        ap.error(
            f"--engines: {', '.join(missing)} not installed (pip install -e '.[bench]'), or leave it out of --engines"
        )
    if not engines:
        ap.error("--engines: no engine named")
    return engines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", help="a folder of MaskBench files (default: the project's cases)")
    ap.add_argument("--limit", type=int, default=600, help="schemas drawn from the folder (0: all)")
    ap.add_argument("--seed", type=int, default=0, help="the draw's seed (random.Random(seed).shuffle of the names)")
    ap.add_argument("--names", help="a file of schema file names to run instead of a draw (one per line)")
    ap.add_argument("--vocab", default="llama3", choices=("llama3", "qwen2"))
    ap.add_argument("--engines", default="bankml,llguidance,xgrammar")
    ap.add_argument("--libllama", type=int, default=60, help="schemas (the first of the draw) also run by libllama")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per schema and engine")
    ap.add_argument("--out", help="write every number (JSON) here")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT))
    import walks

    if args.folder:
        names = pathlib.Path(args.names).read_text().split() if args.names else None
        cases = folder_files(args.folder, args.limit, args.seed, names)
    else:
        cases = project_files()
    engines = check_engines(ap, args.engines, walks)
    oracle_names = [n for n, _ in cases[: args.libllama]] if args.libllama else []
    all_engines = engines + (["libllama"] if oracle_names and "libllama" not in engines else [])

    oracle = walks.oracle_vocab(args.vocab)
    pieces = walks.bankml_vocab(args.vocab).pieces
    jobs = {}
    for name, case in cases:
        tests = []
        for k, t in enumerate(case.get("tests", [])):
            ids = oracle.tokenize(instance_text(t["data"]), add_special=False, parse_special=False)
            tests.append({"valid": bool(t["valid"]), "tokens": ids})
            _token_texts[(name, k)] = (pieces, ids)
        jobs[name] = tests

    ctx = multiprocessing.get_context("spawn")
    workers = {e: Worker(ctx, e, args.vocab) for e in all_engines}
    for e, w in workers.items():
        versions[e] = w.version
    results = {e: {} for e in all_engines}
    started = time.time()
    try:
        for n, (name, case) in enumerate(cases):
            for e in all_engines:
                if e == "libllama" and name not in oracle_names:
                    continue
                job = {"schema": case["schema"], "tests": jobs[name], "hashes": name in oracle_names}
                results[e][name] = workers[e].run(job, args.timeout)
            if (n + 1) % 25 == 0:
                print(f"{n + 1}/{len(cases)} schemas, {time.time() - started:.0f} s", file=sys.stderr)
                if args.out:  # what is done so far survives an interrupted run
                    save(args.out, cases[: n + 1], results)
    finally:
        for w in workers.values():
            w.close()

    shown = [e for e in all_engines]
    print(
        f"## bench/maskbench.py: {len(cases)} schemas"
        + (
            (
                f" of {args.folder} named in {args.names}"
                if args.names
                else f" drawn from {args.folder} (seed {args.seed})"
            )
            if args.folder
            else " (the project's cases)"
        )
        + f", vocabulary {args.vocab}, {sum(len(t) for t in jobs.values())} instances, "
        f"{time.time() - started:.0f} s\n"
    )
    print(summarise(cases, results, shown, oracle_names))
    if args.out:
        save(args.out, cases, results)


def save(path, cases, results):
    pathlib.Path(path).write_text(
        json.dumps(
            {"argv": sys.argv[1:], "names": [n for n, _ in cases], "versions": versions, "results": results},
            default=str,
        )
    )


if __name__ == "__main__":
    main()
