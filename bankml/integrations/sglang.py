"""bankml's llama.cpp-exact grammar masks inside SGLang, as the grammar backend ``"bankml"``.

Importing this module registers the backend with SGLang (``register_grammar_backend("bankml", ...)`` of
``sglang.srt.constrained.base_grammar_backend``, and ``"bankml"`` among ``--grammar-backend``'s choices);
then ``--grammar-backend bankml`` (or ``ServerArgs(grammar_backend="bankml")``) makes every constrained
request use it. What SGLang asks for, and what bankml gives:

* ``ebnf``: GBNF text (bankml parses llama.cpp's GBNF, which is what SGLang's EBNF field carries for
  XGrammar too, rule ``root``);
* ``json``: a JSON schema through bankml's strict compiler (exactly what jsonschema accepts, or the request
  is refused naming the keyword and JSON pointer), or through bankml's port of llama.cpp's converter when
  the server's environment has ``BANKML_JSON_SCHEMA_MODE=llama.cpp`` (``bankml.integrations.spec``);
  ``response_format`` json_object arrives as the schema ``{"type": "object"}`` (any object either way);
* ``regex``: through the converter's pattern translation (``bankml.integrations.spec.regex_to_grammar``);
* ``structural_tag``: an XGrammar structural tag, either form (``format``, or the legacy ``structures`` and
  ``triggers`` with SGLang's ``at_least_one``: what SGLang's tool-call code sends for ``tool_choice`` required
  or named and for ``strict`` functions), compiled by ``bankml.integrations.structural_tag`` to XGrammar's
  language; as SGLang's XGrammar backend does first, a ``json_schema`` (or legacy ``schema``) that is missing
  or null is read as ``{}``. A refused tag is an ``InvalidGrammarObject`` naming the tag's field.

The vocabulary: the model's GGUF file when the model path is one, the GGUF named by ``BANKML_VOCAB_GGUF``, or
else the Hugging Face tokenizer's pieces (``vocab_from_hf_tokenizer``) with the model's EOS ids.

This module imports SGLang; nothing else in bankml does.
"""

import logging
import os

import numpy as np
import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarStats,
    InvalidGrammarObject,
    register_grammar_backend,
)

from bankml.engine._grammar import fill_next_token_bitmasks
from bankml.engine.vocab import Vocab
from bankml.errors import GrammarError
from bankml.integrations.adapters import vocab_from_hf_tokenizer
from bankml.integrations.spec import Compiler, SpecError
from bankml.schema import jsondepth

__all__ = ["MAX_ROLLBACK_TOKENS", "BankmlGrammarBackend", "BankmlGrammarObject", "init_bankml_backend", "register"]

logger = logging.getLogger(__name__)

# as SGLang's XGrammar backend: jump-forward retokenization and speculative trees roll back this far
MAX_ROLLBACK_TOKENS = 200


def _unpack(vocab_mask, n_columns):
    words = vocab_mask.to(torch.int32)
    shifts = torch.arange(32, dtype=torch.int32, device=words.device)
    bits = (words.unsqueeze(-1) >> shifts) & 1
    bits = bits.reshape(words.shape[0], -1)
    if bits.shape[1] >= n_columns:
        return bits[:, :n_columns].bool()
    out = torch.zeros((words.shape[0], n_columns), dtype=torch.bool, device=words.device)
    out[:, : bits.shape[1]] = bits.bool()
    return out


class BankmlGrammarObject(BaseGrammarObject):
    """One request's matcher as SGLang's ``BaseGrammarObject``.

    ``accept_token`` raises ValueError for a token the grammar rejects (as SGLang's XGrammar backend does);
    an accepted end-of-generation token (the vocabulary's, or the model's EOS ids) terminates the grammar
    and later tokens are ignored until a ``rollback`` before it. ``copy()`` is a fresh matcher at the start
    (what SGLang's cache hands to each new request), sharing the compiled grammar's mask cache.
    """

    def __init__(self, template, key_string=None, stop_token_ids=(), grammar_stats=None):
        super().__init__()
        self._template = template
        self.matcher = template.clone()
        self.vocab = template.vocab
        self.key_string = key_string
        self.stop_token_ids = frozenset(stop_token_ids or ())
        self.accepted_tokens = []
        self._terminated_at = None
        self.grammar_stats = grammar_stats
        self._width = (len(self.vocab) + 31) // 32

    def _is_stop(self, token):
        return token in self.stop_token_ids or self.vocab.is_eog(token)

    def accept_token(self, token):
        if self.is_terminated():
            return
        token = int(token)
        self.current_token = token
        try:
            accepted = self.matcher.accept_tokens([token])
        except GrammarError:
            accepted = False
        if not accepted:
            raise ValueError(
                f"Tokens not accepted: {token}\nAccepted tokens: {self.accepted_tokens}\nKey string: {self.key_string}"
            )
        self.accepted_tokens.append(token)
        if self._is_stop(token):
            self._terminated_at = len(self.accepted_tokens)

    def rollback(self, k):
        if k <= 0:
            return
        self.matcher.rollback(k)
        del self.accepted_tokens[len(self.accepted_tokens) - k :]
        if self._terminated_at is not None and self._terminated_at > len(self.accepted_tokens):
            self._terminated_at = None

    def is_terminated(self):
        return self._terminated_at is not None

    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)

    def _rows(self, vocab_mask):
        if vocab_mask.device.type != "cpu" or vocab_mask.dtype != torch.int32:
            raise ValueError(f"bankml fills int32 masks on the CPU, got {vocab_mask.dtype} on {vocab_mask.device}")
        return vocab_mask.numpy()

    def fill_vocab_mask(self, vocab_mask, idx):
        array = self._rows(vocab_mask)
        if array.shape[-1] == self._width:
            self.matcher.fill_next_token_bitmask(array, idx)
            return
        scratch = np.zeros(self._width, dtype=np.int32)
        self.matcher.fill_next_token_bitmask(scratch)
        row = array[idx]
        row[:] = 0
        n = min(row.shape[0], self._width)
        row[:n] = scratch[:n]

    @staticmethod
    def fill_vocab_mask_batched(entries, vocab_mask):
        """All listed rows in one ``fill_next_token_bitmasks`` call (across threads, without the GIL)."""
        if not entries:
            return
        first = entries[0].grammar
        array = first._rows(vocab_mask)
        if array.shape[-1] != first._width or any(not isinstance(e.grammar, BankmlGrammarObject) for e in entries):
            for entry in entries:
                entry.grammar.fill_vocab_mask(vocab_mask, entry.row)
            return
        scratch = np.empty((len(entries), first._width), dtype=np.int32)
        fill_next_token_bitmasks([e.grammar.matcher for e in entries], scratch)
        array[[e.row for e in entries]] = scratch

    @staticmethod
    def reset_vocab_mask(vocab_mask):
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask, device):
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits, vocab_mask):
        allowed = _unpack(vocab_mask.to(logits.device), logits.shape[-1])
        logits.masked_fill_(~allowed, float("-inf"))

    def copy(self):
        stats = None
        if self.grammar_stats is not None:
            import dataclasses

            stats = dataclasses.replace(self.grammar_stats, is_cache_hit=True, tree_traversal_time=[])
        return BankmlGrammarObject(self._template, self.key_string, self.stop_token_ids, stats)

    # -- jump-forward: the text the grammar forces from here

    def try_jump_forward(self, tokenizer):
        if self.is_terminated():
            return None
        forced = self.matcher.jump_forward()
        if not forced:
            return None
        # whole UTF-8 characters only: a forced partial lead stays for the sampler
        text = bytes(forced).decode("utf-8", "ignore")
        while text and text.encode("utf-8") != bytes(forced)[: len(text.encode("utf-8"))]:
            text = text[:-1]
        if not text:
            return None
        return [], text

    def jump_forward_str_state(self, helper):
        _, text = helper
        return text, -1

    def jump_and_retokenize(self, old_output_ids, new_output_ids, next_state):
        k = 0
        for old, new in zip(old_output_ids, new_output_ids):
            if old != new:
                break
            k += 1
        if k < len(old_output_ids):
            self.rollback(len(old_output_ids) - k)
        for i in range(k, len(new_output_ids)):
            try:
                self.accept_token(new_output_ids[i])
            except ValueError:
                raise ValueError(
                    f"Token not accepted during retokenization: {new_output_ids[i]} at position {i}\n"
                    f"Old output IDs: {old_output_ids}\nNew output IDs: {new_output_ids}\n"
                    f"Key string: {self.key_string}"
                ) from None

    def __repr__(self):
        return f"BankmlGrammarObject({self.key_string=}, {self.accepted_tokens=})"


class BankmlGrammarBackend(BaseGrammarBackend):
    """SGLang's ``BaseGrammarBackend`` over bankml: ``dispatch_json / dispatch_ebnf / dispatch_regex /
    dispatch_structural_tag``; compiled Rules are cached per constraint (``spec.Compiler``) besides
    SGLang's own cache of grammar objects."""

    def __init__(self, tokenizer=None, vocab_size=None, vocab=None, eos_token_ids=None):
        super().__init__()
        if vocab is None:
            eog = set(eos_token_ids or ())
            if getattr(tokenizer, "eos_token_id", None) is not None:
                eog.add(tokenizer.eos_token_id)
            vocab = vocab_from_hf_tokenizer(tokenizer, eog_ids=sorted(eog))
        if vocab_size is not None and len(vocab) > vocab_size:
            raise ValueError(f"the tokenizer has {len(vocab)} tokens, more than the model's {vocab_size}")
        self.vocab = vocab
        self.vocab_size = vocab_size or len(vocab)
        self.stop_token_ids = frozenset(eos_token_ids or ())
        self.compiler = Compiler(vocab, max_rollback=MAX_ROLLBACK_TOKENS)

    def _compile(self, kind, key_string, spec=None):
        try:
            template = self.compiler.template(kind, key_string if spec is None else spec)
        except SpecError as e:
            return InvalidGrammarObject(str(e))
        return BankmlGrammarObject(template, key_string, self.stop_token_ids, GrammarStats(dispatch_type=kind))

    def dispatch_json(self, key_string):
        return self._compile("json", key_string)

    def dispatch_ebnf(self, key_string):
        return self._compile("grammar", key_string)

    def dispatch_regex(self, key_string):
        return self._compile("regex", key_string)

    def dispatch_structural_tag(self, key_string):
        try:
            tag = jsondepth.loads(key_string)
        except jsondepth.NestingError:
            return InvalidGrammarObject(f"structural_tag: the JSON text nests deeper than {jsondepth.MAX_DEPTH} levels")
        except ValueError as e:
            return InvalidGrammarObject(f"structural_tag: not valid JSON: {e}")
        _fill_missing_schemas(tag)
        return self._compile("structural_tag", key_string, tag)


def _fill_missing_schemas(tag):
    """SGLang's XGrammar backend's sanitizing, before it compiles a structural tag: a missing or null
    ``json_schema`` of a json_schema / qwen_xml_parameter format (through tag, sequence, or, triggered_tags and
    tags_with_separator) and a legacy structure's missing or null ``schema`` become ``{}``."""
    if not isinstance(tag, dict):
        return
    for structure in tag.get("structures") or ():
        if isinstance(structure, dict) and structure.get("schema") is None:
            structure["schema"] = {}
    pending = [tag.get("format")]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if kind in ("json_schema", "qwen_xml_parameter") and node.get("json_schema") is None:
            node["json_schema"] = {}
        if kind == "tag":
            pending.append(node.get("content"))
        elif kind in ("sequence", "or"):
            pending.extend(node.get("elements") or ())
        elif kind in ("triggered_tags", "tags_with_separator"):
            pending.extend(node.get("tags") or ())


def _vocab_path(server_args):
    if os.environ.get("BANKML_VOCAB_GGUF"):
        return os.environ["BANKML_VOCAB_GGUF"]
    model = str(getattr(server_args, "model_path", "") or "")
    if model.endswith(".gguf") and os.path.isfile(model):
        return model
    return None


def init_bankml_backend(server_args, tokenizer, vocab_size, eos_token_ids=None):
    """SGLang's backend factory signature: ``(server_args, tokenizer, vocab_size, eos_token_ids)``."""
    path = _vocab_path(server_args)
    vocab = Vocab.from_gguf(path) if path is not None else None
    return BankmlGrammarBackend(tokenizer, vocab_size, vocab=vocab, eos_token_ids=eos_token_ids)


def register():
    """Register ``"bankml"`` with SGLang (done on import; idempotent)."""
    register_grammar_backend("bankml", init_bankml_backend)
    try:
        from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES

        if "bankml" not in GRAMMAR_BACKEND_CHOICES:
            GRAMMAR_BACKEND_CHOICES.append("bankml")
    except ImportError:  # pragma: no cover - older SGLang keeps the choices elsewhere
        pass


register()
