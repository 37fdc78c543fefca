# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
"""Token log-probabilities as the pinned llama-server computes and shapes them.

Owns reading the request fields (``logprobs`` / ``top_logprobs`` of the OpenAI endpoints, llama-server's
native ``n_probs`` and ``post_sampling_probs``), the per-token record llama-server keeps
(``completion_token_output``: the drawn token, the text sent for it, its probability and the top ``n_probs``
candidates, from ``populate_token_probs`` in ``tools/server/server-context.cpp``), and its JSON
(``probs_vector_to_json`` in ``server-task.cpp``). It does not sample or stream: the runtime calls
``token_record`` after each draw, the server places the JSON in its chunks.

The numbers:

- pre-sampling (the default): ``get_token_probabilities`` over the model's raw logits (no logit bias, no
  sampler, no grammar: a token the grammar forbids keeps its probability), ``bankml.sampling._sampler.token_probabilities``
  reproduces its std::partial_sort and its float32 softmax order bit for bit;
- ``post_sampling_probs``: the candidates the sampler chain left in its last draw (the grammar redraw's when
  the grammar rejected the first draw), sorted by probability with std::sort; the top list stops at the first
  probability 0;
- ``logprob`` is ``logf`` of the float probability, the lowest float (-3.4028234663852886e+38) for 0.
"""

import numbers

from bankml.errors import RequestError, json_type_name
from bankml.sampling._sampler import token_logarithm, token_probabilities

__all__ = [
    "MAX_PROB_ENTRIES",
    "ProbRequest",
    "probs_to_json",
    "read_request",
    "token_record",
    "trim_stop_word",
    "validate_utf8",
]

# a request whose answer could carry more top entries than this (tokens x n_probs) is refused: llama-server
# would build it (hundreds of MB of JSON); bankml keeps memory bounded. 20 per token fits a 50,000-token context
MAX_PROB_ENTRIES = 1_000_000


class ProbRequest:
    """``n_probs`` (> 0: records are kept) and ``post_sampling`` of one request."""

    __slots__ = ("n_probs", "post_sampling")

    def __init__(self, n_probs=0, post_sampling=False):
        self.n_probs = int(n_probs)
        self.post_sampling = bool(post_sampling)

    def __bool__(self):
        return self.n_probs > 0

    def __repr__(self):
        return f"ProbRequest(n_probs={self.n_probs}, post_sampling={self.post_sampling})"


def _get_int32(value):
    """nlohmann's get<int32_t>: integers wrap, floats truncate (x86-64's cvttsd2si out of range), booleans are
    0 and 1; None for the other JSON types (a type_error)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return (int(value) + 2**31) % 2**32 - 2**31
    if isinstance(value, numbers.Real):
        f = float(value)
        if f != f or f in (float("inf"), float("-inf")) or not -(2**31) <= int(f) < 2**31:
            return -(2**31)
        return int(f)
    return None


def read_request(body, endpoint):
    """The ProbRequest llama-server derives from a request body (RequestError where it answers 400).

    /v1/chat/completions (``oaicompat_chat_params_parse``): ``logprobs`` true sets ``n_probs`` to
    ``top_logprobs`` (20 when absent), overriding a native ``n_probs``; ``top_logprobs`` without it is refused.
    Then, for every endpoint, the native field (``server-schema.cpp``): ``n_probs``, or its alias ``logprobs``
    when ``n_probs`` is absent or null (so ``/v1/completions``'s ``logprobs: k`` is ``n_probs: k``)."""
    fields = dict(body)
    if endpoint == "/v1/chat/completions":
        logprobs = body.get("logprobs")
        if logprobs is True:  # json_value(body, "logprobs", false): a non-boolean reads as false
            tools = body.get("tools")
            if isinstance(tools, list) and tools and body.get("stream") is True:
                raise RequestError("logprobs is not supported with tools + stream")
            top = body.get("top_logprobs")
            n = 20 if top is None else _get_int32(top)
            fields["n_probs"] = 20 if n is None else n  # json_value's type_error: the default
        elif body.get("top_logprobs") is not None:
            raise RequestError("top_logprobs requires logprobs to be set to true")
    n_probs = 0
    for name in ("n_probs", "logprobs"):
        value = fields.get(name)
        if value is not None:
            n = _get_int32(value)
            if n is None:
                raise RequestError(
                    f"Field '{name}': [json.exception.type_error.302] type must be number, but is "
                    f"{json_type_name(value)}"
                )
            n_probs = n
            break
    post = fields.get("post_sampling_probs")
    if post is not None and not isinstance(post, bool):
        raise RequestError(
            "Field 'post_sampling_probs': [json.exception.type_error.302] type must be boolean, "
            f"but is {json_type_name(post)}"
        )
    return ProbRequest(max(n_probs, 0), bool(post))


def check_size(probs, n_vocab, max_tokens, n_ctx):
    """RequestError when the answer's top entries could exceed MAX_PROB_ENTRIES."""
    if not probs:
        return
    per_token = min(probs.n_probs, n_vocab)
    n_tokens = max_tokens if max_tokens is not None and max_tokens >= 0 else n_ctx
    if per_token * max(n_tokens, 1) > MAX_PROB_ENTRIES:
        raise RequestError(
            f"the log-probabilities asked for ({per_token} per token, up to {n_tokens} tokens) exceed "
            f"bankml's limit of {MAX_PROB_ENTRIES} entries per answer: lower top_logprobs / n_probs "
            "or max_tokens"
        )


def token_record(probs, token, logits, sampler, piece):
    """populate_token_probs for a drawn ``token``: ``[token, prob, [(id, piece bytes, p), ...]]`` (the text sent
    is set later, by ``Record.text``). ``logits`` are the model's raw float32 logits of this step (pre-sampling),
    ``sampler`` the Sampler that drew the token (post-sampling), ``piece(id)`` the bytes of a token as llama-server
    renders the top candidates (common_token_to_piece with special=false)."""
    n = probs.n_probs
    prob = 1.0  # llama-server's default, kept when the token is not among the candidates
    top = []
    if probs.post_sampling:
        ids, ps = sampler.candidates()
        hit = (ids == token).nonzero()[0]
        if hit.size:
            prob = float(ps[hit[0]])
        for i in range(min(len(ids), n)):
            if ps[i] == 0.0:  # llama-server filters zero probabilities (some samplers leave them)
                break
            top.append((int(ids[i]), piece(int(ids[i])), float(ps[i])))
    else:
        ids, ps = token_probabilities(logits, n)
        hit = (ids == token).nonzero()[0]
        if hit.size:
            prob = float(ps[hit[0]])
        for i in range(min(len(ids), n)):
            top.append((int(ids[i]), piece(int(ids[i])), float(ps[i])))
    return Record(token, prob, top)


class Record:
    """completion_token_output: the drawn token, the bytes llama-server sent for it (``text``), its probability
    and the top candidates ``[(id, piece, p)]``."""

    __slots__ = ("token", "prob", "top", "text")

    def __init__(self, token, prob, top, text=b""):
        self.token, self.prob, self.top, self.text = token, prob, top, text


def validate_utf8(data):
    """llama-server's validate_utf8: the length of ``data`` without a multi-byte character cut at its end."""
    n = len(data)
    for i in range(1, min(4, n) + 1):
        c = data[n - i]
        if c & 0xE0 == 0xC0:
            if i < 2:
                return n - i
        elif c & 0xF0 == 0xE0:
            if i < 3:
                return n - i
        elif c & 0xF8 == 0xF0:
            if i < 4:
                return n - i
    return n


def _text(data):
    # txt.resize(validate_utf8(txt)), then nlohmann's dump with error_handler_t::replace
    return bytes(data[: validate_utf8(data)]).decode("utf-8", "replace")


def _value(p, post_sampling):
    return p if post_sampling else token_logarithm(p)


def probs_to_json(records, post_sampling):
    """completion_token_output::probs_vector_to_json: the ``content`` list of an OpenAI ``logprobs`` object (and
    llama-server's ``completion_probabilities``)."""
    key, top_key = ("prob", "top_probs") if post_sampling else ("logprob", "top_logprobs")
    out = []
    for r in records:
        out.append(
            {
                "id": r.token,
                "token": _text(r.text),
                "bytes": list(r.text),
                key: _value(r.prob, post_sampling),
                top_key: [
                    {"id": i, "token": _text(piece), "bytes": list(piece), key: _value(p, post_sampling)}
                    for i, piece, p in r.top
                ],
            }
        )
    return out


def trim_stop_word(records, stopping_word, tokenize):
    """send_final_response without streaming, stopped by a stop word: the last ``len(common_tokenize(word,
    false))`` records dropped (``tokenize(text) -> ids`` with add_special and parse_special false)."""
    if not stopping_word:
        return list(records)
    n = min(len(records), len(tokenize(stopping_word)))
    return list(records[: len(records) - n])
