"""Tool-calling requests of 1 to 1,000 tools: bankml's chat layer, and the grammar it gives compiled by bankml,
XGrammar and llguidance, in one run on one machine.

    python bench/tools.py [DIR] [--sizes 1,8,32,128,1000] [--repeat 5] [--vocab qwen2] [--out results.json]

DIR is a folder of MaskBench files (``{"schema": ...}``; the public set is the ``maskbench/data/`` folder of
guidance-ai/jsonschemabench): the tools are its Glaiveai2K function schemas (the tool's name is the file's) and
its BFCL ones (``{"properties": {name: parameters}}``), in file order, one tool per name. Without DIR the
object schemas of ``bench/data/schemas.json`` are used, cycled under numbered names.

The request is Qwen3.5-4B's template (``tests/data/templates/Qwen3.5-4B.jinja``: llama.cpp's Qwen3-Coder
handler, XML calls with one grammar rule per parameter) with one user message and ``tool_choice: "required"``.
Per number of tools:

* **apply, new**: ``ChatTemplate.apply`` on tools never seen (each run renames every tool, so no cache holds
  anything of them): rendering, the tools' parameters read and converted, the PEG arena, the grammar text;
* **apply, repeated**: the same request again, as an agent sends it every turn (the chat caches hit);
* **compile / first mask**, for the grammar ``apply`` gave (the same GBNF text for all three engines):
  bankml's ``Rules.parse`` + first ``Grammar``, then its first whole-vocabulary mask; XGrammar's
  ``compile_grammar(Grammar.from_ebnf(...))`` (one thread, its cache off) + ``GrammarMatcher``, then its first
  mask; llguidance's ``grammar_from("gbnf", ...)`` + ``LLMatcher``, then its first mask;
* **XGrammar structural tag**: XGrammar's own path for these tools, ``get_model_structural_tag("qwen_3_5",
  tools, tool_choice="required")`` compiled with ``compile_structural_tag``, then its first mask (its grammar
  is XGrammar's, not llama.cpp's: the same format, not the same language).

Each figure is the fastest of ``--repeat`` runs (the machine is shared: the fastest run is the least
disturbed), wall clock, in milliseconds; the thread's CPU time is kept in ``--out``. The load average is
printed before and after. Nothing is asserted here (tests/chat/test_chat_cache.py checks that a cache hit gives
what a miss does).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import walks  # noqa: E402

from bankml import Rules  # noqa: E402
from bankml.chat import cache  # noqa: E402
from bankml.chat.inputs import ChatInputs  # noqa: E402
from bankml.chat.template import ChatTemplate  # noqa: E402

TEMPLATE = ROOT / "tests" / "data" / "templates" / "Qwen3.5-4B.jinja"
MESSAGES = [{"role": "user", "content": "What is the weather in Paris tomorrow?"}]


def maskbench_tools(folder):
    """The Glaiveai2K and BFCL function schemas of a MaskBench folder as OpenAI tools, one per name."""
    out, seen = [], set()
    folder = pathlib.Path(folder)
    files = sorted(folder.glob("Glaiveai2K---*.json")) + sorted(folder.glob("BFCL_*.json"))
    for path in files:
        doc = json.loads(path.read_text())
        schema = doc.get("schema")
        if not isinstance(schema, dict):
            continue
        if path.name.startswith("Glaiveai2K---"):
            name, params = path.stem[len("Glaiveai2K---") :], schema
        else:
            props = schema.get("properties")
            if not isinstance(props, dict) or len(props) != 1:
                continue
            name, params = next(iter(props.items()))
        if not isinstance(params, dict) or params.get("type") != "object" or name in seen:
            continue
        seen.add(name)
        description = doc.get("description") or name.replace("_", " ")
        out.append({"type": "function", "function": {"name": name, "description": description, "parameters": params}})
    return out


def project_tools(n):
    schemas = [s for s in json.loads((HERE / "data" / "schemas.json").read_text())["schemas"]]
    objects = [s for s in schemas if s["schema"].get("type") == "object"]
    out = []
    for i in range(n):
        s = objects[i % len(objects)]
        name = "%s_%d" % (s["name"], i)
        out.append(
            {"type": "function", "function": {"name": name, "description": s["title"], "parameters": s["schema"]}}
        )
    return out


def xgrammar_ebnf(text):
    """walks.xgrammar_gbnf, and an empty last (or first) alternative of a group written as ``""`` too."""
    text = walks.xgrammar_gbnf(text)
    text = re.sub(r"\|([ \t]*)\)", r'|\1"")', text)
    return re.sub(r"\(([ \t]*)\|", r'(\1"" |', text)


def renamed(tools, run):
    """The same tools under new names: a request no cache has seen."""
    return [
        {"type": "function", "function": dict(t["function"], name="%s_r%d" % (t["function"]["name"], run))}
        for t in tools
    ]


SLOW_MS = 5000.0  # a run this slow is not repeated
SKIP_MS = 60000.0  # an engine whose compile took this long is not run on more tools


def best(fn, repeat, setup=None):
    """(result, fastest wall ms, fastest thread CPU ms) of ``repeat`` runs of fn(setup(i)) (one when it takes
    SLOW_MS or more)."""
    wall = cpu = None
    result = None
    for i in range(repeat):
        if wall is not None and wall >= SLOW_MS:
            break
        arg = setup(i) if setup else None
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        result = fn(arg)
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        w, c = (w1 - w0) / 1e6, (c1 - c0) / 1e6
        wall = w if wall is None else min(wall, w)
        cpu = c if cpu is None else min(cpu, c)
    return result, wall, cpu


def engine_pair(eng, compile_fn, repeat, matcher_fn=None):
    """Compile (``compile_fn()``, then the engine's first matcher) and the first mask of that matcher, each run
    on a fresh compile; the fastest of each."""
    out = eng.new_mask()
    compiles, cpus, masks = [], [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        compiled = compile_fn()
        matcher = (matcher_fn or eng.matcher)(compiled)
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        if hasattr(matcher, "is_error") and matcher.is_error():
            raise RuntimeError(matcher.get_error())
        eng.fill(matcher, out)
        w2 = time.perf_counter_ns()
        compiles.append((w1 - w0) / 1e6)
        cpus.append((c1 - c0) / 1e6)
        masks.append((w2 - w1) / 1e6)
        if compiles[-1] >= SLOW_MS:
            break
    return {"compile_ms": min(compiles), "compile_cpu_ms": min(cpus), "first_mask_ms": min(masks)}


def run_size(tmpl, tools, n, repeat, engines, vocab_name, skipped):
    row = {"tools": n}
    tools = tools[:n]

    def apply(ts):
        return tmpl.apply(ChatInputs(MESSAGES, tools=ts, tool_choice="required", now=0))

    out, row["apply_new_ms"], row["apply_new_cpu_ms"] = best(apply, repeat, lambda i: renamed(tools, i + 1000 * n))
    apply(tools)
    out, row["apply_repeated_ms"], row["apply_repeated_cpu_ms"] = best(apply, max(repeat, 5), lambda i: tools)
    text = out.grammar
    row["grammar_bytes"] = len(text.encode("utf-8"))
    row["grammar_rules"] = text.count("::=")
    for name in engines:
        if skipped.get(name):
            row[name] = {"error": "skipped: %.0f s to compile %d tools" % skipped[name]}
            continue
        try:
            eng = walks.engine("xgrammar" if name == "xgrammar-stag" else name, vocab_name)
            if name == "bankml":
                # bankml's first matcher builds the (rules, vocabulary) context: engine_pair times it as compile
                row[name] = engine_pair(eng, lambda: Rules.parse(text, vocab=eng.vocab), repeat)
            elif name == "xgrammar":
                gbnf = xgrammar_ebnf(text)
                row[name] = engine_pair(
                    eng, lambda: eng.compiler.compile_grammar(eng.xgr.Grammar.from_ebnf(gbnf)), repeat
                )
            elif name == "llguidance":
                # grammar_from reads the GBNF; the LLMatcher (engine_pair's first matcher) compiles it
                row[name] = engine_pair(
                    eng,
                    lambda: eng.llg.grammar_from("gbnf", text),
                    repeat,
                    lambda grammar: eng.llg.LLMatcher(eng.tokenizer, grammar, log_level=0),
                )
            elif name == "xgrammar-stag":
                import xgrammar.builtin_structural_tag as bst

                def compile_stag():
                    stag = bst.get_model_structural_tag("qwen_3_5", tools=tools, tool_choice="required")
                    return eng.compiler.compile_structural_tag(stag)

                row[name] = engine_pair(eng, compile_stag, repeat)
        except Exception as e:  # an engine that refuses the grammar is reported, not fatal
            row[name] = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160] if str(e) else "")}
        if row[name].get("compile_ms", 0) >= SKIP_MS:
            skipped[name] = (row[name]["compile_ms"] / 1e3, n)
    return row


def fmt(v):
    if v is None:
        return "–"
    if v < 1:
        return "%.3f" % v
    return "%.2f" % v if v < 10 else "%.1f" % v if v < 100 else "{:,.0f}".format(v)


def cell(row, engine, field):
    r = row.get(engine)
    if r is None:
        return "–"
    if "error" in r:
        return "skipped" if r["error"].startswith("skipped") else "error"
    return fmt(r[field])


def table(rows, engines):
    head = ["tools", "grammar", "apply new", "apply repeated"]
    for e in engines:
        head += ["%s compile" % e, "%s 1st mask" % e]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            "{:,}".format(row["tools"]),
            "{:,} B".format(row["grammar_bytes"]),
            fmt(row["apply_new_ms"]),
            fmt(row["apply_repeated_ms"]),
        ]
        for e in engines:
            cells += [cell(row, e, "compile_ms"), cell(row, e, "first_mask_ms")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", help="a MaskBench data folder (default: bench/data/schemas.json)")
    ap.add_argument("--sizes", default="1,8,32,128,1000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--vocab", default="qwen2", choices=("qwen2", "llama3"))
    ap.add_argument("--engines", default="bankml,xgrammar,llguidance,xgrammar-stag")
    ap.add_argument("--out", help="write every figure to this JSON file")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    engines = [e for e in args.engines.split(",") if e]
    known = ("bankml", "xgrammar", "llguidance", "xgrammar-stag")
    if not engines or any(e not in known for e in engines):
        ap.error(f"--engines: unknown engine in {args.engines!r} (the engines: {', '.join(known)})")
    missing = [e for e in engines if e.replace("-stag", "") not in walks.available_engines()]
    if missing:
        ap.error(f"--engines: {', '.join(missing)} not installed (pip install -e '.[bench]')")
    if args.dir:
        tools = maskbench_tools(args.dir)
        source = "MaskBench Glaiveai2K + BFCL (%d tools)" % len(tools)
        if len(tools) < max(sizes):
            tools = tools + project_tools(max(sizes) - len(tools))
    else:
        tools = project_tools(max(sizes))
        source = "bench/data/schemas.json"
    tmpl = ChatTemplate(TEMPLATE.read_text(), bos_token="", eos_token="<|im_end|>")
    for name in engines:  # vocabulary tables and imports before any timing
        walks.engine("xgrammar" if name == "xgrammar-stag" else name, args.vocab)
    tmpl.apply(ChatInputs(MESSAGES, tools=tools[:1], tool_choice="required", now=0))
    load_before = os.getloadavg()
    rows, skipped = [], {}
    for n in sizes:
        repeat = args.repeat if n <= 128 else max(2, args.repeat // 2)
        rows.append(run_size(tmpl, tools, n, repeat, engines, args.vocab, skipped))
        print("%d tools done" % n, file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(
        "Qwen3.5-4B template, tool_choice required, tools from %s; vocabulary %s; ms, fastest of %d runs "
        "(%d above 128 tools); load average %.2f before, %.2f after (%d cores)"
        % (source, args.vocab, args.repeat, max(2, args.repeat // 2), load_before[0], load_after[0], os.cpu_count())
    )
    print()
    print(table(rows, engines))
    errors = [(row["tools"], e, row[e]["error"]) for row in rows for e in engines if "error" in row.get(e, {})]
    for n, e, msg in errors:
        print("  %s at %d tools: %s" % (e, n, msg))
    print("\nchat caches: %s" % json.dumps(cache.stats()))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"load": [load_before, load_after], "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
