"""`bankml serve` as a drop-in for the pinned llama-server: its API key check, its extra endpoints and its default
flags, compared with the pinned llama-server's recorded answers (``tests/data/server_dropin_recordings.json``,
recorded by ``python -m tests.oracle.record_dropin``).

The servers are started as the recordings' llama-server was (``-m MODEL -t 2 --jinja -a ALIAS`` and the run's
flags), as subprocesses on a loopback port, stopped when the module ends. Equal means equal JSON (or text);
the few values that cannot be equal are listed in ``PROPS_DIFFERENCES`` and asserted as what they are.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import httpx
import pytest

from bankml import cli
from bankml.serve import server_flags
from bankml.serve.auth import (
    ApiKeyError,
    api_keys_from_args,
    key_accepted,
    parse_csv_row,
    read_api_key_file,
)
from bankml.serve.endpoints import Metrics, metrics_text
from bankml.serve.flags import flash_attn_name, kv_cache_type

from ..oracle_support import smollm2_path
from .serve_support import LazyModule, running_serve

openai = LazyModule("openai")

REPO = pathlib.Path(__file__).resolve().parents[2]
RECORDINGS = json.loads((REPO / "tests" / "data" / "server_dropin_recordings.json").read_text())
RUNS = RECORDINGS["runs"]
ALIAS = "SmolLM2-135M-Instruct"
KEYS = ("test-key-1", "test-key-2")
TIMEOUT = 600.0  # a guard against a hang only
# /props values that cannot be equal: what each is instead
PROPS_DIFFERENCES = {
    "model_path": "this machine's path of the same file (the recorder's may differ): the file names are equal",
    "media_marker": "random per process in both servers: the same shape",
    "ui": "llama-server reports its web UI enabled (its default --ui); bankml has no web UI: false",
    "build_info": "llama-server's build (b1-0c1e570); bankml's own version",
}


# ---------------------------------------------------------------------------------------------------------
# without a model


def test_parse_csv_row_as_llama_cpp():
    assert parse_csv_row("a,b") == ["a", "b"]
    assert parse_csv_row("") == [""]
    assert parse_csv_row('"a,b",c') == ["a,b", "c"]
    assert parse_csv_row('"say ""hi""",x') == ['say "hi"', "x"]
    assert parse_csv_row('ab"c,d') == ['ab"c', "d"]  # a quote inside an unquoted field is a character
    assert parse_csv_row("a,,b,") == ["a", "", "b", ""]


def test_api_key_file_and_environment(tmp_path, clean_env):
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"# comment\nkey-one\n\nkey two\r\n#not-a-key\nlast")
    assert read_api_key_file(keys) == ["key-one", "key two\r", "last"]  # std::getline keeps the \r
    with pytest.raises(ApiKeyError, match="failed to open file"):
        read_api_key_file(tmp_path / "missing")
    args = cli.build_parser().parse_args(
        ["serve", "--api-key", "a,b", "--api-key-file", str(keys), "--api-key", '"c,d"']
    )
    assert api_keys_from_args(args, {}) == ["a", "b", "key-one", "key two\r", "last", "c,d"]
    env = {"LLAMA_API_KEY": "e1,,e2", "LLAMA_ARG_API_KEY_FILE": str(keys)}
    assert api_keys_from_args(cli.build_parser().parse_args(["serve"]), env) == [
        "e1",
        "e2",
        "key-one",
        "key two\r",
        "last",
    ]
    assert api_keys_from_args(cli.build_parser().parse_args(["serve"]), {}) == []


def test_key_accepted_as_llama_server():
    keys = ["k1", "k2"]
    assert key_accepted(keys, "Bearer k2")
    assert key_accepted(keys, "k1")  # the prefix is optional
    assert key_accepted(keys, "", "Bearer k1")  # X-Api-Key when Authorization is absent
    assert not key_accepted(keys, "bearer k1")  # the prefix is case-sensitive
    assert not key_accepted(keys, "Bearer k3")
    assert not key_accepted(keys, "Bearer wrong", "k1")  # Authorization present: X-Api-Key not looked at
    assert not key_accepted(keys, "")


def test_flag_values_as_llama_server():
    assert [
        flash_attn_name(v)
        for v in ("on", "enabled", "true", "1", "off", "disabled", "false", "0", "auto", "-1", True, False)
    ] == ["on"] * 4 + ["off"] * 4 + ["auto"] * 2 + ["on", "off"]
    with pytest.raises(ValueError, match="unknown value for --flash-attn: 'yes'"):
        flash_attn_name("yes")
    import llama_cpp

    assert kv_cache_type(llama_cpp, "q8_0") == llama_cpp.GGML_TYPE_Q8_0
    with pytest.raises(ValueError, match="Unsupported cache type: q4_k"):
        kv_cache_type(llama_cpp, "q4_k")


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("LLAMA_ARG_") or name == "LLAMA_API_KEY":
            monkeypatch.delenv(name)
    return monkeypatch


def test_llama_server_environment_variables(clean_env):
    for var, value in {
        "LLAMA_ARG_FLASH_ATTN": "off",
        "LLAMA_ARG_N_PARALLEL": "2",
        "LLAMA_ARG_CTX_SIZE": "512",
        "LLAMA_ARG_ENDPOINT_SLOTS": "false",
        "LLAMA_ARG_ENDPOINT_METRICS": "1",
        "LLAMA_ARG_CACHE_TYPE_K": "q8_0",
        "LLAMA_ARG_REPACK": "off",
        "LLAMA_ARG_PORT": "9000",
        "LLAMA_ARG_ALIAS": "m",
    }.items():
        clean_env.setenv(var, value)
    args = cli.build_parser().parse_args(["serve"])
    assert (
        args.flash_attn,
        args.parallel,
        args.ctx_size,
        args.slots,
        args.metrics,
        args.cache_type_k,
        args.no_repack,
        args.port,
        args.alias,
    ) == ("off", 2, 512, False, True, "q8_0", True, 9000, "m")
    args = cli.build_parser().parse_args(["serve", "-fa", "auto", "-np", "1", "--slots", "--port", "1"])
    assert (args.flash_attn, args.parallel, args.slots, args.port) == ("auto", 1, True, 1)  # the command line wins
    clean_env.setenv("LLAMA_ARG_ENDPOINT_SLOTS", "maybe")
    out = subprocess.run(
        [sys.executable, "-m", "bankml", "serve"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(keep_llama_env=True),
        timeout=120,
    )
    assert out.returncode == 2
    assert 'environment variable "LLAMA_ARG_ENDPOINT_SLOTS": invalid boolean value' in out.stderr


def test_serve_defaults_are_llama_servers(clean_env):
    args = cli.build_parser().parse_args(["serve"])
    assert (args.ctx_size, args.batch_size, args.ubatch_size, args.parallel) == (0, 2048, 512, -1)
    assert cli.context_options(args, "auto") == {"flash_attn": "auto", "cache_type_k": "f16", "cache_type_v": "f16"}
    assert (args.slots, args.metrics, args.props, args.port, args.host) == (True, False, False, 8080, "127.0.0.1")
    with pytest.raises(ValueError, match="Unsupported cache type"):
        cli.context_options(cli.build_parser().parse_args(["serve", "-ctk", "f8"]), "auto")


# the names llama-server's --help gives these options (common/arg.cpp), which bankml serve takes too
SHARED_FLAGS = [
    "-m",
    "--model",
    "-c",
    "--ctx-size",
    "-t",
    "--threads",
    "-tb",
    "--threads-batch",
    "-b",
    "--batch-size",
    "-ub",
    "--ubatch-size",
    "-fa",
    "--flash-attn",
    "-ctk",
    "--cache-type-k",
    "-ctv",
    "--cache-type-v",
    "-np",
    "--parallel",
    "-kvu",
    "--kv-unified",
    "-no-kvu",
    "--no-kv-unified",
    "-v",
    "--verbose",
    "--log-verbose",
    "-a",
    "--alias",
    "--host",
    "--port",
    "--api-key",
    "--api-key-file",
    "--metrics",
    "--props",
    "--slots",
    "--no-slots",
    "--chat-template-file",
    "-rea",
    "--reasoning",
    "--reasoning-format",
    "--reasoning-budget",
    "--reasoning-budget-message",
    "--chat-template-kwargs",
    "--jinja",
    "-nr",
    "--no-repack",
    "--no-warmup",
]


def test_serve_help_lists_llama_server_names():
    out = subprocess.run(
        [sys.executable, "-m", "bankml", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(),
        timeout=120,
    )
    assert out.returncode == 0
    listed = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", out.stdout))
    assert [f for f in SHARED_FLAGS if f not in listed] == []
    # the same names in the pinned llama-server's --help (recorded by record_dropin.py)
    assert [f for f in SHARED_FLAGS if f not in RECORDINGS["help_flags"]] == []
    # every other option of bankml serve is bankml's own (its request limits, the JSON schema and tool-call modes): no shared
    # name left unlisted
    options = {
        o for a in cli.build_parser()._subparsers._group_actions[0].choices["serve"]._actions for o in a.option_strings
    }
    # (and llama-server's flags beyond them: bankml.serve.server_flags, tests/serve/test_server_flags.py)
    theirs = set(RECORDINGS["help_flags"]) | set(server_flags.REFUSED) | set(server_flags.NO_BEARING)
    assert sorted(options - set(SHARED_FLAGS) - theirs - {"-h", "--help"}) == [
        "--json-schema-mode",
        "--max-body-bytes",
        "--max-grammar-bytes",
        "--max-messages",
        "--max-preparing",
        "--prepare-timeout",
        "--reject-unknown-fields",
        "--request-timeout",
        "--strict-style",
        "--tool-call-mode",
    ]
    ours = {"--max-body-bytes", "--max-preparing", "--json-schema-mode", "--tool-call-mode"}
    assert not ours & set(RECORDINGS["help_flags"])
    for flag in ("-fa", "--flash-attn"):
        assert cli.build_parser().parse_args(["serve", flag, "off"]).flash_attn == "off"


def test_metrics_text_format():
    text = metrics_text(Metrics().snapshot(0, 0))
    lines = text.splitlines()
    assert len(lines) == 45 and text.endswith("\n")
    assert lines[:3] == [
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens",
        "# TYPE llamacpp:prompt_tokens_total counter",
        "llamacpp:prompt_tokens_total 0",
    ]


def test_bad_key_file_refused_before_loading(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bankml", "serve", "--api-key-file", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(),
        timeout=120,
    )
    assert out.returncode == 2 and "failed to open file" in out.stderr


# ---------------------------------------------------------------------------------------------------------
# the servers


def _env(keep_llama_env=False):
    """The subprocesses' environment: this worktree's bankml first; llama-server's LLAMA_* variables removed
    (the servers start as the recordings' did) unless kept."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if not keep_llama_env:
        for name in list(env):
            if name.startswith("LLAMA_ARG_") or name == "LLAMA_API_KEY":
                del env[name]
    return env


def _serve(flags):
    args = ["-m", str(smollm2_path()), "-t", "2", "--jinja", "-a", ALIAS, *flags]
    return running_serve(args, log_prefix="bankml-dropin-", cwd=REPO, env=_env(), start_timeout=300, stop_timeout=30)


@pytest.fixture(scope="module")
def endpoints_server():
    with _serve(RUNS["endpoints"]["flags"]) as base:
        yield base


def _ask(base, ex):
    r = httpx.request(
        ex["method"],
        base + ex["path"],
        headers=ex["headers"],
        json=ex["body"] if ex["body"] is not None else None,
        timeout=TIMEOUT,
    )
    try:
        answer = r.json()
    except ValueError:
        answer = r.text
    return r.status_code, r.headers.get("content-type", ""), answer


def _exchanges(run, names=None):
    return [e for e in RUNS[run]["exchanges"] if names is None or e["name"] in names]


# ---------------------------------------------------------------------------------------------------------
# the API key

AUTH_NAMES = [
    "health-no-key",
    "v1-health-no-key",
    "models-no-key",
    "models-wrong-key",
    "chat-no-key",
    "chat-wrong-key",
    "ollama-chat-no-key",
    "tokenize-key-without-bearer",
    "tokenize-x-api-key",
    "tokenize-lowercase-bearer",
    "unknown-path-no-key",
    "root-no-key",
]


@pytest.mark.parametrize("name", AUTH_NAMES)
def test_auth_answers_equal_llama_server(endpoints_server, name):
    (ex,) = _exchanges("endpoints", [name])
    status, ctype, answer = _ask(endpoints_server, ex)
    assert (status, answer) == (ex["status"], ex["answer"])
    assert ctype.startswith("application/json")


# ---------------------------------------------------------------------------------------------------------
# the endpoints

EQUAL_NAMES = [
    "slots-idle",
    "slots-fail-on-no-slot",
    "post-props-disabled",
    "tokenize-plain",
    "tokenize-pieces",
    "tokenize-add-special",
    "tokenize-no-parse-special",
    "tokenize-mixed",
    "tokenize-no-content",
    "detokenize",
    "detokenize-partial-utf8",
    "detokenize-empty",
    "detokenize-no-tokens",
    "apply-template-user",
    "apply-template-system",
    "apply-template-no-generation-prompt",
    "apply-template-continue",
    "apply-template-multi-turn",
]


@pytest.mark.parametrize("name", EQUAL_NAMES)
def test_endpoint_answers_equal_llama_server(endpoints_server, name):
    (ex,) = _exchanges("endpoints", [name])
    status, _, answer = _ask(endpoints_server, ex)
    assert (status, answer) == (ex["status"], ex["answer"])


def test_props_equal_but_the_documented_values(endpoints_server):
    (ex,) = _exchanges("endpoints", ["props"])
    status, _, got = _ask(endpoints_server, ex)
    want = ex["answer"]
    assert status == ex["status"] == 200
    assert list(got) == list(want)  # the same keys, in the same order
    for key in want:
        assert type(got[key]) is type(want[key]), key
        if key not in PROPS_DIFFERENCES:
            assert got[key] == want[key], key
    assert os.path.basename(got["model_path"]) == os.path.basename(want["model_path"])
    assert got["model_path"] == str(smollm2_path())
    for marker in (got["media_marker"], want["media_marker"]):
        assert re.fullmatch(r"<__media_[A-Za-z0-9]{32}__>", marker)
    assert want["ui"] is True and got["ui"] is False
    assert want["build_info"].startswith("b") and got["build_info"].startswith("bankml-")


def test_metrics_equal_llama_server_fresh_and_count_a_request(endpoints_server):
    (ex,) = _exchanges("endpoints", ["metrics"])
    status, ctype, text = _ask(endpoints_server, ex)
    assert (status, text) == (ex["status"], ex["answer"])
    assert ctype.startswith("text/plain; version=0.0.4")
    headers = {"Authorization": "Bearer " + KEYS[0]}
    r = httpx.post(
        endpoints_server + "/v1/chat/completions",
        headers=headers,
        timeout=TIMEOUT,
        json={"messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 5, "temperature": 0},
    )
    usage = r.json()["usage"]
    values = dict(
        line.split(" ")
        for line in httpx.get(endpoints_server + "/metrics", headers=headers).text.splitlines()
        if not line.startswith("#")
    )
    assert float(values["llamacpp:tokens_predicted_total"]) == usage["completion_tokens"]
    assert float(values["llamacpp:prompt_tokens_total"]) == usage["prompt_tokens"]
    assert float(values["llamacpp:n_tokens_max"]) == usage["total_tokens"]
    assert float(values["llamacpp:requests_processing"]) == 0
    slots = httpx.get(endpoints_server + "/slots", headers=headers).json()
    used = [s for s in slots if "id_task" in s]
    # the tokens in the slot's cache: the prompt and every generated token but the last
    assert len(used) == 1 and used[0]["n_prompt_tokens"] == usage["total_tokens"] - 1


def test_slots_after_a_chat_as_llama_server(endpoints_server):
    (chat,) = _exchanges("endpoints", ["chat-for-slots"])
    (slots,) = _exchanges("endpoints", ["slots-after-chat"])
    status, _, answer = _ask(endpoints_server, chat)
    assert status == 200 and answer["choices"][0]["message"] == chat["answer"]["choices"][0]["message"]
    status, _, got = _ask(endpoints_server, slots)
    assert status == slots["status"] == 200
    (want,) = [s for s in slots["answer"] if "id_task" in s]
    (mine,) = [s for s in got if "id_task" in s and s["params"]["seed"] == 11]
    # equal but the slot's id (bankml takes the first free slot, llama-server the one whose cache is most alike)
    # and the task id (llama-server counts every task, /slots and /metrics ones included)
    assert list(mine) == list(want)
    assert {k: v for k, v in mine.items() if k not in ("id", "id_task")} == {
        k: v for k, v in want.items() if k not in ("id", "id_task")
    }
    assert [s for s in slots["answer"] if "id_task" not in s] == [
        dict(id=s["id"], n_ctx=8192, speculative=False, is_processing=False)
        for s in slots["answer"]
        if "id_task" not in s
    ]


# after the fresh-state comparisons above: these generate


def test_auth_with_the_openai_client(endpoints_server):
    ask = [{"role": "user", "content": "Say hello."}]
    for key in ("wrong", "test-key-3", KEYS[0].upper()):
        client = openai.OpenAI(base_url=endpoints_server + "/v1", api_key=key, max_retries=0, timeout=TIMEOUT)
        with pytest.raises(openai.AuthenticationError) as info:
            client.chat.completions.create(model=ALIAS, messages=ask, max_tokens=2)
        assert info.value.status_code == 401
        assert info.value.body == {"message": "Invalid API Key", "type": "authentication_error", "code": 401}
    client = openai.OpenAI(base_url=endpoints_server + "/v1", api_key=KEYS[0], max_retries=0, timeout=TIMEOUT)
    out = client.chat.completions.create(model=ALIAS, messages=ask, max_tokens=2, temperature=0)
    assert out.choices[0].finish_reason in ("length", "stop") and out.usage.completion_tokens <= 2
    assert [m.id for m in client.models.list()] == [ALIAS]


def test_auth_raw_http_and_ollama_routes(endpoints_server):
    base = endpoints_server
    assert httpx.get(base + "/health").json() == {"status": "ok"}  # public, no key
    assert httpx.get(base + "/v1/health", headers={"Authorization": "Bearer wrong"}).status_code == 200
    for path in ("/api/tags", "/api/version", "/props", "/slots", "/metrics"):
        assert httpx.get(base + path).status_code == 401, path
        assert httpx.get(base + path, headers={"Authorization": "Bearer " + KEYS[1]}).status_code == 200, path
    body = {
        "model": ALIAS,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "options": {"num_predict": 1, "temperature": 0},
    }
    assert httpx.post(base + "/api/chat", json=body, timeout=TIMEOUT).status_code == 401
    r = httpx.post(base + "/api/chat", json=body, headers={"Authorization": "Bearer " + KEYS[0]}, timeout=TIMEOUT)
    assert r.status_code == 200 and r.json()["done"] is True


# ---------------------------------------------------------------------------------------------------------
# default flags: seeded generations


def _compare_generation(base, ex):
    status, _, got = _ask(base, ex)
    want = ex["answer"]
    assert status == ex["status"] == 200, got
    g, w = got["choices"][0], want["choices"][0]
    assert g["finish_reason"] == w["finish_reason"]
    if "message" in w:
        assert g["message"] == w["message"]
    else:
        assert g["text"] == w["text"]
    assert got["usage"] == want["usage"]
    assert got["tokens"] == want["__verbose"]["tokens"]
    assert got["model"] == want["model"] == ALIAS


GENERATION_NAMES = [e["name"] for e in RUNS["fa_off"]["exchanges"]]


@pytest.fixture(scope="module")
def defaults_server():
    with _serve(RUNS["defaults"]["flags"]) as base:
        yield base


@pytest.mark.parametrize("name", GENERATION_NAMES)
def test_default_flags_generations_equal_llama_server(defaults_server, name):
    (ex,) = _exchanges("defaults", [name])
    _compare_generation(defaults_server, ex)


def test_disabled_endpoints_equal_llama_server(defaults_server):
    for ex in _exchanges("defaults", ["metrics-disabled", "slots-disabled"]):
        status, _, answer = _ask(defaults_server, ex)
        assert (status, answer) == (ex["status"], ex["answer"])


def test_flash_attention_changes_the_recorded_answer():
    # what makes -fa's default matter: llama-server's own answers differ between auto (on, on the CPU) and off
    on = {e["name"]: e["answer"]["choices"][0] for e in _exchanges("defaults", GENERATION_NAMES)}
    off = {e["name"]: e["answer"]["choices"][0] for e in _exchanges("fa_off")}
    assert [n for n in GENERATION_NAMES if on[n] != off[n]] != []


@pytest.fixture(scope="module")
def fa_off_server():
    with _serve(RUNS["fa_off"]["flags"]) as base:
        yield base


@pytest.mark.parametrize("name", GENERATION_NAMES)
def test_fa_off_generations_equal_llama_server(fa_off_server, name):
    (ex,) = _exchanges("fa_off", [name])
    _compare_generation(fa_off_server, ex)


@pytest.fixture(scope="module")
def cache_q8_0_server():
    with _serve(RUNS["cache_q8_0"]["flags"]) as base:
        yield base


@pytest.mark.parametrize("name", [e["name"] for e in RUNS["cache_q8_0"]["exchanges"]])
def test_quantized_kv_cache_generations_equal_llama_server(cache_q8_0_server, name):
    (ex,) = _exchanges("cache_q8_0", [name])
    _compare_generation(cache_q8_0_server, ex)


def test_kv_cache_type_changes_the_recorded_answer():
    q8 = {e["name"]: e["answer"]["__verbose"]["tokens"] for e in _exchanges("cache_q8_0")}
    f16 = {e["name"]: e["answer"]["__verbose"]["tokens"] for e in _exchanges("defaults", list(q8))}
    assert [n for n in q8 if q8[n] != f16[n]] != []
