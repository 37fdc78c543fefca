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


class _StopText:
    """A job's generated text as llama-server's slot holds it (``generated_text``, ``n_sent_text``): the bytes so
    far, how many of its characters were sent, and the stop string that ended it (``stopping_word``). process_token's
    text half: a token's text is sent once the bytes are whole UTF-8 (validate_utf8), cut at a stop string
    (find_stopping_strings), and held back while a stop string may begin in it."""

    __slots__ = ("stop", "generated", "n_sent", "stopping_word")

    def __init__(self, stop):
        self.stop = stop
        self.generated = bytearray()
        self.n_sent = 0
        self.stopping_word = ""

    def push(self, piece, eog):
        """The text a token's ``piece`` releases, or None while the bytes end inside a UTF-8 character (``eog``: the
        token ends the generation, so no stop string is awaited)."""
        generated = self.generated
        generated += piece
        if _utf8_complete(generated) != len(generated):
            return None
        text = generated.decode("utf-8", "replace")
        pos = min(self.n_sent, len(text))
        test = text[pos:]
        stop_pos = self.find(test, len(piece.decode("utf-8", "replace")), True)
        if stop_pos is not None:
            word, at = stop_pos
            text = text[: pos + at]
            self.generated = bytearray(text.encode("utf-8"))
            self.stopping_word = word
            send = text[pos:]
        elif not eog and self.find(test, 0, False) is not None:
            send = ""
        else:
            send = text[pos:]
        self.n_sent += len(send)
        return send

    def find(self, text, last_size, full):
        """``(word, position)`` of the first stop string in ``text`` (``full``: whole, in its last ``last_size``
        characters and the word's length before them; else a suffix that begins one), or None."""
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
        self.prompt_tokens = self._tokenize_prompt(prompt, cancel)
        self.preserved, triggers = self._special_tokens(preserved, grammar_triggers)
        self.tools = bool(tools)
        self.grammar = self._compile_grammar(grammar_text, triggers, cancel)
        self.initial_message = None
        if continuing and parser:
            # task_result_state: a message continued at the request's ``continue_final_message`` starts from the
            # parse of no output, so that the prefill is not sent again
            try:
                self.initial_message = parser.parse(b"", partial=True)
            except ChatParseError as e:
                raise RequestError(str(e)) from None
        self.reasoning_budget = self._budget(reasoning_budget)
        self._prepare_sampler(prefill, grammar_prefill)
        check_cancel(cancel)
        self.result = None
        # token log-probabilities (bankml.sampling.logprobs.ProbRequest): none unless the caller sets them
        self.probs = ProbRequest()

    def _tokenize_prompt(self, prompt, cancel):
        """The prompt's tokens; ContextSizeError when they cannot fit in a slot's context."""
        model = self.model
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
            tokens = model.tokenize_prompt(prompt, cancel)
        else:
            tokens = model.tokenize_mixed(prompt, cancel)
        if not tokens:
            raise RequestError("the prompt is empty")
        if len(tokens) >= model.n_ctx_slot:
            # llama-server's message (server-context.cpp, the n_tokens >= n_ctx check)
            raise ContextSizeError(
                f"request ({len(tokens)} tokens) exceeds the available context size "
                f"({model.n_ctx_slot} tokens), try increasing it",
                len(tokens),
                model.n_ctx_slot,
            )
        return tokens

    def _special_tokens(self, preserved, grammar_triggers):
        """``(preserved token ids, lazy triggers)``, as server-schema.cpp reads them: the preserved tokens that are
        one token of the vocabulary (their text is sent with the special pieces), then the triggers, a trigger word
        that is one token becoming a token trigger (``(tokens, patterns)``; None: the grammar is not lazy)."""
        tokenize = lambda text: self.model.tokenize(text, False, True)  # noqa: E731
        ids = preserved_token_ids(preserved, tokenize)
        if grammar_triggers is None:
            return ids, None
        try:
            return ids, lazy_grammar_triggers(grammar_triggers, ids, tokenize)
        except ValueError as e:
            raise RequestError(str(e)) from None

    def _compile_grammar(self, grammar_text, triggers, cancel):
        """The job's Grammar (None without a grammar): the rules parsed once per text (``Model.rules``), lazy with
        ``triggers``."""
        if grammar_text is None:
            return None
        check_cancel(cancel)
        rules = self.model.rules(grammar_text)
        check_cancel(cancel)
        if triggers is None:
            return Grammar(rules, self.model.vocab)
        tokens, patterns = triggers
        return Grammar(rules, self.model.vocab, trigger_tokens=tokens, trigger_patterns=patterns, lazy=True)

    def _budget(self, reasoning_budget):
        """common_sampler_init: the ReasoningBudget over the thinking tags' tokens (None without one); the forced
        sequence is the budget message then the first end tag (server-schema.cpp's reasoning_budget_message)."""
        if reasoning_budget is None:
            return None
        model = self.model
        start_tag, end_tags, message, n = reasoning_budget
        start = model.tokenize(start_tag, False, True)
        ends = [model.tokenize(t, False, True) for t in end_tags]
        forced = (model.tokenize(message, False, True) if message else []) + (ends[0] if ends else [])
        if start and ends:
            return ReasoningBudget(model.vocab, [start], ends, forced, 2**31 - 1 if n < 0 else n)
        return None

    def _prepare_sampler(self, prefill, grammar_prefill):
        """The sampler, with the prompt in its histories and the generation prompt ``prefill`` accepted by the
        grammar (``grammar_prefill``) or the reasoning budget; RequestError for a grammar that allows no token."""
        grammar, budget = self.grammar, self.reasoning_budget
        self.sampler = Sampler(self.params, self.model.sampler_vocab, grammar, reasoning_budget=budget)
        # llama-server's init_sampler: the prompt enters the penalty/DRY histories (not the grammar)
        self.sampler.accept_prompt(self.prompt_tokens)
        self.prefill_tokens = []
        if prefill and ((grammar is not None and grammar_prefill) or budget is not None):
            self.prefill_tokens = tokenize_prefill(self.model, prefill)
            if grammar is not None and grammar_prefill:
                self.sampler.prefill(self.prefill_tokens)  # the grammar and the budget
            else:
                for token in self.prefill_tokens:
                    budget.accept(token)
        if grammar is not None and grammar.is_dead():
            # llama.cpp's sampler aborts on such a grammar at the first token; known now, it is a 400
            raise RequestError("the grammar allows no token of the model's vocabulary: no answer can match it")

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
        if self.cancelled.is_set():
            self._cancelled_result()
            return
        logits, t_prompt = yield from self._evaluate_prompt(slot)
        tokens, records, text = [], [], _StopText(self.stop)
        finish = "length"
        t_sample = t_decode = 0.0
        redraws0 = sampler.n_redraws if hasattr(sampler, "n_redraws") else 0
        n_predict, n_ctx_slot, deadline, preserved = self.max_tokens, model.n_ctx_slot, self.deadline, self.preserved
        t_start = time.perf_counter()
        while True:  # llama-server's process_token, one token a turn
            if self.cancelled.is_set():
                finish = "cancelled"
                break
            ts = time.perf_counter()
            token = sampler.sample(logits)
            record = token_record(self.probs, token, logits, sampler, model.piece) if self.probs else None
            sampler.accept(token)
            t_sample += time.perf_counter() - ts
            tokens.append(token)
            eog = vocab.is_eog(token)
            send = text.push(b"" if eog else model.piece(token, token in preserved), eog)
            partial = send is not None  # slot.add_token: the record is kept, and sent when streaming
            if not partial:
                send = ""
            elif record is not None:
                record.text = send.encode("utf-8")
                records.append(record)
            if text.stopping_word or eog:
                finish, has_next = "stop", False
            elif (
                (n_predict >= 0 and len(tokens) >= n_predict)
                or slot.n_past + 1 >= n_ctx_slot
                # the request's time budget (llama-server's t_max_predict_ms stops the same way)
                or (deadline is not None and time.monotonic() > deadline)
            ):
                finish, has_next = "length", False
            else:
                has_next = True
            delta, diffs, n_partial_diffs = _message_deltas(content, send, not has_next)
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
        seconds = (t_prompt, time.perf_counter() - t_start, t_decode, t_sample)
        self._finish(tokens, text, finish, records, content, seconds, sampler.n_redraws - redraws0)

    def _evaluate_prompt(self, slot):
        """``(logits, seconds)`` of the prompt's evaluation, the tokens the slot's cache holds reused
        (``_reuse_cache``); with ``return_progress``, llama-server's progress events before the prompt is evaluated
        and after each batch."""
        model, tokens = self.model, self.prompt_tokens
        t0 = time.perf_counter()
        n_cached = self._reuse_cache(slot)
        logits = None
        if self.return_progress:
            yield Event(-1, "", "", progress=(n_cached, 0, n_cached))
            for start in range(n_cached, len(tokens), model.n_batch):
                logits = slot.decode(tokens[start : start + model.n_batch])
                self.prompt_ms = (time.perf_counter() - t0) * 1e3  # the prompt's time so far (timings_per_token)
                yield Event(-1, "", "", progress=(slot.n_past, int(self.prompt_ms), n_cached))
        else:
            logits = slot.decode(tokens[n_cached:])
        t_prompt = time.perf_counter() - t0
        self.prompt_ms = t_prompt * 1e3
        return logits, t_prompt

    def _finish(self, tokens, stop_text, finish, records, content, seconds, redraws):
        """The job's Result (llama-server's send_final_response): the text, the message of a chat job, the timings
        (``seconds``: the prompt's, the generation's, its decodes' and its draws')."""
        generated = bytes(stop_text.generated)
        text = generated.decode("utf-8", "replace")
        t_prompt, t_predicted, t_decode, t_sample = seconds
        message = {}
        if self.parser and finish != "cancelled":
            # llama-server parses partial answers only when it streams: a non-streamed answer's message comes
            # from its final parse alone (a broken call is then answered as text, not as the call a partial
            # parse on the way took it for); the bytes are parsed, as llama-server parses its generated text: an
            # unfinished UTF-8 character at the end (cut by the token limit) is not part of the message
            message = answer_message(self.parser, generated, self.tools, self.initial_message, content)
            answer = message["content"]
            if message.get("tool_calls") and finish == "stop":
                finish = "tool_calls"  # to_json_oaicompat_chat: a stop (eos or word) with calls
        else:
            answer = text
            if self.chat:
                message = {"role": "assistant", "content": text}
        self.result = Result(
            tokens=tokens,
            text=text,
            content=answer,
            finish_reason=finish,
            prompt_tokens=self.prompt_tokens,
            message=message,
            stopping_word=stop_text.stopping_word,
            probs=records,
            timings=_timings(
                len(self.prompt_tokens) - self.n_cached,
                self.n_cached,
                t_prompt,
                len(tokens),
                t_predicted,
                t_decode,
                t_sample,
                redraws,
                self.chat and self.constraint.is_json,
            ),
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
            timings=_timings(len(self.prompt_tokens), 0, 0.0, 0, 0.0, 0.0, 0.0, 0, False),
        )


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


def _message_deltas(content, send, final):
    """``(content delta, message diffs, how many of them the partial parse gave)`` of one token's ``send``: the
    chat stream's partial parse (``content``, a ChatStream; None: the raw text is the content), and after the
    last token (``final``) the final, non-partial parse, whose diffs llama-server sends before the finish chunk."""
    if content is None:
        diffs = [("", send)] if send else []
        return send, diffs, len(diffs)
    delta, diffs = "", []
    if send:
        content.diffs = []
        delta = content.push(send)
        diffs = list(content.diffs)
    n_partial_diffs = len(diffs)
    if final:
        try:
            content.diffs = []
            delta += content.finish()
            diffs += content.diffs
        except ValueError:
            pass
    return delta, diffs, n_partial_diffs


def _timings(prompt_n, cache_n, prompt_s, predicted_n, predicted_s, decode_s, sample_s, redraws, json_mode):
    """A Result's timings (llama-server's, and bankml's own: the decode's and the sampler's time, the redraws)."""
    return {
        # llama-server's n_prompt_tokens_processed and n_prompt_tokens_cache: evaluated, reused
        "prompt_n": prompt_n,
        "cache_n": cache_n,
        "prompt_ms": prompt_s * 1e3,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_s * 1e3,
        "predicted_per_second": predicted_n / predicted_s if predicted_s > 0 else 0.0,
        "decode_ms": decode_s * 1e3,
        "sample_ms": sample_s * 1e3,
        "sample_us_per_token": sample_s * 1e6 / predicted_n if predicted_n else 0.0,
        "redraws": redraws,
        "json_mode": json_mode,
    }
