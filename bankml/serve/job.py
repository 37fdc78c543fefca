"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

One generation of bankml's runtime: the ``Job`` a ``bankml.serve.runtime.Model`` prepares (everything compiled
and tokenized before a slot is taken) and runs on a slot, token by token, as llama-server's slot does
(``tools/server/server-context.cpp``: ``process_token``, ``find_stopping_strings``; ``common/sampling.cpp``: the
chain, the grammar's check-then-redraw, the generation prompt's prefill), with what it gives: a ``Result``, or
``Event`` s while it streams. ``ContextSizeError`` and ``Cancelled`` are the requests it refuses.
"""

import threading
import time
from dataclasses import dataclass, field
from typing import Any, List

from bankml.chat.answers import ChatStream, answer_message
from bankml.chat.chat_peg import ChatParseError
from bankml.chat.constraint import RequestError
from bankml.chat.template import (
    lazy_grammar_triggers,
    preserved_token_ids,
)
from bankml.engine._grammar import Grammar
from bankml.sampling._sampler import Sampler
from bankml.sampling.logprobs import ProbRequest, token_record
from bankml.sampling.params import SamplerParams
from bankml.sampling.reasoning_budget import ReasoningBudget
from bankml.serve.contexts import ModelError, common_prefix


class ContextSizeError(RequestError):
    """The prompt does not fit in a slot's context: llama-server's ``exceed_context_size_error`` (a 400), whose
    error object also gives the prompt's tokens (``n_prompt_tokens``, None when the prompt was refused on its
    size in bytes, before it was tokenized) and the slot's context (``n_ctx``)."""

    def __init__(self, message, n_prompt_tokens=None, n_ctx=None):
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class Cancelled(RequestError):
    """The job was cancelled (its client went away) while it was being prepared."""


def check_cancel(cancel):
    if cancel is not None and cancel.is_set():
        raise Cancelled("the request was cancelled")


@dataclass
class Result:
    """One finished generation."""

    tokens: List[int]  # generated token ids (an end-of-generation token included)
    text: str  # the raw generated text (stop string removed), as llama-server's
    content: str  # the content rule's answer (the JSON value in JSON mode)
    finish_reason: str  # "stop", "length", or "tool_calls" (a stop with tool calls)
    prompt_tokens: List[int]
    message: dict = field(default_factory=dict)  # the assistant message (chat jobs)
    stopping_word: str = ""
    timings: dict = field(default_factory=dict)
    probs: list = field(default_factory=list)  # bankml.sampling.logprobs records (llama-server's generated_token_probs)


@dataclass
class Event:
    """One step of a streamed generation: the token, the text it releases and the content delta; ``diffs``
    the message deltas llama-server streams for it (``[(reasoning_delta, content_delta)]``, one field each,
    common_chat_msg_diff; a job with tools gives ``msg_diffs_with_tools``' 6-tuples ``(reasoning_delta,
    content_delta, tool_call_index (-1: none), name, arguments_delta, id)``), and ``reasoning`` the reasoning
    delta."""

    token: int
    text: str
    content: str
    diffs: list = field(default_factory=list)
    reasoning: str = ""
    # with log-probabilities asked for (Job.probs): whether llama-server sent a partial result for this token
    # (its text was complete UTF-8), its bankml.sampling.logprobs record, how many of ``diffs`` that partial carried (the
    # rest are the final parse's) and the token's 1-based index
    partial: bool = False
    probs: Any = None
    n_partial_diffs: int = 0
    index: int = 0
    # the generation's time so far (ms, since its first token), for llama-server's timings_per_token
    predicted_ms: float = 0.0
    # a prompt-progress event (return_progress, streamed): ``(tokens in the cache, ms, tokens reused from the
    # cache)``; no token then (``token`` -1)
    progress: Any = None


def _utf8_complete(data):
    """Length of the longest prefix of data that does not end inside a UTF-8 sequence (validate_utf8)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        c = data[n - back]
        if c & 0xC0 == 0x80:
            continue
        need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else 4 if c & 0xF8 == 0xF0 else 1
        return n - back if need > back else n
    return n


def _partial_stop(text, word):
    """string_find_partial_stop: where a suffix of text that is a proper prefix of word begins, or -1."""
    if not text or not word:
        return -1
    last = text[-1]
    for i in range(len(word) - 1, -1, -1):
        if word[i] == last:
            cur = word[: i + 1]
            if text.endswith(cur):
                return len(text) - len(cur)
    return -1


class Job:
    """One prepared generation: prompt tokens, sampler (with its grammar), limits. Preparing checks and
    compiles everything, so a bad schema, grammar or field fails before any token is computed."""

    def __init__(
        self,
        model,
        prompt,
        grammar_text,
        prefill,
        params,
        max_tokens,
        stop,
        chat,
        constraint,
        thinking=False,
        parser=None,
        cancel=None,
        deadline=None,
        grammar_prefill=True,
        reasoning_budget=None,
        chat_prompt=None,
        grammar_triggers=None,
        preserved=(),
        tools=False,
        continuing=False,
    ):
        self.model = model
        # whether the client streams the answer: llama-server parses partial answers only when it streams, and
        # a non-streamed answer's message comes from its final parse alone (set by the server per request;
        # None: run() is non-streamed, stream() streamed)
        self.stream_requested = None
        self.return_progress = False  # llama-server's return_progress: prompt-progress events first (streamed)
        # llama-server's cache_prompt: reuse the prefix the slot's cache shares with the prompt (the model's default)
        self.cache_prompt = model.cache_prompt
        self.slot_request = None  # the slot a request's id_slot names (None: the pool's choice)
        self.n_cache_reuse = model.cache_reuse  # llama-server's n_cache_reuse: chunks shifted into place (0: none)
        self.n_cached = 0  # the prompt's tokens reused from the slot's cache, once evaluated
        self.prompt_ms = 0.0  # the prompt's evaluation, once done
        self.chat_prompt = chat_prompt  # bankml.chat.template's ChatPrompt of a chat job (None for raw prompts)
        self.parser = parser  # bankml.chat.template's parser; False: the raw text is the content
        self.prompt = prompt
        self.grammar_text = grammar_text
        self.constraint = constraint
        self.chat = chat
        self.thinking = thinking
        self.params = params if params is not None else SamplerParams()
        self.max_tokens = int(max_tokens) if max_tokens is not None else -1
        self.stop = [s for s in (stop or ()) if s]
        self.cancelled = cancel if cancel is not None else threading.Event()
        self.deadline = deadline
        check_cancel(cancel)
        # the cheap bound first: a prompt that cannot fit is refused without tokenizing it (libllama's
        # tokenizer is quadratic in the special tokens of the text); a prompt of token ids and strings
        # (/completion's) counts its strings' bytes
        texts = [prompt] if isinstance(prompt, str) else [p for p in prompt if isinstance(p, str)]
        n_bytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
        if n_bytes > model.max_prompt_bytes():
            raise ContextSizeError(
                f"request ({n_bytes} bytes of prompt: more than {model.n_ctx_slot} tokens) exceeds "
                f"the available context size ({model.n_ctx_slot} tokens), try increasing it",
                n_ctx=model.n_ctx_slot,
            )
        if isinstance(prompt, str):
            self.prompt_tokens = model.tokenize_prompt(prompt, cancel)
        else:
            self.prompt_tokens = model.tokenize_mixed(prompt, cancel)
        if not self.prompt_tokens:
            raise RequestError("the prompt is empty")
        if len(self.prompt_tokens) >= model.n_ctx_slot:
            # llama-server's message (server-context.cpp, the n_tokens >= n_ctx check)
            raise ContextSizeError(
                f"request ({len(self.prompt_tokens)} tokens) exceeds the available context size "
                f"({model.n_ctx_slot} tokens), try increasing it",
                len(self.prompt_tokens),
                model.n_ctx_slot,
            )
        # server-schema.cpp: the preserved tokens that are one token of the vocabulary (their text is sent with
        # the special pieces), then the triggers: a trigger word that is one token becomes a token trigger
        tokenize = lambda text: model.tokenize(text, False, True)  # noqa: E731
        self.preserved = preserved_token_ids(preserved, tokenize)
        trigger_tokens, trigger_patterns = [], []
        if grammar_triggers is not None:
            try:
                trigger_tokens, trigger_patterns = lazy_grammar_triggers(grammar_triggers, self.preserved, tokenize)
            except ValueError as e:
                raise RequestError(str(e)) from None
        self.tools = bool(tools)
        grammar = None
        if grammar_text is not None:
            check_cancel(cancel)
            rules = model.rules(grammar_text)
            check_cancel(cancel)
            if grammar_triggers is not None:
                grammar = Grammar(
                    rules, model.vocab, trigger_tokens=trigger_tokens, trigger_patterns=trigger_patterns, lazy=True
                )
            else:
                grammar = Grammar(rules, model.vocab)
        self.grammar = grammar
        self.initial_message = None
        if continuing and parser:
            # task_result_state: a message continued at the request's ``continue_final_message`` starts from the
            # parse of no output, so that the prefill is not sent again
            try:
                self.initial_message = parser.parse(b"", partial=True)
            except ChatParseError as e:
                raise RequestError(str(e)) from None
        budget = None
        if reasoning_budget is not None:
            # common_sampler_init: the budget over the thinking tags' tokens; the forced sequence is the budget
            # message then the first end tag (server-schema.cpp's reasoning_budget_message handler)
            start_tag, end_tags, message, n = reasoning_budget
            start = model.tokenize(start_tag, False, True)
            ends = [model.tokenize(t, False, True) for t in end_tags]
            forced = (model.tokenize(message, False, True) if message else []) + (ends[0] if ends else [])
            if start and ends:
                budget = ReasoningBudget(model.vocab, [start], ends, forced, 2**31 - 1 if n < 0 else n)
        self.reasoning_budget = budget
        self.sampler = Sampler(self.params, model.sampler_vocab, grammar, reasoning_budget=budget)
        # llama-server's init_sampler: the prompt enters the penalty/DRY histories (not the grammar)
        self.sampler.accept_prompt(self.prompt_tokens)
        self.prefill_tokens = []
        if prefill and ((grammar is not None and grammar_prefill) or budget is not None):
            self.prefill_tokens = tokenize_prefill(model, prefill)
            if grammar is not None and grammar_prefill:
                self.sampler.prefill(self.prefill_tokens)  # the grammar and the budget
            else:
                for token in self.prefill_tokens:
                    budget.accept(token)
        if grammar is not None and grammar.is_dead():
            # llama.cpp's sampler aborts on such a grammar at the first token; known now, it is a 400
            raise RequestError("the grammar allows no token of the model's vocabulary: no answer can match it")
        check_cancel(cancel)
        self.result = None
        # token log-probabilities (bankml.sampling.logprobs.ProbRequest): none unless the caller sets them
        self.probs = ProbRequest()

    def cancel(self):
        """Stop after the current token (a client went away); the slot is freed."""
        self.cancelled.set()

    def run(self, slot=None):
        """Generate to the end; the Result (the answer parsed as a non-streamed one, unless ``stream_requested``)."""
        for _ in self._stream(slot, bool(self.stream_requested)):
            pass
        return self.result

    def stream(self, slot=None):
        """Generate, yielding an Event per token; ``self.result`` holds the Result once exhausted. The answer is
        parsed as a streamed one (its partial parses), unless ``stream_requested`` is False: the server runs
        every request through here and says which it is."""
        return self._stream(slot, self.stream_requested is not False)

    def _stream(self, slot, streamed):
        model = self.model
        own = slot is None
        if own:
            timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            try:
                slot = model.acquire(timeout, self.cancelled, self.prompt_tokens, self.slot_request)
            except ModelError:
                raise ModelError("no free slot within the request's time budget") from None
            if slot is None:  # cancelled while waiting: nothing computed
                self._cancelled_result()
                return
        self.slot_index = slot.index  # which slot served it (llama-server's /slots)
        try:
            yield from self._generate(slot, streamed)
        finally:
            if own:
                model.release(slot)

    def _generate(self, slot, streamed):
        model = self.model
        vocab = model.vocab
        sampler = self.sampler
        content = None
        if self.parser and streamed:
            # llama-server parses partial answers only when it streams them, and a partial parse it refuses (or
            # a message diff it cannot make) ends the stream with an error
            content = ChatStream(self.parser, tools=self.tools, initial=self.initial_message, strict=True)
        json_mode = self.chat and self.constraint.is_json
        if self.cancelled.is_set():
            self._cancelled_result()
            return
        t0 = time.perf_counter()
        n_cached = self._reuse_cache(slot)
        logits = None
        if self.return_progress:  # llama-server's progress before the prompt is evaluated, and after each batch
            yield Event(-1, "", "", progress=(n_cached, 0, n_cached))
            for start in range(n_cached, len(self.prompt_tokens), model.n_batch):
                logits = slot.decode(self.prompt_tokens[start : start + model.n_batch])
                self.prompt_ms = (time.perf_counter() - t0) * 1e3  # the prompt's time so far (timings_per_token)
                yield Event(-1, "", "", progress=(slot.n_past, int(self.prompt_ms), n_cached))
        else:
            logits = slot.decode(self.prompt_tokens[n_cached:])
        t_prompt = time.perf_counter() - t0
        self.prompt_ms = t_prompt * 1e3
        tokens, generated = [], bytearray()
        records = []
        n_sent = 0
        finish, stopping_word = "length", ""
        t_sample = t_decode = 0.0
        redraws0 = sampler.n_redraws if hasattr(sampler, "n_redraws") else 0
        n_predict = self.max_tokens
        t_start = time.perf_counter()
        while True:
            if self.cancelled.is_set():
                finish = "cancelled"
                break
            ts = time.perf_counter()
            token = sampler.sample(logits)
            record = token_record(self.probs, token, logits, sampler, model.piece) if self.probs else None
            sampler.accept(token)
            t_sample += time.perf_counter() - ts
            tokens.append(token)
            partial = False
            eog = vocab.is_eog(token)
            piece = b"" if eog else model.piece(token, token in self.preserved)
            generated += piece
            has_next = True
            send = b""
            if _utf8_complete(generated) == len(generated):
                text = generated.decode("utf-8", "replace")
                pos = min(n_sent, len(text))
                test = text[pos:]
                stop_pos = self._find_stop(test, len(piece.decode("utf-8", "replace")), True)
                if stop_pos is not None:
                    word, at = stop_pos
                    text = text[: pos + at]
                    generated = bytearray(text.encode("utf-8"))
                    stopping_word = word
                    finish = "stop"
                    has_next = False
                    send_text = text[pos:]
                elif not eog and self._find_stop(test, 0, False) is not None:
                    send_text = ""
                else:
                    send_text = text[pos:]
                n_sent += len(send_text)
                send = send_text
                partial = True  # slot.add_token: the record is kept, and sent when streaming
                if record is not None:
                    record.text = send.encode("utf-8")
                    records.append(record)
            else:
                send = ""
            if has_next and n_predict >= 0 and len(tokens) >= n_predict:
                finish, has_next = "length", False
            if eog:
                finish, has_next = "stop", False
            if has_next and slot.n_past + 1 >= model.n_ctx_slot:
                finish, has_next = "length", False
            if has_next and self.deadline is not None and time.monotonic() > self.deadline:
                # the request's time budget (llama-server's t_max_predict_ms stops the same way)
                finish, has_next = "length", False
            delta, diffs = "", []
            n_partial_diffs = 0
            if content is not None:
                if send:
                    content.diffs = []
                    delta = content.push(send)
                    diffs = list(content.diffs)
                n_partial_diffs = len(diffs)
                if not has_next and finish != "cancelled":
                    # the final, non-partial parse: llama-server sends its diffs before the finish chunk
                    try:
                        content.diffs = []
                        delta += content.finish()
                        diffs += content.diffs
                    except ValueError:
                        pass
            else:
                delta = send
                diffs = [("", send)] if send else []
                n_partial_diffs = len(diffs)
            # llama-server sends a partial result for every token whose text is whole UTF-8 (send_partial_response),
            # empty text included: the chunks of a stream follow them
            if send or delta or diffs or not has_next or partial:
                yield Event(
                    token,
                    send,
                    delta,
                    diffs,
                    "".join(d[0] for d in diffs),
                    partial,
                    record if partial else None,
                    n_partial_diffs,
                    len(tokens),
                    (time.perf_counter() - t_start) * 1e3,
                )
            if not has_next:
                break
            td = time.perf_counter()
            logits = slot.decode([token])
            t_decode += time.perf_counter() - td
        t_end = time.perf_counter()
        text = generated.decode("utf-8", "replace")
        message = {}
        if self.parser and finish != "cancelled":
            # llama-server parses partial answers only when it streams: a non-streamed answer's message comes
            # from its final parse alone (a broken call is then answered as text, not as the call a partial
            # parse on the way took it for); the bytes are parsed, as llama-server parses its generated text: an
            # unfinished UTF-8 character at the end (cut by the token limit) is not part of the message
            message = answer_message(self.parser, bytes(generated), self.tools, self.initial_message, content)
            answer = message["content"]
            if message.get("tool_calls") and finish == "stop":
                finish = "tool_calls"  # to_json_oaicompat_chat: a stop (eos or word) with calls
        else:
            answer = text
            if self.chat:
                message = {"role": "assistant", "content": text}
        n = len(tokens)
        self.result = Result(
            tokens=tokens,
            text=text,
            content=answer,
            finish_reason=finish,
            prompt_tokens=self.prompt_tokens,
            message=message,
            stopping_word=stopping_word,
            probs=records,
            timings={
                # llama-server's n_prompt_tokens_processed and n_prompt_tokens_cache: evaluated, reused
                "prompt_n": len(self.prompt_tokens) - self.n_cached,
                "cache_n": self.n_cached,
                "prompt_ms": t_prompt * 1e3,
                "predicted_n": n,
                "predicted_ms": (t_end - t_start) * 1e3,
                "predicted_per_second": n / (t_end - t_start) if t_end > t_start else 0.0,
                "decode_ms": t_decode * 1e3,
                "sample_ms": t_sample * 1e3,
                "sample_us_per_token": t_sample * 1e6 / n if n else 0.0,
                "redraws": sampler.n_redraws - redraws0,
                "json_mode": json_mode,
            },
        )

    def _reuse_cache(self, slot):
        """The prompt's tokens taken from the slot's cache, the rest of the cache dropped: with ``cache_prompt``, the
        longest prefix the cache shares with the prompt, less its last token when the whole prompt is cached (the
        first draw needs that token's logits, as llama-server evaluates at least one token); else none."""
        n = 0
        if self.cache_prompt:
            n = common_prefix(slot.tokens, self.prompt_tokens)
            if self.n_cache_reuse > 0 and self.model._L.llama_memory_can_shift(slot.mem):
                n = slot.reuse_chunks(self.prompt_tokens, n, self.n_cache_reuse)
            if n == len(self.prompt_tokens):
                n -= 1
            n = slot.keep_first(n)
        else:
            slot.clear()
        self.n_cached = n
        return n

    def _cancelled_result(self):
        self.result = Result(
            tokens=[],
            text="",
            content="",
            finish_reason="cancelled",
            prompt_tokens=self.prompt_tokens,
            timings={
                "prompt_n": len(self.prompt_tokens),
                "cache_n": 0,
                "prompt_ms": 0.0,
                "predicted_n": 0,
                "predicted_ms": 0.0,
                "predicted_per_second": 0.0,
                "decode_ms": 0.0,
                "sample_ms": 0.0,
                "sample_us_per_token": 0.0,
                "redraws": 0,
                "json_mode": False,
            },
        )

    def _find_stop(self, text, last_size, full):
        best = None
        for word in self.stop:
            if full:
                frm = max(len(text) - (len(word) + last_size), 0)
                at = text.find(word, frm)
            else:
                at = _partial_stop(text, word)
            if at >= 0 and (best is None or at < best[1]):
                best = (word, at)
        return best


def tokenize_prefill(model, text):
    """The generation prompt's tokens the grammar accepts first (common_sampler_init)."""
    tokens = model.tokenize(text, False, True)
    out = []
    for i, t in enumerate(tokens):
        piece = model.vocab.piece(t)
        if i == 0 and piece[:1].isspace() and not text[:1].isspace():
            continue
        out.append(t)
    return out
