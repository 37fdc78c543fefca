"""Drop-in adapters: bankml's grammar masks inside other runtimes' sampling loops.

* ``LlamaCppLogitsProcessor(grammar)``: a llama-cpp-python ``logits_processor`` (``Llama.__call__``,
  ``create_completion``, ``generate``): it advances the grammar with the tokens llama-cpp-python sampled and
  sets the logits of every token the grammar rejects to -inf, in place.
* ``TransformersLogitsProcessor(grammar)``: a transformers ``LogitsProcessor`` for ``model.generate``: one
  matcher per batch row, the rows' masks filled in one call across threads (``fill_next_token_bitmasks``),
  rejected tokens (and the model's padding columns beyond the vocabulary) set to -inf.
* ``vocab_from_hf_tokenizer(tokenizer)``: a ``Vocab`` with the byte pieces of a Hugging Face tokenizer
  (byte-level BPE or SentencePiece with byte fallback), for grammars over a transformers model.
* ``llama_cpp_tokenizer(model)`` and ``hf_tokenizer(tokenizer)``: ready-made tokenizer hooks
  (``tokenize(text: bytes, add_special, parse_special) -> list[int]``) for ``Vocab.with_tokenizer``, which the
  sampler calls where llama.cpp tokenizes (the tails of multi-byte DRY sequence breakers).

These adapters only mask; the runtime keeps its own sampler. For llama-server's exact sampling (the chain,
the check-then-redraw), use ``bankml.Sampler`` in your loop (docs/usage.md) or ``bankml.serve.runtime``.
"""

import json

import numpy as np

from bankml.engine._grammar import Grammar, Rules, fill_next_token_bitmasks
from bankml.engine.vocab import Vocab

__all__ = [
    "LlamaCppLogitsProcessor",
    "TransformersLogitsProcessor",
    "grammar_for",
    "hf_tokenizer",
    "llama_cpp_tokenizer",
    "vocab_from_hf_tokenizer",
]


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
            for token in input_ids[self._seen : n]:
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


class TransformersLogitsProcessor(_logits_processor_base()):  # type: ignore[misc]  # its base: transformers (optional)
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
                raise ValueError(
                    f"the batch changed from {len(self.grammars)} to {batch} rows: use one processor "
                    "per generate() call"
                )
            for row in range(batch):
                if self._done[row]:
                    continue
                token = int(ids[row, -1])
                self.grammars[row].accept(token)
                if self.vocab.is_eog(token):
                    self._done[row] = True
        fill_next_token_bitmasks(self.grammars, self._bitmask, self.max_workers)
        bits = np.unpackbits(self._bitmask.view(np.uint8), axis=1, bitorder="little")[:, : self._n_vocab]
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


# -- tokenizer hooks for Vocab.with_tokenizer


class _LlamaCppTokenizer:
    """llama_tokenize on a llama-cpp-python model (a Llama, or a GGUF loaded vocabulary-only)."""

    def __init__(self, model):
        import llama_cpp

        self._ll = llama_cpp
        self._model = None
        self._owner = None
        if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            import os

            path = os.fsencode(model)
            llama_cpp.llama_backend_init()
            params = llama_cpp.llama_model_default_params()
            params.vocab_only = True
            handle = llama_cpp.llama_model_load_from_file(path, params)
            if not handle:
                raise ValueError(f"llama-cpp-python could not load the vocabulary of {os.fsdecode(path)!r}")
            self._model = handle
            self._vocab = llama_cpp.llama_model_get_vocab(handle)
        else:
            # a llama_cpp.Llama: its own model, kept alive by this hook
            inner = getattr(model, "model", None) or getattr(getattr(model, "_model", None), "model", None)
            if inner is None:
                raise TypeError(f"expected a llama_cpp.Llama or a GGUF path, got {type(model).__name__}")
            self._owner = model
            self._vocab = llama_cpp.llama_model_get_vocab(inner)

    def __call__(self, text, add_special, parse_special):
        ll = self._ll
        text = bytes(text)
        cap = max(8, len(text) + 4)
        while True:
            out = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, text, len(text), out, cap, bool(add_special), bool(parse_special))
            if n >= 0:
                return list(out[:n])
            if n == -(2**31):
                raise ValueError("the tokenization is longer than INT32_MAX tokens")
            cap = -n

    def __del__(self):
        if self._model is not None:
            try:
                self._ll.llama_model_free(self._model)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
            self._model = None

    def __reduce__(self):
        raise TypeError("a llama-cpp-python tokenizer hook is not picklable")


def llama_cpp_tokenizer(model):
    """A tokenizer hook from llama-cpp-python: ``llama_tokenize`` of the pinned libllama on ``model``, a
    ``llama_cpp.Llama`` or the path of a GGUF file (its vocabulary loaded alone, no weights).

    Exact: it is the tokenizer llama-server runs (for any bytes, valid UTF-8 or not, and for either flag)."""
    return _LlamaCppTokenizer(model)


class _HFTokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        # transformers' tokenizers wrap a tokenizers.Tokenizer; a bare tokenizers.Tokenizer is used as is
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        if self._backend is None and hasattr(tokenizer, "encode") and hasattr(tokenizer, "token_to_id"):
            self._backend = tokenizer
        if self._backend is None:
            raise TypeError(
                "hf_tokenizer needs a fast tokenizer (transformers' PreTrainedTokenizerFast or a "
                f"tokenizers.Tokenizer), got {type(tokenizer).__name__}"
            )

    def __call__(self, text, add_special, parse_special):
        try:
            string = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(
                f"a Hugging Face tokenizer takes text, and {bytes(text)!r:.60} is not valid UTF-8 "
                "(llama.cpp tokenizes such bytes; use llama_cpp_tokenizer)"
            ) from None
        if not parse_special:
            special = [t for t in self._added_specials() if t in string]
            if special:
                raise ValueError(
                    f"{string!r:.60} contains the special token text {special[0]!r}, which a Hugging "
                    "Face tokenizer always parses (llama.cpp's parse_special=False does not); use "
                    "llama_cpp_tokenizer"
                )
        encoding = self._backend.encode(string, add_special_tokens=bool(add_special))
        return list(encoding.ids)

    def _added_specials(self):
        try:
            decoder = self._backend.get_added_tokens_decoder()
        except AttributeError:  # pragma: no cover - old tokenizers
            return []
        return [tok.content for tok in decoder.values() if getattr(tok, "special", False)]

    def __reduce__(self):
        return (_HFTokenizer, (self.tokenizer,))


def hf_tokenizer(tokenizer):
    """A tokenizer hook from a Hugging Face fast tokenizer (transformers' ``PreTrainedTokenizerFast``, e.g. one
    read from the GGUF with ``AutoTokenizer.from_pretrained(dir, gguf_file=...)``, or a ``tokenizers.Tokenizer``).

    Exact where the Hugging Face tokenization of the text is llama.cpp's: the same vocabulary, merges and
    pre-tokenizer (byte-level BPE models such as Qwen2, Llama 3, SmolLM2 converted from their GGUF) and the
    same added-token handling; ``add_special`` maps to ``add_special_tokens``. It refuses, with ValueError,
    what it cannot do as llama.cpp does: bytes that are not UTF-8 (a Hugging Face tokenizer takes text) and,
    with ``parse_special=False``, text containing a special token (Hugging Face always parses those)."""
    return _HFTokenizer(tokenizer)
