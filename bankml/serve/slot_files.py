"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama-server's slot actions (``--slot-save-path DIR``, ``POST /slots/:id?action=save|restore|erase``:
``tools/server/server-context.cpp``'s ``post_slots``, ``handle_slots_*`` and the ``SERVER_TASK_TYPE_SLOT_*``
tasks; ``server-common.cpp``'s ``server_tokens::serialize``/``deserialize``; ``common/common.cpp``'s
``fs_validate_filename``). A slot's KV cache and the tokens it holds (``bankml.serve.contexts.Slot``) are written
with libllama's ``llama_state_seq_save_file``, the tokens in llama-server's packed form (a ``LLAMA_TOKEN_NULL``
marker, the format version 1, the token count and tokens, no media), and read back with
``llama_state_seq_load_file`` (a plain token list, as older llama-servers wrote, is read too), so that the next
request on the restored slot reuses its prefix as llama-server's does. Each action waits until its slot is free,
as llama-server defers the task; the answers and errors are llama-server's.
"""

import ctypes
import os
import time

from bankml.serve.contexts import ModelError, slot_of_id

__all__ = [
    "SlotActionError",
    "erase",
    "pack_tokens",
    "restore",
    "save",
    "slot_index",
    "unpack_tokens",
    "valid_filename",
]

TOKEN_NULL = -1  # LLAMA_TOKEN_NULL
STATE_VERSION = 1  # SERVER_TOKENS_STATE_VERSION


class SlotActionError(Exception):
    """An action llama-server answers with an error object: ``message``, ``code``, ``kind``."""

    def __init__(self, message, code=400, kind="invalid_request_error"):
        super().__init__(message)
        self.message, self.code, self.kind = message, code, kind


def _forbidden(c):
    return (
        c <= 0x1F
        or c == 0x7F
        or 0x80 <= c <= 0x9F
        or c in (0xFF0E, 0x2215, 0x2216, 0xFFFD, 0xFEFF)
        or 0xD800 <= c <= 0xDFFF
        or chr(c) in ':*?"<>|/\\'
    )


def valid_filename(name):
    """fs_validate_filename(name) (no subdirectories): a name of at most 255 bytes, valid UTF-8, without control
    characters, path separators, the characters Windows forbids, their look-alikes, a leading or trailing space,
    a trailing dot or ``..`` anywhere."""
    if not isinstance(name, str) or not name:
        return False
    try:
        data = name.encode("utf-8")  # a lone surrogate (invalid UTF-8) cannot be encoded
    except UnicodeEncodeError:
        return False
    if len(data) > 255 or any(_forbidden(ord(ch)) for ch in name):
        return False
    if name[0] == " " or name[-1] in " .":
        return False
    return ".." not in name and name != "."


def slot_index(text, n_slots):
    """``(id_slot, index)``: the path's slot id read as ``std::stoi`` reads it (leading blanks, a sign, the digits
    before any other character) and the slot it names (``bankml.serve.contexts.slot_of_id``: any id names one).
    SlotActionError ``Invalid slot ID`` for a text stoi refuses (no digits, outside a 32-bit int)."""
    s = text.lstrip(" \t\n\v\f\r")
    sign = ""
    if s and s[0] in "+-":
        sign, s = s[0], s[1:]
    digits = len(s) - len(s.lstrip("0123456789"))
    if digits == 0:
        raise SlotActionError("Invalid slot ID")
    value = int(sign + s[:digits])
    if not -(2**31) <= value < 2**31:
        raise SlotActionError("Invalid slot ID")
    return value, slot_of_id(value, n_slots)


def pack_tokens(tokens):
    """server_tokens::serialize of a text-only slot: the words written as the state file's tokens."""
    return [TOKEN_NULL, STATE_VERSION, len(tokens), *tokens, 0]


def _u32(words, pos):
    if pos >= len(words):
        raise ValueError("Unexpected end of server tokens state")
    return words[pos] & 0xFFFFFFFF


def unpack_tokens(words):
    """server_tokens::deserialize without a multimodal projector: the tokens of a packed state, or the words
    themselves for a plain token list. ValueError with llama-server's message."""
    if not words or words[0] != TOKEN_NULL:
        return list(words)
    if _u32(words, 1) != STATE_VERSION:
        raise ValueError("Unsupported server tokens state version")
    n = _u32(words, 2)
    if n > len(words) - 3:
        raise ValueError("Unexpected end of server tokens state")
    tokens = list(words[3 : 3 + n])
    n_media = _u32(words, 3 + n)
    if n_media > len(words) - 4 - n:
        raise ValueError("Unexpected end of server tokens state")
    if n_media:
        raise ValueError("Cannot restore media tokens without an mmproj")
    if len(words) > 4 + n:
        raise ValueError("Trailing data in server tokens state")
    return tokens


def _held(model, index, timeout):
    try:
        return model.slots.acquire(timeout, index=index)
    except ModelError:
        raise SlotActionError("no free slot within the request's time budget", 503, "unavailable_error") from None


def save(model, index, id_slot, filename, path, timeout=None):
    """``action=save``: slot ``index``'s tokens and KV cache written to ``path``."""
    slot = _held(model, index, timeout)
    try:
        start = time.perf_counter()
        L = model._L
        words = pack_tokens(slot.tokens)
        arr = (L.llama_token * len(words))(*words)
        n_bytes = L.llama_state_seq_save_file(slot.ctx, os.fsencode(path), 0, arr, len(words))
        if n_bytes == 0:
            raise SlotActionError("Unable to save slot", 500, "server_error")
        elapsed = (time.perf_counter() - start) * 1000.0
        return {
            "id_slot": id_slot,
            "filename": filename,
            "n_saved": len(slot.tokens),
            "n_written": int(n_bytes),
            "timings": {"save_ms": elapsed},
        }
    finally:
        model.slots.release(slot)


def _load(model, slot, path):
    """The tokens of the state file at ``path``, its KV cache loaded into ``slot`` (ValueError with llama-server's
    message)."""
    L = model._L
    count = ctypes.c_size_t(0)
    n_read = L.llama_state_seq_load_file(slot.ctx, os.fsencode(path), 0, None, 0, ctypes.byref(count))
    if n_read:
        words = (L.llama_token * max(1, count.value))()
        n_read = L.llama_state_seq_load_file(slot.ctx, os.fsencode(path), 0, words, len(words), ctypes.byref(count))
    if not n_read:
        raise ValueError("No available space in KV cache or invalid slot save file")
    tokens = unpack_tokens(list(words[: count.value]))
    if len(tokens) > model.n_ctx_slot:
        raise ValueError("Restored prompt does not fit in the slot context")
    if any(not 0 <= t < model.n_vocab for t in tokens):
        raise ValueError("Invalid tokens in slot save file")
    return tokens, int(n_read)


def restore(model, index, id_slot, filename, path, timeout=None):
    """``action=restore``: slot ``index``'s tokens and KV cache read from ``path``; on failure the slot is left
    empty, as llama-server's ``prompt_clear``."""
    slot = _held(model, index, timeout)
    try:
        start = time.perf_counter()
        try:
            tokens, n_read = _load(model, slot, path)
        except ValueError as e:
            slot.clear()
            raise SlotActionError(f"Unable to restore slot: {e}") from None
        slot.tokens = tokens
        slot.n_past = len(tokens)
        elapsed = (time.perf_counter() - start) * 1000.0
        return {
            "id_slot": id_slot,
            "filename": filename,
            "n_restored": len(tokens),
            "n_read": n_read,
            "timings": {"restore_ms": elapsed},
        }
    finally:
        model.slots.release(slot)


def erase(model, index, id_slot, timeout=None):
    """``action=erase``: slot ``index``'s cache emptied."""
    slot = _held(model, index, timeout)
    try:
        n = len(slot.tokens)
        slot.clear()
        return {"id_slot": id_slot, "n_erased": n}
    finally:
        model.slots.release(slot)
