"""llama-server's flags on ``bankml serve`` (bankml.serve.server_flags, bankml.serve.cors): every flag of the pinned
llama-server's ``--help`` is served, accepted with no bearing, or refused at start naming the flag; the served ones
answer as llama-server does (the request defaults of ``--seed``, ``-n``, the sampler flags, ``-v``'s ``__verbose``,
CORS and its preflight, a slot's context with and without ``--kv-unified``). No model, but the last section (a
SmolLM2 ``Model``)."""

import json
import re
import subprocess

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from bankml import cli
from bankml.errors import RequestError
from bankml.serve import anthropic, fields, native, ollama, openai, responses, server_flags
from bankml.serve.auth import ApiKeyMiddleware
from bankml.serve.contexts import slot_context_size
from bankml.serve.cors import CorsMiddleware, CorsOptions, origin_is_localhost
from bankml.serve.job import ContextSizeError, Event
from bankml.serve.plumbing import refusal
from bankml.serve.request import ReadContext, ServerDefaults, ServerLimits

from ..oracle.build_server import build_server
from ..oracle_support import smollm2_path


def _parse(*argv):
    return cli.build_parser().parse_args(["serve", *argv])


def _help_flags():
    text = subprocess.run([str(build_server()), "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = set()
    for line in text.splitlines():
        if not line.startswith("-") or line.startswith("-----"):
            continue
        pos = 0
        while m := re.compile(r"\s*(--?[a-zA-Z][\w.-]*)(,)?").match(line, pos):
            flags.add(m.group(1))
            pos = m.end()
            if not m.group(2):
                break
    return flags


def test_every_llama_server_flag_is_served_accepted_or_refused():
    flags = _help_flags()
    assert len(flags) > 400  # the pinned llama-server's --help: 412 names
    parser = cli.build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]
    known = set(serve._option_string_actions)
    missing = sorted(f for f in flags if f not in known)
    assert missing == [], "llama-server flags bankml serve neither serves, accepts nor refuses"
    # the tables name llama-server's flags only
    stray = sorted(f for f in (*server_flags.REFUSED, *server_flags.NO_BEARING) if f not in flags)
    assert stray == []


@pytest.mark.parametrize(
    "argv, why",
    [
        (["--lora", "adapter.gguf"], "LoRA adapters"),
        (["--tools", "all"], "server-side tools, MCP servers"),
        (["--mcp-servers-json", "{}"], "server-side tools, MCP servers"),
        (["--models-dir", "models"], "router mode"),
        (["--spec-type", "ngram-simple"], "speculative decoding"),
        (["-md", "draft.gguf"], "speculative decoding"),
        (["-ngl", "99"], "default device placement"),
    ],
)
def test_refused_flags_name_the_flag_and_why(argv, why, capsys):
    with pytest.raises(SystemExit) as exit_:
        _parse(*argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"llama-server's {argv[0]} is not served by bankml serve" in err and why in err


def test_an_unknown_flag_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit):
        _parse("--no-such-flag")
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_flags_with_no_bearing_are_accepted():
    args = _parse(
        "--cache-ram", "0", "--no-cache-prompt", "-cb", "--threads-http", "2", "--offline", "--no-ui", "-to", "5"
    )
    assert args.no_bearing_cache_ram == "0" and args.no_bearing_offline is True


def test_request_defaults_from_the_flags():
    from bankml.serve.app import defaults_from_args

    d = defaults_from_args(_parse("-s", "42", "-n", "8", "--temp", "0", "--top-k", "5", "-v"))
    assert d == ServerDefaults((("seed", 42), ("temperature", 0.0), ("top_k", 5)), 8, True)
    assert defaults_from_args(_parse()) == ServerDefaults()
    assert defaults_from_args(_parse("-lv", "10")).verbose and not defaults_from_args(_parse("-lv", "9")).verbose
    with pytest.raises(ValueError, match="adaptive_decay"):  # refused as a request's field is
        defaults_from_args(_parse("--adaptive-decay", "2"))


def test_defaults_fill_the_fields_a_body_leaves_out():
    context = ReadContext(defaults=ServerDefaults((("seed", 42), ("temperature", 0.0)), 8, True))
    req = openai.read_chat(json.dumps({"messages": [{"role": "user", "content": "Hi"}]}), context)
    assert (req.params.seed, req.params.temperature, req.n_predict, req.verbose) == (42, 0.0, 8, True)
    body = {"messages": [{"role": "user", "content": "Hi"}], "seed": 7, "max_tokens": 2, "verbose": False}
    req = openai.read_chat(json.dumps(body), context)
    assert (req.params.seed, req.n_predict, req.verbose) == (7, 2, False)
    req = openai.read_completion(json.dumps({"prompt": "Hi"}), context)
    assert (req.params.seed, req.n_predict) == (42, 8)
    # without server defaults: llama-server's own
    req = openai.read_chat(json.dumps({"messages": [{"role": "user", "content": "Hi"}]}))
    assert (req.params.seed, req.n_predict, req.verbose) == (SamplerSeed.DEFAULT, -1, False)


class SamplerSeed:
    DEFAULT = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED


@pytest.mark.parametrize("field", ["verbose", "timings_per_token", "return_progress"])
def test_debug_fields_read_as_field_bool(field):
    body = {"messages": [{"role": "user", "content": "Hi"}], field: True, "stream": True}
    assert getattr(openai.read_chat(json.dumps(body)), field) is True
    with pytest.raises(RequestError, match=f"Field '{field}'.*type must be boolean"):
        openai.read_chat(json.dumps(dict(body, **{field: "yes"})))


@pytest.mark.parametrize(
    "n_ctx, n_parallel, unified, per_slot, expected",
    [
        (1000, 2, False, 0, 512),  # GGML_PAD(1000) = 1024, / 2 = 512
        (600, 2, False, 0, 512),  # 768 / 2 = 384, padded to 512
        (8192, 4, False, 0, 2048),
        (8192, 4, True, 0, 8192),  # one pool: each slot may fill the whole context
        (8192, 4, True, 1024, 1024),
    ],
)
def test_slot_context_as_llama_context_divides_it(n_ctx, n_parallel, unified, per_slot, expected):
    assert slot_context_size(n_ctx, n_parallel, unified, per_slot) == expected


def test_context_size_error_carries_the_sizes():
    r = refusal(ContextSizeError("request (9 tokens) exceeds ...", 9, 8))
    body = json.loads(r.response().body)
    assert body == {
        "error": {
            "code": 400,
            "message": "request (9 tokens) exceeds ...",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 9,
            "n_ctx": 8,
        }
    }


def test_partial_results_with_timings_and_progress():
    job = type("J", (), {"prompt_tokens": [1, 2, 3], "prompt_ms": 6.0, "slot_index": 1, "probs": None})()
    begin = native.partial_json(Event(-1, "", "", progress=(0, 0)), job, 3, timings=True)
    assert begin["prompt_progress"] == {"total": 3, "cache": 0, "processed": 0, "time_ms": 0}
    assert (begin["tokens"], begin["tokens_predicted"], begin["timings"]["prompt_n"]) == ([], 0, 0)
    done = native.partial_json(Event(-1, "", "", progress=(3, 6)), job, 3, timings=True)
    assert (done["timings"]["prompt_n"], done["timings"]["prompt_ms"], done["prompt_progress"]["processed"]) == (
        3,
        6.0,
        3,
    )
    token = native.partial_json(Event(9, "a", "a", index=2, predicted_ms=5.0), job, 3, timings=True)
    assert token["timings"]["predicted_n"] == 2 and token["timings"]["predicted_ms"] == 5.0
    assert "prompt_progress" not in token and "timings" not in native.partial_json(Event(9, "a", "a"), job, 3)


# -- CORS (llama-server's pre-routing handler)


def _cors_client(options=None, keys=()):
    async def hello(request):
        return JSONResponse({"ok": True})

    async def stream(request):
        return StreamingResponse(iter([b"data: 1\n\n"]), media_type="text/event-stream")

    app = Starlette(
        routes=[Route("/hello", hello), Route("/stream", stream)],
        middleware=[
            Middleware(CorsMiddleware, options=options or CorsOptions()),
            Middleware(ApiKeyMiddleware, keys=list(keys)),
        ],
    )
    return TestClient(app)


def test_default_cors_echoes_the_origin():
    c = _cors_client()
    assert c.get("/hello", headers={"Origin": "http://x.com"}).headers["Access-Control-Allow-Origin"] == "http://x.com"
    assert c.get("/hello").headers["Access-Control-Allow-Origin"] == ""  # llama-server sends it empty
    r = c.get("/stream", headers={"Origin": "http://y.org"})
    assert r.headers["Access-Control-Allow-Origin"] == "http://y.org" and r.text == "data: 1\n\n"


def test_preflight_answered_before_the_api_key():
    r = _cors_client(keys=["secret"]).options("/anything", headers={"Origin": "http://x.com"})
    assert r.status_code == 200 and r.content == b""
    h = r.headers
    assert (h["Access-Control-Allow-Origin"], h["Access-Control-Allow-Credentials"]) == ("http://x.com", "true")
    assert (h["Access-Control-Allow-Methods"], h["Access-Control-Allow-Headers"]) == ("GET, POST, DELETE, OPTIONS", "*")
    assert h["Content-Type"] == "text/html"
    assert _cors_client(keys=["secret"]).get("/hello").status_code == 401


@pytest.mark.parametrize(
    "options, origin, expected",
    [
        (CorsOptions("localhost"), "http://localhost:3000", "http://localhost:3000"),
        (CorsOptions("localhost"), "http://127.0.0.1", "http://127.0.0.1"),
        (CorsOptions("localhost"), "http://evil.com", None),
        (CorsOptions("http://a.com,http://b.com"), "http://c.com", "http://a.com,http://b.com"),
        (CorsOptions(credentials=False), "http://c.com", "*"),
    ],
)
def test_cors_origins(options, origin, expected):
    r = _cors_client(options).get("/hello", headers={"Origin": origin})
    assert r.headers.get("Access-Control-Allow-Origin") == expected


def test_preflight_without_credentials():
    r = _cors_client(CorsOptions(credentials=False, methods="GET")).options("/x", headers={"Origin": "http://a"})
    assert (r.headers["Access-Control-Allow-Credentials"], r.headers["Access-Control-Allow-Methods"]) == (
        "false",
        "GET",
    )


def test_origin_is_localhost():
    assert origin_is_localhost("http://[::1]:8080") and not origin_is_localhost("not a url")


# -- with SmolLM2: the served flags through the app


@pytest.fixture(scope="module")
def served():
    from bankml.serve.app import create_app
    from bankml.serve.runtime import Model

    # two slots of a divided context (-np 2 -c 600, no --kv-unified): 512 tokens each, as llama-server's
    model = Model(smollm2_path(), n_ctx=600, n_threads=1, n_parallel=2, kv_unified=False)
    defaults = ServerDefaults((("seed", 42), ("temperature", 0.0)), 3, True)
    with TestClient(create_app(model, "m", defaults=defaults)) as c:
        yield c
    model.close()


CHAT = {"messages": [{"role": "user", "content": "Hi"}]}


def test_slot_context_in_props_slots_and_the_context_error(served):
    assert served.get("/props").json()["default_generation_settings"]["n_ctx"] == 512
    assert [s["n_ctx"] for s in served.get("/slots").json()] == [512, 512]
    r = served.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hello " * 600}]})
    err = r.json()["error"]
    assert r.status_code == 400 and err["type"] == "exceed_context_size_error"
    assert err["n_ctx"] == 512 and err["n_prompt_tokens"] > 512
    assert (
        err["message"]
        == f"request ({err['n_prompt_tokens']} tokens) exceeds the available context size (512 tokens), try increasing it"
    )


def test_seed_n_predict_and_verbose_defaults(served):
    assert served.get("/props").json()["default_generation_settings"]["params"]["seed"] == 42
    body = served.post("/v1/chat/completions", json=CHAT).json()
    assert body["usage"]["completion_tokens"] == 3
    verbose = body["__verbose"]
    assert verbose["generation_settings"]["seed"] == 42 and verbose["generation_settings"]["n_predict"] == 3
    assert verbose["content"] == body["choices"][0]["message"]["content"] and verbose["stop"] is True
    assert "__verbose" not in served.post("/v1/chat/completions", json=dict(CHAT, verbose=False)).json()
    completion = served.post("/v1/completions", json={"prompt": "The sky is"}).json()
    assert completion["__verbose"]["tokens_predicted"] == 3


def _events(response):
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def test_timings_per_token_and_progress_in_a_chat_stream(served):
    body = dict(CHAT, stream=True, timings_per_token=True, return_progress=True, verbose=False, max_tokens=2)
    chunks = _events(served.post("/v1/chat/completions", json=body))
    begin, done = chunks[0], chunks[1]
    assert begin["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert (
        begin["prompt_progress"]["processed"] == 0
        and done["prompt_progress"]["processed"] == done["prompt_progress"]["total"]
    )
    assert begin["timings"]["prompt_n"] == 0 and done["timings"]["prompt_n"] == done["prompt_progress"]["total"]
    tokens = [c for c in chunks[2:] if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert [c["timings"]["predicted_n"] for c in tokens] == list(range(1, len(tokens) + 1))
    plain = _events(served.post("/v1/chat/completions", json=dict(CHAT, stream=True, verbose=False, max_tokens=2)))
    assert not any("prompt_progress" in c for c in plain) and not any("timings" in c for c in plain[:-1])


def test_progress_in_a_native_stream(served):
    body = {"prompt": "The sky is", "stream": True, "return_progress": True, "timings_per_token": True, "n_predict": 2}
    events = _events(served.post("/completion", json=body))
    n_prompt = events[0]["tokens_evaluated"]
    assert [e["prompt_progress"]["processed"] for e in events[:2]] == [0, n_prompt]
    assert events[1]["prompt_progress"]["total"] == n_prompt and events[1]["tokens"] == []
    assert events[2]["tokens_predicted"] == 1 and events[2]["timings"]["predicted_n"] == 1
    assert events[-1]["stop"] is True


def test_completions_without_v1_is_the_native_completion(served):
    body = served.post("/completions", json={"prompt": "The sky is", "n_predict": 2}).json()
    assert body["stop"] is True and body["tokens_predicted"] == 2 and "generation_settings" in body


def test_unknown_route_is_llama_servers_404(served):
    r = served.get("/no/such/route")
    assert r.status_code == 404
    assert r.content == b'{"error":{"message":"File Not Found","type":"not_found_error","code":404}}'


# -- --reject-unknown-fields: a field a route does not read is a 400 naming it (default: ignored, as llama-server)

STRICT = ReadContext(limits=ServerLimits(reject_unknown_fields=True))
HI = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    "read, body, unknown",
    [
        (openai.read_chat, {"messages": HI, "respons_format": {"type": "json_object"}}, "'respons_format'"),
        (openai.read_completion, {"prompt": "Hi", "max_token": 3, "tempreature": 0}, "'max_token', 'tempreature'"),
        (native.read_native, {"prompt": "Hi", "n_predit": 3}, "'n_predit'"),
        (anthropic.read_messages, {"messages": HI, "max_tokens": 3, "stop_sequence": ["x"]}, "'stop_sequence'"),
        (anthropic.read_count_tokens, {"messages": HI, "systen": "x"}, "'systen'"),
        (responses.read_responses, {"input": "Hi", "instruction": "x"}, "'instruction'"),
        (responses.read_input_tokens, {"input": "Hi", "max_output_token": 3}, "'max_output_token'"),
        (ollama.read_chat, {"messages": HI, "fromat": "json"}, "'fromat'"),
        (ollama.read_generate, {"prompt": "Hi", "options": {"temprature": 0}}, "'options.temprature'"),
    ],
)
def test_unknown_fields_refused_on_request(read, body, unknown):
    raw = json.dumps(body)
    read(raw)  # llama-server's default: ignored
    with pytest.raises(RequestError, match=f"unknown fields? {re.escape(unknown)}: .*--reject-unknown-fields"):
        read(raw, STRICT)


@pytest.mark.parametrize(
    "read, body",
    [
        (openai.read_chat, {"messages": HI, "max_tokens": 3, "seed": 1, "stream": False, "tools": [], "verbose": True}),
        (anthropic.read_messages, {"messages": HI, "max_tokens": 3, "system": "x", "metadata": {}, "model": "m"}),
        (responses.read_responses, {"input": "Hi", "instructions": "x", "temperature": 0, "store": False}),
        (ollama.read_chat, {"messages": HI, "options": {"num_predict": 3, "num_gpu": 0}, "keep_alive": 5}),
    ],
)
def test_known_fields_pass_with_reject_unknown_fields(read, body):
    read(json.dumps(body), STRICT)


def test_template_and_tokenize_fields():
    with pytest.raises(RequestError, match="'mesages'"):
        openai.read_template({"messages": HI, "mesages": []}, "{}", STRICT)
    fields.check_unknown({"content": "a", "with_pieces": True}, fields.TOKENIZE)
    with pytest.raises(RequestError, match="'token'"):
        fields.check_unknown({"token": [1]}, fields.DETOKENIZE)


# -- n (llama-server's n_cmpl): several completions of one prompt, each on a slot of its own


def test_several_completions(served):
    body = dict(CHAT, n=2, verbose=False, seed=5, temperature=0.8)
    answer = served.post("/v1/chat/completions", json=body).json()
    # one seed, one prompt: the two completions are the same draws, as llama-server's child tasks are
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    assert answer["choices"][0]["message"] == answer["choices"][1]["message"]
    assert answer["usage"]["completion_tokens"] == 3  # the first completion's, as llama-server reports it
    completion = served.post("/v1/completions", json={"prompt": "The sky is", "n_cmpl": 2, "n": 1}).json()
    assert [c["index"] for c in completion["choices"]] == [0, 1]
    native_answer = served.post("/completion", json={"prompt": "The sky is", "n": 2}).json()
    assert isinstance(native_answer, list) and [r["index"] for r in native_answer] == [0, 1]
    r = served.post("/v1/chat/completions", json=dict(CHAT, n=3))
    assert (
        r.status_code == 400
        and r.json()["error"]["message"] == "Field 'n': Value must be between 1 <= value <= 2, but got 3"
    )
    r = served.post("/v1/responses", json={"input": "Hi", "n": 2})
    assert r.status_code == 400 and "several completions" in r.json()["error"]["message"]


def test_several_completions_streamed(served):
    body = dict(CHAT, n=2, stream=True, verbose=False, stream_options={"include_usage": True})
    chunks = _events(served.post("/v1/chat/completions", json=body))
    finals = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert sorted(f["index"] for f in finals) == [0, 1]
    for index in (0, 1):
        text = "".join(
            c["choices"][0]["delta"].get("content") or ""
            for c in chunks
            if c["choices"] and c["choices"][0]["index"] == index
        )
        assert text
    assert sum(1 for c in chunks if c["choices"] == [] and "usage" in c) == 2  # each completion's usage chunk
    events = _events(served.post("/completion", json={"prompt": "The sky is", "n": 2, "stream": True}))
    assert sorted(e["index"] for e in events if e["stop"]) == [0, 1]


def test_host_list_and_a_unix_socket(capsys):
    from bankml.serve.app import _address

    assert cli.main(["serve", "--host", " , "]) == 2
    assert "--host requires at least one address" in capsys.readouterr().err
    assert cli.main(["serve", "--host", "127.0.0.1,localhost", "--port", "0"]) == 2
    assert "--port 0 is not supported with multiple TCP addresses" in capsys.readouterr().err
    assert _address(_parse("--host", "/tmp/x.sock")) == {"uds": "/tmp/x.sock"}
    assert _address(_parse("--host", "0.0.0.0", "--port", "9")) == {"host": "0.0.0.0", "port": 9}


def test_flags_spelled_with_underscores_as_llama_server(capsys):
    parser = cli.build_parser()
    spelled = cli._llama_server_spelling(parser, ["serve", "--n_predict", "5", "--chat-template-file", "a_b", "--x_y"])
    assert spelled == ["serve", "--n-predict", "5", "--chat-template-file", "a_b", "--x_y"]
    assert cli._llama_server_spelling(parser, ["generate", "--n_predict"]) == ["generate", "--n_predict"]
    with pytest.raises(SystemExit):
        cli.main(["serve", "--ui_mcp_proxy"])
    assert "llama-server's --ui-mcp-proxy is not served by bankml serve" in capsys.readouterr().err
    assert (
        cli.build_parser()
        .parse_args(cli._llama_server_spelling(parser, ["serve", "--backend_sampling"]))
        .backend_sampling
    )
