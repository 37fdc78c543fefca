"""bankml as SGLang's grammar backend "bankml" (sglang 0.5.23): registered through register_grammar_backend,
created by SGLang's own create_grammar_backend, its objects driven through SGLang's base classes (the
backend's cache and dispatch, GrammarRow batches, GrammarMask.apply, SamplingBatchInfo's mask update), with
every mask checked against a fresh bankml Grammar fed the same tokens.

Skipped where sglang is not importable; run in SGLang's environment with
``python -m pytest -m sglang tests/integrations/test_engine_sglang.py``."""

import json
import types

import numpy as np
import pytest

from bankml.integrations.spec import grammar_text

from .. import engines_support
from ..engines_support import SCHEMA, YES_NO, reference, reference_row

base = engines_support.import_or_skip(
    "sglang.srt.constrained.base_grammar_backend", "SGLang", "install sglang 0.5.23 (bankml[sglang], --no-deps on CPU)"
)

import torch  # noqa: E402

pytestmark = pytest.mark.sglang


@pytest.fixture(scope="module")
def vocab():
    return engines_support.smollm2_vocab()


@pytest.fixture(scope="module")
def backend(vocab, monkeypatch_module):
    from sglang.srt.server_args import ServerArgs

    import bankml.integrations.sglang as bsg

    assert base.GRAMMAR_BACKEND_REGISTRY["bankml"] is bsg.init_bankml_backend
    monkeypatch_module.setenv("BANKML_VOCAB_GGUF", engines_support.smollm2_gguf())
    args = types.SimpleNamespace(model_path=engines_support.smollm2_tokenizer_dir())
    # SGLang's factory reads the backend's name from its runtime context; the registry is what it consults first
    created = base.GRAMMAR_BACKEND_REGISTRY["bankml"](args, None, len(vocab), {2})
    assert isinstance(created, bsg.BankmlGrammarBackend) and isinstance(created, base.BaseGrammarBackend)
    assert "bankml" in __import__("sglang.srt.arg_groups.choices", fromlist=["x"]).GRAMMAR_BACKEND_CHOICES
    assert ServerArgs is not None
    return created


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def compiled(backend, key):
    value, hit = backend.get_cached_or_future_value(key, False)
    if not hit:
        value = value.result()
        backend.set_cache(key, value.copy())  # what SGLang's GrammarManager does with a fresh result
    return value


def test_dispatch_through_sglangs_backend_base(backend, vocab):
    import bankml.integrations.sglang as bsg

    cases = [
        (("json", json.dumps(SCHEMA)), ("json", SCHEMA)),
        (("ebnf", YES_NO), ("grammar", YES_NO)),
        (("regex", "[0-9]{2,4}-[a-z]+"), ("regex", "[0-9]{2,4}-[a-z]+")),
        (("json", '{"type": "object"}'), ("json_object", None)),
    ]
    for key, ref in cases:
        g = compiled(backend, key)
        assert isinstance(g, bsg.BankmlGrammarObject) and isinstance(g, base.BaseGrammarObject)
        mask = g.allocate_vocab_mask(len(vocab), 3, "cpu")
        assert mask.dtype == torch.int32 and bool((mask == -1).all())
        g.fill_vocab_mask(mask, 1)
        assert np.array_equal(mask[1].numpy(), reference_row(vocab, *ref)), key
        again, hit = backend.get_cached_or_future_value(key, False)
        assert hit and again is not g and again.accepted_tokens == []
    bad = compiled(backend, ("ebnf", "root ::= ("))
    assert isinstance(bad, base.InvalidGrammarObject) and "GBNF" in bad.error_message
    refused = compiled(backend, ("json", json.dumps({"type": "integer", "minimum": "x"})))
    assert isinstance(refused, base.InvalidGrammarObject)
    unsupported = compiled(backend, ("regex", "a(?=b)"))
    assert isinstance(unsupported, base.InvalidGrammarObject) and "not supported" in unsupported.error_message
    tag = compiled(backend, ("structural_tag", json.dumps({"structures": [], "triggers": []})))
    assert isinstance(tag, base.InvalidGrammarObject)
    assert tag.error_message == "structural_tag.structures: must hold at least one structure"
    nul = compiled(backend, ("ebnf", 'root ::= "\x00"'))
    assert isinstance(nul, base.InvalidGrammarObject)  # SGLang's own NUL guard runs before dispatch


TOOL = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_structural_tags_as_sglang_sends_them(backend, vocab):
    """The legacy form SGLang's tool-call code sends (get_legacy_structural_tag: at_least_one for required or
    named; a non-strict function's schema missing or null) and the current form, dispatched through SGLang's
    backend base: masks along a call equal to the reference for the same tag (null schemas read as {}, as
    SGLang's XGrammar backend does); a malformed tag is an InvalidGrammarObject naming the field."""
    import bankml.integrations.sglang as bsg

    legacy = {
        "type": "structural_tag",
        "structures": [
            {"begin": '<tool_call>\n{"name": "get_weather", "arguments": ', "schema": TOOL, "end": "}\n</tool_call>"},
            {"begin": '<tool_call>\n{"name": "get_time", "arguments": ', "schema": None, "end": "}\n</tool_call>"},
        ],
        "triggers": ["<tool_call>"],
        "at_least_one": True,
    }
    current = {
        "type": "structural_tag",
        "format": {
            "type": "tags_with_separator",
            "tags": [
                {
                    "type": "tag",
                    "begin": "<call>",
                    "content": {"type": "json_schema", "json_schema": None},
                    "end": "</call>",
                }
            ],
            "separator": "",
            "at_least_one": True,
        },
    }
    reference_of = {
        "legacy": dict(legacy, structures=[legacy["structures"][0], dict(legacy["structures"][1], schema={})]),
        "current": json.loads(json.dumps(current).replace('"json_schema": null', '"json_schema": {}')),
    }
    texts = {
        "legacy": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "current": '<call>{"any": [1, 2]}</call><call>3</call>',
    }
    for name, tag in (("legacy", legacy), ("current", current)):
        g = compiled(backend, ("structural_tag", json.dumps(tag)))
        assert isinstance(g, bsg.BankmlGrammarObject), getattr(g, "error_message", g)
        tokens = engines_support_tokens(vocab, texts[name])
        mask = g.allocate_vocab_mask(len(vocab), 1, "cpu")
        for i, token in enumerate(tokens):
            g.fill_vocab_mask(mask, 0)
            expected = reference_row(vocab, "structural_tag", reference_of[name], tokens[:i])
            assert np.array_equal(mask[0].numpy(), expected), (name, i)
            g.accept_token(token)
        assert reference(vocab, "structural_tag", reference_of[name], tokens).complete
    refused = compiled(
        backend, ("structural_tag", json.dumps({"format": {"type": "tag", "begin": "<a>", "end": "</a>"}}))
    )
    assert isinstance(refused, base.InvalidGrammarObject)
    assert refused.error_message == "structural_tag.format: the field 'content' is required"


def test_accept_rollback_terminate_and_masks(backend, vocab):
    key = ("json", json.dumps(SCHEMA))
    g = compiled(backend, key)
    target = engines_support_tokens(vocab, '{"name": "Tom \u00e9", "age": 12}')
    rng = np.random.default_rng(4)
    pos = 0
    mask = g.allocate_vocab_mask(len(vocab), 1, "cpu")
    while pos < len(target):
        g.fill_vocab_mask(mask, 0)
        assert np.array_equal(mask[0].numpy(), reference_row(vocab, "json", SCHEMA, target[:pos])), pos
        n = min(len(target) - pos, int(rng.integers(1, 4)))
        for t in target[pos : pos + n]:
            g.accept_token(t)
        back = int(rng.integers(0, n + 1))
        g.rollback(back)
        pos += n - back
        assert g.accepted_tokens == target[:pos]
    with pytest.raises(ValueError, match="Tokens not accepted"):
        g.accept_token(target[0])  # '{' again after the object closed
    assert g.accepted_tokens == target
    assert not g.is_terminated()
    g.accept_token(2)  # <|im_end|>: end of generation
    assert g.is_terminated()
    g.accept_token(5)  # ignored once terminated, as SGLang's XGrammar object does
    assert g.accepted_tokens == target + [2]
    g.rollback(1)
    assert not g.is_terminated()


def engines_support_tokens(vocab, text):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engines_support.smollm2_tokenizer_dir())
    ids = tok.encode(text, add_special_tokens=False)
    assert b"".join(vocab.piece(i) for i in ids) == text.encode("utf-8")
    return ids


def test_batched_rows_mask_apply_and_sampling_batch_info(backend, vocab):
    """SGLang's SamplingBatchInfo.update_regex_vocab_mask (the real method, on a batch of 4 rows: three
    grammars and a request without one) fills the listed rows through fill_vocab_mask_batched and leaves
    the others all-ones; GrammarMask.apply masks the logits."""
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    a = compiled(backend, ("json", json.dumps(SCHEMA)))
    b = compiled(backend, ("ebnf", YES_NO))
    c = compiled(backend, ("json", json.dumps(SCHEMA)))
    for t in engines_support_tokens(vocab, '{"name": "A'):
        c.accept_token(t)
    for t in engines_support_tokens(vocab, "yes, n"):
        b.accept_token(t)
    info = types.SimpleNamespace(
        grammars=[a, None, b, c], temperatures=torch.ones(4, 1), vocab_size=len(vocab), device="cpu", grammar_mask=None
    )
    SamplingBatchInfo.update_regex_vocab_mask(info)
    mask = info.grammar_mask.vocab_mask
    assert np.array_equal(mask[0].numpy(), reference_row(vocab, "json", SCHEMA))
    assert bool((mask[1] == -1).all())
    assert np.array_equal(mask[2].numpy(), reference_row(vocab, "grammar", YES_NO, b.accepted_tokens))
    assert np.array_equal(mask[3].numpy(), reference_row(vocab, "json", SCHEMA, c.accepted_tokens))
    logits = torch.randn(4, len(vocab))
    before = logits.clone()
    info.grammar_mask.apply(logits)
    for row in range(4):
        words = mask[row].numpy()
        keep = np.unpackbits(words.view(np.uint8), bitorder="little")[: len(vocab)].astype(bool)
        assert np.array_equal(torch.isfinite(logits[row]).numpy(), keep)
        assert torch.equal(logits[row][torch.from_numpy(keep)], before[row][torch.from_numpy(keep)])
    # the mask's own helpers
    moved = a.move_vocab_mask(mask, "cpu")
    assert torch.equal(moved, mask)
    a.reset_vocab_mask(moved)
    assert bool((moved == -1).all())


def test_jump_forward_and_retokenize(backend, vocab):
    """try_jump_forward gives the text the grammar forces; after SGLang retokenizes the output with it,
    jump_and_retokenize rolls back to the common prefix and accepts the new tokens; masks stay bankml's."""
    schema = {
        "type": "object",
        "properties": {"temperature_celsius": {"type": "number"}},
        "required": ["temperature_celsius"],
    }
    # llama.cpp's grammar for the schema (as an ebnf request): strict mode, the engines' default since this test
    # was written, spells a key's characters in every JSON escape too, so it forces nothing after '{"'
    gbnf = grammar_text("json", schema, "llama.cpp")
    g = compiled(backend, ("ebnf", gbnf))
    assert g.try_jump_forward(None) == ([], "{")
    for t in engines_support_tokens(vocab, "{"):
        g.accept_token(t)
    assert g.try_jump_forward(None) is None  # whitespace may follow: nothing is forced
    old = engines_support_tokens(vocab, '{"')
    g.rollback(len(g.accepted_tokens))
    for t in old:
        g.accept_token(t)
    helper = g.try_jump_forward(None)
    text, state = g.jump_forward_str_state(helper)
    assert text == 'temperature_celsius"'  # the key is forced once its quote opened
    new = engines_support_tokens(vocab, '{"' + text)
    assert new[:1] == old[:1] and new != old
    g.jump_and_retokenize(old, new, state)
    assert g.accepted_tokens == new
    mask = g.allocate_vocab_mask(len(vocab), 1, "cpu")
    g.fill_vocab_mask(mask, 0)
    assert np.array_equal(mask[0].numpy(), reference_row(vocab, "grammar", gbnf, new))
    with pytest.raises(ValueError, match="retokenization"):
        g.jump_and_retokenize(new, new + engines_support_tokens(vocab, "x"), state)
