"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama-server's native ``POST /completion``: the body read as ``/v1/completions`` reads it (the same native
fields, ``bankml.serve.openai.read_completion``), and the answer and stream written as llama-server's
``to_json_non_oaicompat`` writers write them (``tools/server/server-task.cpp``): ``content``, ``tokens``,
``stop_type``, ``stopping_word``, ``generation_settings``, ``timings`` (``server_slot_stats::to_json``) and
``completion_probabilities``.

Must not import: ``bankml.serve.runtime``, ``app``.
"""

import json
import math

from bankml.sampling import logprobs
from bankml.serve.endpoints import task_params
from bankml.serve.openai import read_completion

__all__ = [
    "COMPLETION",
    "completion_json",
    "generation_settings",
    "partial_json",
    "partial_timings",
    "progress_json",
    "stats_json",
    "read_native",
    "sse",
    "stop_type",
    "timings_json",
]

COMPLETION = "/completion"


def read_native(raw, context=None):
    """The Request of a native ``/completion`` body."""
    return read_completion(raw, context, COMPLETION)


def stop_type(result):
    """stop_type_to_str: ``eos``, ``word`` (a stop string), ``limit`` (the token limit, the context, the time
    budget)."""
    if result.finish_reason == "length":
        return "limit"
    return "word" if result.stopping_word else "eos"


def timings_json(result):
    """server_slot_stats::to_json of a finished generation (``cache_n``: the prompt's tokens reused from the slot's
    cache, ``prompt_n`` the ones evaluated). The first generated token comes from the prompt's logits: the
    generation's rate counts the steps after it."""
    t = result.timings
    return stats_json(t["prompt_n"], t["prompt_ms"], t["predicted_n"], t["predicted_ms"], t.get("cache_n", 0))


def partial_timings(job, event):
    """server_slot_stats::to_json while a generation runs (timings_per_token): the prompt's evaluation and the
    tokens so far (a prompt-progress event: the prompt's evaluation once it is done, no token)."""
    n_gen = 0 if event.progress is not None else event.index
    done = event.progress is None or event.progress[0] == len(job.prompt_tokens)
    prompt_ms = job.prompt_ms if done else 0.0
    n_cached = getattr(job, "n_cached", 0)
    n_prompt = len(job.prompt_tokens) - n_cached if prompt_ms else 0
    return stats_json(n_prompt, prompt_ms, n_gen, event.predicted_ms, n_cached)


def progress_json(event, n_prompt):
    """result_prompt_progress::to_json of a prompt-progress event (``cache``: the prompt's tokens reused from the
    slot's cache, ``processed`` the ones in the cache so far, those included)."""
    processed, time_ms, n_cached = (*event.progress, 0)[:3]
    return {"total": n_prompt, "cache": n_cached, "processed": processed, "time_ms": time_ms}


def stats_json(n_prompt, prompt_ms, n_gen, gen_ms, n_cached=0):
    """server_slot_stats::to_json of these counts and times (``n_prompt`` the prompt's tokens evaluated,
    ``n_cached`` those reused from the cache)."""
    steps = max(n_gen - 1, 0)
    return {
        "cache_n": n_cached,
        "prompt_n": n_prompt,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / n_prompt if n_prompt else 0.0,
        "prompt_per_second": 1e3 / prompt_ms * n_prompt if prompt_ms > 0 else 0.0,
        "predicted_n": n_gen,
        "predicted_ms": gen_ms,
        "predicted_per_token_ms": gen_ms / steps if steps else 0.0,
        "predicted_per_second": 1e3 / gen_ms * steps if gen_ms > 0 else 0.0,
    }


_AFTER = {
    "dry_penalty_last_n": ("dry_sequence_breakers",),
    "adaptive_decay": ("stop",),
    "stream": ("logit_bias",),
    "min_keep": ("grammar", "grammar_lazy", "grammar_triggers", "preserved_tokens"),
}


def generation_settings(job):
    """task_params::to_json() (not only its metrics, as ``/slots`` and ``/props`` show them): the sampler settings
    with the DRY breakers, the stop strings, the logit biases, the grammar and its lazy triggers, in its order."""
    short = task_params(job)
    d = job.params.as_dict() if job.params is not None else {}
    extra = {
        "dry_sequence_breakers": list(d.get("dry_sequence_breakers", ())),
        "stop": list(getattr(job, "stop", ())),
        # a -inf bias (false, ignore_eos' biases) is JSON's null, as nlohmann writes a non-finite number
        "logit_bias": [
            {"bias": bias if math.isfinite(bias) else None, "token": token} for token, bias in d.get("logit_bias", ())
        ],
        "grammar": getattr(job, "grammar_text", None) or "",
        "grammar_lazy": False,
        "grammar_triggers": [],
        "preserved_tokens": [],
    }
    out = {}
    for key, value in short.items():
        out[key] = value
        for name in _AFTER.get(key, ()):  # the fields to_json(true) leaves out, in to_json()'s places
            out[name] = extra[name]
    # a raw prompt has no chat parser: its reasoning format is the server's (llama-server's params_from_json_cmpl)
    out["reasoning_format"] = getattr(getattr(job, "model", None), "reasoning_format", None) or out["reasoning_format"]
    return out


def completion_json(result, job, model, prompt, probs=None, return_tokens=False, index=0):
    """to_json_non_oaicompat of the final result. ``prompt``: the prompt's tokens detokenized with their special
    text; ``probs``: the records to send (None: none asked for, or streamed). Streamed, llama-server's final result
    carries no content or tokens (the partial results did)."""
    streamed = bool(job.stream_requested)
    n_prompt, n_gen = len(result.prompt_tokens), len(result.tokens)
    out = {
        "index": index,
        "content": "" if streamed else result.text,
        # slot.generated_tokens: kept only with return_tokens
        "tokens": list(result.tokens) if return_tokens and not streamed else [],
        "id_slot": getattr(job, "slot_index", 0),
        "stop": True,
        "model": model,
        "tokens_predicted": n_gen,
        "tokens_evaluated": n_prompt,
        "generation_settings": generation_settings(job),
        "prompt": prompt,
        "has_new_line": "\n" in result.text,
        "truncated": False,
        "stop_type": stop_type(result),
        "stopping_word": result.stopping_word,
        "tokens_cached": n_prompt + max(n_gen - 1, 0),  # the last token is sampled, never decoded
        "timings": timings_json(result),
    }
    if not streamed and probs:
        out["completion_probabilities"] = logprobs.probs_to_json(probs, job.probs.post_sampling)
    return out


def partial_json(event, job, n_prompt, timings=False, index=0):
    """to_json_non_oaicompat of a partial result: the token's text and id (none in a prompt-progress event, which
    carries ``prompt_progress``), its ``timings`` with timings_per_token."""
    progress = event.progress is not None
    out = {
        "index": index,
        "content": event.text,
        "tokens": [] if progress else [event.token],
        "stop": False,
        "id_slot": getattr(job, "slot_index", 0),
        "tokens_predicted": 0 if progress else event.index,
        "tokens_evaluated": n_prompt,
    }
    if timings:
        out["timings"] = partial_timings(job, event)
    if progress:
        out["prompt_progress"] = progress_json(event, n_prompt)
    record = event.probs
    if record is not None and record.top:
        out["completion_probabilities"] = logprobs.probs_to_json([record], job.probs.post_sampling)
    return out


def sse(obj):
    """format_oai_sse of one result (no ``[DONE]`` follows a native stream)."""
    return ("data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode("utf-8")
