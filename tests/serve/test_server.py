"""`bankml serve` end to end: a real server process on a loopback port, driven by the official clients.

Two server processes for the module: ``server`` (``--parallel 2``) answers the functional checks;
``server1`` (``--parallel 1``, a 16,384-token context) is kept busy with a generation that never ends by itself
(``root ::= "a" root`` has no end, so only the context size stops it: ~16,000 tokens), which makes
"answered without a slot" and "the slot was freed" observable without timing anything: a request that
needed the slot would wait far past the generous client timeouts.

The answers are checked the way a client of llama-server (``openai``) or Ollama (``ollama``) would: field
names, object types, finish reasons, usage counts equal to the token counts, and the constraint itself
(JSON parses, validates against its schema with ``jsonschema``, text matches its GBNF grammar).
"""

import contextlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import pytest

from bankml import Grammar, GrammarError, Rules, Vocab

from ..oracle_support import smollm2_path
from .serve_support import LazyModule, running_serve

ollama = LazyModule("ollama")
openai = LazyModule("openai")

MODEL = "bankml-test"
TIMEOUT = 600.0  # only a guard against a hang: requests are short, but a loaded 2-core machine is slow
BUSY_TIMEOUT = 120.0  # a request that needed the busy slot would wait for ~16,000 tokens (minutes)
BUSY_CTX = 16384  # server1's context: what ends a NEVER_ENDS generation
# a slot's context: server1's, capped at SmolLM2's training context as llama-server's n_ctx_slot() caps it
SLOT_CTX = min(BUSY_CTX, 8192)
NEVER_ENDS = 'root ::= "a" root'  # no end: EOG is never allowed, only the context size stops it
# Ollama has no grammar field: a schema no context can hold (2,000 strings of at least 2,000 characters)
ENDS_WITH_THE_CONTEXT = {"type": "array", "items": {"type": "string", "minLength": 2000}, "minItems": 2000}
ASK_JSON = [{"role": "user", "content": "Describe a cat as a JSON object."}]
ASK_TEXT = [{"role": "user", "content": "Name three colors."}]


# ---------------------------------------------------------------------------------------------------------
# the server processes


def _serve(*extra):
    return running_serve(["-t", "1", "--alias", MODEL, *extra], cwd=os.path.dirname(os.path.dirname(__file__)))


@pytest.fixture(scope="module")
def server():
    with _serve("--parallel", "2") as base:
        yield base


@pytest.fixture(scope="module")
def server1():
    with _serve("--parallel", "1", "-c", str(BUSY_CTX)) as base:
        yield base


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def oclient(server):
    return ollama.Client(host=server, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def vocab():
    return Vocab.from_gguf(smollm2_path())


@pytest.fixture(scope="module")
def tokenize():
    """libllama's tokenizer (vocabulary only), independent of the server process."""
    import llama_cpp

    llm = llama_cpp.Llama(str(smollm2_path()), vocab_only=True, verbose=False)

    def run(text):
        return llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)

    return run


def chatml(messages):
    """SmolLM2's chat template, written out by hand (its default system message when there is none)."""
    out = ""
    if messages[0]["role"] != "system":
        out += "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def matches(grammar, text, vocab):
    """Whether ``text`` is a complete sentence of the GBNF ``grammar`` (bankml's matcher, llama.cpp's rules)."""
    g = Grammar(Rules.parse(grammar, vocab=vocab), vocab)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return g.complete


def post(base, path, body, timeout=TIMEOUT):
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(base + path, content=content, headers={"Content-Type": "application/json"}, timeout=timeout)


def chat(base, timeout=TIMEOUT, **body):
    body.setdefault("model", MODEL)
    body.setdefault("messages", ASK_TEXT)
    r = post(base, "/v1/chat/completions", body, timeout)
    assert r.status_code == 200, r.text
    return r.json()


def sse(response):
    """The JSON events of a server-sent-events response, until ``[DONE]`` (which must come)."""
    events = []
    for line in response.iter_lines():
        if not line:
            continue
        assert line.startswith("data: "), line
        data = line[len("data: ") :]
        if data == "[DONE]":
            return events
        events.append(json.loads(data))
    raise AssertionError("the stream ended without data: [DONE]")


# ---------------------------------------------------------------------------------------------------------
# discovery


def test_health_models_tags_version(server, client, oclient):
    r = httpx.get(server + "/health", timeout=TIMEOUT)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].object == "model"
    assert isinstance(models.data[0].created, int)
    tags = oclient.list()
    assert [m.model for m in tags.models] == [MODEL]
    assert tags.models[0].size == os.path.getsize(smollm2_path())
    version = httpx.get(server + "/api/version", timeout=TIMEOUT).json()
    assert isinstance(version["version"], str) and version["version"]


# ---------------------------------------------------------------------------------------------------------
# OpenAI: /v1/chat/completions


def test_json_mode(client, tokenize):
    r = client.chat.completions.create(
        model=MODEL,
        messages=ASK_JSON,
        response_format={"type": "json_object"},
        seed=2,
        max_tokens=100,
        extra_body={"return_tokens": True},
    )
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == MODEL
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    value = json.loads(choice.message.content)
    assert isinstance(value, dict) and value
    tokens = r.model_extra["tokens"]
    assert r.usage.completion_tokens == len(tokens)
    assert r.usage.prompt_tokens == len(tokenize(chatml(ASK_JSON)))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


SCHEMAS = {
    "required-enum-integer": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 24},
            "age": {"type": "integer", "minimum": 18, "maximum": 99},
            "role": {"enum": ["admin", "editor", "viewer"]},
        },
        "required": ["name", "age", "role"],
        "additionalProperties": False,
    },
    "array-bounds": {
        "type": "object",
        "properties": {
            "colors": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 2, "maxItems": 4}
        },
        "required": ["colors"],
        "additionalProperties": False,
    },
    "nested-object": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 30},
            "author": {
                "type": "object",
                "properties": {
                    "first": {"type": "string", "maxLength": 16},
                    "last": {"type": "string", "maxLength": 16},
                },
                "required": ["first", "last"],
                "additionalProperties": False,
            },
            "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
        },
        "required": ["title", "author", "year"],
        "additionalProperties": False,
    },
    "ref-defs": {
        "$defs": {
            "point": {
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "minimum": -10, "maximum": 10},
                    "y": {"type": "integer", "minimum": -10, "maximum": 10},
                },
                "required": ["x", "y"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
        "required": ["start", "end"],
        "additionalProperties": False,
    },
    "string-pattern": {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 500},
            "in_stock": {"type": "boolean"},
        },
        "required": ["sku", "quantity", "in_stock"],
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_response_format(client, name):
    schema = SCHEMAS[name]
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Give me a {name.replace('-', ' ')} example as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
        seed=3,
        max_tokens=300,
    )
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    value = json.loads(r.choices[0].message.content)
    jsonschema.validate(value, schema)


def test_top_level_json_schema(client):
    schema = SCHEMAS["required-enum-integer"]
    r = client.chat.completions.create(
        model=MODEL, messages=ASK_JSON, seed=5, max_tokens=200, extra_body={"json_schema": schema}
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


ANSWER_GRAMMAR = 'root ::= "Answer: " ("yes" | "no") ". Confidence: " [1-9] [0-9]? "%"'
ANSWER_RE = re.compile(r"Answer: (yes|no)\. Confidence: [1-9][0-9]?%")


def test_gbnf_grammar(client, vocab):
    # the checks can fail: near misses are refused by both
    for wrong in ("Answer: maybe. Confidence: 5%", "Answer: yes. Confidence: 05%", "Answer: yes."):
        assert not matches(ANSWER_GRAMMAR, wrong, vocab) and not ANSWER_RE.fullmatch(wrong)
    for seed in (1, 2):
        r = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Is the sky blue?"}],
            seed=seed,
            max_tokens=40,
            extra_body={"grammar": ANSWER_GRAMMAR},
        )
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop"
        assert matches(ANSWER_GRAMMAR, text, vocab), text
        assert ANSWER_RE.fullmatch(text), text


def test_streaming_equals_non_streamed(client):
    for kwargs in (
        {"messages": ASK_JSON, "response_format": {"type": "json_object"}, "max_tokens": 100, "seed": 2},
        # cut inside the JSON value: the streamed growth is the open value too
        {"messages": ASK_JSON, "response_format": {"type": "json_object"}, "max_tokens": 31, "seed": 9},
        {"messages": ASK_TEXT, "max_tokens": 12, "seed": 9},
    ):
        plain = client.chat.completions.create(model=MODEL, **kwargs)
        stream = client.chat.completions.create(
            model=MODEL, stream=True, stream_options={"include_usage": True}, **kwargs
        )
        chunks = list(stream)
        assert chunks, "no chunk"
        assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].id.startswith("chatcmpl-")
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        assert chunks[0].choices[0].delta.role == "assistant"
        with_choice = [c for c in chunks if c.choices]
        text = "".join(c.choices[0].delta.content or "" for c in with_choice)
        finishes = [c.choices[0].finish_reason for c in with_choice if c.choices[0].finish_reason]
        assert text == plain.choices[0].message.content
        assert finishes == [plain.choices[0].finish_reason]
        assert with_choice[-1].choices[0].finish_reason is not None
        # include_usage: the last chunk has no choice and the usage
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
        assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens


def test_streaming_without_include_usage_puts_usage_on_the_finish_chunk(server):
    with httpx.stream(
        "POST",
        server + "/v1/chat/completions",
        timeout=TIMEOUT,
        json={"model": MODEL, "messages": ASK_TEXT, "seed": 2, "max_tokens": 6, "stream": True},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse(r)
    last = events[-1]
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["usage"]["completion_tokens"] == 6
    assert all(e["choices"][0]["finish_reason"] is None for e in events[:-1])


def test_max_tokens_cut(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=ASK_JSON,
        response_format={"type": "json_object"},
        seed=4,
        max_tokens=7,
        extra_body={"return_tokens": True},
    )
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7 == len(r.model_extra["tokens"])


def test_greedy_is_deterministic_and_stop_cuts_before_the_word(client):
    def greedy(seed, **kw):
        return client.chat.completions.create(
            model=MODEL, messages=ASK_TEXT, temperature=0, seed=seed, max_tokens=30, **kw
        )

    a, b = greedy(1), greedy(2)
    assert a.choices[0].message.content == b.choices[0].message.content  # greedy ignores the seed
    full = a.choices[0].message.content
    words = full.split()
    assert len(words) >= 4, full
    word = words[3]
    cut = greedy(3, stop=[word, "never-in-the-answer"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[: full.index(word)]
    assert cut.usage.completion_tokens < a.usage.completion_tokens


def test_seeded_sampling_is_reproducible(client):
    def sample(seed):
        r = client.chat.completions.create(model=MODEL, messages=ASK_TEXT, temperature=1.0, seed=seed, max_tokens=12)
        return r.choices[0].message.content

    first = {seed: sample(seed) for seed in (11, 12, 13, 14)}
    assert sample(11) == first[11]
    assert sample(13) == first[13]
    assert len(set(first.values())) > 1, first  # the seed does change the draw


def test_concurrent_requests_do_not_cross_talk(server):
    requests = [
        {"messages": ASK_JSON, "response_format": {"type": "json_object"}, "seed": 21, "max_tokens": 16},
        {"messages": ASK_TEXT, "seed": 22, "max_tokens": 16, "temperature": 1.0},
        {
            "messages": ASK_JSON,
            "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMAS["ref-defs"]}},
            "seed": 23,
            "max_tokens": 16,
        },
        {"messages": ASK_TEXT, "seed": 24, "max_tokens": 16, "temperature": 1.0},
    ]

    def run(body):
        out = chat(server, return_tokens=True, **body)
        return out["tokens"], out["choices"][0]["message"]["content"]

    alone = [run(body) for body in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(run, requests))
    assert together == alone
    assert len({tuple(t) for t, _ in alone}) == len(requests)


# ---------------------------------------------------------------------------------------------------------
# OpenAI: /v1/completions


def test_completions_raw_prompt(client, tokenize, vocab):
    prompt = "The three primary colors are"
    r = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=8, temperature=0, extra_body={"return_tokens": True}
    )
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8 == len(r.model_extra["tokens"])
    assert r.usage.prompt_tokens == len(tokenize(prompt))
    assert r.choices[0].text == b"".join(vocab.piece(t) for t in r.model_extra["tokens"]).decode("utf-8")
    # streamed: the pieces add up to the same text
    stream = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_completions_with_grammar(client, vocab):
    grammar = 'root ::= " " color ", " color ", and " color "."\ncolor ::= "red" | "green" | "blue" | "yellow"'
    r = client.completions.create(
        model=MODEL, prompt="The three primary colors are", max_tokens=30, seed=8, extra_body={"grammar": grammar}
    )
    text = r.choices[0].text
    assert r.choices[0].finish_reason == "stop"
    assert matches(grammar, text, vocab), text
    assert re.fullmatch(r" (red|green|blue|yellow), (red|green|blue|yellow), and (red|green|blue|yellow)\.", text)


def test_completions_with_json_schema(client):
    schema = SCHEMAS["ref-defs"]
    r = client.completions.create(
        model=MODEL,
        prompt="A line from (1, 2) to (3, 4) as JSON:",
        max_tokens=120,
        seed=8,
        extra_body={"json_schema": schema},
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), schema)


# ---------------------------------------------------------------------------------------------------------
# Ollama: /api/chat, /api/generate


def test_ollama_chat_json_streamed_and_not(oclient):
    options = {"seed": 1, "temperature": 0.7, "num_predict": 200}
    r = oclient.chat(model=MODEL, messages=ASK_JSON, format="json", options=options, stream=False)
    assert r.done and r.done_reason == "stop"
    assert r.message.role == "assistant"
    assert isinstance(json.loads(r.message.content), dict)
    parts = list(oclient.chat(model=MODEL, messages=ASK_JSON, format="json", options=options, stream=True))
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert "".join(p.message.content for p in parts) == r.message.content
    assert parts[-1].done_reason == "stop"
    assert parts[-1].eval_count == r.eval_count
    assert parts[-1].prompt_eval_count == r.prompt_eval_count


def test_ollama_chat_schema_format(oclient):
    schema = SCHEMAS["nested-object"]
    r = oclient.chat(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe a famous book as JSON."}],
        format=schema,
        options={"seed": 2, "num_predict": 300},
        stream=False,
    )
    assert r.done_reason == "stop"
    jsonschema.validate(json.loads(r.message.content), schema)


def test_ollama_generate(oclient, tokenize):
    schema = SCHEMAS["string-pattern"]
    r = oclient.generate(
        model=MODEL,
        prompt="An inventory item as JSON.",
        format=schema,
        options={"seed": 6, "num_predict": 200},
        stream=False,
    )
    assert r.done and r.done_reason == "stop"
    jsonschema.validate(json.loads(r.response), schema)
    # num_predict cuts: "length", exactly that many tokens; the prompt goes through the chat template
    prompt = "Name a color."
    r = oclient.generate(
        model=MODEL, prompt=prompt, options={"seed": 6, "num_predict": 5, "temperature": 0}, stream=False
    )
    assert r.done_reason == "length" and r.eval_count == 5
    assert r.prompt_eval_count == len(tokenize(chatml([{"role": "user", "content": prompt}])))
    parts = list(
        oclient.generate(
            model=MODEL, prompt=prompt, options={"seed": 6, "num_predict": 5, "temperature": 0}, stream=True
        )
    )
    assert "".join(p.response for p in parts) == r.response
    assert parts[-1].done and parts[-1].done_reason == "length" and parts[-1].eval_count == 5
    # format "json" on generate
    r = oclient.generate(
        model=MODEL,
        prompt="Describe a dog as a JSON object.",
        format="json",
        options={"seed": 3, "num_predict": 100},
        stream=False,
    )
    # whether a 135M model closes its object within 100 tokens depends on the machine's kernels (the logits
    # differ between AVX2 and AVX-512 builds): either a whole object, or 100 tokens of one under way
    if r.done_reason == "stop":
        assert isinstance(json.loads(r.response), dict)
    else:
        assert r.done_reason == "length" and r.eval_count == 100 and r.response.lstrip().startswith("{")


def test_ollama_streams_ndjson_by_default(server):
    with httpx.stream(
        "POST",
        server + "/api/chat",
        timeout=TIMEOUT,
        json={"model": MODEL, "messages": ASK_TEXT, "options": {"num_predict": 3, "seed": 1}},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] == 3
    assert all(line["done"] is False and line["message"]["role"] == "assistant" for line in lines[:-1])


# ---------------------------------------------------------------------------------------------------------
# refusals: 400 with llama-server's (Ollama's) error object, answered without a slot


BAD_SCHEMA = {"type": "object", "properties": {"a": {"type": "nope"}}}
OPENAI_ERRORS = [
    # (path, body, a part of the message)
    ("/v1/chat/completions", b'{"messages": [', "JSON"),
    (
        "/v1/chat/completions",
        {"messages": ASK_TEXT, "response_format": {"type": "json_schema", "json_schema": {"schema": BAD_SCHEMA}}},
        "#/properties/a: unrecognized type nope",
    ),
    ("/v1/chat/completions", {"messages": ASK_TEXT, "grammar": 'root ::= "a'}, "line 1"),
    ("/v1/chat/completions", {"messages": ASK_TEXT, "grammar": "root ::= undefined-rule"}, "undefined-rule"),
    (
        "/v1/chat/completions",
        {"messages": ASK_TEXT, "response_format": {"type": "xml"}},
        'response_format type must be one of "text" or "json_object", but got: xml',
    ),
    (
        "/v1/chat/completions",
        {"messages": ASK_TEXT, "json_schema": {"type": "object"}, "grammar": 'root ::= "a"'},
        "Cannot use both json_schema and grammar",
    ),
    # top_p 2 is clamped to 1, as llama-server clamps its soft limits; repeat_last_n has a hard one
    ("/v1/chat/completions", {"messages": ASK_TEXT, "repeat_last_n": -1}, "repeat_last_n"),
    ("/v1/completions", {"prompt": "Hi", "grammar": 'root ::= "a'}, "line 1"),
    ("/v1/completions", {"prompt": "Hi", "json_schema": BAD_SCHEMA}, "unrecognized type nope"),
]
OLLAMA_ERRORS = [
    ("/api/chat", b'{"messages": [', "JSON"),
    (
        "/api/chat",
        {"messages": ASK_TEXT, "format": "xml"},
        'invalid format: "\\"xml\\""; expected "json" or a valid JSON Schema object',
    ),
    ("/api/chat", {"messages": ASK_TEXT, "format": BAD_SCHEMA}, "unrecognized type nope"),
    ("/api/generate", {"prompt": "Hi", "format": BAD_SCHEMA}, "unrecognized type nope"),
    ("/api/chat", {"messages": ASK_TEXT, "options": {"top_k": "many"}}, "top_k"),
]


@contextlib.contextmanager
def _busy(base):
    """Hold the only slot of ``base`` with a never-ending streamed generation until the block ends (then the
    client disconnects)."""
    with httpx.stream(
        "POST",
        base + "/v1/chat/completions",
        timeout=TIMEOUT,
        json={"model": MODEL, "messages": ASK_TEXT, "grammar": NEVER_ENDS, "stream": True, "max_tokens": 100000},
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break  # a token came: the slot is ours
        else:
            raise AssertionError("the holding stream ended")
        yield lines


def _assert_slot_free(base):
    """A short request completes: the slot is free (a held slot would keep it waiting ~16,000 tokens)."""
    out = chat(base, timeout=BUSY_TIMEOUT, seed=1, max_tokens=3)
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 3


def test_refusals_come_without_a_slot(server1, tokenize):
    long_text = "hello " * (BUSY_CTX + 100)
    n_long = len(tokenize(chatml([{"role": "user", "content": long_text}])))
    assert n_long >= BUSY_CTX
    too_long = [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": long_text}]},
            f"request ({n_long} tokens) exceeds the available context size ({SLOT_CTX} tokens), try increasing it",
            "exceed_context_size_error",
        ),
        (
            "/v1/completions",
            {"prompt": long_text},
            f"exceeds the available context size ({SLOT_CTX} tokens)",
            "exceed_context_size_error",
        ),
    ]
    with _busy(server1):
        for path, body, part, *kind in OPENAI_ERRORS + too_long:
            r = post(server1, path, body, BUSY_TIMEOUT)
            assert r.status_code == 400, (path, body, r.text)
            error = r.json()
            assert set(error) == {"error"}, error
            # llama-server's exceed_context_size_error also gives the prompt's tokens and the slot's context
            extra = {"n_ctx", "n_prompt_tokens"} if kind == ["exceed_context_size_error"] else set()
            assert set(error["error"]) == {"code", "message", "type"} | extra, error
            if extra:
                assert error["error"]["n_ctx"] == SLOT_CTX and error["error"]["n_prompt_tokens"] > SLOT_CTX, error
            assert error["error"]["code"] == 400
            assert error["error"]["type"] == (kind or ["invalid_request_error"])[0], error
            assert part in error["error"]["message"], (part, error)
        for path, body, part in OLLAMA_ERRORS:
            r = post(server1, path, body, BUSY_TIMEOUT)
            assert r.status_code == 400, (path, body, r.text)
            error = r.json()
            assert set(error) == {"error"} and isinstance(error["error"], str), error
            assert part in error["error"], (part, error)
        # the official clients raise their 400 errors
        c = openai.OpenAI(base_url=server1 + "/v1", api_key="x", max_retries=0, timeout=BUSY_TIMEOUT)
        with pytest.raises(openai.BadRequestError) as info:
            c.chat.completions.create(
                model=MODEL,
                messages=ASK_TEXT,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": BAD_SCHEMA}},
            )
        assert info.value.status_code == 400
        assert info.value.body["type"] == "invalid_request_error"
        with pytest.raises(ollama.ResponseError) as info:
            ollama.Client(host=server1, timeout=BUSY_TIMEOUT).chat(model=MODEL, messages=ASK_TEXT, format=BAD_SCHEMA)
        assert info.value.status_code == 400 and "unrecognized type nope" in info.value.error
    _assert_slot_free(server1)


# ---------------------------------------------------------------------------------------------------------
# disconnects free the slot (--parallel 1)


def test_disconnect_mid_stream_frees_the_slot(server1):
    for _ in range(2):
        with _busy(server1) as lines:
            next(lines)  # read one more event, then go away
        _assert_slot_free(server1)


def test_openai_stream_closed_early_frees_the_slot(server1):
    c = openai.OpenAI(base_url=server1 + "/v1", api_key="x", max_retries=0, timeout=BUSY_TIMEOUT)
    stream = c.chat.completions.create(
        model=MODEL, messages=ASK_TEXT, stream=True, max_tokens=100000, extra_body={"grammar": NEVER_ENDS}
    )
    got = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            got.append(chunk.choices[0].delta.content)
            if len(got) == 2:
                break
    stream.close()
    assert set("".join(got)) == {"a"}
    _assert_slot_free(server1)


def test_ollama_stream_closed_early_frees_the_slot(server1):
    with httpx.stream(
        "POST",
        server1 + "/api/chat",
        timeout=TIMEOUT,
        json={"model": MODEL, "messages": ASK_JSON, "format": ENDS_WITH_THE_CONTEXT},
    ) as r:
        assert r.status_code == 200
        first = json.loads(next(r.iter_lines()))
        assert first["done"] is False
    _assert_slot_free(server1)


def test_non_streamed_client_gone_frees_the_slot(server1):
    with pytest.raises(httpx.ReadTimeout):
        post(
            server1,
            "/v1/chat/completions",
            {"model": MODEL, "messages": ASK_TEXT, "grammar": NEVER_ENDS, "max_tokens": 100000},
            timeout=httpx.Timeout(TIMEOUT, read=2.0),
        )
    _assert_slot_free(server1)
