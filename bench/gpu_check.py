#!/usr/bin/env python3
"""The device check: structured generation on a GPU with each engine's masks, batch 1 to 256.

A transformers causal LM (a small Llama of random weights built from a config, so nothing is downloaded: the
point is the mask path, not the text) runs on the device with a KV cache; at every step each engine fills the
batch's token bitmask on the CPU (int32, one row per sequence, the wire format vLLM and SGLang use), the bitmask is
copied to the device and applied to the logits there (bankml: the unpack-and-mask torch ops of
``bankml.integrations.vllm.apply_bitmask`` for device logits; XGrammar: ``xgrammar.apply_token_bitmask_inplace``,
its CUDA/Triton kernel; llguidance: ``llguidance.torch.apply_token_bitmask_inplace``), the next token is the
argmax, and every row's matcher accepts it. Row i is constrained by schema i mod 22 of bench/data/schemas.json
(bankml: llama.cpp's GBNF of the schema; XGrammar ``compile_json_schema``; llguidance
``grammar_from_json_schema``), over the Llama 3 vocabulary (128,256 tokens, tests/data/ggml-vocab-llama-bpe.gguf).

Checked at every step, for every row (the run fails, exit 1, on any miss): the number of logits left finite on
the device equals the bitmask row's popcount (the mask was applied whole, on the device), and the argmax token
is allowed by the engine's own mask. Timed per step: the fill (CPU), the copy and the apply (device,
synchronised), the forward pass. Printed per engine and batch: steps, rows checked, ms per step for each part,
tokens/s.

    python bench/gpu_check.py                                   # --device cuda, batches 1,8,32,64,128,256
    python bench/gpu_check.py --device cpu --batches 1,4 --steps 3   # the dry run, anywhere

On a lent GPU machine (nothing outside it can be reached): carry the wheels and bankml's built extensions.
Here, once: ``pip download --no-deps -d wheels xgrammar==0.2.9 llguidance==1.9.1 apache-tvm-ffi`` (7.5 MB for
CPython 3.11; the extensions, ``bankml/**/*.so``, are 48 MB, built in place by ``python setup.py build_ext
--inplace``). Then the device command (its Python must match the wheels'; torch with CUDA, transformers,
numpy, gguf and triton must be there already: a CUDA torch cannot be carried)::

    pip install --no-index --no-deps wheels/*.whl && python bench/gpu_check.py --out $OUT/gpu_check.json

The whole run takes about a minute on an H100 (22 compiles per engine, 24 steps per batch size); ``--steps``
and ``--batches`` bound it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VOCAB_FILE = ROOT / "tests" / "data" / "ggml-vocab-llama-bpe.gguf"
SCHEMAS_FILE = ROOT / "bench" / "data" / "schemas.json"
ENGINES = ("bankml", "xgrammar", "llguidance")


def popcounts(bitmask, n_vocab):
    """Allowed tokens per row of an int32 bitmask (bits past n_vocab ignored)."""
    bits = np.unpackbits(np.ascontiguousarray(bitmask).view(np.uint8), axis=1, bitorder="little")
    return bits[:, :n_vocab].sum(axis=1)


def allowed(bitmask_row, token):
    return bool((int(bitmask_row[token >> 5]) >> (token & 31)) & 1)


class Bankml:
    name = "bankml"

    def __init__(self, vocab, torch):
        from bankml import Grammar, Rules, json_schema_to_grammar

        self.vocab, self.torch, self.Grammar = vocab, torch, Grammar
        self.compile = lambda schema: Rules.parse(json_schema_to_grammar(schema)[0], vocab=vocab)

    def matcher(self, compiled):
        return self.Grammar(compiled, self.vocab)

    def fill(self, matchers, rows, bitmask):
        from bankml import fill_next_token_bitmasks

        fill_next_token_bitmasks([matchers[r] for r in rows], bitmask.numpy(), indices=rows)

    def accept(self, matcher, token):
        matcher.accept(token)

    def apply(self, logits, bitmask):
        torch = self.torch
        if logits.device.type == "cpu":
            from bankml.engine._grammar import apply_token_bitmask_inplace

            apply_token_bitmask_inplace(logits, bitmask.numpy())
            return
        # bankml.integrations.vllm.apply_bitmask's device path (that module needs vLLM to import)
        masks = bitmask.to(logits.device, non_blocking=True)
        shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
        ok = ((masks.unsqueeze(-1) >> shifts) & 1).bool().flatten(1)[:, : logits.shape[-1]]
        logits.masked_fill_(~ok, float("-inf"))


class XGrammar:
    name = "xgrammar"

    def __init__(self, vocab, torch):
        import xgrammar

        self.xgr, self.torch = xgrammar, torch
        info = xgrammar.TokenizerInfo(
            encoded_vocab=list(vocab.pieces),
            vocab_type=xgrammar.VocabType.RAW,
            vocab_size=vocab.n_vocab,
            stop_token_ids=list(vocab.eog_ids),
        )
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.compile = lambda schema: self.compiler.compile_json_schema(json.dumps(schema))

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled)

    def fill(self, matchers, rows, bitmask):
        for r in rows:
            matchers[r].fill_next_token_bitmask(bitmask, r)

    def accept(self, matcher, token):
        if not matcher.accept_token(token):
            raise RuntimeError(f"XGrammar refused token {token} its mask allowed")

    def apply(self, logits, bitmask):
        self.xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True))


class Llguidance:
    name = "llguidance"

    def __init__(self, vocab, torch):
        import llguidance
        import llguidance.torch

        self.llg, self.llg_torch, self.torch = llguidance, llguidance.torch, torch
        pieces = list(vocab.pieces)
        by_piece = {}
        for i, p in enumerate(pieces):
            by_piece.setdefault(bytes(p), i)
        longest = max(len(p) for p in pieces)

        class ByteTokenizer:
            # what llguidance.TokenizerWrapper reads: the pieces, EOS, and a text -> ids function (a greedy
            # longest-piece split: llguidance uses it for forced text, not for masks)
            tokens = pieces
            eos_token_id = vocab.eog_ids[0]
            bos_token_id = None

            def __call__(self, text):
                data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
                ids, i = [], 0
                while i < len(data):
                    for n in range(min(longest, len(data) - i), 0, -1):
                        t = by_piece.get(data[i : i + n])
                        if t is not None:
                            ids.append(t)
                            i += n
                            break
                    else:
                        i += 1
                return ids

        self.tokenizer = llguidance.LLTokenizer(
            llguidance.TokenizerWrapper(ByteTokenizer()), n_vocab=vocab.n_vocab, eos_token=list(vocab.eog_ids)
        )
        self.executor = llguidance.LLExecutor()
        self.compile = lambda schema: llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))

    def matcher(self, compiled):
        m = self.llg.LLMatcher(self.tokenizer, compiled, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        return m

    def fill(self, matchers, rows, bitmask):
        self.llg_torch.fill_next_token_bitmask_par(self.executor, [(matchers[r], r) for r in rows], bitmask)

    def accept(self, matcher, token):
        if not matcher.consume_token(token) or matcher.is_error():
            raise RuntimeError(f"llguidance refused token {token}: {matcher.get_error()}")

    def apply(self, logits, bitmask):
        self.llg_torch.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True))


def build_model(torch, n_vocab, device, args):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=n_vocab,
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    return LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def run_batch(engine, compiled, model, torch, device, n_vocab, eog, batch, steps, sync):
    """One engine at one batch size: ``steps`` constrained decoding steps; the figures and the checks."""
    matchers = [engine.matcher(compiled[i % len(compiled)]) for i in range(batch)]
    done = [False] * batch
    width = (n_vocab + 31) // 32
    bitmask = torch.full((batch, width), -1, dtype=torch.int32)
    ids = torch.zeros((batch, 1), dtype=torch.long, device=device)
    past = None
    t_fill = t_apply = t_model = 0.0
    checked = 0
    with torch.no_grad():
        for _ in range(steps):
            t0 = time.perf_counter()
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            sync()
            t1 = time.perf_counter()
            bitmask.fill_(-1)
            rows = [r for r in range(batch) if not done[r]]
            if not rows:
                break
            engine.fill(matchers, rows, bitmask)
            t2 = time.perf_counter()
            engine.apply(logits, bitmask)
            sync()
            t3 = time.perf_counter()
            finite = torch.isfinite(logits).sum(dim=-1).cpu().numpy()
            expect = popcounts(bitmask.numpy(), n_vocab)
            nxt = logits.argmax(dim=-1).cpu().numpy()
            host = bitmask.numpy()
            for r in rows:
                if finite[r] != expect[r]:
                    raise AssertionError(
                        f"{engine.name}, batch {batch}, row {r}: {finite[r]} logits left, mask {expect[r]}"
                    )
                token = int(nxt[r])
                if not allowed(host[r], token):
                    raise AssertionError(f"{engine.name}, batch {batch}, row {r}: token {token} outside its mask")
                engine.accept(matchers[r], token)
                checked += 1
                if token in eog:
                    done[r] = True
            ids = torch.as_tensor(nxt, dtype=torch.long, device=device).unsqueeze(1)
            t_model += t1 - t0
            t_fill += t2 - t1
            t_apply += t3 - t2
    n = max(1, steps)
    total = t_model + t_fill + t_apply
    return {
        "engine": engine.name,
        "batch": batch,
        "steps": steps,
        "rows_checked": checked,
        "model_ms": 1e3 * t_model / n,
        "fill_ms": 1e3 * t_fill / n,
        "apply_ms": 1e3 * t_apply / n,
        "tokens_per_s": checked / total if total else 0.0,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="torch device (default cuda; cpu for the dry run)")
    ap.add_argument("--batches", default="1,8,32,64,128,256", help="batch sizes (default 1,8,32,64,128,256)")
    ap.add_argument("--steps", type=int, default=24, help="decoding steps per batch size (default 24)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="from bankml, xgrammar, llguidance (all by default)")
    ap.add_argument("--layers", type=int, default=2, help="the random model's layers (default 2)")
    ap.add_argument("--hidden", type=int, default=256, help="the random model's hidden size (default 256)")
    ap.add_argument("--seed", type=int, default=0, help="the random weights' seed (default 0)")
    ap.add_argument("--out", help="write every figure (JSON) here")
    args = ap.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        ap.error(f"--engines: unknown engine {', '.join(map(repr, unknown))} (the engines: {', '.join(ENGINES)})")
    batches = [int(b) for b in args.batches.split(",")]
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here (use --device cpu for the dry run)")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    from bankml import Vocab

    started = time.time()
    vocab = Vocab.from_gguf(VOCAB_FILE)
    schemas = [e["schema"] for e in json.loads(SCHEMAS_FILE.read_text(encoding="utf-8"))["schemas"]]
    model = build_model(torch, vocab.n_vocab, device, args)
    classes = {"bankml": Bankml, "xgrammar": XGrammar, "llguidance": Llguidance}
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "vocab": VOCAB_FILE.name,
        "n_vocab": vocab.n_vocab,
        "runs": [],
    }
    failures = []
    for name in engines:
        engine = classes[name](vocab, torch)
        t0 = time.perf_counter()
        compiled = [engine.compile(s) for s in schemas]
        compile_ms = 1e3 * (time.perf_counter() - t0)
        # one untimed apply first: a kernel built on first use (Triton, torch.compile) is not a step's cost
        width = (vocab.n_vocab + 31) // 32
        engine.apply(torch.zeros((1, vocab.n_vocab), device=device), torch.full((1, width), -1, dtype=torch.int32))
        sync()
        for batch in batches:
            try:
                row = run_batch(
                    engine, compiled, model, torch, device, vocab.n_vocab, set(vocab.eog_ids), batch, args.steps, sync
                )
            except (AssertionError, RuntimeError) as e:
                failures.append(str(e))
                row = {"engine": name, "batch": batch, "error": str(e)}
            row["compile_22_ms"] = compile_ms
            report["runs"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    report["seconds"] = time.time() - started
    print(f"## bench/gpu_check.py on {report['device']} (torch {report['torch']}), {report['seconds']:.0f} s\n")
    print("| engine | batch | steps | rows checked | model ms/step | fill ms/step | copy + apply ms/step | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["runs"]:
        if "error" in r:
            print(f"| {r['engine']} | {r['batch']} | FAILED: {r['error'][:80]} | | | | | |")
            continue
        print(
            f"| {r['engine']} | {r['batch']} | {r['steps']} | {r['rows_checked']:,} | {r['model_ms']:.2f} | "
            f"{r['fill_ms']:.2f} | {r['apply_ms']:.2f} | {r['tokens_per_s']:,.0f} |"
        )
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
