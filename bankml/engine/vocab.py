# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""The token vocabulary bankml constrains: what each token id spells and which ids end generation.

This module owns:

* :class:`Vocab` -- for every token id, its *piece*: the bytes llama.cpp's
  ``llama_token_to_piece(vocab, id, ..., lstrip=0, special=true)`` gives, which
  is what llama.cpp's grammar sampler matches against the grammar; the
  *end-of-generation* (EOG) set, as ``llama_vocab_is_eog`` reports it; the
  token attributes (``llama_vocab_get_attr``); and the lookup the GBNF parser
  makes for a ``<...>`` token terminal (:meth:`Vocab.token_for_text`).
* :meth:`Vocab.from_gguf` -- a port of the part of llama.cpp's vocabulary
  loader (``llama_vocab::impl::load`` of the llama.cpp vendored by
  llama-cpp-python 0.3.36) that decides those four things, reading the GGUF
  metadata with a small reader of its own (no weights are touched).

Nothing here tokenizes text: the BPE merges, the pre-tokenizer regexes and the
SentencePiece scores are read past, not used. Where llama.cpp tokenizes (the tails of
multi-byte DRY sequence breakers), a caller-given hook does (:meth:`Vocab.with_tokenizer`;
ready-made ones in ``bankml.integrations.adapters``).
"""

from __future__ import annotations

import mmap
import os
import struct
import warnings
from operator import index as _index
from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "Vocab",
    "ATTR_UNDEFINED",
    "ATTR_UNKNOWN",
    "ATTR_UNUSED",
    "ATTR_NORMAL",
    "ATTR_CONTROL",
    "ATTR_USER_DEFINED",
    "ATTR_BYTE",
    "ATTR_NORMALIZED",
    "ATTR_LSTRIP",
    "ATTR_RSTRIP",
    "ATTR_SINGLE_WORD",
]

# ---------------------------------------------------------------------------
# Token attributes: the bit values of llama.h's enum llama_token_attr.
ATTR_UNDEFINED = 0
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_NORMALIZED = 1 << 6
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
ATTR_SINGLE_WORD = 1 << 9

# GGUF tokenizer.ggml.token_type values (llama.h enum llama_token_type) -> attribute.
_TOKEN_TYPE_TO_ATTR = {
    0: ATTR_UNDEFINED,  # UNDEFINED
    1: ATTR_NORMAL,  # NORMAL
    2: ATTR_UNKNOWN,  # UNKNOWN
    3: ATTR_CONTROL,  # CONTROL
    4: ATTR_USER_DEFINED,  # USER_DEFINED
    5: ATTR_UNUSED,  # UNUSED
    6: ATTR_BYTE,  # BYTE
}

# Tokens the tokenizer matches verbatim when parse_special is true
# (llama.cpp's cache_special_tokens).
_SPECIAL_ATTRS = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN

# Vocabulary kinds (llama.h enum llama_vocab_type, by name).
_SPM, _BPE, _WPM, _UGM, _RWKV, _PLAMO2, _TEST, _NONE = (
    "SPM",
    "BPE",
    "WPM",
    "UGM",
    "RWKV",
    "PLaMo2",
    "TEST",
    "none",
)

_NULL = -1  # LLAMA_TOKEN_NULL

# ---------------------------------------------------------------------------
# The text-based heuristics of the loader. Each slot is filled, if the GGUF did
# not name it, by the first token (in the loader's hash-map iteration order)
# whose text is in the list; the token is then forced to be a control token.
_HEURISTIC_SLOTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "eot",
        (
            "<|eot_id|>",
            "<|im_end|>",
            "<|end|>",
            "<end_of_turn>",
            "<|endoftext|>",
            "<|end_of_text|>",
            "<EOT>",
            "_<EOT>",
            "[EOT]",
            "<｜end▁of▁sentence｜>",
            "<end_of_utterance>",
        ),
    ),
    ("eom", ("<|eom_id|>",)),
    (
        "fim_pre",
        (
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ),
    ),
    (
        "fim_suf",
        (
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ),
    ),
    (
        "fim_mid",
        (
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ),
    ),
    ("fim_pad", ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    ("fim_rep", ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    ("fim_sep", ("<|file_sep|>",)),
)

# Every token with one of these texts ends generation (and becomes a control token).
_EOG_TEXTS = frozenset(
    s.encode()
    for s in (
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<｜end▁of▁sentence｜>",
        "[e~[",
    )
)

# gpt-oss: these are always rendered, as user-defined tokens.
_ALWAYS_USER_DEFINED = frozenset(
    s.encode()
    for s in (
        "<|channel|>",
        "<|message|>",
        "<|start|>",
        "<|constrain|>",
    )
)

# Special-id GGUF keys in the order the loader reads them (later keys win for
# the same slot: the three deprecated FIM keys come last).
_SPECIAL_ID_KEYS: tuple[tuple[str, str], ...] = (
    ("tokenizer.ggml.bos_token_id", "bos"),
    ("tokenizer.ggml.eos_token_id", "eos"),
    ("tokenizer.ggml.eot_token_id", "eot"),
    ("tokenizer.ggml.eom_token_id", "eom"),
    ("tokenizer.ggml.unknown_token_id", "unk"),
    ("tokenizer.ggml.seperator_token_id", "sep"),
    ("tokenizer.ggml.padding_token_id", "pad"),
    ("tokenizer.ggml.mask_token_id", "mask"),
    ("tokenizer.ggml.fim_pre_token_id", "fim_pre"),
    ("tokenizer.ggml.fim_suf_token_id", "fim_suf"),
    ("tokenizer.ggml.fim_mid_token_id", "fim_mid"),
    ("tokenizer.ggml.fim_pad_token_id", "fim_pad"),
    ("tokenizer.ggml.fim_rep_token_id", "fim_rep"),
    ("tokenizer.ggml.fim_sep_token_id", "fim_sep"),
    ("tokenizer.ggml.prefix_token_id", "fim_pre"),
    ("tokenizer.ggml.suffix_token_id", "fim_suf"),
    ("tokenizer.ggml.middle_token_id", "fim_mid"),
)

_SLOT_NAMES = (
    "bos",
    "eos",
    "eot",
    "eom",
    "unk",
    "sep",
    "pad",
    "mask",
    "fim_pre",
    "fim_suf",
    "fim_mid",
    "fim_pad",
    "fim_rep",
    "fim_sep",
)

# BPE pre-tokenizers: the names the pinned loader accepts (any other name makes
# it refuse the file), those that keep SentencePiece-style escaped spaces
# (U+2581) in their tokens, and those that clear the default BOS id. The rest of
# each pre-tokenizer's configuration only matters for tokenizing text, which is
# not reproduced here.
_BPE_PRE_ESCAPES_WHITESPACE = frozenset({"gemma4", "granite-embed-multi-311m", "sarvam-moe"})
_BPE_PRE_NO_BOS = frozenset({"chatglm-bpe", "glm4", "glm5"})
_BPE_PRE_KNOWN = frozenset(
    {
        "default",
        "minicpm5",
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
        "jina-v5-nano",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "spark2_5",
        "youtu",
        "falcon",
        "mpt",
        "starcoder",
        "gpt-2",
        "phi-2",
        "jina-es",
        "jina-de",
        "gigachat",
        "jina-v2-es",
        "jina-v2-de",
        "a.x-4.0",
        "mellum",
        "modern-bert",
        "jais-2",
        "gemma4",
        "granite-embed-multi-311m",
        "sarvam-moe",
        "jina-v1-en",
        "jina-v2-code",
        "roberta-bpe",
        "whitespace",
        "refact",
        "command-r",
        "qwen2",
        "deepseek-r1-qwen",
        "kormo",
        "f2llmv2",
        "qwen35",
        "stablelm2",
        "olmo",
        "dbrx",
        "smaug-bpe",
        "poro-chat",
        "chatglm-bpe",
        "glm4",
        "glm5",
        "viking",
        "jais",
        "tekken",
        "smollm",
        "codeshell",
        "bloom",
        "gpt3-finnish",
        "exaone",
        "exaone4",
        "exaone-moe",
        "chameleon",
        "minerva-7b",
        "megrez",
        "gpt-4o",
        "llama4",
        "kanana2",
        "talkie",
        "granite-embed-multi-97m",
        "tiny_aya",
        "cohere2moe",
        "superbpe",
        "trillion",
        "granite-docling",
        "bailingmoe",
        "bailingmoe2",
        "llada-moe",
        "seed-coder",
        "hunyuan",
        "hunyuan-dense",
        "hy_v4",
        "joyai-llm",
        "kimi-k2",
        "ufakzeka",
        "grok-2",
        "afmoe",
        "laguna",
        "minimax-m2",
        "solar-open",
        "mellum2",
    }
)

_ESCAPED_SPACE = "\u2581".encode()  # "▁"
_DNA_KMER_MARKER = b"\xee\x80\x80"


# ---------------------------------------------------------------------------
# Minimal GGUF metadata reader (little-endian GGUF v2/v3, as the pinned ggml
# accepts). Only the key/value section is read; string arrays other than the
# wanted ones (e.g. the BPE merges) are skipped without being decoded.

_GGUF_UINT8, _GGUF_INT8, _GGUF_UINT16, _GGUF_INT16, _GGUF_UINT32, _GGUF_INT32 = 0, 1, 2, 3, 4, 5
_GGUF_FLOAT32, _GGUF_BOOL, _GGUF_STRING, _GGUF_ARRAY = 6, 7, 8, 9
_GGUF_UINT64, _GGUF_INT64, _GGUF_FLOAT64 = 10, 11, 12

_GGUF_SCALAR = {
    _GGUF_UINT8: "<B",
    _GGUF_INT8: "<b",
    _GGUF_UINT16: "<H",
    _GGUF_INT16: "<h",
    _GGUF_UINT32: "<I",
    _GGUF_INT32: "<i",
    _GGUF_FLOAT32: "<f",
    _GGUF_BOOL: "<?",
    _GGUF_UINT64: "<Q",
    _GGUF_INT64: "<q",
    _GGUF_FLOAT64: "<d",
}
_GGUF_NUMPY = {
    _GGUF_UINT8: "<u1",
    _GGUF_INT8: "<i1",
    _GGUF_UINT16: "<u2",
    _GGUF_INT16: "<i2",
    _GGUF_UINT32: "<u4",
    _GGUF_INT32: "<i4",
    _GGUF_FLOAT32: "<f4",
    _GGUF_BOOL: "<u1",
    _GGUF_UINT64: "<u8",
    _GGUF_INT64: "<i8",
    _GGUF_FLOAT64: "<f8",
}
_GGUF_TYPE_NAMES = {
    _GGUF_UINT8: "u8",
    _GGUF_INT8: "i8",
    _GGUF_UINT16: "u16",
    _GGUF_INT16: "i16",
    _GGUF_UINT32: "u32",
    _GGUF_INT32: "i32",
    _GGUF_FLOAT32: "f32",
    _GGUF_BOOL: "bool",
    _GGUF_STRING: "str",
    _GGUF_ARRAY: "arr",
    _GGUF_UINT64: "u64",
    _GGUF_INT64: "i64",
    _GGUF_FLOAT64: "f64",
}


class _GGUFValue:
    """A metadata value: its GGUF type, array element type and decoded value."""

    __slots__ = ("type", "elem_type", "value", "count")

    def __init__(self, type_, elem_type, value, count=None):
        self.type = type_
        self.elem_type = elem_type
        self.value = value  # None for a skipped string array
        self.count = count


def _read_gguf_metadata(path: str | os.PathLike, string_arrays: Iterable[str] = ()) -> dict:
    """Read a GGUF file's key/value metadata.

    String arrays are decoded (to lists of bytes) only for the keys named in
    ``string_arrays``; other string arrays are skipped (value None, count set).
    Numeric arrays come back as numpy arrays; strings as bytes.
    """
    want = frozenset(string_arrays)
    with open(path, "rb") as f:
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as e:  # empty file
            raise ValueError(f"{os.fspath(path)!r} is not a GGUF file ({e})") from None
    try:
        return _parse_gguf_kv(mm, os.fspath(path), want)
    finally:
        mm.close()


def _parse_gguf_kv(mm, path: str, want: frozenset) -> dict:
    size = len(mm)
    unpack_from = struct.unpack_from

    def fail(msg):
        raise ValueError(f"{path!r}: {msg}")

    if size < 24 or mm[:4] != b"GGUF":
        fail("not a GGUF file (bad magic)")
    (version,) = unpack_from("<I", mm, 4)
    if version & 0xFFFF == 0:
        fail(f"GGUF version {version} looks byte-swapped; big-endian GGUF files are not supported")
    if version == 1:
        fail("GGUFv1 is not supported (llama.cpp refuses it too)")
    if version > 3 or version == 0:
        fail(f"unsupported GGUF version {version}")
    n_tensors, n_kv = unpack_from("<qq", mm, 8)
    if n_tensors < 0 or n_kv < 0:
        fail("negative tensor or key/value count")
    off = 24

    def need(n):
        if off + n > size:
            fail("truncated metadata")

    def read_str():
        nonlocal off
        need(8)
        (n,) = unpack_from("<Q", mm, off)
        off += 8
        need(n)
        s = mm[off : off + n]
        off += n
        return s

    out: dict[str, _GGUFValue] = {}
    for _ in range(n_kv):
        key_b = read_str()
        try:
            key = key_b.decode("utf-8")
        except UnicodeDecodeError:
            key = key_b.decode("utf-8", "replace")
        need(4)
        (vt,) = unpack_from("<I", mm, off)
        off += 4
        if key in out:
            fail(f"duplicate key {key!r}")
        if vt in _GGUF_SCALAR:
            fmt = _GGUF_SCALAR[vt]
            n = struct.calcsize(fmt)
            need(n)
            (v,) = unpack_from(fmt, mm, off)
            off += n
            out[key] = _GGUFValue(vt, None, v)
        elif vt == _GGUF_STRING:
            out[key] = _GGUFValue(vt, None, read_str())
        elif vt == _GGUF_ARRAY:
            need(12)
            et, count = unpack_from("<IQ", mm, off)
            off += 12
            if et in _GGUF_NUMPY:
                dt = np.dtype(_GGUF_NUMPY[et])
                nbytes = dt.itemsize * count
                need(nbytes)
                arr = np.frombuffer(mm, dtype=dt, count=count, offset=off).copy()
                off += nbytes
                out[key] = _GGUFValue(vt, et, arr, count)
            elif et == _GGUF_STRING:
                if key in want:
                    items: list = []
                    append = items.append
                    for _i in range(count):
                        if off + 8 > size:
                            fail("truncated metadata")
                        (n,) = unpack_from("<Q", mm, off)
                        off += 8
                        if off + n > size:
                            fail("truncated metadata")
                        append(mm[off : off + n])
                        off += n
                    out[key] = _GGUFValue(vt, et, items, count)
                else:
                    for _i in range(count):
                        if off + 8 > size:
                            fail("truncated metadata")
                        (n,) = unpack_from("<Q", mm, off)
                        off += 8 + n
                    if off > size:
                        fail("truncated metadata")
                    out[key] = _GGUFValue(vt, et, None, count)
            else:
                fail(f"key {key!r}: unsupported array element type {et}")
        else:
            fail(f"key {key!r}: unknown value type {vt}")
    return out


class _Meta:
    """Typed access to GGUF metadata with the loader's strict type checks."""

    def __init__(self, kv: dict, path: str):
        self.kv = kv
        self.path = path

    def _check(self, key, v, want_type):
        if v.type != want_type:
            raise ValueError(
                f"{self.path!r}: key {key} has wrong type {_GGUF_TYPE_NAMES.get(v.type, v.type)} "
                f"but expected type {_GGUF_TYPE_NAMES[want_type]}"
            )

    def get(self, key, want_type, default=None, required=False):
        v = self.kv.get(key)
        if v is None:
            if required:
                raise ValueError(f"{self.path!r}: key not found in model: {key}")
            return default
        self._check(key, v, want_type)
        return v.value

    def get_str(self, key, default=None, required=False) -> str | None:
        b = self.get(key, _GGUF_STRING, None, required)
        if b is None:
            return default
        return b.decode("utf-8", "surrogateescape")

    def array(self, key, elem_types):
        v = self.kv.get(key)
        if v is None:
            return None
        if v.type != _GGUF_ARRAY or v.elem_type not in elem_types:
            raise ValueError(f"{self.path!r}: invalid gguf type for {key}")
        return v


# ---------------------------------------------------------------------------
# Piece rendering (llama_vocab::impl::token_to_piece with special = true).


def _build_byte_decoder():
    """GPT-2 byte-level BPE: printable code point -> byte, as a str.translate table.

    Bytes in '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves; the other 68
    bytes are written as U+0100 + n in byte order. Code points below U+0100
    that are not in the table are mapped to None so that str.translate drops
    them and the caller can notice (length change) and take the slow path.
    """
    direct = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    cp_to_byte = {}
    n = 0
    for b in range(256):
        if b in direct:
            cp_to_byte[b] = b
        else:
            cp_to_byte[256 + n] = b
            n += 1
    table = {}
    for cp in range(256):
        if cp not in cp_to_byte:
            table[cp] = None
    for cp, b in cp_to_byte.items():
        if cp >= 256:
            table[cp] = b  # translate to chr(b)
    return cp_to_byte, table


_CP_TO_BYTE, _BYTE_DECODE_TABLE = _build_byte_decoder()


def _utf8_codepoints_lenient(text: bytes) -> list[int]:
    """Code points the way llama.cpp's unicode_cpts_from_utf8 reads them.

    It checks only lead-byte patterns and continuation bytes (so overlong
    forms, surrogates and values above U+10FFFF pass); any other byte becomes
    U+FFFD and decoding resumes at the next byte.
    """
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c < 0x80:
            out.append(c)
            i += 1
            continue
        if not c & 0x40:
            out.append(0xFFFD)
            i += 1
            continue
        if not c & 0x20:
            if i + 1 >= n or (text[i + 1] & 0xC0) != 0x80:
                out.append(0xFFFD)
                i += 1
                continue
            out.append(((c & 0x1F) << 6) | (text[i + 1] & 0x3F))
            i += 2
            continue
        if not c & 0x10:
            if i + 2 >= n or (text[i + 1] & 0xC0) != 0x80 or (text[i + 2] & 0xC0) != 0x80:
                out.append(0xFFFD)
                i += 1
                continue
            out.append(((c & 0x0F) << 12) | ((text[i + 1] & 0x3F) << 6) | (text[i + 2] & 0x3F))
            i += 3
            continue
        if not c & 0x08:
            if (
                i + 3 >= n
                or (text[i + 1] & 0xC0) != 0x80
                or (text[i + 2] & 0xC0) != 0x80
                or (text[i + 3] & 0xC0) != 0x80
            ):
                out.append(0xFFFD)
                i += 1
                continue
            out.append(
                ((c & 0x07) << 18) | ((text[i + 1] & 0x3F) << 12) | ((text[i + 2] & 0x3F) << 6) | (text[i + 3] & 0x3F)
            )
            i += 4
            continue
        out.append(0xFFFD)
        i += 1
    return out


def _cpt_to_utf8(cp: int) -> bytes:
    """UTF-8 bytes of a code point, surrogates included (as llama.cpp writes them)."""
    if cp <= 0x7F:
        return bytes((cp,))
    if cp <= 0x7FF:
        return bytes((0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)))
    if cp <= 0xFFFF:
        return bytes((0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)))
    if cp <= 0x10FFFF:
        return bytes((0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)))
    raise ValueError("invalid codepoint")


def _decode_byte_level(text: bytes) -> bytes:
    """Byte-level BPE token text -> bytes (llama.cpp's llama_decode_text).

    A code point outside the byte alphabet is written as
    ``[UNK_BYTE_0x<hex of its UTF-8>`` followed by the whole token text and ``]``.
    """
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError:
        s = None
    if s is not None:
        t = s.translate(_BYTE_DECODE_TABLE)
        if len(t) == len(s):
            try:
                return t.encode("latin-1")
            except UnicodeEncodeError:
                pass
    out = bytearray()
    for cp in _utf8_codepoints_lenient(text):
        b = _CP_TO_BYTE.get(cp)
        if b is not None:
            out.append(b)
        else:
            utf8 = _cpt_to_utf8(cp)  # raises for cp > U+10FFFF, as the loader does
            out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text + b"]"
    return bytes(out)


_C_SPACE = b" \t\n\v\f\r"
_HEX = {c: int(chr(c), 16) for c in b"0123456789abcdefABCDEF"}


def _token_to_byte(text: bytes) -> int:
    """Byte value of a ``<0xNN>`` byte token: C strtol(text[3:5], 16), truncated to 8 bits."""
    if len(text) < 3:
        raise ValueError(f"byte token {text!r} is too short (llama.cpp throws std::out_of_range)")
    s = text[3:5]
    i = 0
    while i < len(s) and s[i] in _C_SPACE:
        i += 1
    neg = False
    if i < len(s) and s[i] in b"+-":
        neg = s[i] == 0x2D
        i += 1
    # (a "0x" prefix cannot be followed by a digit within two characters, so
    # strtol reads just the "0" of it, as the digit loop below does)
    v = 0
    while i < len(s) and s[i] in _HEX:
        v = v * 16 + _HEX[s[i]]
        i += 1
    if neg:
        v = -v
    return v & 0xFF


def _unescape_rwkv(text: bytes) -> bytes:
    """RWKV token text -> bytes (llama.cpp's llama_unescape_rwkv_token)."""
    out = bytearray()
    escaping = False
    hex_remaining = 0
    hex_acc = 0
    for c in text:
        if hex_remaining:
            sc = c - 256 if c >= 0x80 else c  # the loader reads a signed char
            value = (sc - 0x61 + 10) if sc >= 0x61 else (sc - 0x30)
            hex_acc = ((hex_acc << 4) + value) & 0xFF
            hex_remaining -= 1
            if hex_remaining == 0:
                out.append(hex_acc)
                hex_acc = 0
            continue
        if escaping:
            if c == 0x74:  # t
                out.append(0x09)
            elif c == 0x6E:  # n
                out.append(0x0A)
            elif c == 0x72:  # r
                out.append(0x0D)
            elif c == 0x78:  # x
                hex_remaining = 2
            else:
                out.append(c)
            escaping = False
            continue
        if c == 0x5C:  # backslash
            escaping = True
            continue
        out.append(c)
    return bytes(out)


def _render_piece(vtype: str, escape_ws: bool, token_id: int, text: bytes, attr: int) -> bytes:
    if vtype in (_SPM, _WPM, _UGM, _BPE):
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED):
            return text
        if attr & ATTR_NORMAL:
            if vtype == _BPE and not escape_ws:
                return _decode_byte_level(text)
            return text.replace(_ESCAPED_SPACE, b" ")
        if attr & ATTR_BYTE:
            return bytes((_token_to_byte(text),))
        return b""
    if vtype == _RWKV:
        return _unescape_rwkv(text)
    if vtype == _TEST:
        return format(token_id, "x").encode()
    if vtype == _PLAMO2:
        if (
            attr & ATTR_BYTE
            and len(text) == 6
            and text[:3] == b"<0x"
            and text[5:] == b">"
            and text[3] in _HEX
            and text[4] in _HEX
        ):
            return bytes((int(text[3:5], 16),))
        return text
    raise ValueError(f"vocabulary type {vtype} has no pieces")


# ---------------------------------------------------------------------------
# Iteration order of the loader's std::unordered_map<std::string, llama_token>.
#
# The loader's text heuristics take, for each slot, the *first* matching token
# in the iteration order of its token-text hash map. When a vocabulary holds two
# candidates for one slot (say "<|fim_pad|>" and "<PAD>"), which one wins is
# decided by that order. Linux builds of libllama use libstdc++, whose order is
# reproduced here: MurmurHash-based std::hash<std::string> (std::_Hash_bytes,
# seed 0xc70f6907), buckets = hash % bucket_count, the prime rehash schedule
# below (bucket count after the Nth insertion into a map that starts empty),
# insertion at the front of a bucket's run or of the whole list, and rehashing
# that walks the old list. It is only computed when a slot is ambiguous.

_LIBSTDCXX_REHASH = (  # (size that triggers the rehash, new bucket count)
    (1, 13),
    (14, 29),
    (30, 59),
    (60, 127),
    (128, 257),
    (258, 541),
    (542, 1109),
    (1110, 2357),
    (2358, 5087),
    (5088, 10273),
    (10274, 20753),
    (20754, 42043),
    (42044, 85229),
    (85230, 172933),
    (172934, 351061),
    (351062, 712697),
    (712698, 1447153),
    (1447154, 2938679),
    (2938680, 5967347),
)
_MURMUR_MUL = np.uint64((0xC6A4A793 << 32) + 0x5BD1E995)
_MURMUR_SEED = 0xC70F6907


def _libstdcxx_string_hashes(keys: Sequence[bytes]) -> np.ndarray:
    """std::hash<std::string> of libstdc++ (64-bit) for every key, vectorised."""
    n = len(keys)
    out = np.empty(n, dtype=np.uint64)
    # group keys of similar length so the zero-padded word matrix stays small
    lens_all = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    by_len = np.argsort(lens_all, kind="stable")
    chunk = 8192
    for c0 in range(0, n, chunk):
        idx = by_len[c0 : c0 + chunk]
        out[idx] = _murmur_chunk([keys[i] for i in idx], lens_all[idx])
    return out


def _murmur_chunk(keys: list[bytes], lens: np.ndarray) -> np.ndarray:
    n = len(keys)
    nwords = int(lens.max() // 8) + 1 if n else 1
    width = nwords * 8
    buf = np.zeros((n, width), dtype=np.uint8)
    flat = np.frombuffer(b"".join(keys), dtype=np.uint8)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(flat.size) - np.repeat(starts, lens)
    buf[rows, cols] = flat
    words = buf.view("<u8")  # (n, nwords) little-endian words, zero-padded
    mul = _MURMUR_MUL
    s47 = np.uint64(47)
    zero = np.uint64(0)
    with np.errstate(over="ignore"):
        h = np.uint64(_MURMUR_SEED) ^ (lens.astype(np.uint64) * mul)
        nfull = lens // 8
        has_tail = (lens & 7) != 0
        for j in range(nwords):
            w = words[:, j]
            full = nfull > j
            d = w * mul
            d = (d ^ (d >> s47)) * mul
            tail = (nfull == j) & has_tail
            # a full 8-byte word is mixed first; the zero-padded tail word is not
            x = np.where(full, d, np.where(tail, w, zero))
            h = np.where(full | tail, (h ^ x) * mul, h)
        h = (h ^ (h >> s47)) * mul
        h = h ^ (h >> s47)
    return h


def _libstdcxx_iteration_order(keys: Sequence[bytes]) -> np.ndarray:
    """Indices of ``keys`` in the order a libstdc++ unordered_map filled with
    ``m[keys[i]] = i`` (i ascending, from empty) iterates them."""
    n = len(keys)
    if n > _LIBSTDCXX_REHASH[-1][0] - 1:
        raise ValueError("too many keys for the tabulated rehash schedule")
    hashes = _libstdcxx_string_hashes(keys)
    order = np.zeros(0, dtype=np.int64)
    sched = list(_LIBSTDCXX_REHASH)
    for si, (trigger, buckets) in enumerate(sched):
        start = trigger - 1  # index of the element whose insertion rehashes
        if start >= n:
            break
        end = sched[si + 1][0] - 1 if si + 1 < len(sched) else n
        end = min(end, n)
        elems = np.concatenate([order, np.arange(start, end, dtype=np.int64)])
        # placement time: position in the old list during the rehash walk,
        # then insertion index (always larger) for the elements inserted after
        t = np.concatenate([np.arange(order.size, dtype=np.int64), np.arange(start, end, dtype=np.int64)])
        bkt = (hashes[elems] % np.uint64(buckets)).astype(np.int64)
        # first placement time per bucket = the time the bucket's run was created
        by_bkt = np.lexsort((t, bkt))
        sb = bkt[by_bkt]
        first = np.ones(sb.size, dtype=bool)
        first[1:] = sb[1:] != sb[:-1]
        grp_of_sorted = np.cumsum(first) - 1
        grp_created = t[by_bkt][first]
        created = np.empty(elems.size, dtype=np.int64)
        created[by_bkt] = grp_created[grp_of_sorted]
        # newest run first; inside a run, most recently placed first
        final = np.lexsort((-t, -created))
        order = elems[final]
    return order


# ---------------------------------------------------------------------------


class Vocab:
    """A token vocabulary: per-id pieces, the end-of-generation set, attributes.

    Build one by hand with ``Vocab(pieces, eog_ids)`` or from a model file with
    :meth:`Vocab.from_gguf`. A Vocab is immutable by convention (the arrays it
    hands out are read-only) and picklable.

    Attributes of a vocabulary loaded from GGUF:

    * ``pieces`` -- list of bytes, ``pieces[i]`` is what
      ``llama_token_to_piece(vocab, i, buf, n, 0, special=true)`` writes.
    * ``eog_ids`` -- sorted tuple of the ids ``llama_vocab_is_eog`` is true for.
    * ``eog_mask`` -- read-only numpy bool array, ``eog_mask[i] == is_eog(i)``.
    * ``token_attrs`` -- read-only numpy int32 array of ``llama_vocab_get_attr``
      values (the ``ATTR_*`` bits of this module), or None for a hand-made vocab.
    * ``info`` -- dict describing the tokenizer (model, pre-tokenizer, type,
      special ids, flags, ambiguity notes); empty for a hand-made vocab.
    """

    __slots__ = (
        "_pieces",
        "_eog_ids",
        "_eog_mask",
        "_attrs",
        "_special_text_to_id",
        "_piece_to_id",
        "_info",
        "_derived",
        "_tokenizer",
        "__weakref__",
    )

    def __init__(self, pieces: Sequence[bytes], eog_ids: Iterable[int], tokenize=None):
        pieces = list(pieces)
        if not pieces:
            raise ValueError("a vocabulary needs at least one token")
        for i, p in enumerate(pieces):
            if type(p) is not bytes:
                raise ValueError(
                    f"piece {i} is {type(p).__name__} ({p!r:.60}), not bytes; pieces are the raw bytes a token spells"
                )
        n = len(pieces)
        ids = set()
        for e in eog_ids:
            try:
                k = _index(e)
            except TypeError:
                raise ValueError(f"end-of-generation id {e!r} is not an integer") from None
            if isinstance(e, bool):
                raise ValueError(f"end-of-generation id {e!r} is a bool, not a token id")
            if not 0 <= k < n:
                raise ValueError(f"end-of-generation id {k} is out of range for a vocabulary of {n} tokens")
            ids.add(k)
        self._init(pieces, tuple(sorted(ids)), None, None, {})
        if tokenize is not None:
            self._tokenizer = _check_tokenizer(tokenize)

    def _init(self, pieces, eog_ids, attrs, special_text_to_id, info):
        self._pieces = pieces
        self._eog_ids = eog_ids
        mask = np.zeros(len(pieces), dtype=np.bool_)
        if eog_ids:
            mask[list(eog_ids)] = True
        mask.flags.writeable = False
        self._eog_mask = mask
        if attrs is not None:
            attrs = np.asarray(attrs, dtype=np.int32)
            attrs.flags.writeable = False
        self._attrs = attrs
        self._special_text_to_id = special_text_to_id
        self._piece_to_id = None
        self._info = info
        # Structures the engine derives from the pieces (decoded code points, the trie),
        # built on first use and kept with the vocabulary; never pickled.
        self._derived = {}
        self._tokenizer = None

    # -- pickling: arrays are rebuilt read-only; lookup caches are not stored.
    def __getstate__(self):
        return {
            "pieces": self._pieces,
            "eog_ids": self._eog_ids,
            "attrs": None if self._attrs is None else np.array(self._attrs),
            "special_text_to_id": self._special_text_to_id,
            "info": self._info,
        }

    def __setstate__(self, state):
        self._init(state["pieces"], tuple(state["eog_ids"]), state["attrs"], state["special_text_to_id"], state["info"])

    # -- basic accessors
    def __len__(self) -> int:
        return len(self._pieces)

    @property
    def n_vocab(self) -> int:
        return len(self._pieces)

    @property
    def pieces(self) -> list[bytes]:
        """``pieces[i]`` is token i's piece. Do not modify the list."""
        return self._pieces

    def piece(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` spells (``llama_token_to_piece``, special=true)."""
        if not 0 <= token_id < len(self._pieces):
            raise IndexError(f"token id {token_id} out of range for a vocabulary of {len(self._pieces)} tokens")
        return self._pieces[token_id]

    def is_eog(self, token_id: int) -> bool:
        """Whether the token ends generation (``llama_vocab_is_eog``); False out of range."""
        return 0 <= token_id < len(self._pieces) and bool(self._eog_mask[token_id])

    @property
    def eog_ids(self) -> tuple[int, ...]:
        return self._eog_ids

    @property
    def eog_mask(self) -> np.ndarray:
        return self._eog_mask

    @property
    def token_attrs(self) -> np.ndarray | None:
        return self._attrs

    @property
    def info(self) -> dict:
        return self._info

    def __repr__(self) -> str:
        src = self._info.get("path")
        where = f" from {os.path.basename(src)!r}" if src else ""
        return f"<Vocab{where}: {len(self._pieces)} tokens, {len(self._eog_ids)} end-of-generation>"

    def __eq__(self, other):
        if not isinstance(other, Vocab):
            return NotImplemented
        if self._pieces != other._pieces or self._eog_ids != other._eog_ids:
            return False
        if (self._attrs is None) != (other._attrs is None):
            return False
        return self._attrs is None or bool(np.array_equal(self._attrs, other._attrs))

    __hash__ = None  # type: ignore[assignment]  # equal vocabularies compare equal; they are not hashed

    # -- the tokenizer hook
    def with_tokenizer(self, tokenize) -> "Vocab":
        """This vocabulary with a tokenizer: ``tokenize(text: bytes, add_special: bool, parse_special: bool)
        -> list[int]``, llama.cpp's ``llama_tokenize`` signature.

        bankml does not tokenize; the few places where llama.cpp does -- the tails of DRY sequence breakers
        longer than one byte (``get_overlapping_token_sequences``) -- call this hook. Ready-made hooks:
        ``bankml.integrations.adapters.llama_cpp_tokenizer`` (libllama itself: exact) and
        ``bankml.integrations.adapters.hf_tokenizer`` (a Hugging Face tokenizer: exact where its tokenization of the text is
        llama.cpp's). The result shares the pieces and derived structures with this vocabulary; the hook is
        not pickled (an unpickled Vocab has none).
        """
        other = Vocab.__new__(Vocab)
        other._pieces = self._pieces
        other._eog_ids = self._eog_ids
        other._eog_mask = self._eog_mask
        other._attrs = self._attrs
        other._special_text_to_id = self._special_text_to_id
        other._piece_to_id = self._piece_to_id
        other._info = self._info
        other._derived = self._derived
        other._tokenizer = _check_tokenizer(tokenize) if tokenize is not None else None
        return other

    @property
    def has_tokenizer(self) -> bool:
        return self._tokenizer is not None

    def tokenize(self, text: bytes, add_special: bool = False, parse_special: bool = False) -> list[int]:
        """The token ids of ``text`` by the tokenizer hook (see :meth:`with_tokenizer`); ValueError without one,
        or when the hook returns something that is not a list of ids of this vocabulary."""
        if self._tokenizer is None:
            raise ValueError(
                "this Vocab has no tokenizer: bankml does not tokenize; give one with "
                "Vocab.with_tokenizer (see bankml.integrations.adapters.llama_cpp_tokenizer, hf_tokenizer)"
            )
        if isinstance(text, str):
            raise TypeError("tokenize takes bytes (UTF-8 text)")
        ids = self._tokenizer(bytes(text), bool(add_special), bool(parse_special))
        try:
            out = [_index(t) for t in ids]
        except TypeError:
            raise ValueError(f"the tokenizer hook returned {ids!r:.80}, not a list of token ids") from None
        n = len(self._pieces)
        for t in out:
            if not 0 <= t < n:
                raise ValueError(f"the tokenizer hook returned token id {t}, outside this vocabulary of {n} tokens")
        return out

    # -- GBNF token terminals
    def token_for_text(self, text: bytes) -> int | None:
        """The token a GBNF token terminal ``<...>`` names, or None.

        ``text`` is the whole terminal as written in the grammar, angle
        brackets included (e.g. ``b"<|im_end|>"``), which is what llama.cpp's
        grammar parser hands to ``llama_tokenize(..., add_special=false,
        parse_special=true)``; the parser accepts the terminal only if that
        yields exactly one token.

        For a vocabulary loaded from GGUF this returns the id of the special
        token (control, user-defined or unknown attribute -- the tokens the
        tokenizer matches verbatim when parse_special is true) whose text is
        exactly ``text``, else None.

        With a tokenizer hook (:meth:`with_tokenizer`) this is llama.cpp's own
        rule: the hook's ``tokenize(text, add_special=False,
        parse_special=True)``, and the id when that is exactly one token. With
        ``bankml.integrations.adapters.llama_cpp_tokenizer`` it is exact, so a text that the
        ordinary tokenizer (BPE merges, SentencePiece, ...) turns into one
        *normal* token (``<?>``, ``<>``, ``<()>`` on Qwen2 and Llama 3) names that
        token, as in libllama. Without a hook (bankml does not tokenize) such a
        text gives None: only special tokens resolve.

        For a hand-made vocabulary (no attributes) the lowest id whose piece is
        exactly ``text`` is returned, else None.
        """
        if isinstance(text, str):
            raise TypeError("token_for_text takes bytes (the UTF-8 text of the terminal)")
        text = bytes(text)
        if self._tokenizer is not None:
            ids = self.tokenize(text, False, True)
            return ids[0] if len(ids) == 1 else None
        if self._special_text_to_id is not None:
            return self._special_text_to_id.get(text)
        if self._piece_to_id is None:
            d: dict[bytes, int] = {}
            for i, p in enumerate(self._pieces):
                d.setdefault(p, i)
            self._piece_to_id = d
        return self._piece_to_id.get(text)

    # -- loading
    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "Vocab":
        """Load the vocabulary of a GGUF model file (weights are not read).

        Pieces, attributes and the end-of-generation set are computed the way
        the pinned llama.cpp's vocabulary loader computes them. Raises
        ValueError where that loader would refuse the file (unknown tokenizer
        or pre-tokenizer, wrongly typed keys, duplicate token texts, ...).
        """
        path = os.fspath(path)
        kv = _read_gguf_metadata(path, string_arrays=("tokenizer.ggml.tokens",))
        return _load_from_metadata(cls, _Meta(kv, path))


def _check_tokenizer(tokenize):
    if not callable(tokenize):
        raise TypeError(
            f"tokenize must be callable as tokenize(text: bytes, add_special, parse_special), "
            f"got {type(tokenize).__name__}"
        )
    return tokenize


def _load_from_metadata(cls, meta: _Meta) -> Vocab:
    path = meta.path
    model = meta.get_str("tokenizer.ggml.model", required=True)
    pre = meta.get_str("tokenizer.ggml.pre", default="")

    ids = dict.fromkeys(_SLOT_NAMES, _NULL)
    ids.update(bos=1, eos=2, unk=0)  # member defaults of llama_vocab::impl
    escape_ws = True
    add_space_prefix = False
    notes: list[str] = []

    if model in ("no_vocab", "none"):
        raise ValueError(f"{path!r}: tokenizer model {model!r} has no vocabulary")
    if model == "llama":
        vtype = _SPM
        ids.update(bos=1, eos=2, unk=0, sep=_NULL, pad=_NULL, mask=_NULL)
    elif model == "bert":
        vtype = _WPM
        ids.update(bos=101, eos=_NULL, unk=100, sep=102, pad=0, mask=103)
    elif model in ("gpt2", "hybriddna", "whitespace", "gemma4"):
        vtype = _BPE
        merges = meta.kv.get("tokenizer.ggml.merges")
        if merges is None:
            if not (model != "gemma4" and pre == "kimi-k2"):
                raise ValueError(f"{path!r}: cannot find tokenizer merges in model file")
        elif merges.type != _GGUF_ARRAY or merges.elem_type != _GGUF_STRING:
            raise ValueError(f"{path!r}: invalid gguf type for tokenizer.ggml.merges")
        if model == "gemma4":
            ids.update(bos=_NULL, eos=_NULL, unk=_NULL, sep=_NULL, pad=_NULL, mask=_NULL)
            pre = "gemma4"
        else:
            ids.update(bos=11, eos=11, unk=_NULL, sep=_NULL, pad=_NULL, mask=_NULL)
    elif model == "t5":
        vtype = _UGM
        ids.update(bos=_NULL, eos=1, unk=2, sep=_NULL, pad=0, mask=_NULL)
    elif model == "rwkv":
        vtype = _RWKV
        ids.update(bos=_NULL, eos=_NULL, unk=_NULL, sep=_NULL, pad=_NULL)
    elif model == "test":
        vtype = _TEST
        ids.update(bos=_NULL, eos=_NULL, unk=_NULL, sep=_NULL, pad=_NULL, mask=_NULL)
    elif model == "plamo2":
        vtype = _PLAMO2
        ids.update(bos=1, eos=2, unk=0, sep=_NULL, pad=3, mask=_NULL)
    else:
        raise ValueError(f"{path!r}: unknown tokenizer: {model!r}")

    if vtype == _BPE:
        add_space_prefix = False
        escape_ws = False
        if pre == "":
            warnings.warn(f"{path}: missing pre-tokenizer type, llama.cpp uses 'default'", stacklevel=3)
        elif pre not in _BPE_PRE_KNOWN:
            raise ValueError(f"{path!r}: unknown pre-tokenizer type: {pre!r}")
        if pre in _BPE_PRE_ESCAPES_WHITESPACE:
            escape_ws = True
        if pre in _BPE_PRE_NO_BOS:
            ids["bos"] = _NULL
    elif vtype == _SPM:
        add_space_prefix = True
    elif vtype in (_WPM, _RWKV):
        add_space_prefix = False
    add_space_prefix = meta.get("tokenizer.ggml.add_space_prefix", _GGUF_BOOL, add_space_prefix)
    remove_extra_ws = meta.get("tokenizer.ggml.remove_extra_whitespaces", _GGUF_BOOL, False)

    tok = meta.kv.get("tokenizer.ggml.tokens")
    if tok is None:
        raise ValueError(f"{path!r}: cannot find tokenizer vocab in model file")
    if tok.type != _GGUF_ARRAY or tok.elem_type != _GGUF_STRING:
        raise ValueError(f"{path!r}: invalid gguf type for tokenizer.ggml.tokens")
    keys: list[bytes] = tok.value
    n = len(keys)

    scores = meta.array("tokenizer.ggml.scores", (_GGUF_INT32, _GGUF_FLOAT32))
    if scores is not None and scores.count < n:
        raise ValueError(f"{path!r}: Index out of array bounds for scores ({scores.count} < {n})")
    tt = meta.array("tokenizer.ggml.token_type", (_GGUF_INT32,))
    if tt is not None and tt.count < n:
        raise ValueError(f"{path!r}: Index out of array bounds for toktypes ({tt.count} < {n})")

    # token texts: an empty text is replaced, as the loader does
    for i in range(n):
        if not keys[i]:
            keys[i] = b"[EMPTY_%d]" % i
    token_to_id = {k: i for i, k in enumerate(keys)}
    if len(token_to_id) != n:
        dup = n - len(token_to_id)
        raise ValueError(f"{path!r}: {dup} duplicate token text(s); llama.cpp aborts on such a vocabulary")

    if tt is not None:
        types = tt.value[:n].astype(np.int64)
        lut = np.zeros(8, dtype=np.int32)
        for k, a in _TOKEN_TYPE_TO_ATTR.items():
            lut[k] = a
        valid = (types >= 0) & (types <= 6)
        attrs = np.where(valid, lut[np.clip(types, 0, 7)], ATTR_UNDEFINED).astype(np.int32)
    else:
        attrs = np.full(n, ATTR_NORMAL, dtype=np.int32)

    texts = keys  # id -> text; differs from the map keys only for hybriddna
    if model == "hybriddna":
        oov = token_to_id.get(b"<oov>")
        if oov is not None:
            texts = list(keys)
            for i in range(oov + 1, n):
                kmer = texts[i]
                if len(kmer) > len(_DNA_KMER_MARKER) and kmer.endswith(_DNA_KMER_MARKER):
                    texts[i] = kmer[: -len(_DNA_KMER_MARKER)]

    # special token ids: defaults out of range are disabled; GGUF values in range win
    for key, slot in _SPECIAL_ID_KEYS:
        if ids[slot] >= 0 and ids[slot] >= n:
            ids[slot] = _NULL
        v = meta.get(key, _GGUF_UINT32)
        if v is None:
            continue
        if v < n:
            ids[slot] = v
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_sep_token"):
        meta.get(key, _GGUF_BOOL)  # type check only

    # text heuristics for unset slots
    rank = None  # position of each text in the loader's hash-map iteration order
    for slot, cands in _HEURISTIC_SLOTS:
        if ids[slot] != _NULL:
            continue
        found = [token_to_id[c.encode()] for c in cands if c.encode() in token_to_id]
        if not found:
            continue
        if len(found) > 1:
            if rank is None:
                rank = np.empty(n, dtype=np.int64)
                rank[_libstdcxx_iteration_order(keys)] = np.arange(n)
            found.sort(key=lambda i: rank[i])
            notes.append(
                f"{slot}: candidates {[keys[i].decode('utf-8', 'replace') for i in found]}; "
                "chose the first in libstdc++ unordered_map order"
            )
        tid = found[0]
        ids[slot] = tid
        attrs[tid] |= ATTR_CONTROL

    # control tokens whose text says "unused"
    for control in np.flatnonzero(attrs & ATTR_CONTROL):
        if b"unused" in keys[control].split(b"\0", 1)[0]:
            attrs[control] |= ATTR_UNUSED

    # end-of-generation set
    eog = set()
    for slot in ("fim_pad", "fim_rep", "fim_sep"):
        if ids[slot] != _NULL:
            eog.add(ids[slot])
    for text in _EOG_TEXTS:
        found_id = token_to_id.get(text)
        if found_id is not None:
            eog.add(found_id)
            attrs[found_id] |= ATTR_CONTROL
    for text in _ALWAYS_USER_DEFINED:
        found_id = token_to_id.get(text)
        if found_id is not None:
            attrs[found_id] = ATTR_USER_DEFINED
    for slot in ("eos", "eot", "eom"):
        if ids[slot] != _NULL:
            eog.add(ids[slot])

    # "<|end|>" is not an end token when "<|return|>"/"<|call|>" (gpt-oss) or
    # "<|calls|>"/"<|flush|>" (solar-open) are
    in_range = [t for t in sorted(eog) if 0 <= t < n]
    has = {"return": False, "call": False, "flush": False, "end": False}
    end_id = _NULL
    for t in in_range:
        x: bytes = texts[t]
        if x == b"<|return|>":
            has["return"] = True
        elif x in (b"<|call|>", b"<|calls|>"):
            has["call"] = True
        elif x == b"<|flush|>":
            has["flush"] = True
        elif x == b"<|end|>":
            has["end"] = True
            end_id = t
    if (has["return"] and has["call"] and has["end"]) or (has["call"] and has["flush"] and has["end"]):
        eog.discard(end_id)
        attrs[end_id] = ATTR_USER_DEFINED

    # "</s>" is a normal token in vocabularies that also have "<|tool_response>" or "<|plamo:eos|>"
    normal_s_marker = False
    s_id = _NULL
    for t in sorted(eog):
        if not 0 <= t < n:
            continue
        x = texts[t]
        if x in (b"<|tool_response>", b"<|plamo:eos|>"):
            normal_s_marker = True
        elif x == b"</s>":
            s_id = t
    if normal_s_marker and s_id != _NULL:
        eog.discard(s_id)
        attrs[s_id] = ATTR_NORMAL

    eog_ids = tuple(sorted(t for t in eog if 0 <= t < n))
    if len(eog_ids) != len(eog):
        notes.append("end-of-generation ids out of range were dropped")

    # special tokens matched verbatim by the tokenizer (cache_special_tokens)
    special_ids = np.flatnonzero(attrs & _SPECIAL_ATTRS)
    special_text_to_id = {texts[i]: int(i) for i in special_ids}

    # pieces
    pieces = _render_pieces(vtype, escape_ws, texts, attrs)

    # per-model strip attributes (after the piece cache, as in the loader)
    model_name = meta.get_str("general.name", default="") or ""
    model_name_l = model_name.encode("utf-8", "surrogateescape").lower().decode("utf-8", "surrogateescape")
    pre_again = meta.get_str("tokenizer.ggml.pre", default="") or ""
    arch = meta.get_str("general.architecture", default="") or ""
    if any(s in pre_again for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        mask_id = token_to_id.get(b"<mask>")
        if mask_id is not None:
            attrs[mask_id] |= ATTR_LSTRIP
    elif any(s in model_name_l for s in ("phi-3", "phi3")):
        for special in special_ids:
            attrs[special] |= ATTR_RSTRIP
        for name, on in ((b"</s>", True), (b"<unk>", False), (b"<s>", False), (b"<|endoftext|>", False)):
            named_id = token_to_id.get(name)
            if named_id is None:
                raise ValueError(f"{path!r}: phi-3 vocabulary lacks the token {name!r} (llama.cpp throws)")
            if on:
                attrs[named_id] |= ATTR_RSTRIP
            else:
                attrs[named_id] &= ~ATTR_RSTRIP
    elif "modern-bert" in model_name_l:
        mask_id = token_to_id.get(b"[MASK]")
        if mask_id is not None:
            attrs[mask_id] |= ATTR_LSTRIP

    info = {
        "path": path,
        "tokenizer_model": model,
        "tokenizer_pre": pre,
        "type": vtype,
        "escape_whitespaces": escape_ws,
        "add_space_prefix": bool(add_space_prefix),
        "remove_extra_whitespaces": bool(remove_extra_ws),
        "special_ids": {k: (None if v == _NULL else int(v)) for k, v in ids.items()},
        "notes": notes,
    }
    v = cls.__new__(cls)
    v._init(pieces, eog_ids, attrs, special_text_to_id, info)
    return v


def _render_pieces(vtype: str, escape_ws: bool, texts: list[bytes], attrs: np.ndarray) -> list[bytes]:
    n = len(texts)
    if vtype == _BPE and not escape_ws:
        # the hot path: byte-level BPE; normal tokens are decoded in one batch
        special = (attrs & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) != 0
        normal = ~special & ((attrs & ATTR_NORMAL) != 0)
        byte = ~special & ~normal & ((attrs & ATTR_BYTE) != 0)
        pieces = [b""] * n
        for i in np.flatnonzero(special).tolist():
            pieces[i] = texts[i]
        for i in np.flatnonzero(byte).tolist():
            pieces[i] = bytes((_token_to_byte(texts[i]),))
        idx = np.flatnonzero(normal).tolist()
        for i, piece in zip(idx, _decode_byte_level_batch([texts[i] for i in idx])):
            pieces[i] = piece
        return pieces
    attr_list = attrs.tolist()
    return [_render_piece(vtype, escape_ws, i, texts[i], attr_list[i]) for i in range(n)]


# byte -> decoded byte for single-byte alphabet characters, -1 elsewhere
_ASCII_LUT = np.full(256, -1, dtype=np.int16)
# code point (< 0x180) -> decoded byte for two-byte alphabet characters, -1 elsewhere
_CP2_LUT = np.full(0x180, -1, dtype=np.int16)
for _cp, _b in _CP_TO_BYTE.items():
    if _cp < 0x80:
        _ASCII_LUT[_cp] = _b
    else:
        _CP2_LUT[_cp] = _b
del _cp, _b


def _decode_byte_level_batch(texts: list[bytes]) -> list[bytes]:
    """:func:`_decode_byte_level` for many texts at once.

    Byte-level alphabet characters are U+0021..U+0143: one UTF-8 byte
    (0x21-0x7E) or two (lead 0xC2-0xC5). A text made only of those is decoded
    with numpy; any other text goes through the exact per-text path.
    """
    n = len(texts)
    if n == 0:
        return []
    lens = np.fromiter(map(len, texts), dtype=np.int64, count=n)
    b = np.frombuffer(b"".join(texts), dtype=np.uint8)
    total = b.size
    tok_start = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1], out=tok_start[1:])
    # last byte of each token: a two-byte character must not cross it
    is_last = np.zeros(total, dtype=bool)
    is_last[tok_start + lens - 1] = True
    nxt = np.empty(total, dtype=np.uint8)
    nxt[:-1] = b[1:]
    nxt[-1] = 0
    lead = (b >= 0xC2) & (b <= 0xC5) & ((nxt & 0xC0) == 0x80) & ~is_last
    cp = ((b.astype(np.int32) & 0x1F) << 6) | (nxt.astype(np.int32) & 0x3F)
    dec2 = np.where(lead, _CP2_LUT[np.where(lead, cp, 0)], -1)
    lead_ok = dec2 >= 0
    cont_ok = np.zeros(total, dtype=bool)
    cont_ok[1:] = lead_ok[:-1]
    dec1 = _ASCII_LUT[b]
    ascii_ok = dec1 >= 0
    ok = ascii_ok | lead_ok | cont_ok
    bad_per_tok = np.add.reduceat((~ok).astype(np.int64), tok_start)
    out_val = np.where(lead_ok, dec2, dec1).astype(np.uint8)
    keep = ascii_ok | lead_ok
    out_len = np.add.reduceat(keep.astype(np.int64), tok_start)
    ob = out_val[keep].tobytes()
    ends = np.cumsum(out_len).tolist()
    starts = [0] + ends[:-1]
    bad = bad_per_tok.tolist()
    return [ob[s:e] if not bd else _decode_byte_level(t) for s, e, bd, t in zip(starts, ends, bad, texts)]
