"""Test support: the pinned llama.cpp's ``common_chat_parse`` of broken tool calls and of reasoning, in each
template's own syntax, over every template of the sdist's ``models/templates/`` (issue 29).

It drives the program of ``build_chat_tools.py`` (the same protocol: ``streams`` parse every code point
prefix of a text as partial, then the whole text as not partial, with the ``common_chat_msg_diff`` list
between consecutive parses) on texts made from each template's own outputs:

* the tool-call outputs ``build_chat_tools`` derived from the template's rendering of an assistant message with
  tool calls (recorded in ``tests/data/chat_tools_oracle.json.gz``, checked there by llama.cpp's own parse),
  broken by ``MUTATIONS``: an undeclared parameter, an undeclared function, a value outside the enum, values
  with quotes, newlines and tag-like text, JSON with a missing colon or quote, the call cut inside a value,
  after the last value and halfway through its closing, text after and before the call, the call twice;
* the same, prefilled: the request's last message is an assistant message holding the output up to its grammar
  trigger word (``"<tool_call>\\n"`` on Qwen), continued by the rest (llama-server's prefill, which sets
  ``continue_final_message``), whole and broken;
* reasoning in the template's own syntax: the template renders an assistant message with ``reasoning_content``
  (and content, or a tool call) after the user turn with thinking on; what follows the generation prompt,
  without the end-of-turn text, is parsed with tools, without tools and with ``reasoning_format: none``,
  whole, cut inside the reasoning and with its closing removed.

Each stream is answered whole: the message (content, reasoning, tool calls with name, arguments and id) or the
exception at every prefix, and the msg diffs. Recording (a minute or two on 2 cores; builds the program first if
needed)::

    python -m tests.oracle.build_chat_malformed --record   # writes tests/data/chat_malformed_oracle.json.gz

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors (tests/data/LICENSE-llama.cpp.txt);
the recorded answers are its output.
"""

import gzip
import json
import pathlib

from . import build_chat_tools as tools_oracle
from .build_chat_templates import template_names, templates_dir

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "chat_malformed_oracle.json.gz"
TOOLS_DATA = tools_oracle.DATA

USER = tools_oracle.USER
MANY = tools_oracle.MANY
TEXT = tools_oracle.TEXT
REASONING = "The user asks about the weather.\nIt is sunny there, I think."
TRIGGER_WORD = 1  # common_grammar_trigger_type's WORD


def _replace(old, new):
    def f(text):
        return text.replace(old, new) if old in text else None

    return f


def _cut_inside(word, keep):
    def f(text):
        i = text.find(word)
        return text[: i + keep] if i >= 0 else None

    return f


def _unclosed(text):
    i = text.rfind("celsius")
    return text[: i + len("celsius")] if i >= 0 and i + len("celsius") < len(text) else None


def _half_closed(text):
    i = text.rfind("celsius")
    if i < 0:
        return None
    end = i + len("celsius")
    rest = len(text) - end
    return text[: end + (rest + 1) // 2] if rest > 1 else None


def _missing_quote(text):
    i = text.find('"Paris"')
    return text[:i] + text[i + 1 :] if i >= 0 else None


# name -> text -> broken text (None: not applicable to this output)
MUTATIONS = {
    "undeclared-parameter": _replace("location", "place"),
    "undeclared-second-parameter": _replace("unit", "scale"),
    "undeclared-function": _replace("get_weather", "get_wether"),
    "value-outside-enum": _replace("celsius", "kelvin"),
    "value-with-markup": _replace("Paris", 'Pa"ris\n</x> {\\'),
    "json-missing-colon": _replace('"location": ', '"location" '),
    "json-missing-quote": _missing_quote,
    "cut-inside-value": _cut_inside("Paris", 3),
    "cut-after-last-value": _unclosed,
    "cut-inside-closing": _half_closed,
    "name-cut-short": _replace("get_weather", "get_"),
    "value-in-unicode": _replace("Paris", "Zürich 東京 🌧"),
    "doubled-whitespace": lambda text: (
        text.replace("\n", "\n\n").replace(" ", "  ") if text.strip() != text or "\n" in text or " " in text else None
    ),
    "abandoned-start": lambda text: text[: len(text) // 4] + "\nnever mind.\n" + text,
    "text-after": lambda text: text + "\nDone.",
    "text-before": lambda text: "Sure.\n" + text,
    "twice": lambda text: text + "\n" + text,
}

# the parse requests (without the template): name -> (request, [(output, mutation or "")])
WHOLE = ""


def _req(messages, thinking, tools=None, tool_choice=None, parallel=None, **extra):
    return tools_oracle._req(messages, thinking, tools, tool_choice, parallel, **extra)


def parse_requests():
    """[(name, request, [(output name, mutation name)])]: the tool requests and which texts each streams."""
    broken = [("call", m) for m in MUTATIONS]
    return [
        ("auto/think-off", _req([USER], False, MANY, "auto", False), [("call", WHOLE), ("two-calls", WHOLE)] + broken),
        (
            "auto/parallel/think-off",
            _req([USER], False, MANY, "auto", True),
            [("two-calls", WHOLE), ("content-then-call", WHOLE)]
            + [("two-calls", m) for m in ("cut-inside-closing", "undeclared-function", "twice")]
            + [("content-then-call", m) for m in ("undeclared-parameter", "cut-after-last-value")],
        ),
        (
            "required/think-off",
            _req([USER], False, MANY, "required", False),
            [("call", m) for m in ("undeclared-parameter", "undeclared-function", "text-before", "text-after")],
        ),
        (
            "auto/think-on",
            _req([USER], True, MANY, "auto", True),
            [("reasoning-then-call", WHOLE)]
            + [("reasoning-then-call", m) for m in ("undeclared-parameter", "cut-after-last-value")],
        ),
    ]


# the reasoning renders: name -> (assistant message, thinking)
REASONING_RENDERS = {
    "text/think-on": ({"role": "assistant", "content": TEXT}, True),
    "reasoning-then-text": ({"role": "assistant", "content": TEXT, "reasoning_content": REASONING}, True),
    "reasoning-then-call": (
        {"role": "assistant", "content": None, "reasoning_content": REASONING, "tool_calls": tools_oracle.CALL1},
        True,
    ),
}


def effort(req, source):
    """A reasoning request for a template that reads ``reasoning_effort`` (Hy3 thinks only with one, its
    default being ``no_think``): with ``reasoning_effort: "high"``, a value each of them takes."""
    if "reasoning_effort" in source:
        req = dict(req, kwargs=req["kwargs"] + [["reasoning_effort", '"high"']])
    return req


def render_requests(source):
    out = [("render/user/think-on", effort(_req([USER], True, MANY), source))]
    for name, (msg, thinking) in REASONING_RENDERS.items():
        out.append(("render/" + name, effort(_req([USER, msg], thinking, MANY, add_generation_prompt=False), source)))
    return out


def reasoning_outputs(renders):
    """{render name: answer} -> {output name: text}: the assistant part of each reasoning rendering (after the
    user turn with the generation prompt), without the end-of-turn text (what follows the plain text in its
    own rendering)."""
    base, plain = renders["render/user/think-on"], renders["render/text/think-on"]
    if not (base["ok"] and plain["ok"]):
        return {}
    end = plain["prompt"].rfind(TEXT)
    tail = plain["prompt"][end + len(TEXT) :] if end >= 0 else ""
    out = {}
    for name in ("reasoning-then-text", "reasoning-then-call"):
        ans = renders["render/" + name]
        if not ans["ok"]:
            continue
        prompt = ans["prompt"]
        start = (
            len(base["prompt"])
            if prompt.startswith(base["prompt"])
            else tools_oracle._common_prefix(prompt, base["prompt"])
        )
        text = prompt[start:]
        if tail and text.endswith(tail):
            text = text[: -len(tail)]
        elif tail.strip() and text.endswith(tail.rstrip()):
            text = text[: -len(tail.rstrip())]
        if text.strip():
            out[name] = text
    return out


def _reasoning_cut(text):
    i = text.find(REASONING)
    return text[: i + len(REASONING) // 2] if i >= 0 else None


def _reasoning_unclosed(text):
    i, j = text.find(REASONING), text.rfind(TEXT)
    if i < 0 or j < 0 or j < i + len(REASONING):
        return None
    end = i + len(REASONING)
    return text[:end] + "\n" + text[j:] if text[end:j].strip() else None


REASONING_MUTATIONS = {"cut-inside-reasoning": _reasoning_cut, "reasoning-unclosed": _reasoning_unclosed}


def reasoning_requests(source):
    """[(name, request, [(output name, mutation name)])] of the reasoning outputs."""
    texts = [("reasoning-then-text", WHOLE)] + [("reasoning-then-text", m) for m in REASONING_MUTATIONS]
    return [
        (
            "reasoning/tools/think-on",
            effort(_req([USER], True, MANY, "auto", True), source),
            texts + [("reasoning-then-call", WHOLE)],
        ),
        ("reasoning/no-tools/think-on", effort(_req([USER], True), source), texts),
        ("reasoning/no-tools/format-none", effort(_req([USER], True, reasoning_format="none"), source), texts[:1]),
    ]


def mutate(text, mutation):
    """One output broken by ``mutation`` (``WHOLE``: as it is); None where the mutation does not apply."""
    if mutation == WHOLE:
        return text
    fn = MUTATIONS.get(mutation) or REASONING_MUTATIONS[mutation]
    return fn(text)


def prefill_case(outputs, triggers):
    """(head, rest) of the template's one-call output split after its first grammar trigger word (and the line
    breaks after it), for a prefilled assistant message; None when the output holds no trigger word (or nothing
    follows it)."""
    text = outputs.get("call")
    if not text:
        return None
    for kind, word in triggers:
        pos = text.find(word) if kind == TRIGGER_WORD and word else -1
        if pos < 0:
            continue
        end = pos + len(word)
        while text[end : end + 1] == "\n":  # the line break after it too, as a client prefills "<tool_call>\n"
            end += 1
        if text[end:]:
            return text[:end], text[end:]
    return None


PREFILL_MUTATIONS = (WHOLE, "undeclared-parameter", "undeclared-function", "cut-after-last-value", "text-after")


def requests_for(outputs, reasoning, triggers, source):
    """One template's requests: [(name, request, [(output, mutation)], [texts])], texts in stream order."""
    out = []
    for name, req, wanted in parse_requests():
        pairs, texts = [], []
        for output, mutation in wanted:
            text = outputs.get(output)
            broken = mutate(text, mutation) if text else None
            if broken is not None and broken not in texts:
                pairs.append((output, mutation))
                texts.append(broken)
        out.append((name, req, pairs, texts))
    split = prefill_case(outputs, triggers)
    if split is not None:
        head, rest = split
        pairs, texts = [], []
        for mutation in PREFILL_MUTATIONS:
            broken = mutate(rest, mutation)
            if broken is not None and broken not in texts:
                pairs.append(("prefill", mutation))
                texts.append(broken)
        for thinking in (False, True):
            req = _req(
                [USER, {"role": "assistant", "content": head}],
                thinking,
                MANY,
                "auto",
                False,
                add_generation_prompt=False,
                continue_final_message=True,
                # the message a continued answer starts from (task_result_state: the parse of no output)
                parses=[["", 1]],
            )
            out.append(("prefill/think-" + ("on" if thinking else "off"), req, pairs, texts))
    for name, req, wanted in reasoning_requests(source):
        pairs, texts = [], []
        for output, mutation in wanted:
            text = (reasoning if output in reasoning else {}).get(output)
            broken = mutate(text, mutation) if text else None
            if broken is not None and broken not in texts:
                pairs.append((output, mutation))
                texts.append(broken)
        if texts:
            out.append((name, req, pairs, texts))
    return out


def pack(steps):
    """A stream's answers, consecutive repeats folded: [[count, answer], ...]."""
    out = []
    for step in steps:
        if out and out[-1][1] == step:
            out[-1][0] += 1
        else:
            out.append([1, step])
    return out


def unpack(runs):
    return [step for count, step in runs for _ in range(count)]


def _tool_records(path=TOOLS_DATA):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)["templates"]


def record(path=DATA, exe=None):
    """Derive every template's reasoning outputs, build the requests and write llama.cpp's answers (with the
    template texts and the texts parsed) to ``path`` (gzip-compressed JSON)."""
    exe = exe or tools_oracle.build()
    tdir = templates_dir()
    names = template_names()
    tool_recs = _tool_records()
    sources = {name: (tdir / name).read_text(encoding="utf-8") for name in names}
    renders_req = {name: render_requests(sources[name]) for name in names}
    _, renders = tools_oracle.run([dict(r, template=str(tdir / n)) for n in names for _, r in renders_req[n]], exe)
    k = len(REASONING_RENDERS) + 1
    data = {"version": "llama-cpp-python 0.3.36", "templates": {}}
    requests, keys = [], []
    for i, name in enumerate(names):
        source = sources[name]
        rec = tool_recs[name]
        assert rec["source"] == source, name
        reasoning = reasoning_outputs({r: a for (r, _), a in zip(renders_req[name], renders[i * k : (i + 1) * k])})
        pick = rec["answers"]["many/auto/think-off"]
        triggers = pick.get("triggers", []) if pick["ok"] else []
        entry = {"source": source, "outputs": rec["outputs"], "reasoning": reasoning, "triggers": triggers}
        entry["requests"] = {}
        # the requests themselves are not stored: sorted JSON keys would reorder the tools' properties, whose
        # order shapes the parser (``requests_for`` rebuilds them from the outputs and triggers)
        for rname, req, pairs, texts in requests_for(rec["outputs"], reasoning, triggers, source):
            entry["requests"][rname] = {"cases": pairs}
            requests.append(dict(req, template=str(tdir / name), streams=texts))
            keys.append((name, rname))
        data["templates"][name] = entry
    started, answers = tools_oracle.run(requests, exe)
    data["started"] = started
    for (name, rname), ans in zip(keys, answers):
        entry = data["templates"][name]["requests"][rname]
        if ans["ok"]:
            ans = dict(ans, streams=[pack(s) for s in ans["streams"]])
            ans = {k: ans[k] for k in ("ok", "format", "generation_prompt", "streams", "parses")}
        entry["answer"] = ans
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(data, f, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return data


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--record"]:
        rec = record()
        n = sum(len(t["requests"]) for t in rec["templates"].values())
        print("recorded", len(rec["templates"]), "templates,", n, "requests into", DATA)
    else:
        print(tools_oracle.build())
        print(len(template_names()), "templates")
