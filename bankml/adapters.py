"""Drop-in adapters: bankml's grammar masks inside other runtimes' sampling loops.

* ``LlamaCppLogitsProcessor(grammar)``: a llama-cpp-python ``logits_processor`` (``Llama.__call__``,
  ``create_completion``, ``generate``): it advances the grammar with the tokens llama-cpp-python sampled and
  sets the logits of every token the grammar rejects to -inf, in place.
* ``TransformersLogitsProcessor(grammar)``: a transformers ``LogitsProcessor`` for ``model.generate``: one
  matcher per batch row, the rows' masks filled in one call across threads (``fill_next_token_bitmasks``),
  rejected tokens (and the model's padding columns beyond the vocabulary) set to -inf.
* ``vocab_from_hf_tokenizer(tokenizer)``: a ``Vocab`` with the byte pieces of a Hugging Face tokenizer
  (byte-level BPE or SentencePiece with byte fallback), for grammars over a transformers model.

These adapters only mask; the runtime keeps its own sampler. For llama-server's exact sampling (the chain,
the check-then-redraw), use ``bankml.Sampler`` in your loop (docs/usage.md) or ``bankml.runtime``.
"""
import json

import numpy as np

from ._grammar import Grammar, Rules, fill_next_token_bitmasks
from .vocab import Vocab

__all__ = ["LlamaCppLogitsProcessor", "TransformersLogitsProcessor", "grammar_for", "vocab_from_hf_tokenizer"]


def grammar_for(grammar, vocab, root="root"):
    """A fresh Grammar from a Grammar (cloned), Rules or GBNF text over ``vocab``."""
    if isinstance(grammar, Grammar):
        return grammar.clone()
    if isinstance(grammar, Rules):
        return Grammar(grammar, vocab)
    if isinstance(grammar, str):
        return Grammar(Rules.parse(grammar, root, vocab), vocab)
    raise TypeError(f"expected a Grammar, Rules or GBNF text, got {type(grammar).__name__}")


class LlamaCppLogitsProcessor:
    """A llama-cpp-python logits processor constraining generation to ``grammar``.

    ``grammar``: a Grammar (used as is: it advances), or Rules / GBNF text with ``vocab`` (a Vocab, or the
    ``llama_cpp.Llama`` itself, whose GGUF file gives the vocabulary). One processor per generation: the
    first call sees the prompt, later calls the tokens sampled since.
    """

    def __init__(self, grammar, vocab=None):
        if not isinstance(grammar, Grammar):
            if vocab is None:
                raise ValueError("give the vocabulary (a Vocab or the llama_cpp.Llama) with Rules or GBNF text")
            if not isinstance(vocab, Vocab):
                vocab = Vocab.from_gguf(vocab.model_path)
            grammar = grammar_for(grammar, vocab)
        self.grammar = grammar
        self._seen = None

    def __call__(self, input_ids, scores):
        n = len(input_ids)
        if self._seen is None:
            self._seen = n
        else:
            for token in input_ids[self._seen:n]:
                self.grammar.accept(int(token))
            self._seen = n
        if scores.dtype != np.float32 or not scores.flags.c_contiguous:
            masked = np.ascontiguousarray(scores, dtype=np.float32)
            self.grammar.apply(masked)
            return masked
        self.grammar.apply(scores)
        return scores


def _logits_processor_base():
    try:
        from transformers import LogitsProcessor
        return LogitsProcessor
    except ImportError:  # pragma: no cover - transformers is optional
        return object


class TransformersLogitsProcessor(_logits_processor_base()):
    """A transformers LogitsProcessor constraining every row of ``model.generate`` to ``grammar``.

    ``grammar``: a Grammar, Rules or GBNF text; ``vocab``: the Vocab (needed for Rules or text; see
    ``vocab_from_hf_tokenizer``). Each batch row gets its own matcher (clones share the mask cache). The
    first call sees the prompts; each later call advances every row by its last token. A row that has
    emitted an end-of-generation token is held to end-of-generation tokens (transformers pads it); pass
    ``eos_token_id=list(vocab.eog_ids)`` to ``generate`` so that every row stops where its grammar ends.
    """

    supports_continuous_batching = False

    def __init__(self, grammar, vocab=None, max_workers=None):
        if isinstance(grammar, Grammar):
            vocab = grammar.vocab
        elif vocab is None:
            raise ValueError("give the vocabulary (a Vocab) with Rules or GBNF text")
        self.vocab = vocab
        self._template = grammar_for(grammar, vocab)
        self.grammars = None
        self._done = None
        self._bitmask = None
        self.max_workers = max_workers
        self._n_vocab = len(vocab)

    def __call__(self, input_ids, scores):
        ids = _to_numpy(input_ids)
        batch = ids.shape[0]
        if self.grammars is None:
            self.grammars = [self._template.clone() for _ in range(batch)]
            self._done = [False] * batch
            self._bitmask = np.zeros((batch, (self._n_vocab + 31) // 32), dtype=np.int32)
        else:
            if batch != len(self.grammars):
                raise ValueError(f"the batch changed from {len(self.grammars)} to {batch} rows: use one processor "
                                 "per generate() call")
            for row in range(batch):
                if self._done[row]:
                    continue
                token = int(ids[row, -1])
                self.grammars[row].accept(token)
                if self.vocab.is_eog(token):
                    self._done[row] = True
        fill_next_token_bitmasks(self.grammars, self._bitmask, self.max_workers)
        bits = np.unpackbits(self._bitmask.view(np.uint8), axis=1, bitorder="little")[:, :self._n_vocab]
        allowed = bits.astype(bool)
        for row in range(batch):
            if self._done[row]:
                # finished: only end-of-generation tokens (transformers pads with one; give generate()
                # eos_token_id=list(vocab.eog_ids) so that it stops on every one the grammar ends with)
                allowed[row, :] = self.vocab.eog_mask
        return _mask_scores(scores, allowed, self._n_vocab)


def _to_numpy(array):
    if isinstance(array, np.ndarray):
        return array
    detach = getattr(array, "detach", None)
    if detach is not None:
        return detach().cpu().numpy()
    return np.asarray(array)


def _mask_scores(scores, allowed, n_vocab):
    if isinstance(scores, np.ndarray):
        out = scores.copy()
        out[:, :n_vocab][~allowed] = -np.inf
        out[:, n_vocab:] = -np.inf
        return out
    import torch
    keep = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    keep[:, :n_vocab] = torch.from_numpy(allowed).to(scores.device)
    return scores.masked_fill(~keep, float("-inf"))


# -- Hugging Face tokenizers -> byte pieces


def _bytes_to_unicode():
    # GPT-2's reversible byte <-> printable character table
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocab_from_hf_tokenizer(tokenizer, eog_ids=None):
    """A Vocab whose pieces are the bytes each token of a Hugging Face (fast) tokenizer spells.

    Byte-level BPE tokens are mapped back through GPT-2's byte table; SentencePiece tokens turn ``▁`` into a
    space and ``<0xNN>`` into the byte; added and special tokens spell their text (as llama.cpp's grammar
    sees control tokens). ``eog_ids`` defaults to the tokenizer's EOS id.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("vocab_from_hf_tokenizer needs a fast tokenizer (tokenizers backend)")
    spec = json.loads(backend.to_str())
    decoder = json.dumps(spec.get("decoder") or {})
    byte_level = '"ByteLevel"' in decoder
    n = len(tokenizer)
    added = {tok.content for tok in getattr(tokenizer, "added_tokens_decoder", {}).values()}
    table = _bytes_to_unicode() if byte_level else None
    pieces = []
    for token_id in range(n):
        text = tokenizer.convert_ids_to_tokens(token_id)
        if text is None:
            pieces.append(b"")
        elif text in added:
            pieces.append(text.encode("utf-8"))
        elif byte_level:
            try:
                pieces.append(bytes(table[c] for c in text))
            except KeyError:
                pieces.append(text.encode("utf-8"))
        elif len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            pieces.append(bytes([int(text[3:5], 16)]))
        else:
            pieces.append(text.replace("\u2581", " ").encode("utf-8"))
    if eog_ids is None:
        eog_ids = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    return Vocab(pieces, eog_ids)
