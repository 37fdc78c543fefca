"""docs/usage.md's numpy sampling loop runs as written: every answer it draws is valid JSON for its schema."""
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
              if "ChatTemplate(" in b]
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "usage_example"})
    lines = [line for line in capsys.readouterr().out.splitlines() if "characters of reasoning" in line]
    assert [line.split(" ", 1)[0] for line in lines] == ["0", "1"]
    assert all(not line.endswith(" 0 characters of reasoning") for line in lines)
