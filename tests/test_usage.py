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
    bankml.chat, the reasoning budget, in the numpy loop; every answer valid for the schema, with reasoning."""
    monkeypatch.chdir(DOC.parent.parent)
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
              if "ChatTemplate(" in b and "tools=" not in b]
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
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
              if "lazy_grammar_triggers" in b]
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "usage_example"})
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["tool call: get_weather {'city': 'Oslo', 'unit': 'celsius'}",
                     "answer: It is sunny in Oslo, 21 °C."]
