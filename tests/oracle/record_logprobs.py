"""Test support: records token log-probabilities answered by the pinned llama-server with SmolLM2-135M-Instruct.

Run by hand (a minute on 2 cores; the server is built first if needed, see ``build_server.py``)::

    python -m tests.oracle.record_logprobs      # writes tests/data/server_logprobs_recordings.json

The server runs as ``record_server.py`` runs it (same flags, one slot, no prompt cache); every request carries
``"cache_prompt": false`` and nothing else of bankml's recording fields (``verbose`` would add ``__verbose`` to
the first chunk of a stream). The requests: chat completions with ``logprobs`` / ``top_logprobs`` 0, 1, 2, 5
and the default 20, OpenAI completions with ``logprobs: k`` (and ``true``), llama-server's native ``n_probs`` and
``post_sampling_probs``, greedy and seeded, with a json_schema and a GBNF grammar, a stop word, text whose
tokens split UTF-8 characters, streamed and not, and ``logprobs`` above n_vocab. Each recording is the request
and the response (the JSON, or the parsed SSE chunks and the closing ``"[DONE]"``) with the fields that change
from run to run removed (``created``, ``id``, ``system_fingerprint``, ``timings``). A top list longer than
``DIGEST_OVER`` entries (``logprobs`` above n_vocab lists all 49,152 candidates) is kept as its first
``DIGEST_HEAD`` entries, its length and the sha256 of its compact JSON (``digest_long_lists``).

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors; the recorded answers are llama.cpp's
output (full notice in tests/data/LICENSE-llama.cpp.txt).
"""

import argparse
import copy
import hashlib
import json
import pathlib
import sys

from .record_server import SCHEMAS, machine_path, recording_header, running_server

REPO = pathlib.Path(__file__).resolve().parents[2]
OUTPUT = REPO / "tests" / "data" / "server_logprobs_recordings.json"
COMMON = {"cache_prompt": False}
VOLATILE = ("created", "id", "system_fingerprint", "timings")
DIGEST_OVER = 100
DIGEST_HEAD = 10

GREEDY = {"temperature": 0, "seed": 1}
YES_NO = 'root ::= " " ( "yes" | "no" ) "."\n'


def _user(text):
    return [{"role": "user", "content": text}]


def _schema(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}


CHAT, CMPL = "/v1/chat/completions", "/v1/completions"
REQUESTS = [
    (
        "chat/greedy/top5",
        CHAT,
        dict(messages=_user("What is the capital of France?"), max_tokens=12, logprobs=True, top_logprobs=5, **GREEDY),
    ),
    (
        "chat/seed42/top1",
        CHAT,
        dict(messages=_user("Name a fruit."), max_tokens=12, logprobs=True, top_logprobs=1, temperature=0.8, seed=42),
    ),
    (
        "chat/greedy/top0",
        CHAT,
        dict(messages=_user("Say hello."), max_tokens=6, logprobs=True, top_logprobs=0, **GREEDY),
    ),
    ("chat/greedy/default20", CHAT, dict(messages=_user("Say hello."), max_tokens=6, logprobs=True, **GREEDY)),
    (
        "chat/json_schema/greedy/top5",
        CHAT,
        dict(
            messages=_user("Invent a person and give their name and age."),
            response_format=_schema("person"),
            max_tokens=24,
            logprobs=True,
            top_logprobs=5,
            **GREEDY,
        ),
    ),
    (
        "chat/json_schema/seed3/top20",
        CHAT,
        dict(
            messages=_user("Classify the sentiment of: 'I love this phone.'"),
            response_format=_schema("sentiment"),
            max_tokens=24,
            logprobs=True,
            top_logprobs=20,
            temperature=0.7,
            seed=3,
        ),
    ),
    (
        "chat/stop-word/greedy/top2",
        CHAT,
        dict(
            messages=_user("Count from one to ten, one number per line."),
            stop=["4."],
            max_tokens=32,
            logprobs=True,
            top_logprobs=2,
            **GREEDY,
        ),
    ),
    (
        "chat/utf8/seed7/top3",
        CHAT,
        dict(
            messages=_user("Write the French word for coffee shop, then an emoji of a cup."),
            max_tokens=16,
            logprobs=True,
            top_logprobs=3,
            temperature=0.9,
            seed=7,
        ),
    ),
    ("chat/native-n_probs/greedy", CHAT, dict(messages=_user("Name a color."), max_tokens=8, n_probs=3, **GREEDY)),
    (
        "chat/post_sampling/seed5/top5",
        CHAT,
        dict(
            messages=_user("Name a color."),
            max_tokens=10,
            logprobs=True,
            top_logprobs=5,
            post_sampling_probs=True,
            temperature=1.0,
            top_k=40,
            top_p=0.9,
            seed=5,
        ),
    ),
    (
        "chat/post_sampling/json_schema/greedy",
        CHAT,
        dict(
            messages=_user("Invent a person and give their name and age."),
            response_format=_schema("person"),
            max_tokens=16,
            logprobs=True,
            top_logprobs=3,
            post_sampling_probs=True,
            **GREEDY,
        ),
    ),
    (
        "stream/chat/greedy/top5",
        CHAT,
        dict(
            messages=_user("What is the capital of France?"),
            max_tokens=12,
            logprobs=True,
            top_logprobs=5,
            stream=True,
            **GREEDY,
        ),
    ),
    (
        "stream/chat/json_object/seed8/top2",
        CHAT,
        dict(
            messages=_user("Describe a dog as JSON with a name."),
            response_format={"type": "json_object"},
            max_tokens=20,
            logprobs=True,
            top_logprobs=2,
            temperature=0.7,
            seed=8,
            stream=True,
            stream_options={"include_usage": True},
        ),
    ),
    (
        "stream/chat/utf8/seed7/top3",
        CHAT,
        dict(
            messages=_user("Write the French word for coffee shop, then an emoji of a cup."),
            max_tokens=16,
            logprobs=True,
            top_logprobs=3,
            temperature=0.9,
            seed=7,
            stream=True,
        ),
    ),
    (
        "stream/chat/stop-word/greedy/top1",
        CHAT,
        dict(
            messages=_user("Count from one to ten, one number per line."),
            stop=["4."],
            max_tokens=32,
            logprobs=True,
            top_logprobs=1,
            stream=True,
            **GREEDY,
        ),
    ),
    (
        "stream/chat/post_sampling/seed5/top3",
        CHAT,
        dict(
            messages=_user("Name a color."),
            max_tokens=8,
            logprobs=True,
            top_logprobs=3,
            post_sampling_probs=True,
            temperature=1.0,
            top_k=40,
            seed=5,
            stream=True,
        ),
    ),
    (
        "completions/greedy/logprobs5",
        CMPL,
        dict(prompt="The three primary colors are", max_tokens=12, logprobs=5, **GREEDY),
    ),
    (
        "completions/seed4/logprobs-true",
        CMPL,
        dict(prompt="Once upon a time", max_tokens=8, logprobs=True, temperature=0.8, seed=4),
    ),
    (
        "completions/grammar/seed4/logprobs3",
        CMPL,
        dict(
            prompt="Question: Is water wet?\nAnswer:", grammar=YES_NO, max_tokens=8, logprobs=3, temperature=0.8, seed=4
        ),
    ),
    (
        "completions/stop-word/greedy/logprobs2",
        CMPL,
        dict(prompt="1, 2, 3,", stop=[" 6"], max_tokens=24, logprobs=2, **GREEDY),
    ),
    (
        "completions/post_sampling/seed9/n_probs4",
        CMPL,
        dict(
            prompt="The sky is", max_tokens=8, n_probs=4, post_sampling_probs=True, temperature=0.9, min_p=0.05, seed=9
        ),
    ),
    ("completions/above-n_vocab/greedy", CMPL, dict(prompt="The sky is", max_tokens=2, logprobs=50000, **GREEDY)),
    (
        "stream/completions/seed4/logprobs1",
        CMPL,
        dict(prompt="Once upon a time", max_tokens=8, logprobs=1, temperature=0.8, seed=4, stream=True),
    ),
    (
        "stream/completions/utf8/seed7/logprobs2",
        CMPL,
        dict(prompt="Un café et un croissant: ☕", max_tokens=12, logprobs=2, temperature=1.0, seed=7, stream=True),
    ),
    # tokens that end inside a UTF-8 character: llama-server keeps no record (and sends no chunk) for them
    (
        "completions/emoji/greedy/logprobs2",
        CMPL,
        dict(prompt="Emoji: \U0001f600\U0001f603\U0001f604\U0001f601\U0001f606", max_tokens=10, logprobs=2, **GREEDY),
    ),
    (
        "stream/completions/emoji/greedy/logprobs2",
        CMPL,
        dict(
            prompt="Emoji: \U0001f600\U0001f603\U0001f604\U0001f601\U0001f606",
            max_tokens=10,
            logprobs=2,
            stream=True,
            **GREEDY,
        ),
    ),
    (
        "stream/completions/japanese/seed2/logprobs3",
        CMPL,
        dict(
            prompt="\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3092\u66f8\u304d\u307e\u3059\u3002",
            max_tokens=12,
            logprobs=3,
            temperature=0.9,
            seed=2,
            stream=True,
        ),
    ),
    (
        "chat/emoji/greedy/top2",
        CHAT,
        dict(
            messages=_user("Reply with five emojis and nothing else."),
            max_tokens=12,
            logprobs=True,
            top_logprobs=2,
            **GREEDY,
        ),
    ),
    (
        "stream/chat/emoji/greedy/top2",
        CHAT,
        dict(
            messages=_user("Reply with five emojis and nothing else."),
            max_tokens=12,
            logprobs=True,
            top_logprobs=2,
            stream=True,
            **GREEDY,
        ),
    ),
    (
        "stream/completions/stop-word/greedy/logprobs2",
        CMPL,
        dict(prompt="1, 2, 3,", stop=[" 6"], max_tokens=24, logprobs=2, stream=True, **GREEDY),
    ),
]


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    return obj


def digest_long_lists(obj):
    """``obj`` with every top list ("top_logprobs" / "top_probs") longer than DIGEST_OVER replaced by
    ``{"n": length, "head": first DIGEST_HEAD entries, "sha256": of json.dumps(list, separators=(",", ":"))}``."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("top_logprobs", "top_probs") and isinstance(v, list) and len(v) > DIGEST_OVER:
                text = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
                out[k] = {
                    "n": len(v),
                    "head": v[:DIGEST_HEAD],
                    "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                }
            else:
                out[k] = digest_long_lists(v)
        return out
    if isinstance(obj, list):
        return [digest_long_lists(v) for v in obj]
    return obj


def _answer(server, endpoint, request):
    if request.get("stream"):
        return [e if e == "[DONE]" else _strip(e) for e in server.post_stream(endpoint, request)]
    return _strip(server.post(endpoint, request))


def record(names=None):
    """The recording file's content (every request of REQUESTS, or only those in ``names``)."""
    out = []
    with running_server("record_logprobs.log") as server:
        _, header = recording_header(
            server,
            "Token log-probabilities answered by the llama-server of llama-cpp-python 0.3.36's llama.cpp, "
            "recorded by tests/oracle/record_logprobs.py (see its docstring). llama.cpp is under the MIT "
            "License, Copyright (c) 2023-2026 The ggml authors (full text in LICENSE-llama.cpp.txt).",
        )
        for name, endpoint, body in REQUESTS:
            if names is not None and name not in names:
                continue
            request = dict(copy.deepcopy(body), **COMMON)
            response = _answer(server, endpoint, request)
            again = _answer(server, endpoint, request)
            if again != response:
                raise RuntimeError(f"{name}: a second run gave another answer")
            out.append(
                {"name": name, "endpoint": endpoint, "request": request, "response": digest_long_lists(response)}
            )
            print(f"[record_logprobs] {name}", file=sys.stderr, flush=True)
    return {
        **header,
        "volatile_fields_removed": list(VOLATILE),
        "recordings": out,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--only",
        nargs="+",
        help="record only these requests and merge them into the file (same server build and kernels)",
    )
    ap.add_argument(
        "--machine",
        action="store_true",
        help="write this machine's kernels' own recording (server_logprobs_recordings.<kernels key>.json), which "
        "the tests read on machines with these kernels",
    )
    args = ap.parse_args(argv)
    data = record(set(args.only) if args.only else None)
    path = machine_path(OUTPUT, data["kernels"]) if args.machine else OUTPUT
    if args.only:
        old = json.loads(path.read_text(encoding="utf-8"))
        if (old["kernels"], old["build_info"]) != (data["kernels"], data["build_info"]):
            raise SystemExit("the file was recorded with another server build or other kernels: record all")
        new = {r["name"]: r for r in data["recordings"]}
        kept = {r["name"]: r for r in old["recordings"]}
        kept.update(new)
        data["recordings"] = [kept[name] for name, _, _ in REQUESTS if name in kept]
    path.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(
        f"[record_logprobs] wrote {path} ({len(data['recordings'])} recordings, {path.stat().st_size} bytes)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
