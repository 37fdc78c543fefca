"""Oracle driver: the pinned libllama (llama-cpp-python 0.3.36) through its low-level ctypes API.

bankml's tests compare against this module: it loads a vocabulary the way
llama.cpp does (vocab-only), renders pieces, answers is_eog, tokenizes, and runs
llama.cpp's own grammar sampler to produce whole-vocabulary token masks.

Safety: llama.cpp aborts the process (a C++ exception crossing the C boundary,
or GGML_ABORT) when a grammar sampler is asked to accept a token its grammar
rejects. :meth:`OracleGrammar.accept` therefore checks the token against the
current mask first and raises :class:`TokenRejected` instead. One case cannot
be checked from outside: a *lazy* grammar that is still waiting for its
trigger accepts any token, and when a token completes a trigger pattern the
buffered text is replayed into the grammar; if the grammar rejects that text
libllama aborts. Tests must only feed lazy grammars trigger text the grammar
accepts.

Import it as ``tests.oracle.libllama`` (the repository root is on sys.path
under pytest) or put ``tests/`` on the path and import ``oracle.libllama``.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import weakref
from collections import deque
from typing import Iterable, Sequence

import numpy as np

try:
    import llama_cpp as _ll
except ImportError as e:  # pragma: no cover - exercised only without the test extra
    raise ImportError(
        "the libllama oracle needs llama-cpp-python==0.3.36; install the test extra: pip install -e '.[test]'"
    ) from e

from bankml.engine._hash import mask_hash

__all__ = [
    "OracleError",
    "TokenRejected",
    "OracleVocab",
    "OracleGrammar",
    "load_vocab",
    "mask_hash",
    "PINNED_VERSION",
]

PINNED_VERSION = "0.3.36"
if getattr(_ll, "__version__", None) != PINNED_VERSION:  # pragma: no cover
    raise ImportError(
        f"the oracle is pinned to llama-cpp-python {PINNED_VERSION}, found {getattr(_ll, '__version__', '?')}"
    )


class OracleError(RuntimeError):
    """libllama refused something (model load, grammar parse, ...)."""


class TokenRejected(ValueError):
    """A token the grammar's current mask does not allow was offered to accept()."""


# --- logging: keep libllama quiet, remember recent lines for error messages.
_LOG_LINES: deque[str] = deque(maxlen=64)
_LOG_LOCK = threading.Lock()


@_ll.llama_log_callback
def _log_callback(level, text, user_data):  # noqa: ARG001
    try:
        s = text.decode("utf-8", "replace") if text else ""
    except Exception:  # pragma: no cover
        s = ""
    with _LOG_LOCK:
        _LOG_LINES.append(s)


def _recent_log(n: int = 12) -> str:
    with _LOG_LOCK:
        lines = "".join(list(_LOG_LINES)[-n:]).strip()
    return lines


def _clear_log() -> None:
    with _LOG_LOCK:
        _LOG_LINES.clear()


_INIT_LOCK = threading.Lock()
_INITIALISED = False


def _init_backend() -> None:
    global _INITIALISED
    with _INIT_LOCK:
        if _INITIALISED:
            return
        if os.environ.get("BANKML_ORACLE_VERBOSE", "") in ("", "0"):
            _ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _ll.llama_backend_init()
        _INITIALISED = True


# --- vocabularies --------------------------------------------------------------

_LIVE_MODELS: "weakref.WeakSet[OracleVocab]" = weakref.WeakSet()


class OracleVocab:
    """A vocabulary loaded vocab-only by libllama. Use :func:`load_vocab`."""

    def __init__(self, path: str | os.PathLike):
        _init_backend()
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(self.path)
        params = _ll.llama_model_default_params()
        params.vocab_only = True
        params.use_mmap = True
        _clear_log()
        model = _ll.llama_model_load_from_file(self.path.encode(), params)
        if not model:
            raise OracleError(f"libllama could not load {self.path!r}:\n{_recent_log()}")
        self._model = model
        vocab = _ll.llama_model_get_vocab(model)
        if not vocab:  # pragma: no cover
            _ll.llama_model_free(model)
            self._model = None
            raise OracleError(f"libllama gave no vocabulary for {self.path!r}")
        self._vocab = vocab
        self.n_vocab = int(_ll.llama_vocab_n_tokens(vocab))
        self._buf = ctypes.create_string_buffer(256)
        self._grammars: "weakref.WeakSet[OracleGrammar]" = weakref.WeakSet()
        _LIVE_MODELS.add(self)

    # the raw pointer, for the grammar sampler
    @property
    def handle(self):
        if self._vocab is None:
            raise OracleError("vocabulary is closed")
        return self._vocab

    def close(self) -> None:
        """Free the model (and every grammar sampler still open on it)."""
        for g in list(self._grammars):
            g.close()
        if getattr(self, "_model", None):
            _ll.llama_model_free(self._model)
        self._model = None
        self._vocab = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self) -> int:
        return self.n_vocab

    def _check_id(self, token_id: int) -> int:
        token_id = int(token_id)
        if not 0 <= token_id < self.n_vocab:
            raise IndexError(f"token id {token_id} out of range (n_vocab={self.n_vocab})")
        return token_id

    def piece(self, token_id: int) -> bytes:
        """llama_token_to_piece(vocab, id, buf, n, lstrip=0, special=true)."""
        token_id = self._check_id(token_id)
        buf = self._buf
        n = _ll.llama_token_to_piece(self.handle, token_id, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n2 = _ll.llama_token_to_piece(self.handle, token_id, buf, len(buf), 0, True)
            if n2 != -n:  # pragma: no cover
                raise OracleError(f"llama_token_to_piece size changed for token {token_id}: {n} then {n2}")
            n = n2
        return buf.raw[:n]

    def pieces(self) -> list[bytes]:
        return [self.piece(i) for i in range(self.n_vocab)]

    def is_eog(self, token_id: int) -> bool:
        return bool(_ll.llama_vocab_is_eog(self.handle, int(token_id)))

    def eog_ids(self) -> list[int]:
        v = self.handle
        f = _ll.llama_vocab_is_eog
        return [i for i in range(self.n_vocab) if f(v, i)]

    def attr(self, token_id: int) -> int:
        return int(_ll.llama_vocab_get_attr(self.handle, self._check_id(token_id)))

    def text(self, token_id: int) -> bytes:
        """The token's raw text in the vocabulary (llama_vocab_get_text)."""
        return _ll.llama_vocab_get_text(self.handle, self._check_id(token_id)) or b""

    def special_id(self, name: str) -> int | None:
        """bos/eos/eot/eom/sep/nl/pad/fim_pre/fim_suf/fim_mid/fim_pad/fim_rep/fim_sep; None for LLAMA_TOKEN_NULL."""
        fn = getattr(_ll, f"llama_vocab_{name}")
        t = int(fn(self.handle))
        return None if t < 0 else t

    def tokenize(self, text: bytes, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """llama_tokenize; grows the output buffer when libllama asks for more."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        cap = max(8, len(text) + 4)
        while True:
            out = (_ll.llama_token * cap)()
            n = _ll.llama_tokenize(self.handle, text, len(text), out, cap, add_special, parse_special)
            if n >= 0:
                return list(out[:n])
            if n == -(2**31):  # pragma: no cover - int32 overflow report
                raise OracleError("tokenization result too large")
            cap = -n

    def tokenize_limited(
        self, text: bytes, n_tokens_max: int, add_special: bool = False, parse_special: bool = True
    ) -> int | list[int]:
        """llama_tokenize with a fixed output size; returns the raw count when negative.

        ``tokenize_limited(text, 2)`` is exactly the call llama.cpp's grammar
        parser makes for a ``<...>`` token terminal.
        """
        if isinstance(text, str):
            text = text.encode("utf-8")
        out = (_ll.llama_token * max(1, n_tokens_max))()
        n = _ll.llama_tokenize(self.handle, text, len(text), out, n_tokens_max, add_special, parse_special)
        return list(out[:n]) if n >= 0 else n


_VOCAB_CACHE: dict[str, OracleVocab] = {}


def load_vocab(path: str | os.PathLike, cached: bool = True) -> OracleVocab:
    """Load a vocabulary vocab-only with libllama (cached per path by default)."""
    key = os.path.realpath(os.fspath(path))
    if cached:
        v = _VOCAB_CACHE.get(key)
        if v is not None and v._vocab is not None:
            return v
    v = OracleVocab(key)
    if cached:
        _VOCAB_CACHE[key] = v
    return v


@atexit.register
def _free_all() -> None:  # pragma: no cover - interpreter shutdown
    for v in list(_LIVE_MODELS):
        try:
            v.close()
        except Exception:
            pass
    _VOCAB_CACHE.clear()


# --- grammar sampler ------------------------------------------------------------

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(_ll.llama_token_data)


class OracleGrammar:
    """llama.cpp's grammar sampler over a vocabulary loaded by :func:`load_vocab`.

    ``lazy=True`` uses llama_sampler_init_grammar_lazy_patterns with the given
    trigger regex patterns and trigger token ids.
    """

    def __init__(
        self,
        vocab: OracleVocab,
        grammar_text: str | bytes,
        root: str = "root",
        lazy: bool = False,
        trigger_patterns: Sequence[str | bytes] = (),
        trigger_tokens: Iterable[int] = (),
        *,
        _handle=None,
    ):
        self.vocab = vocab
        self._smpl = None
        gtext = grammar_text.encode("utf-8") if isinstance(grammar_text, str) else bytes(grammar_text)
        groot = root.encode("utf-8") if isinstance(root, str) else bytes(root)
        self.grammar_text = gtext
        self.root = groot
        self.lazy = bool(lazy)
        self._cur_buf = None
        if _handle is not None:
            self._smpl = _handle
        else:
            if not gtext:
                # an empty grammar string gives a sampler with no grammar (no-op)
                raise OracleError("empty grammar text")
            _clear_log()
            if lazy:
                pats = [p.encode("utf-8") if isinstance(p, str) else bytes(p) for p in trigger_patterns]
                toks = [int(t) for t in trigger_tokens]
                c_pats = (ctypes.c_char_p * max(1, len(pats)))(*pats)
                c_toks = (_ll.llama_token * max(1, len(toks)))(*toks)
                smpl = _ll.llama_sampler_init_grammar_lazy_patterns(
                    vocab.handle, gtext, groot, c_pats, len(pats), c_toks, len(toks)
                )
            else:
                if trigger_patterns or tuple(trigger_tokens):
                    raise ValueError("trigger patterns/tokens need lazy=True")
                smpl = _ll.llama_sampler_init_grammar(vocab.handle, gtext, groot)
            if not smpl:
                raise OracleError(f"libllama rejected the grammar:\n{_recent_log()}")
            self._smpl = smpl
        vocab._grammars.add(self)
        n = vocab.n_vocab
        self._data = np.zeros(n, dtype=_TOKEN_DATA)
        self._ids = np.arange(n, dtype=np.int32)
        # the mask of the current state, kept until accept()/reset() changes the state,
        # so that accept() right after allowed_ids() does not apply the grammar twice
        self._mask = None

    def close(self) -> None:
        if self._smpl:
            _ll.llama_sampler_free(self._smpl)
        self._smpl = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass

    def _handle(self):
        if not self._smpl:
            raise OracleError("grammar sampler is closed")
        if self.vocab._vocab is None:
            raise OracleError("the vocabulary of this grammar was closed")
        return self._smpl

    def allowed_mask(self) -> np.ndarray:
        """Boolean mask over the whole vocabulary (one llama_sampler_apply call).

        The returned array is read-only; it is cached until the state changes.
        """
        smpl = self._handle()
        if self._mask is not None:
            return self._mask
        data = self._data
        data["id"] = self._ids
        data["logit"] = 0.0
        data["p"] = 0.0
        arr = _ll.llama_token_data_array(
            data=data.ctypes.data_as(_ll.llama_token_data_p),
            size=data.size,
            selected=-1,
            sorted=False,
        )
        _ll.llama_sampler_apply(smpl, ctypes.byref(arr))
        if arr.size != data.size or ctypes.addressof(arr.data.contents) != data.ctypes.data:
            raise OracleError("the grammar sampler changed the candidate array")  # pragma: no cover
        mask = np.zeros(data.size, dtype=bool)
        mask[data["id"]] = data["logit"] != -np.inf
        mask.flags.writeable = False
        self._mask = mask
        return mask

    def allowed_ids(self) -> np.ndarray:
        """Sorted int32 array of the token ids the grammar allows now."""
        return np.flatnonzero(self.allowed_mask()).astype(np.int32)

    def mask_hash(self) -> tuple[int, int]:
        return mask_hash(self.allowed_ids())

    def is_allowed(self, token_id: int) -> bool:
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab.n_vocab:
            return False
        return bool(self.allowed_mask()[token_id])

    def accept(self, token_id: int) -> None:
        """llama_sampler_accept, after checking that the mask allows the token.

        Raises :class:`TokenRejected` (the sampler is left unchanged) instead of
        letting libllama abort the process.
        """
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab.n_vocab:
            raise TokenRejected(f"token id {token_id} out of range (n_vocab={self.vocab.n_vocab})")
        smpl = self._handle()
        if not self.allowed_mask()[token_id]:
            raise TokenRejected(f"the grammar does not allow token {token_id} ({self.vocab.piece(token_id)!r}) here")
        self._mask = None
        _ll.llama_sampler_accept(smpl, token_id)

    def accept_unchecked(self, token_id: int) -> None:
        """llama_sampler_accept without the mask check: for callers that have just compared the
        mask, and for child processes that expect libllama to throw (which ends the process)."""
        smpl = self._handle()
        self._mask = None
        _ll.llama_sampler_accept(smpl, int(token_id))

    def accept_many(self, token_ids: Iterable[int]) -> None:
        for t in token_ids:
            self.accept(t)

    def clone(self) -> "OracleGrammar":
        """An independent copy of the sampler in its current state (llama_sampler_clone)."""
        h = _ll.llama_sampler_clone(self._handle())
        if not h:  # pragma: no cover
            raise OracleError("llama_sampler_clone failed")
        return OracleGrammar(
            self.vocab, self.grammar_text, self.root.decode("utf-8", "replace"), lazy=self.lazy, _handle=h
        )

    def reset(self) -> None:
        """llama_sampler_reset: back to the grammar's start state."""
        self._mask = None
        _ll.llama_sampler_reset(self._handle())
