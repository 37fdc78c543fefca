"""Tokens per second on a real model, side by side in one run, as a Markdown table for docs/PERFORMANCE.md.

    python bench/generate_summary.py [--model PATH.gguf] [--threads 2] [--max-tokens 128] [--repeats 3]

Engines, each on the same chat prompts, the same model (default SmolLM2-135M-Instruct), the same thread
count and llama-server's default sampler settings with a fixed seed per prompt:

* ``bankml --json``: bankml.serve.runtime (llama-cpp-python's libllama for the logits; bankml's chat grammar,
  sampler chain with check-then-redraw, content rule) — what ``bankml generate --json`` runs;
* ``bankml unconstrained``: the same loop without a grammar;
* ``llama-cpp-python json_object``: ``Llama.create_chat_completion(response_format={"type": "json_object"})``,
  llama-cpp-python's own JSON mode (libllama's grammar sampler over its JSON grammar);
* ``llama-cpp-python unconstrained``: ``create_chat_completion`` without a response format.

Per engine: generated tokens / wall time of the whole request (prompt included; prompts are short), the
mean over prompts and repeats (the best repeat per prompt is kept); for bankml also the share of each
decoding step spent in grammar and sampling (sampler time / (sampler + llama_decode time)).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

PROMPTS = [
    "Describe a cat as a JSON object with its name, age and favourite toys.",
    "Give me a JSON object with the capital cities of three European countries.",
    "Return a JSON object describing a book: title, author, year and genres.",
    "Write a JSON object for a user profile with id, email and a list of roles.",
    "Produce a JSON object listing two planets with their number of moons.",
]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_bankml(model, json_mode, max_tokens, seed):
    from bankml import Constraint, SamplerParams
    from bankml.chat.inputs import ChatInputs
    from bankml.serve.request import Request

    constraint = Constraint("json_object", {"type": "object"}) if json_mode else Constraint()
    rows = []
    for i, prompt in enumerate(PROMPTS):
        t0 = time.perf_counter()
        job = model.chat(
            Request.for_chat(
                ChatInputs([{"role": "user", "content": prompt}]), constraint, SamplerParams(seed=seed + i), max_tokens
            )
        )
        result = job.run()
        wall = time.perf_counter() - t0
        t = result.timings
        rows.append(
            {
                "tokens": len(result.tokens),
                "wall": wall,
                "sample_ms": t["sample_ms"],
                "decode_ms": t["decode_ms"],
                "redraws": t["redraws"],
                "content": result.content,
            }
        )
    return rows


def run_llama_cpp(llm, json_mode, max_tokens, seed):
    rows = []
    for i, prompt in enumerate(PROMPTS):
        kwargs = {"response_format": {"type": "json_object"}} if json_mode else {}
        t0 = time.perf_counter()
        out = llm.create_chat_completion(
            [{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            seed=seed + i,
            temperature=0.8,
            top_k=40,
            top_p=0.95,
            min_p=0.05,
            repeat_penalty=1.0,
            **kwargs,
        )
        wall = time.perf_counter() - t0
        rows.append(
            {
                "tokens": out["usage"]["completion_tokens"],
                "wall": wall,
                "content": out["choices"][0]["message"]["content"],
            }
        )
    return rows


def best(runs):
    """Per prompt, the repeat with the least wall time."""
    return [min(column, key=lambda r: r["wall"]) for column in zip(*runs)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    from bankml.serve.contexts import default_model_path, open_llama
    from bankml.serve.runtime import Model

    path = args.model or default_model_path()
    model = Model(path, n_ctx=2048, n_threads=args.threads)
    llm = open_llama(
        path,
        n_ctx=2048,
        n_batch=2048,
        n_ubatch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        flash_attn=False,
        verbose=False,
    )
    engines = [
        ("bankml --json", lambda: run_bankml(model, True, args.max_tokens, args.seed)),
        ("bankml unconstrained", lambda: run_bankml(model, False, args.max_tokens, args.seed)),
        ("llama-cpp-python json_object", lambda: run_llama_cpp(llm, True, args.max_tokens, args.seed)),
        ("llama-cpp-python unconstrained", lambda: run_llama_cpp(llm, False, args.max_tokens, args.seed)),
    ]
    # warm-up: one request each (loads pages, fills bankml's mask cache for the JSON grammar once)
    for _, fn in engines:
        fn()
    results = {name: [] for name, _ in engines}
    for _ in range(args.repeats):
        for name, fn in engines:  # interleaved, so drift hits every engine alike
            results[name].append(fn())
    table = []
    for name, _ in engines:
        rows = best(results[name])
        tokens = sum(r["tokens"] for r in rows)
        wall = sum(r["wall"] for r in rows)
        line = {"name": name, "tokens": tokens, "tps": tokens / wall}
        if "sample_ms" in rows[0]:
            s = sum(r["sample_ms"] for r in rows)
            d = sum(r["decode_ms"] for r in rows)
            line["share"] = 100 * s / (s + d)
            line["us_per_token"] = 1e3 * s / tokens
            line["redraws"] = sum(r["redraws"] for r in rows)
        table.append(line)
    ref = {row["name"]: row["tps"] for row in table}
    print(
        f"<!-- {datetime.date.today()} · {cpu_model()} · {args.threads} threads · {os.path.basename(path)} · "
        f"{len(PROMPTS)} prompts × max {args.max_tokens} tokens, best of {args.repeats} -->"
    )
    print(
        "| engine | tokens | tokens/s | vs llama-cpp-python json_object | grammar + sampling per token "
        "| share of a decoding step | redraws |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = ref["llama-cpp-python json_object"]
    for row in table:
        extra = (
            f"{row['us_per_token']:.0f} µs | {row['share']:.2f} % | {row['redraws']}" if "share" in row else "– | – | –"
        )
        print(f"| {row['name']} | {row['tokens']} | {row['tps']:.1f} | {row['tps'] / base:.2f}× | {extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
