"""Run SmolLM2-135M-Instruct on vLLM (CPU) under bankml's logits processor; print the answers as JSON.

    BANKML_VLLM_TRACE=trace.jsonl VLLM_CPU_KVCACHE_SPACE=1 python tests/engines_vllm_run.py answers.json

Used by tests/integrations/test_engine_vllm.py (in a child process: vLLM starts its own engine processes)."""

import json
import os
import sys
from importlib.metadata import entry_points

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import engines_support  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
YES_NO = 'root ::= answer ("," " "? answer)*\nanswer ::= "yes" | "no"\n'
USER = "Describe a cat as a JSON object with its name and age."

# (name, chat?, prompt, extra_args, temperature)
REQUESTS = [
    ("schema", True, USER, {"bankml_json_schema": SCHEMA}, 0.0),
    ("json_object", True, USER, {"bankml_json_object": True}, 0.0),
    ("gbnf", False, "Is the sky blue? Answer yes or no, three times:", {"bankml_grammar": YES_NO}, 0.8),
    ("schema_sampled", True, USER, {"bankml_json_schema": SCHEMA}, 0.7),
    ("free", False, "The capital of France is", None, 0.0),
]


def main(out_path):
    from vllm import LLM, SamplingParams

    from bankml import Vocab
    from bankml.integrations.vllm import BankmlLogitsProcessor

    gguf = engines_support.smollm2_gguf()
    eog = list(Vocab.from_gguf(gguf).eog_ids)
    # installed bankml registers the processor under vLLM's entry point, and every engine loads it from there;
    # naming it as well would load it twice (every row masked twice)
    registered = any(
        ep.value == "bankml.integrations.vllm:BankmlLogitsProcessor"
        for ep in entry_points(group="vllm.logits_processors")
    )
    llm = LLM(
        model=engines_support.smollm2_hf_dir(),
        enforce_eager=True,
        dtype="float32",
        max_model_len=512,
        max_num_seqs=8,
        seed=0,
        logits_processors=[] if registered else [BankmlLogitsProcessor],
        additional_config={"bankml_vocab": gguf},
    )
    tokenizer = llm.get_tokenizer()
    prompts, params = [], []
    for name, chat, prompt, extra, temperature in REQUESTS:
        if chat:
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        prompts.append(prompt)
        # stop where llama.cpp's grammar ends: on every end-of-generation token of the GGUF vocabulary
        params.append(
            SamplingParams(max_tokens=96, temperature=temperature, seed=7, stop_token_ids=eog, extra_args=extra)
        )
    outputs = llm.generate(prompts, params)
    answers = []
    for (name, _, _, extra, _), prompt, out in zip(REQUESTS, prompts, outputs):
        answers.append(
            {
                "name": name,
                "prompt": prompt,
                "extra_args": extra,
                "text": out.outputs[0].text,
                "tokens": list(out.outputs[0].token_ids),
                "finish_reason": out.outputs[0].finish_reason,
            }
        )
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
