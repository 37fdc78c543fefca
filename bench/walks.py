"""The benchmark walk: one JSON document, tokenized by libllama, and each engine's grammar state along it.

This module owns what the mask benchmarks (``test_mask_bench.py``) and the
summary script (``summary.py``) share:

* the document (a nested order record of 876 bytes, pretty-printed with
  two-space indents, which llama.cpp's ``grammars/json.gbnf`` accepts) and its tokens, as ``llama_tokenize`` of the pinned libllama
  splits it for each vocabulary;
* one adapter per engine -- bankml, libllama (the oracle), XGrammar,
  llguidance -- that builds a matcher for a GBNF text over the same token
  bytes (bankml's ``Vocab.pieces``, which equal ``llama_token_to_piece`` with
  special=true), accepts tokens, clones its state, and fills a whole-vocabulary
  mask;
* :func:`states_along`, the state of an engine before each chosen token of the walk.

It must not time anything nor print: the callers do.
XGrammar and llguidance are optional; :func:`available_engines` names those that import.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pathlib
import re
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bankml import Grammar, Rules, Vocab, mask_hash  # noqa: E402
from tests.oracle import libllama  # noqa: E402

DATA = ROOT / "tests" / "data"
VOCAB_FILES = {
    "qwen2": DATA / "ggml-vocab-qwen2.gguf",
    "llama3": DATA / "ggml-vocab-llama-bpe.gguf",
}
GRAMMAR_FILES = {
    "json": DATA / "grammars" / "json.gbnf",
}
ENGINES = ("bankml", "libllama", "xgrammar", "llguidance")
OPTIONAL_MODULES = {"xgrammar": "xgrammar", "llguidance": "llguidance"}

# A realistic nested record: objects in objects, an array of objects, a flat array, strings with
# escaped quotes and non-ASCII text, integers, decimals, a negative number, false and null.
# 876 bytes: 330 tokens with Qwen2, 302 with Llama 3.
DOCUMENT = """{
  "order_id": "ORD-2024-118403",
  "status": "shipped",
  "created_at": "2024-11-28T14:32:07Z",
  "customer": {
    "id": 40917,
    "name": "Zoë Castellanos",
    "email": "zoe.castellanos@example.com",
    "loyalty_tier": "gold",
    "address": {
      "street": "221 Baker Street, Flat 3B",
      "city": "London",
      "postcode": "NW1 6XE",
      "country": "GB"
    }
  },
  "items": [
    {
      "sku": "BK-00731",
      "title": "The Art of Computer Programming, Vol. 1",
      "quantity": 1,
      "unit_price": 74.99
    },
    {
      "sku": "MUG-1120",
      "title": "Mug \\"Hello, World\\"",
      "quantity": 2,
      "unit_price": 12.5
    }
  ],
  "discount": -5.0,
  "gift_wrap": false,
  "delivery_note": "Please leave the parcel with the concierge if nobody answers.",
  "coupon": null,
  "tags": ["priority", "gift", "eu-warehouse"],
  "total": 95.48
}"""


def representative_positions(text: bytes, ends: list[int]) -> dict[str, int]:
    """About eight positions of the walk, as token indices: the mask is taken before that token.

    ``ends[i]`` is the byte offset where token i ends. Several spots can share a token (a
    token such as ``"{\\n"`` holds the brace and what follows it); the first name keeps it.
    """

    def before_token_at(offset):
        # the state before the token that holds byte ``offset``
        for i, end in enumerate(ends):
            if end > offset:
                return i
        return len(ends) - 1

    def after_token_at(offset):
        # the state after the token that holds byte ``offset``
        return min(before_token_at(offset) + 1, len(ends) - 1)

    def offset_of(needle):
        # the offset of the last byte of the first occurrence of needle
        return text.index(needle) + len(needle) - 1

    wanted = {
        "start": 0,
        "after-brace": after_token_at(offset_of(b'"address": {')),
        "in-key": before_token_at(offset_of(b'"loyalty_')),
        "after-colon": after_token_at(offset_of(b'"city":')),
        "in-string": before_token_at(offset_of(b'"The Art of ')),
        "in-number": before_token_at(offset_of(b'"unit_price": 74.')),
        "in-array": after_token_at(offset_of(b'"tags": ["priority",')),
        "near-end": len(ends) - 2,
    }
    positions = {}
    for name, index in wanted.items():
        if index not in positions.values():
            positions[name] = index
    return positions


# --- vocabularies and the walk -----------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def bankml_vocab(name: str) -> Vocab:
    return Vocab.from_gguf(VOCAB_FILES[name])


@functools.lru_cache(maxsize=None)
def oracle_vocab(name: str):
    return libllama.load_vocab(VOCAB_FILES[name])


@functools.lru_cache(maxsize=None)
def grammar_text(name: str) -> str:
    return GRAMMAR_FILES[name].read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def walk_tokens(vocab_name: str) -> tuple[int, ...]:
    """The document as libllama tokenizes it (no BOS, special tokens parsed)."""
    return tuple(oracle_vocab(vocab_name).tokenize(DOCUMENT.encode("utf-8"), add_special=False, parse_special=True))


def token_ends(vocab_name: str) -> list[int]:
    pieces = bankml_vocab(vocab_name).pieces
    ends, offset = [], 0
    for t in walk_tokens(vocab_name):
        offset += len(pieces[t])
        ends.append(offset)
    return ends


def walk_positions(vocab_name: str) -> dict[str, int]:
    return representative_positions(DOCUMENT.encode("utf-8"), token_ends(vocab_name))


def bitmask_to_ids(bitmask: np.ndarray, n_vocab: int) -> np.ndarray:
    bits = np.unpackbits(np.ascontiguousarray(bitmask).view(np.uint8), bitorder="little")[:n_vocab]
    return np.flatnonzero(bits).astype(np.int32)


def known_difference_ids(vocab_name: str) -> np.ndarray:
    """Tokens on which XGrammar and llguidance differ from llama.cpp by design (see shared ANCHORS):
    control and end-of-generation tokens, and the single-byte tokens 0xF5..0xFF, which llama.cpp's
    decode_utf8 takes as the lead byte of a 4-byte character."""
    vocab = bankml_vocab(vocab_name)
    attrs = vocab.token_attrs
    ids = set(vocab.eog_ids)
    if attrs is not None:
        ids.update(np.flatnonzero(attrs & 8).tolist())  # LLAMA_TOKEN_ATTR_CONTROL
    ids.update(i for i, piece in enumerate(vocab.pieces) if len(piece) == 1 and piece[0] >= 0xF5)
    return np.array(sorted(ids), dtype=np.int32)


# --- engines ------------------------------------------------------------------------------------


def available_engines() -> list[str]:
    return [e for e in ENGINES if e not in OPTIONAL_MODULES or importlib.util.find_spec(OPTIONAL_MODULES[e])]


def _stale_extensions(package: pathlib.Path) -> list[str]:
    """The built extensions older than their .pyx, their .pxd or a bankml .pxd they cimport."""
    stale = []
    for built in sorted(package.glob("*.so")):
        stem = built.name.split(".")[0]
        sources = [package / f"{stem}.pyx", package / f"{stem}.pxd"]
        for source in list(sources):
            if source.exists():
                text = source.read_text(encoding="utf-8", errors="replace")
                sources += [package / f"{m}.pxd" for m in re.findall(r"(?:bankml\.|from \.)(\w+) cimport", text)]
        newest = max((p.stat().st_mtime for p in sources if p.exists()), default=0)
        if built.stat().st_mtime < newest:
            stale.append(built.name)
    return stale


@functools.lru_cache(maxsize=None)
def bankml_build() -> str:
    """bankml's version, commit, and whether the working tree or the built extensions lag behind
    (read once, when first asked: the benchmark runs the extension it imported)."""
    import subprocess

    import bankml

    parts = [bankml.__version__]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "bankml"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        parts.append(f"git {head}{'+dirty' if dirty else ''}")
    except (OSError, subprocess.CalledProcessError):
        pass
    stale = [name for name in _stale_extensions(ROOT / "bankml")]
    if stale:
        parts.append(f"STALE BUILD: {', '.join(stale)} older than its sources, rebuild")
    return ", ".join(parts)


def engine_version(engine: str) -> str:
    from importlib.metadata import version

    if engine == "bankml":
        return bankml_build()
    dist = {"bankml": "bankml", "libllama": "llama_cpp_python", "xgrammar": "xgrammar", "llguidance": "llguidance"}
    try:
        v = version(dist[engine])
    except Exception:
        return "?"
    return f"llama-cpp-python {v}" if engine == "libllama" else v


class Engine:
    """One implementation prepared for one vocabulary: builds matchers over a GBNF text."""

    name = "?"

    modules = ()

    def __init__(self, vocab_name: str):
        self.vocab_name = vocab_name
        self.vocab = bankml_vocab(vocab_name)
        self.n_vocab = self.vocab.n_vocab
        for module in self.modules:  # imports are not part of the preparation time
            importlib.import_module(module)
        started = time.perf_counter()
        self.prepare()
        self.prepare_ms = (time.perf_counter() - started) * 1e3

    def prepare(self):
        """Per-vocabulary work done once, before any grammar (tokenizer tables, decoded pieces)."""

    def compile(self, text: str):
        raise NotImplementedError

    def matcher(self, compiled):
        raise NotImplementedError

    def accept(self, matcher, token: int):
        raise NotImplementedError

    def clone(self, matcher):
        raise NotImplementedError

    def new_mask(self):
        """The output buffer fill() writes."""
        return np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)

    def fill(self, matcher, out):
        """Compute the whole-vocabulary mask of the current state into out (the timed call)."""
        raise NotImplementedError

    def allowed_ids(self, matcher, out) -> np.ndarray:
        """The allowed ids from the last fill() into out."""
        return bitmask_to_ids(out, self.n_vocab)


class BankmlEngine(Engine):
    name = "bankml"

    def prepare(self):
        # the per-vocabulary tables (decoded pieces, token trie) are built on first use and cached
        # per Vocab; a throwaway matcher builds them here so that compile() times the grammar alone
        Grammar(Rules.parse('root ::= "a"', vocab=self.vocab), self.vocab)

    def compile(self, text):
        # parse, then the first matcher makes the (rules, vocabulary) context every later matcher shares:
        # bankml's compile. Its segment cache is built ahead in a background thread (Grammar's precompute
        # budget) that the constructor starts and does not wait for, so it is not timed here.
        rules = Rules.parse(text, vocab=self.vocab)
        Grammar(rules, self.vocab)
        return rules

    def matcher(self, compiled):
        return Grammar(compiled, self.vocab)

    def accept(self, matcher, token):
        matcher.accept(token)

    def clone(self, matcher):
        return matcher.clone()

    def fill(self, matcher, out):
        matcher.fill_next_token_bitmask(out)


class LibllamaEngine(Engine):
    """llama.cpp's grammar sampler: one llama_sampler_apply over the whole vocabulary per mask."""

    name = "libllama"

    def prepare(self):
        self.oracle = oracle_vocab(self.vocab_name)

    def __init__(self, vocab_name):
        super().__init__(vocab_name)
        self.prepare_ms = None  # the llama_vocab is the input here, as the pieces are for the others

    def compile(self, text):
        # llama.cpp parses the GBNF when the sampler is made; there is nothing to compile apart
        return libllama.OracleGrammar(self.oracle, text)

    def matcher(self, compiled):
        return compiled.clone()

    def accept(self, matcher, token):
        matcher.accept_unchecked(token)
        matcher._mask = None

    def clone(self, matcher):
        return matcher.clone()

    def new_mask(self):
        return [None]

    def fill(self, matcher, out):
        matcher._mask = None  # OracleGrammar caches the mask of a state; force llama_sampler_apply
        out[0] = matcher.allowed_mask()

    def allowed_ids(self, matcher, out):
        return np.flatnonzero(out[0]).astype(np.int32)


def xgrammar_gbnf(text: str) -> str:
    """The GBNF with each empty alternative written as ``""``: XGrammar's EBNF parser wants an element
    there (llama.cpp's json.gbnf has ``ws ::= | " " | ...``). The language is unchanged."""
    text = re.sub(r"(::=[ \t]*)\|", r'\1"" |', text)
    return re.sub(r"\|([ \t]*)\|", r'|\1"" |', text)


class XGrammarEngine(Engine):
    name = "xgrammar"
    modules = ("torch", "xgrammar")

    def prepare(self):
        import torch
        import xgrammar

        torch.set_num_threads(1)
        self.xgr = xgrammar
        self.torch = torch
        self.tokenizer_info = xgrammar.TokenizerInfo(
            encoded_vocab=list(self.vocab.pieces),
            vocab_type=xgrammar.VocabType.RAW,
            vocab_size=self.n_vocab,
            stop_token_ids=list(self.vocab.eog_ids),
        )
        self.compiler = xgrammar.GrammarCompiler(self.tokenizer_info, max_threads=1, cache_enabled=False)

    def compile(self, text):
        return self.compiler.compile_grammar(self.xgr.Grammar.from_ebnf(xgrammar_gbnf(text)))

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled)

    def accept(self, matcher, token):
        if not matcher.accept_token(token):
            raise RuntimeError(f"XGrammar rejected token {token} ({self.vocab.piece(token)!r})")

    def clone(self, matcher):
        return matcher.fork()

    def new_mask(self):
        return self.xgr.allocate_token_bitmask(1, self.n_vocab)

    def fill(self, matcher, out):
        matcher.fill_next_token_bitmask(out)

    def allowed_ids(self, matcher, out):
        return bitmask_to_ids(out[0].numpy(), self.n_vocab)


class LlguidanceEngine(Engine):
    name = "llguidance"
    modules = ("llguidance", "llguidance.numpy")

    def prepare(self):
        import llguidance
        import llguidance.numpy

        self.llg = llguidance
        self.llg_numpy = llguidance.numpy
        oracle = oracle_vocab(self.vocab_name)
        eos = oracle.special_id("eos")
        attrs = self.vocab.token_attrs

        class ByteTokenizer:
            # what llguidance.TokenizerWrapper reads: the pieces, EOS/BOS and a text -> ids function
            tokens = list(self.vocab.pieces)
            eos_token_id = eos if eos is not None else self.vocab.eog_ids[0]
            bos_token_id = oracle.special_id("bos")
            special_token_ids = [] if attrs is None else np.flatnonzero(attrs & 8).tolist()

            def __call__(self, text):
                return oracle.tokenize(text, add_special=False, parse_special=False)

        self.tokenizer = llguidance.LLTokenizer(
            llguidance.TokenizerWrapper(ByteTokenizer()),
            n_vocab=self.n_vocab,
            eos_token=list(self.vocab.eog_ids),
        )

    def compile(self, text):
        grammar = self.llg.grammar_from("gbnf", text)
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise RuntimeError(f"llguidance rejected the grammar: {matcher.get_error()}")
        return grammar, matcher

    def matcher(self, compiled):
        # a new matcher, not a deep_copy of the compiled one, so that lazily built lexer states
        # start cold on each walk (as a new request would)
        return self.llg.LLMatcher(self.tokenizer, compiled[0], log_level=0)

    def accept(self, matcher, token):
        if not matcher.consume_token(token) or matcher.is_error():
            raise RuntimeError(
                f"llguidance rejected token {token} ({self.vocab.piece(token)!r}): {matcher.get_error()}"
            )

    def clone(self, matcher):
        return matcher.deep_copy()

    def new_mask(self):
        return self.llg_numpy.allocate_token_bitmask(1, self.n_vocab)

    def fill(self, matcher, out):
        self.llg_numpy.fill_next_token_bitmask(matcher, out)

    def allowed_ids(self, matcher, out):
        return bitmask_to_ids(out[0], self.n_vocab)


ENGINE_CLASSES = {
    "bankml": BankmlEngine,
    "libllama": LibllamaEngine,
    "xgrammar": XGrammarEngine,
    "llguidance": LlguidanceEngine,
}


@functools.lru_cache(maxsize=None)
def engine(engine_name: str, vocab_name: str) -> Engine:
    return ENGINE_CLASSES[engine_name](vocab_name)


def states_along(eng: Engine, compiled, tokens, positions) -> dict[int, object]:
    """The engine's matcher before token ``p`` of the walk, for each p in positions (0 = start)."""
    wanted = sorted(set(positions))
    states = {}
    m = eng.matcher(compiled)
    done = 0
    for p in wanted:
        while done < p:
            eng.accept(m, tokens[done])
            done += 1
        states[p] = eng.clone(m)
    return states


def ids_hash(ids: np.ndarray) -> tuple[int, int]:
    return mask_hash(ids)
