"""docs/usage.md's examples run as written: the numpy sampling loop (every answer valid JSON for its schema), the
chat layer with thinking, the agent loop with tools."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "usage.md"


def test_numpy_loop_example_runs(monkeypatch, capsys):
    monkeypatch.chdir(DOC.parent.parent)
    block = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[0]
    exec(compile(block, str(DOC), "exec"), {"__name__": "usage_example"})
    lines = capsys.readouterr().out
    # three seeds, each printed once with its redraw count (the asserts inside the block check the JSON)
    assert [line.split(" ", 1)[0] for line in lines.splitlines() if line.endswith("redraws)")] == ["0", "1", "2"]


def test_chat_layer_example_runs(monkeypatch, capsys):
    """The runtime-author example: a Qwen3.5 template with thinking on, prompt, grammar and parser from
    bankml.chat.template, the reasoning budget, in the numpy loop; every answer valid for the schema, with reasoning."""
    monkeypatch.chdir(DOC.parent.parent)
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
        if "ChatTemplate(" in b and "tools=" not in b
    ]
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "usage_example"})
    lines = [line for line in capsys.readouterr().out.splitlines() if "characters of reasoning" in line]
    assert [line.split(" ", 1)[0] for line in lines] == ["0", "1"]
    assert all(not line.endswith(" 0 characters of reasoning") for line in lines)


def test_agent_loop_example_runs(monkeypatch, capsys):
    """The agent loop without a server: a Qwen3.5 template with tools, the lazy tool-call grammar triggered by
    "<tool_call>", the parsed call run as a Python function, its result appended, the template applied again
    and the answer given in text."""
    monkeypatch.chdir(DOC.parent.parent)
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
        if "lazy_grammar_triggers" in b
    ]
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "usage_example"})
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "tool call: get_weather {'city': 'Oslo', 'unit': 'celsius'}",
        "answer: It is sunny in Oslo, 21 °C.",
    ]


def test_readme_example_runs(monkeypatch):
    """README's "Use it" block runs as written from the checkout (the shipped Qwen2 vocabulary and json.gbnf):
    the mask allows exactly what the grammar allows at the start, and the drawn token is accepted."""
    import numpy as np

    readme = DOC.parent.parent / "README.md"
    monkeypatch.chdir(readme.parent)
    block = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.S)[0]
    scope = {"__name__": "readme_example"}
    exec(compile(block, str(readme), "exec"), scope)
    grammar, bitmask, logits = scope["grammar"], scope["bitmask"], scope["logits"]
    allowed = np.flatnonzero(np.isfinite(logits))
    unpacked = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: len(scope["vocab"])]
    assert allowed.size and np.array_equal(np.flatnonzero(unpacked), allowed)
    assert scope["token_id"] in allowed
    assert "root ::=" in scope["gbnf"] and scope["warnings"] == []
    assert grammar.rollback_depth == 0  # the accepted token was rolled back
