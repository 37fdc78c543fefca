"""bankml.integrations.adapters inside other runtimes' sampling loops: llama-cpp-python's ``logits_processor`` on the real
SmolLM2-135M-Instruct, transformers' ``generate`` on a tiny random Llama with SmolLM2's tokenizer (read from
the GGUF), and ``vocab_from_hf_tokenizer`` against bankml's own GGUF reader.

The answers are checked by parsing and validating them, not by comparing them with recorded text: a
processor that let one wrong token through, or let the model stop early, fails.
"""

import json

import jsonschema
import numpy as np
import pytest

from bankml import Grammar, Rules, Vocab, json_schema_to_grammar
from bankml.integrations.adapters import LlamaCppLogitsProcessor, TransformersLogitsProcessor, vocab_from_hf_tokenizer

from ..oracle_support import smollm2_path

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
# small enough for a random model: every row ends within a few dozen tokens
BOUNDED = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["color", "n"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def vocab():
    return Vocab.from_gguf(smollm2_path())


@pytest.fixture(scope="module")
def hf_tokenizer():
    # transformers' GGUF reader (integrations/gguf/reader.py) imports torch: no tokenizer from the GGUF without it
    import torch  # noqa: F401  (the test extra installs it)

    from ..engines_support import smollm2_hf_tokenizer

    return smollm2_hf_tokenizer(padding_side="left")


# ---------------------------------------------------------------------------------------------------------
# llama-cpp-python


@pytest.fixture(scope="module")
def llm():
    from bankml.serve.contexts import open_llama  # loads as bankml's Model does (AMX checked first)

    return open_llama(smollm2_path(), n_ctx=512, n_threads=2, verbose=False)


def test_llama_cpp_logits_processor_json_schema(llm):
    from llama_cpp import LogitsProcessorList

    proc = LlamaCppLogitsProcessor(json_schema_to_grammar(PERSON)[0], llm)  # the vocabulary from llm's GGUF
    prompt = (
        "<|im_start|>user\nDescribe a person as JSON with a name, an age and tags.<|im_end|>\n<|im_start|>assistant\n"
    )
    out = llm.create_completion(prompt, logits_processor=LogitsProcessorList([proc]), max_tokens=120, temperature=0)
    choice = out["choices"][0]
    # llama-cpp-python stops only at its end-of-generation token: the processor allowed it only at the end
    assert choice["finish_reason"] == "stop", choice["text"]
    jsonschema.validate(json.loads(choice["text"]), PERSON)
    assert proc.grammar.complete


def test_llama_cpp_logits_processor_gbnf_with_a_grammar(llm, vocab):
    from llama_cpp import LogitsProcessorList

    text = 'root ::= "Answer: " ("yes" | "no") "."'
    grammar = Grammar(Rules.parse(text, vocab=vocab), vocab)
    proc = LlamaCppLogitsProcessor(grammar)  # a Grammar is used as is: it advances
    prompt = "<|im_start|>user\nIs water wet?<|im_end|>\n<|im_start|>assistant\n"
    out = llm.create_completion(prompt, logits_processor=LogitsProcessorList([proc]), max_tokens=20, temperature=0)
    assert out["choices"][0]["text"] in ("Answer: yes.", "Answer: no.")
    assert out["choices"][0]["finish_reason"] == "stop"
    assert proc.grammar is grammar and grammar.complete


def test_llama_cpp_logits_processor_needs_a_vocabulary():
    with pytest.raises(ValueError, match="vocabulary"):
        LlamaCppLogitsProcessor('root ::= "a"')


# ---------------------------------------------------------------------------------------------------------
# Hugging Face tokenizers


def test_vocab_from_hf_tokenizer_matches_the_gguf(hf_tokenizer, vocab):
    hf = vocab_from_hf_tokenizer(hf_tokenizer)
    assert len(hf) == len(vocab) == 49152
    differ = [t for t in range(len(vocab)) if hf.piece(t) != vocab.piece(t)]
    assert differ == [], [(t, hf.piece(t), vocab.piece(t)) for t in differ[:10]]
    assert hf.eog_ids == (hf_tokenizer.eos_token_id,)
    assert vocab_from_hf_tokenizer(hf_tokenizer, eog_ids=vocab.eog_ids).eog_ids == vocab.eog_ids


def test_transformers_processor_refuses_a_batch_of_another_size(vocab):
    proc = TransformersLogitsProcessor(json_schema_to_grammar(BOUNDED)[0], vocab)
    scores = np.zeros((2, len(vocab) + 64), dtype=np.float32)
    out = proc(np.zeros((2, 3), dtype=np.int64), scores)
    assert out.shape == scores.shape
    allowed = np.flatnonzero(np.isfinite(out[0]))
    assert {vocab.piece(int(t))[:1] for t in allowed} == {b"{"}  # only an opening brace first
    assert not np.isfinite(out[:, len(vocab) :]).any()  # padding columns never
    with pytest.raises(ValueError, match="batch"):
        proc(np.zeros((3, 4), dtype=np.int64), np.zeros((3, len(vocab) + 64), dtype=np.float32))


def test_transformers_generate_batch(hf_tokenizer, vocab):
    import torch  # the test extra installs it
    from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessorList

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152 + 64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    hf_vocab = vocab_from_hf_tokenizer(hf_tokenizer, eog_ids=vocab.eog_ids)
    proc = TransformersLogitsProcessor(json_schema_to_grammar(BOUNDED)[0], hf_vocab)
    batch = hf_tokenizer(
        ["Give me JSON:", "A much longer prompt that asks for one JSON object:"], return_tensors="pt", padding=True
    )
    torch.manual_seed(1)
    with torch.no_grad():
        out = model.generate(
            **batch,
            logits_processor=LogitsProcessorList([proc]),
            do_sample=True,
            top_k=0,
            max_new_tokens=120,
            eos_token_id=list(vocab.eog_ids),
            pad_token_id=2,
        )
    generated = out[:, batch["input_ids"].shape[1] :]
    assert generated.shape[0] == 2
    for row in generated.tolist():
        ends = [i for i, t in enumerate(row) if vocab.is_eog(t)]
        assert ends, f"row never ended: {row}"  # the grammar completed and allowed the end
        body = row[: ends[0]]
        text = b"".join(vocab.piece(t) for t in body).decode("utf-8")
        assert text == hf_tokenizer.decode(body)
        jsonschema.validate(json.loads(text), BOUNDED)
        assert all(t == config.pad_token_id for t in row[ends[0] + 1 :])
