"""bankml's llama.cpp-exact grammar masks inside vLLM V1.

* ``BankmlLogitsProcessor``: a custom logits processor for both of vLLM 0.32's model runners (a subclass of V1's
  ``vllm.v1.sample.logits_processor.LogitsProcessor`` and of Model Runner V2's, which masks each draft row of
  speculative decoding) that constrains each request that asks for it through ``SamplingParams.extra_args``
  (``vllm_xargs`` over HTTP): ``bankml_grammar`` (GBNF text), ``bankml_json_schema`` (a JSON schema, dict or text: bankml's
  strict compiler, or llama.cpp's converter with ``BANKML_JSON_SCHEMA_MODE=llama.cpp``; see
  ``bankml.integrations.spec``), ``bankml_json_object`` (true: llama-server's JSON mode), ``bankml_regex`` or
  ``bankml_structural_tag`` (an XGrammar structural tag, object or text: ``bankml.integrations.structural_tag``). Load it with
  ``LLM(..., logits_processors=[BankmlLogitsProcessor])``, ``vllm serve --logits-processors
  bankml.integrations.vllm:BankmlLogitsProcessor``, or install bankml (its ``vllm.logits_processors`` entry point
  loads it into every engine). The masks are computed on the worker, per step, from the tokens vLLM sampled.
* ``BankmlBackend`` / ``BankmlGrammar``: subclasses of vLLM's own ``StructuredOutputBackend`` and
  ``StructuredOutputGrammar`` (``vllm/v1/structured_output/backend_types.py``), for the structured-output
  manager (which fills masks on the scheduler, accepts the draft tokens of speculative decoding, then rolls
  back). It compiles JSON, JSON_OBJECT, GRAMMAR, REGEX, CHOICE and STRUCTURAL_TAG requests (the structural tags
  vLLM's OpenAI server builds for strict tool calls: ``tool_choice`` required or named, ``strict`` functions).
  vLLM 0.32's manager hard-codes its backends; ``install_backend(manager)`` puts bankml's in place, and
  ``general_plugin`` (bankml's ``vllm.general_plugins`` entry point) does it in every engine vLLM starts when
  the server's environment has ``BANKML_VLLM_STRUCTURED_OUTPUTS=1``.

JSON schemas (``bankml_json_schema``, ``response_format`` json_schema, guided JSON) are compiled strictly by
default: exactly what jsonschema accepts, or the request is refused naming the keyword and JSON pointer, as
XGrammar and llguidance are compared. ``BANKML_JSON_SCHEMA_MODE=llama.cpp`` in the engine's environment gives
llama-server's grammars instead (``bankml.integrations.spec``).

The vocabulary is the model's: its GGUF file when the model is one (``Vocab.from_gguf``: libllama's pieces
and end-of-generation set), the GGUF named by ``additional_config={"bankml_vocab": PATH}`` or the
``BANKML_VOCAB_GGUF`` environment variable, or else the Hugging Face tokenizer's pieces
(``vocab_from_hf_tokenizer``) with the model's EOS ids.

This module imports vLLM; nothing else in bankml does.
"""

import dataclasses
import hashlib
import json
import logging
import os

import numpy as np
import torch
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

try:  # Model Runner V2's processor interface (vLLM 0.32): the same class serves both model runners
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as LogitsProcessorV2
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcRequestState
except ImportError:  # a vLLM without it: a stand-in base, so that the class keeps one shape

    class LogitsProcessorV2:  # type: ignore[no-redef]
        pass

    LogitsProcRequestState = None
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)
from vllm.v1.structured_output.request import get_structured_output_key

from bankml.engine._grammar import Rules, apply_token_bitmask_inplace, fill_next_token_bitmasks
from bankml.engine.vocab import Vocab
from bankml.errors import GrammarError
from bankml.integrations.adapters import vocab_from_hf_tokenizer
from bankml.integrations.spec import Compiler, SpecError, grammar_text
from bankml.schema.converter import gbnf_format_literal

__all__ = [
    "EXTRA_ARGS",
    "STRUCTURED_OUTPUTS_ENV",
    "BankmlBackend",
    "BankmlGrammar",
    "BankmlLogitsProcessor",
    "apply_bitmask",
    "engine_vocab",
    "general_plugin",
    "install_backend",
    "request_spec",
]

logger = logging.getLogger(__name__)

# extra_args key -> bankml constraint kind
EXTRA_ARGS = {
    "bankml_grammar": "grammar",
    "bankml_json_schema": "json",
    "bankml_json_object": "json_object",
    "bankml_regex": "regex",
    "bankml_structural_tag": "structural_tag",
}

# set to 1 in the environment of `vllm serve` (its engine processes inherit it): bankml's backend compiles every
# structured-output request (general_plugin)
STRUCTURED_OUTPUTS_ENV = "BANKML_VLLM_STRUCTURED_OUTPUTS"


def request_spec(params):
    """``(kind, spec)`` a request's ``extra_args`` ask bankml for, or None; ValueError for a bad request."""
    extra = getattr(params, "extra_args", None) or {}
    if not isinstance(extra, dict):
        raise ValueError(f"extra_args must be an object, got {type(extra).__name__}")
    asked = [key for key in EXTRA_ARGS if extra.get(key) not in (None, False)]
    if not asked:
        return None
    if len(asked) > 1:
        raise ValueError(f"give one bankml constraint per request, got {', '.join(asked)}")
    key = asked[0]
    value = extra[key]
    if key == "bankml_json_object":
        if value is not True:
            raise ValueError(f"bankml_json_object must be true, got {value!r}")
        return "json_object", None
    if key == "bankml_json_schema":
        if not isinstance(value, (dict, str, bool)):
            raise ValueError(f"bankml_json_schema must be a JSON schema (object or text), got {type(value).__name__}")
        return "json", value
    if key == "bankml_structural_tag":
        if not isinstance(value, (dict, str)):
            raise ValueError(
                f"bankml_structural_tag must be a structural tag (object or text), got {type(value).__name__}"
            )
        return "structural_tag", value
    if not isinstance(value, str):
        raise ValueError(f"{key} must be text, got {type(value).__name__}")
    return EXTRA_ARGS[key], value


def _gguf_path(vllm_config):
    extra = getattr(vllm_config, "additional_config", None)
    if isinstance(extra, dict) and extra.get("bankml_vocab"):
        return extra["bankml_vocab"]
    if os.environ.get("BANKML_VOCAB_GGUF"):
        return os.environ["BANKML_VOCAB_GGUF"]
    model = getattr(vllm_config.model_config, "model", "") or ""
    if str(model).endswith(".gguf") and os.path.isfile(model):
        return model
    return None


def engine_vocab(vllm_config, tokenizer=None):
    """The bankml Vocab of the engine's model (see the module docstring for where it comes from)."""
    path = _gguf_path(vllm_config)
    if path is not None:
        return Vocab.from_gguf(path)
    if tokenizer is None:
        from vllm.tokenizers import cached_tokenizer_from_config

        tokenizer = cached_tokenizer_from_config(model_config=vllm_config.model_config)
    eos = getattr(vllm_config.model_config.hf_config, "eos_token_id", None)
    eog = set([eos] if isinstance(eos, int) else list(eos or ()))
    if tokenizer.eos_token_id is not None:
        eog.add(tokenizer.eos_token_id)
    return vocab_from_hf_tokenizer(tokenizer, eog_ids=sorted(eog))


def _as_numpy(bitmask):
    # a CPU torch tensor shares its memory with .numpy(): the row is filled in place, no copy
    if isinstance(bitmask, torch.Tensor):
        if bitmask.device.type != "cpu":
            raise ValueError(f"bankml fills bitmasks on the CPU, got a tensor on {bitmask.device}")
        return bitmask.numpy()
    return bitmask


def apply_bitmask(logits, bitmask, indices):
    """Set ``logits[indices[k], t]`` to -inf wherever bit t of ``bitmask[k]`` is clear, in place, as vLLM applies
    XGrammar's bitmask (``apply_token_bitmask_inplace``); logits columns past the bitmask's width * 32 too.

    ``bitmask``: int32 (k, width) on the CPU. CPU float32 logits (vLLM's CPU sampler) are masked by bankml's
    kernel without the GIL, across the cores; other CPU dtypes through a float32 copy (as vLLM does for
    XGrammar's CPU kernel); logits on another device with torch ops there (the bitmask copied once).
    """
    if logits.device.type == "cpu":
        if logits.dtype == torch.float32 and logits.stride(-1) == 1:
            apply_token_bitmask_inplace(logits, bitmask, indices=indices)
        else:
            values = logits.to(torch.float32).contiguous()
            apply_token_bitmask_inplace(values, bitmask, indices=indices)
            logits.copy_(values)
        return logits
    masks = bitmask.to(logits.device, non_blocking=True)
    rows = torch.as_tensor(indices, dtype=torch.long).to(logits.device, non_blocking=True)
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    allowed = ((masks.unsqueeze(-1) >> shifts) & 1).bool().flatten(1)
    columns = logits.shape[-1]
    if allowed.shape[1] < columns:
        allowed = torch.nn.functional.pad(allowed, (0, columns - allowed.shape[1]), value=False)
    logits[rows] = logits[rows].masked_fill(~allowed[:, :columns], float("-inf"))
    return logits


class _Row:
    """One request's matcher and how far it has read the request's output tokens."""

    __slots__ = ("grammar", "output_ids", "seen", "done", "dead", "eog_ids", "spec")

    def __init__(self, grammar, output_ids, eog_ids):
        self.grammar = grammar
        self.output_ids = output_ids  # vLLM's live list: it grows as the request generates
        self.seen = 0
        self.done = False  # an end-of-generation token was accepted
        self.dead = False  # a token the grammar rejects was sampled
        self.eog_ids = eog_ids  # the vocabulary's end-of-generation ids, a frozenset of ints
        self.spec = None

    def advance(self):
        ids = self.output_ids
        while self.seen < len(ids):
            token = ids[self.seen]
            if token < 0:  # an async-scheduling placeholder: read it once it is replaced
                return
            self.seen += 1
            if self.done or self.dead:
                continue
            try:
                self.grammar.accept(int(token))
            except GrammarError as e:
                self.dead = True
                logger.error(
                    "bankml: the grammar rejects sampled token %d (%s); holding the row to end-of-generation tokens",
                    token,
                    e,
                )
                continue
            if token in self.eog_ids:
                self.done = True


class BankmlLogitsProcessor(LogitsProcessor, LogitsProcessorV2):
    """vLLM logits processor: bankml's grammar per request, from ``SamplingParams.extra_args``.

    One class for both of vLLM 0.32's model runners, a subclass of both processor interfaces: vLLM loads the
    installed entry point into every engine, and Model Runner V2 (the default on GPUs with Triton) refuses a
    plugin that is not a V2 processor, so a V1-only class would stop every V2 engine on the machine from
    starting. The constructor's arguments say which runner built it:

    * V1 (``vllm_config, device, is_pin_memory``): ``update_state`` follows vLLM's ``BatchUpdate``s (a reference
      to each request's live output-token list) and ``apply(logits)`` masks the batch's rows.
    * V2 (``vllm_config, req_states``): ``add_request(slot, params)`` starts a request's matcher in its slot, and
      ``apply(logits, ctx)`` first reads the tokens each constrained slot committed since the last step from
      ``req_states`` (``all_token_ids`` from ``prompt_len`` to ``total_len``), then masks each of its logits
      rows. Under speculative decoding a request has a row per draft position: row k's mask is the grammar's
      after the committed tokens and the first k draft tokens (``ctx.input_ids`` of the rows after the
      request's first, as vLLM's bad-words stage reads them), each a clone of the one before, so that
      verification never sees a draft the grammar refused. Rows after a draft the grammar refuses, or after an
      end-of-generation draft, are held to the end-of-generation tokens: the verifier rejects them anyway.

    Not argmax-invariant (it changes greedy picks), so vLLM runs it for greedy and random sampling alike.
    Requests without a ``bankml_*`` key are left alone. Compiled grammars are cached per constraint
    (``spec.Compiler``), so requests with the same schema share one mask cache.

    ``BANKML_VLLM_TRACE=PATH`` in the engine's environment appends one JSON line per constrained row and step
    to PATH: the constraint, the output tokens so far, whether the row was held to end-of-generation tokens
    and the SHA-256 of the mask row (the bytes of the int32 words), so that a test can replay the tokens
    through libllama's grammar (the oracle) and compare every mask.
    """

    def __init__(self, vllm_config, device, is_pin_memory=False):
        self._req_states = None
        if LogitsProcRequestState is not None and isinstance(device, LogitsProcRequestState):
            # Model Runner V2: (vllm_config, req_states)
            self._req_states = device
            device = self._req_states.device
            is_pin_memory = False
        self.vocab = engine_vocab(vllm_config)
        self.compiler = Compiler(self.vocab)
        self.n_vocab = len(self.vocab)
        self.width = (self.n_vocab + 31) // 32
        self.device = torch.device(device)
        self.rows = {}
        max_rows = max(1, int(getattr(vllm_config.scheduler_config, "max_num_seqs", 1) or 1))
        # vLLM's bitmask layout, on the CPU (pinned when the logits live elsewhere: one copy per step)
        self._pin = bool(is_pin_memory) and self.device.type != "cpu"
        self._allocate(max_rows)
        eog = np.zeros(self.width * 32, dtype=bool)
        eog[list(self.vocab.eog_ids)] = True
        self._eog_words = np.packbits(eog, bitorder="little").view(np.int32)
        self._eog_ids = frozenset(int(t) for t in self.vocab.eog_ids)
        trace = os.environ.get("BANKML_VLLM_TRACE")
        self._trace = open(trace, "a", encoding="utf-8") if trace else None

    def _allocate(self, rows):
        self._bitmask = torch.zeros((rows, self.width), dtype=torch.int32, pin_memory=self._pin)
        # the same memory as numpy, sliced per step: a torch slice and .numpy() cost more than the mask itself
        # when the forward pass has just evicted the caches
        self._words = self._bitmask.numpy()
        self._in_order = list(range(rows))

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams):
        spec = request_spec(sampling_params)
        if spec is None:
            return
        try:
            Rules.parse(grammar_text(*spec))
        except (SpecError, GrammarError) as e:
            raise ValueError(f"bankml: {e}") from None

    def is_argmax_invariant(self):
        return False

    def _new_row(self, params, _prompt_ids, output_ids):
        spec = request_spec(params)
        if spec is None:
            return None
        row = _Row(self.compiler.matcher(*spec), output_ids, self._eog_ids)
        row.spec = spec
        return row

    def update_state(self, batch_update: "BatchUpdate | None"):
        process_dict_updates(self.rows, batch_update, self._new_row)

    def add_request(self, req_idx, sampling_params):
        """Model Runner V2: a request enters slot ``req_idx`` (a recycled slot's previous matcher is dropped).
        Returns whether bankml constrains it."""
        spec = request_spec(sampling_params)
        if spec is None:
            self.rows.pop(req_idx, None)
            return False
        row = _Row(self.compiler.matcher(*spec), [], self._eog_ids)
        row.spec = spec
        self.rows[req_idx] = row
        return True

    def apply(self, logits, ctx=None):
        """The constrained rows' masks in one ``fill_next_token_bitmasks`` call (without the GIL, across the
        cores) into vLLM's int32 bitmask layout, then applied to the logits in place. A row whose request
        accepted an end-of-generation token, or sampled a token its grammar rejects, is held to the
        end-of-generation tokens without computing a mask. ``ctx``: Model Runner V2's ``LogitsContext``
        (the class docstring); V1 passes none."""
        if not self.rows:
            return logits
        if logits.shape[-1] < self.n_vocab:
            raise ValueError(f"the logits have {logits.shape[-1]} columns, fewer than the vocabulary's {self.n_vocab}")
        if ctx is not None:
            return self._apply_v2(logits, ctx)
        live, grammars, held = [], [], []
        for index, row in self.rows.items():
            row.advance()
            if row.done or row.dead:
                held.append(index)
            else:
                live.append(index)
                grammars.append(row.grammar)
        traced = None
        if self._trace is not None:
            traced = {
                i: (row.spec, list(row.output_ids[: row.seen]), row.done or row.dead) for i, row in self.rows.items()
            }
        return self._mask(logits, grammars, live, held, traced)

    def _apply_v2(self, logits, ctx):
        rows = self.rows
        batch = [int(slot) for slot in ctx.idx_mapping_np if int(slot) in rows]
        if not batch:
            return logits
        states = self._req_states
        total_len = states.total_len.gpu
        totals = total_len[torch.as_tensor(batch, dtype=torch.long, device=total_len.device)].tolist()
        for slot, total in zip(batch, totals):
            row = rows[slot]
            have = int(states.prompt_len.np[slot]) + len(row.output_ids)
            if total > have:
                row.output_ids.extend(states.all_token_ids.gpu[slot, have:total].tolist())
            row.advance()
        slots = ctx.expanded_idx_mapping.tolist()
        local = ctx.expanded_local_pos.tolist()
        drafts = None
        live, grammars, held, traced = [], [], [], {}
        before = {}  # slot -> (the grammar of its previous row, None where held; the drafts before it)
        for index, (slot, k) in enumerate(zip(slots, local)):
            row = rows.get(slot)
            if row is None:
                continue
            if k == 0:
                grammar = None if row.done or row.dead else row.grammar
                taken = ()
            else:
                if drafts is None:
                    drafts = ctx.input_ids.tolist()
                grammar, taken = before.get(slot, (None, ()))
                draft = int(drafts[index])
                if grammar is not None:
                    if draft in self._eog_ids or not 0 <= draft < self.n_vocab or not grammar.allows(draft):
                        # the request would end at that draft, or the row before masks it out: verification
                        # rejects it (llama.cpp's accept takes some tokens its mask refuses, such as a lone
                        # UTF-8 continuation byte: the mask is what decides)
                        grammar = None
                    else:
                        grammar = grammar.clone()
                        try:
                            grammar.accept(draft)
                        except GrammarError:
                            grammar = None
                taken = taken + (draft,)
            before[slot] = grammar, taken
            if grammar is None:
                held.append(index)
            else:
                live.append(index)
                grammars.append(grammar)
            if self._trace is not None:
                traced[index] = (row.spec, list(row.output_ids[: row.seen]) + list(taken), grammar is None)
        if not live and not held:
            return logits
        return self._mask(logits, grammars, live, held, traced if self._trace is not None else None)

    def _mask(self, logits, grammars, live, held, traced):
        """Fill the rows ``live`` (their ``grammars``) and hold the rows ``held``, then mask the logits; ``traced``:
        None, or each row's trace entry by row index (``_write_trace``)."""
        n = len(live) + len(held)
        if n > self._words.shape[0]:
            self._allocate(n)
        words = self._words[:n]
        fill_next_token_bitmasks(grammars, words)
        if held:
            words[len(live) :] = self._eog_words
        indices = live + held
        if traced is not None:
            self._write_trace([traced[i] for i in indices], words)
        if logits.dtype is torch.float32 and self.device.type == "cpu" and logits.stride(-1) == 1:
            # vLLM's CPU sampler: bankml's kernel straight on the numpy words; rows that are the batch in order
            # (every request constrained) need no index list, whose checks cost more than one row's mask
            if n == logits.shape[0] and indices == self._in_order[:n]:
                indices = None
            apply_token_bitmask_inplace(logits, words, indices=indices)
        else:
            apply_bitmask(logits, self._bitmask[:n], indices)
        return logits

    def _write_trace(self, traced, words):
        """``traced``: per mask row, (the constraint, the tokens its mask follows, whether it was held)."""
        for k, ((kind, spec), tokens, held) in enumerate(traced):
            self._trace.write(
                json.dumps(
                    {
                        "kind": kind,
                        "spec": spec,
                        "tokens": tokens,
                        "held": held,
                        "mask_sha256": hashlib.sha256(words[k].tobytes()).hexdigest(),
                    }
                )
                + "\n"
            )
        self._trace.flush()


# -- StructuredOutputBackend / StructuredOutputGrammar


_KINDS = {
    StructuredOutputOptions.JSON: "json",
    StructuredOutputOptions.JSON_OBJECT: "json_object",
    StructuredOutputOptions.GRAMMAR: "grammar",
    StructuredOutputOptions.REGEX: "regex",
    StructuredOutputOptions.STRUCTURAL_TAG: "structural_tag",
}


def _choice_grammar(spec):
    choices = json.loads(spec) if isinstance(spec, str) else spec
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
        raise ValueError("a choice constraint is a non-empty list of strings")
    return "root ::= " + " | ".join(gbnf_format_literal(c) for c in choices) + "\n"


def structured_output_spec(request_type, grammar_spec):
    """``(kind, spec)`` for ``bankml.integrations.spec`` of one of vLLM's structured-output requests."""
    if request_type == StructuredOutputOptions.CHOICE:
        return "grammar", _choice_grammar(grammar_spec)
    if request_type in _KINDS:
        return _KINDS[request_type], grammar_spec
    raise ValueError(f"bankml does not compile {request_type!s} constraints")


class BankmlGrammar(StructuredOutputGrammar):
    """One request's matcher for vLLM's structured-output manager (the ABC's contract, XGrammar's behaviour).

    Termination: an accepted end-of-generation token of the vocabulary, or of the request's
    ``stop_token_ids``, terminates the grammar; later tokens are ignored (``accept_tokens`` returns True) as
    XGrammar's adapter does. Masks are llama.cpp's: a stop token outside the vocabulary's end-of-generation
    set is masked as the text it spells.
    """

    def __init__(self, matcher, vocab_size, stop_token_ids=None):
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.stop_token_ids = frozenset(stop_token_ids or ())
        self.num_processed_tokens = 0
        self._stops = []  # positions (num_processed_tokens after it) of accepted stop tokens
        n_vocab = len(matcher.vocab)
        self._width = (n_vocab + 31) // 32
        self._scratch = None

    def _is_stop(self, token):
        return token in self.stop_token_ids or self.matcher.vocab.is_eog(token)

    def accept_tokens(self, request_id, tokens):
        if self.is_terminated():
            return True
        for token in tokens:
            token = int(token)
            try:
                accepted = self.matcher.accept_tokens([token])
            except GrammarError:
                accepted = False
            if not accepted:
                logger.error("bankml: the grammar rejects token %d for request %s", token, request_id)
                return False
            self.num_processed_tokens += 1
            if self._is_stop(token):
                self._stops.append(self.num_processed_tokens)
                break
        return True

    def validate_tokens(self, tokens):
        if self.is_terminated():
            return []
        tokens = [int(t) for t in tokens]
        n = self.matcher.validate_tokens(tokens)
        for i in range(n):
            if self._is_stop(tokens[i]):
                return tokens[: i + 1]
        return tokens[:n]

    def rollback(self, num_tokens):
        if num_tokens <= 0:
            return
        self.matcher.rollback(num_tokens)
        self.num_processed_tokens -= num_tokens
        while self._stops and self._stops[-1] > self.num_processed_tokens:
            self._stops.pop()

    def fill_bitmask(self, bitmask, idx):
        array = _as_numpy(bitmask)
        if array.shape[-1] == self._width:
            self.matcher.fill_next_token_bitmask(array, idx)
            return
        # the model's vocabulary is padded past the tokenizer's: fill a row of bankml's width, pad with zeros
        if self._scratch is None:
            self._scratch = np.zeros(self._width, dtype=np.int32)
        self.matcher.fill_next_token_bitmask(self._scratch)
        row = array[idx]
        row[:] = 0
        row[: self._width] = self._scratch[: row.shape[0]]

    def is_terminated(self):
        return bool(self._stops)

    def reset(self):
        self.matcher.reset()
        self.num_processed_tokens = 0
        self._stops = []


@dataclasses.dataclass
class BankmlBackend(StructuredOutputBackend):
    """vLLM's engine-level backend over bankml: ``compile_grammar`` per request (cached per constraint),
    ``allocate_token_bitmask`` (int32, all allowed), ``destroy``. Matchers keep ``num_speculative_tokens``
    states (at least 1) for ``rollback``."""

    def __post_init__(self):
        self.num_speculative_tokens = 0
        spec_config = getattr(self.vllm_config, "speculative_config", None)
        if spec_config is not None:
            self.num_speculative_tokens = int(spec_config.num_speculative_tokens or 0)
        self.vocab = engine_vocab(self.vllm_config, self.tokenizer)
        if len(self.vocab) > self.vocab_size:
            raise ValueError(f"the tokenizer has {len(self.vocab)} tokens, more than the model's {self.vocab_size}")
        self.compiler = Compiler(self.vocab, max_rollback=max(1, self.num_speculative_tokens + 1))

    def compile_grammar(self, request_type, grammar_spec, stop_token_ids=None):
        kind, spec = structured_output_spec(request_type, grammar_spec)
        return BankmlGrammar(self.compiler.matcher(kind, spec), self.vocab_size, stop_token_ids)

    def allocate_token_bitmask(self, max_num_seqs):
        return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def destroy(self):
        self.compiler = None


def install_backend(manager, vocab_size=None):
    """Put a BankmlBackend in a ``StructuredOutputManager`` (vLLM 0.32 picks its backend by name from a fixed
    list; a manager whose backend is already set keeps using it). Returns the backend."""
    config = manager.vllm_config
    if vocab_size is None:
        vocab_size = config.model_config.get_vocab_size()
    manager.backend = BankmlBackend(config, tokenizer=manager.tokenizer, vocab_size=vocab_size)
    return manager.backend


def general_plugin():
    """bankml's ``vllm.general_plugins`` entry point, which vLLM loads in each process it starts (the engine core
    before its scheduler). With ``BANKML_VLLM_STRUCTURED_OUTPUTS=1`` in the environment, every
    ``StructuredOutputManager`` built afterwards in the process gets bankml's backend (``install_backend``), so
    ``vllm serve``'s structured outputs (``response_format``, ``structured_outputs``, and the structural tags of
    strict tool calls) are compiled and masked by bankml, and the frontend refuses (a 400: ``bankml: <reason>``)
    what bankml's backend would refuse, before vLLM's own checks; without it, nothing is changed. Idempotent."""
    if os.environ.get(STRUCTURED_OUTPUTS_ENV, "").lower() not in ("1", "true", "yes"):
        return
    original = StructuredOutputManager.__init__
    if getattr(original, "_bankml_installs_backend", False):
        return

    def __init__(self, vllm_config):
        original(self, vllm_config)
        if not vllm_config.model_config.skip_tokenizer_init:
            install_backend(self)
            # a warning, so that it shows in the engine's log (vLLM configures its own loggers only)
            logger.warning(
                "bankml: this engine's structured outputs are compiled by bankml's backend (%s=1)",
                STRUCTURED_OUTPUTS_ENV,
            )

    __init__._bankml_installs_backend = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    StructuredOutputManager.__init__ = __init__  # type: ignore[method-assign]

    validate = SamplingParams._validate_structured_outputs

    def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer):
        # the frontend's check (a 400 before any token): what bankml's backend will refuse, refused here with its
        # reason; then vLLM's own checks
        params = self.structured_outputs
        if structured_outputs_config is not None and params is not None and not params.all_constraints_none():
            try:
                Rules.parse(grammar_text(*structured_output_spec(*get_structured_output_key(params))))
            except (SpecError, GrammarError, ValueError) as e:
                raise VLLMValidationError(f"bankml: {e}") from None
        return validate(self, model_config, structured_outputs_config, tokenizer)

    SamplingParams._validate_structured_outputs = _validate_structured_outputs  # type: ignore[method-assign]
