"""The official JSON-Schema-Test-Suite (draft 2020-12, ``tests/data/jsts``, commit 44401e0) run through every
engine, the suite's labels the truth.

For each group (one schema and its tests) the engine compiles the schema as its users give it, then walks each
test's text, ``json.dumps(data)``, through the grammar byte by byte: the text is accepted when every byte is
allowed and the grammar may end after the last one. A compile error (or a timeout) counts the group as not
compiled; a compiled group passes when every verdict equals its label.

Engines (``--engines``; an unknown name, or one that does not import here, is an error):

* ``bankml-strict``: ``json_schema_to_grammar(schema, mode="strict", strict_style="exact", registry=REMOTES)``
  (ECMA-262 regexes, formats asserted; ``REMOTES`` the suite's remote documents under ``http://localhost:1234/``,
  given as python-jsonschema's ``referencing.Registry`` gives them; nothing is fetched);
* ``xgrammar``: ``GrammarCompiler.compile_json_schema`` over a byte vocabulary (256 single bytes and an end);
* ``llguidance``: ``LLMatcher.grammar_from_json_schema`` over the same byte vocabulary.

xgrammar and llguidance take no documents beside the schema (neither API has a registry), so a group whose
``$ref`` names a remote document is one they do not compile: the table counts them so, and says it.

The sets of the table: ``required`` (the draft's directory, less ``format.json``, where ``format`` is an
annotation), ``optional/format`` and ``other optional``.

    python bench/jsts.py [--engines bankml-strict,xgrammar,llguidance] [--json out.json] [--failures]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's bankml, not an installed one
SUITE = ROOT / "tests" / "data" / "jsts" / "tests" / "draft2020-12"
REMOTES_DIR = ROOT / "tests" / "data" / "jsts" / "remotes"
COMMIT = "44401e0c046704b476ec9d2e2fccdaee618f259d"
SETS = ("required", "optional/format", "other optional")
ENGINES = ("bankml-strict", "xgrammar", "llguidance")
MODULES = {"bankml-strict": "bankml", "xgrammar": "xgrammar", "llguidance": "llguidance"}
EOS = 256


def set_of(path: pathlib.Path) -> str:
    rel = path.relative_to(SUITE).as_posix()
    if rel.startswith("optional/format/"):
        return "optional/format"
    return "other optional" if rel.startswith("optional/") else "required"


def groups(suite=SUITE):
    """``[(set, file, index, group)]`` of every group of the suite's files, in a fixed order."""
    out = []
    for path in sorted(suite.rglob("*.json")):
        for i, group in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            out.append((set_of(path), path.relative_to(suite).as_posix(), i, group))
    return out


def remotes(root=REMOTES_DIR):
    """``{URI: schema}``: the suite's remote documents, each under ``http://localhost:1234/`` and its path."""
    return {
        "http://localhost:1234/" + path.relative_to(root).as_posix(): json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(root.rglob("*.json"))
    }


def instance_text(data) -> bytes:
    return json.dumps(data).encode("utf-8")


# --- the engines: compile(schema) -> accepts(text) ----------------------------------------------------------------


class BankmlStrict:
    def __init__(self):
        from bankml import Grammar, Rules, Vocab, json_schema_to_grammar
        from bankml.errors import GrammarError

        self.Grammar, self.Rules, self.convert, self.error = Grammar, Rules, json_schema_to_grammar, GrammarError
        self.vocab = Vocab([b"x"], [])
        self.registry = remotes()

    def compile(self, schema):
        text, _ = self.convert(schema, mode="strict", strict_style="exact", registry=self.registry)
        rules = self.Rules.parse(text, vocab=self.vocab)

        def accepts(data: bytes) -> bool:
            g = self.Grammar(rules, self.vocab)
            try:
                g.accept_bytes(data)
            except self.error:
                return False
            return bool(g.complete)

        return accepts


def _byte_pieces():
    return [bytes([b]) for b in range(256)] + [b"</s>"]


class XGrammar:
    def __init__(self):
        import xgrammar

        self.xgr = xgrammar
        info = xgrammar.TokenizerInfo(
            encoded_vocab=_byte_pieces(), vocab_type=xgrammar.VocabType.RAW, vocab_size=257, stop_token_ids=[EOS]
        )
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile(self, schema):
        compiled = self.compiler.compile_json_schema(json.dumps(schema))

        def accepts(data: bytes) -> bool:
            m = self.xgr.GrammarMatcher(compiled)
            return all(m.accept_token(b) for b in data) and m.accept_token(EOS)

        return accepts


class Llguidance:
    def __init__(self):
        import llguidance

        class ByteTokenizer:  # what llguidance.TokenizerWrapper reads
            tokens = _byte_pieces()
            eos_token_id = EOS
            bos_token_id = None
            special_token_ids = [EOS]

            def __call__(self, text):
                return list(text.encode("utf-8") if isinstance(text, str) else text)

        self.llg = llguidance
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTokenizer()), n_vocab=257)

    def compile(self, schema):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        first = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if first.is_error():
            raise RuntimeError(first.get_error())

        def accepts(data: bytes) -> bool:
            m = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
            for b in data:
                if not m.consume_token(b) or m.is_error():
                    return False
            return bool(m.is_accepting())

        return accepts


ENGINE_CLASSES = {"bankml-strict": BankmlStrict, "xgrammar": XGrammar, "llguidance": Llguidance}


def run_group(engine, group):
    """``{"status": "ok"|"compile_error", "message", "verdicts": [bool]}`` of one group."""
    try:
        accepts = engine.compile(group["schema"])
    except Exception as e:  # the engine refuses the schema
        return {"status": "compile_error", "message": f"{type(e).__name__}: {e}"[:300]}
    return {"status": "ok", "verdicts": [accepts(instance_text(t["data"])) for t in group["tests"]]}


def _worker(name, conn):
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    engine = ENGINE_CLASSES[name]()
    conn.send("ready")
    while True:
        group = conn.recv()
        if group is None:
            return
        conn.send(run_group(engine, group))


class Worker:
    """One engine in a process of its own, so that a group that hangs or crashes it costs that group only."""

    def __init__(self, name):
        self.name, self.proc = name, None

    def start(self):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(self.name, child), daemon=True)
        self.proc.start()
        if not self.conn.poll(120):
            raise RuntimeError(f"{self.name}: the worker did not start")
        self.conn.recv()

    def run(self, group, timeout):
        if self.proc is None or not self.proc.is_alive():
            self.start()
        self.conn.send(group)
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
            status, message = "timeout", f"no answer in {timeout:g} s"
        except EOFError:
            status, message = "crash", f"the worker died (exit {self.proc.exitcode})"
        self.close()
        return {"status": status, "message": message}

    def close(self):
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
            self.proc = None


def run(engines, timeout=60.0, suite=SUITE):
    """``{engine: [(set, file, index, group, result)]}``."""
    cases = groups(suite)
    results = {}
    for name in engines:
        worker = Worker(name)
        try:
            results[name] = [(s, f, i, g, worker.run(g, timeout)) for s, f, i, g in cases]
        finally:
            worker.close()
    return results


def tally(rows):
    """One table row's counts from ``[(set, file, index, group, result)]``."""
    out = {"groups": 0, "compiled": 0, "passing": 0, "valid rejected": 0, "invalid accepted": 0}
    for _, _, _, group, result in rows:
        out["groups"] += 1
        if result["status"] != "ok":
            continue
        out["compiled"] += 1
        wrong = 0
        for test, verdict in zip(group["tests"], result["verdicts"]):
            if verdict != test["valid"]:
                wrong += 1
                out["valid rejected" if test["valid"] else "invalid accepted"] += 1
        out["passing"] += wrong == 0
    return out


def version(name):
    from importlib.metadata import version as v

    if name == "bankml-strict":
        sys.path.insert(0, str(ROOT / "bench"))
        import walks

        return walks.bankml_build()
    return v(name)


def table(results):
    lines = [
        f"JSON-Schema-Test-Suite {COMMIT[:7]}, draft 2020-12 (`python bench/jsts.py`)",
        "",
        "bankml-strict is given the suite's remote documents (`registry`); xgrammar and llguidance take none.",
        "",
        "| set | engine | groups | compiled | groups passing | valid rejected | invalid accepted |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SETS:
        for k, (name, rows) in enumerate(results.items()):
            t = tally([r for r in rows if r[0] == s])
            lines.append(
                f"| {s if k == 0 else ''} | {name} {version(name)} | {t['groups']} | {t['compiled']} | "
                f"{t['passing']} | {t['valid rejected']} | {t['invalid accepted']} |"
            )
    return "\n".join(lines)


def failures(name, rows):
    lines = []
    for s, f, i, group, result in rows:
        if result["status"] != "ok":
            lines.append(f"{name} {f}#{i} {group['description']!r}: {result['status']}: {result['message']}")
            continue
        for test, verdict in zip(group["tests"], result["verdicts"]):
            if verdict != test["valid"]:
                lines.append(
                    f"{name} {f}#{i} {group['description']!r}: WRONG {test['description']!r} "
                    f"label {test['valid']} got {verdict}: {instance_text(test['data'])[:80]!r}"
                )
    return lines


def check_engines(ap, text):
    engines = [e.strip() for e in text.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        ap.error(f"--engines: unknown engine {', '.join(map(repr, unknown))} (the engines: {', '.join(ENGINES)})")
    missing = [e for e in engines if importlib.util.find_spec(MODULES[e]) is None]
    if missing:
        ap.error(f"--engines: {', '.join(missing)} not installed (pip install -e '.[bench]'), or leave it out")
    if not engines:
        ap.error("--engines: no engine named")
    return engines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="bankml-strict,llguidance,xgrammar")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per group and engine")
    ap.add_argument("--failures", action="store_true", help="list every group not compiled and every wrong verdict")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    engines = check_engines(ap, args.engines)
    results = run(engines, args.timeout)
    if args.failures:
        for name, rows in results.items():
            print("\n".join(failures(name, rows)))
    print(table(results))
    if args.json:
        out = {n: [{"file": f, "index": i, **r} for _, f, i, _, r in rows] for n, rows in results.items()}
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
