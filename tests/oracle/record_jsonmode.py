"""Recorder of ``tests/data/llama-server-jsonmode.json``: the pinned llama-server (``build_server.py``) running
SmolLM2-135M-Instruct with ``record_server.SERVER_FLAGS`` (``--jinja --reasoning off``), once with the model's own
template (ChatML) and once with ``--chat-template-file models/templates/Qwen-Qwen3-0.6B.jinja`` of the sdist,
answering one request per constraint (``response_format`` json_object and json_schema, a GBNF ``grammar``),
greedy. Per request it keeps what llama-server's chat layer made of it (the grammar it sampled with and the
generation prompt, from ``__verbose.generation_settings``) and the answer (content, finish reason), plus
``tokens`` (``__verbose.tokens``: empty, as ``return_tokens`` is not asked) and ``raw`` (null: the answer's raw
text is not part of this file). ``tests/chat/test_constraint.py``, ``test_content.py`` and
``test_chat_oracle.py`` read it.

    python -m tests.oracle.record_jsonmode            # write tests/data/llama-server-jsonmode.json
    python -m tests.oracle.record_jsonmode --check    # compare with the file; exit 1 when a grammar or a
                                                      # generation prompt differs (the answers depend on the
                                                      # machine's CPU kernels: their differences are listed)

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors (full text in
tests/data/LICENSE-llama.cpp.txt); the recorded answers are llama-server's.
"""

import copy
import json
import pathlib
import sys

from .build_converter import cache_dir
from .build_server import build_server
from .record_server_templates import _start, template_text

OUTPUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "llama-server-jsonmode.json"
TEMPLATES = {"smollm2-chatml": None, "qwen3": "Qwen-Qwen3-0.6B.jinja"}
BASE = {
    "messages": [{"role": "user", "content": "Describe a cat as JSON."}],
    "max_tokens": 48,
    "temperature": 0,
    "seed": 7,
    "verbose": True,
}
CAT = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "colors": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age"],
}
CONSTRAINTS = {
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "cat", "schema": CAT}}},
    "grammar": {"grammar": 'root ::= "{" "\\"name\\": \\"" [A-Za-z ]{1,20} "\\"}"'},
}
# what depends on the chat layer only (the same on every machine), and what on the logits (the CPU kernels)
STATIC = ("request", "grammar", "generation_prompt")


def _entry(server, body):
    response = server.post("/v1/chat/completions", copy.deepcopy(body))
    verbose = response.get("__verbose", {})
    settings = verbose.get("generation_settings", {})
    choice = response["choices"][0]
    return {
        "request": body,
        "grammar": settings.get("grammar"),
        "generation_prompt": settings.get("generation_prompt"),
        "content": choice["message"]["content"],
        "finish_reason": choice["finish_reason"],
        "tokens": verbose.get("tokens", []),
        "raw": None,
    }


def record():
    """The recording: ``{"template/constraint": entry}``, templates and constraints in the file's order."""
    from .record_server import Server, model_path

    exe = build_server()
    out = {}
    for name, template in TEMPLATES.items():
        log = cache_dir() / ("record_jsonmode_%s.log" % name)
        if template is None:
            server = Server(exe, model_path(), log)
        else:
            server = _start(exe, template_text(template)[1], log)
        try:
            for kind, constraint in CONSTRAINTS.items():
                out["%s/%s" % (name, kind)] = _entry(server, dict(BASE, **constraint))
        finally:
            server.close()
    return out


def dump(recording):
    return json.dumps(recording, indent=1, ensure_ascii=False) + "\n"


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    recording = record()
    if "--check" in args:
        stored = json.loads(OUTPUT.read_text(encoding="utf-8"))
        bad = 0
        for key in sorted(set(stored) | set(recording)):
            a, b = stored.get(key, {}), recording.get(key, {})
            for field in sorted(set(a) | set(b)):
                if a.get(field) != b.get(field):
                    static = field in STATIC
                    bad += static
                    print(
                        "[record_jsonmode] %s %s: %s" % (key, field, "DIFFERS" if static else "differs (kernels)"),
                        file=sys.stderr,
                    )
        print("[record_jsonmode] %d requests; %d chat-layer fields differ" % (len(recording), bad), file=sys.stderr)
        return 1 if bad else 0
    OUTPUT.write_text(dump(recording), encoding="utf-8")
    print("[record_jsonmode] wrote %s (%d requests)" % (OUTPUT, len(recording)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
