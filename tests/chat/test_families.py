"""bankml.chat.families: each model family's module holds its detection, and the registry asks the families in
the order of the pinned llama.cpp's ``common_chat_try_specialized_template`` (read from its source, chat.cpp).

What each handler produces (prompts, grammars, parses) is compared with llama.cpp in test_chat_templates.py,
test_chat_tools.py and test_chat_malformed.py; here: which family answers, and in which order they are asked."""

import re

from bankml.chat import families

from ..oracle.build_converter import _sdist_tree, cache_dir
from ..oracle_support import chat_templates_recording


def _module(family):
    return family.apply.__module__.rsplit(".", 1)[1]


def _llama_cpp_order():
    """The ``common_chat_params_init_<name>`` calls of common_chat_try_specialized_template, in order (a name
    called twice in a row, LFM2 then LFM2.5, once)."""
    source = (_sdist_tree(cache_dir()) / "common" / "chat.cpp").read_text()
    start = source.index("std::optional<common_chat_params> common_chat_try_specialized_template(")
    body = source[start : source.index("return std::nullopt;", start)]
    order = []
    for name in re.findall(r"return common_chat_params_init_(\w+)\(", body):
        if not order or order[-1] != name:
            order.append(name)
    return order


def test_families_are_asked_in_llama_cpps_order():
    order = _llama_cpp_order()
    assert len(order) == 15
    assert [_module(f) for f in families.FAMILIES] == order


def test_every_handler_has_one_family():
    names = [name for f in families.FAMILIES for name in f.names]
    assert len(names) == len(set(names)) == 16
    assert set(families.HANDLERS) == set(names)
    for f in families.FAMILIES:
        for name in f.names:
            assert families.HANDLERS[name] is f
            assert families.ported(name)


def test_each_family_detects_its_templates():
    """On the 70 templates of models/templates/: the registry's answer is the first family's that detects the
    template, the 26 handler templates are detected by their own family's module, and every family detects at
    least one."""
    recorded = chat_templates_recording()["templates"]
    detected = {}
    for name, rec in recorded.items():
        source = rec["source"]
        answers = [(f, f.detect(source)) for f in families.FAMILIES]
        first = next((a for a in answers if a[1] is not None), (None, None))
        assert families.detect(source) == first[1], name
        if first[1] is not None:
            assert first[1] in first[0].names, name
            detected.setdefault(_module(first[0]), []).append(name)
    assert sum(len(v) for v in detected.values()) == 26
    assert sorted(detected) == sorted(_module(f) for f in families.FAMILIES)


def test_a_template_without_a_family_gets_none():
    assert families.detect("{{ messages[0].content }}") is None
    # one marker of a two-marker detection is not enough
    assert families.detect("<|START_TEXT|>") is None
    # LFM2 is detected before LFM2.5, by the same module
    assert families.detect("<|tool_list_start|><|tool_list_end|>List of tools: [") == "lfm2"
    assert families.detect("List of tools: [") == "lfm2.5"
