"""JSON nesting is bounded before Python's decoder recurses (bankml.schema.jsondepth).

The decoder counts each level toward the recursion limit, and a garbage collection that starts at the limit
can abort CPython 3.11 ("Cannot recover from stack overflow": once in ~20 load-test runs of bankml serve,
on the 100,000-deep body). So text nested past the bound must be refused without being decoded at all.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatRequestError, ChatTemplate
from bankml.errors import SchemaError
from bankml.schema import jsondepth as _jsondepth
from bankml.schema.jsondepth import MAX_DEPTH, NestingError, loads, nested_deeper_than
from bankml.schema.jsontext import load_schema


def depth(value):
    """The nesting of arrays and objects in a decoded value (iteratively: the values may be deep)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (list, dict)):
            level += 1
            todo.extend((x, level) for x in (value.values() if isinstance(value, dict) else value))
        deepest = max(deepest, level)
    return deepest


def nested(n, inner="1"):
    return '{"a":[' * (n // 2) + ("[" if n % 2 else "") + inner + ("]" if n % 2 else "") + "]}" * (n // 2)


@pytest.mark.parametrize("n", [0, 1, 2, 511, 512, 513, 1000, 100000])
def test_the_bound_is_exact(n):
    text = nested(n)
    if n < 900:
        assert depth(json.loads(text)) == n
    assert nested_deeper_than(text) == (n > MAX_DEPTH)
    assert nested_deeper_than(text.encode()) == (n > MAX_DEPTH)
    assert nested_deeper_than(text, n) is False and nested_deeper_than(text, n - 1) is (n >= 1)


def test_brackets_inside_strings_do_not_count():
    inside = '"' + "[{" * 1000 + '\\"[[[\\\\' + '"'
    assert not nested_deeper_than("[" + inside + "]")
    assert not nested_deeper_than('{"k' + "[" * 900 + '": ' + inside + "}")
    # an escaped quote does not end the string
    assert not nested_deeper_than('["\\"' + "[" * 900 + '"]')
    assert nested_deeper_than('["\\\\"' + ", [" * 900 + "]" * 900 + "]")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text('[]{}"\\ab', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text('[]{}"\\', max_size=3), inner, max_size=3),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(0, 8))
def test_agrees_with_the_decoded_depth(value, bound):
    text = json.dumps(value, ensure_ascii=False)
    assert nested_deeper_than(text, bound) == (depth(value) > bound)


def test_deep_text_never_reaches_the_decoder(monkeypatch):
    calls = []
    monkeypatch.setattr(_jsondepth.json, "loads", lambda *a, **k: calls.append(a) or {})
    for text in ("[" * 100000 + "]" * 100000, '{"a":' * 100000 + "1" + "}" * 100000, b"[" * 600):
        with pytest.raises(NestingError, match="nested deeper than 512 levels"):
            loads(text)
    assert calls == []
    assert loads("[[1]]") == {} and len(calls) == 1


def test_request_texts_inside_the_body_are_bounded():
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(SchemaError, match="nesting deeper than 512"):
        load_schema(deep)
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(ChatRequestError, match="nested deeper than 512 levels"):
        template.apply(ChatInputs([{"role": "user", "content": "hi"}], chat_template_kwargs={"x": deep}))
