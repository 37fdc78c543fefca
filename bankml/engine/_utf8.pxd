# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
# Copyright (c) 2023-2026 The ggml authors: the partial-UTF-8 decoder of
# src/llama-grammar.cpp (`decode_utf8` with a `llama_partial_utf8` start state).
#
# Inline helpers only; the engine (_grammar.pyx) owns every buffer they write to.
from libc.stdint cimport int32_t, uint8_t, uint32_t
from libcpp.vector cimport vector


cdef struct partial_utf8:
    uint32_t value      # bits decoded so far, unshifted
    int32_t n_remain    # continuation bytes still expected; -1 marks an invalid sequence


# Byte count of a sequence by its lead byte's high nibble; 0 marks a continuation
# byte, which cannot start a sequence.
cdef inline int32_t utf8_sequence_length(uint8_t first_byte) noexcept nogil:
    cdef uint8_t highbits = first_byte >> 4
    if highbits < 8:
        return 1
    if highbits < 12:
        return 0
    if highbits < 14:
        return 2
    if highbits == 14:
        return 3
    return 4


cdef inline partial_utf8 decode_utf8(const uint8_t* src, Py_ssize_t size, partial_utf8 start,
                                     vector[uint32_t]& code_points) noexcept nogil:
    """Append the code points of src[0:size] to code_points, followed by a 0 terminator.

    The decode stops at the first NUL byte, as llama.cpp's C-string walk does.
    An invalid sequence leaves exactly [0] in the output (earlier code points of
    the same piece are dropped) and returns n_remain -1, matching llama.cpp.
    """
    cdef Py_ssize_t pos = 0
    cdef uint32_t value = start.value
    cdef int32_t n_remain = start.n_remain
    cdef Py_ssize_t first_index = code_points.size()
    cdef uint8_t next_byte
    cdef partial_utf8 result

    # Finish a sequence the previous token left open.
    while pos < size and src[pos] != 0 and n_remain > 0:
        next_byte = src[pos]
        if (next_byte >> 6) != 2:
            code_points.push_back(0)
            result.value = 0
            result.n_remain = -1
            return result
        value = (value << 6) + (next_byte & 0x3F)
        pos += 1
        n_remain -= 1
    if start.n_remain > 0 and n_remain == 0:
        code_points.push_back(value)

    while pos < size and src[pos] != 0:
        n_remain = utf8_sequence_length(src[pos]) - 1
        if n_remain < 0:
            code_points.resize(first_index)
            code_points.push_back(0)
            result.value = 0
            result.n_remain = n_remain
            return result
        value = src[pos] & ((1 << (7 - n_remain)) - 1)
        pos += 1
        while pos < size and src[pos] != 0 and n_remain > 0:
            value = (value << 6) + (src[pos] & 0x3F)
            pos += 1
            n_remain -= 1
        if n_remain == 0:
            code_points.push_back(value)
    code_points.push_back(0)
    result.value = value
    result.n_remain = n_remain
    return result
