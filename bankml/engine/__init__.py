"""The grammar engine: GBNF rules, the matcher and its masks, vocabularies and the code-point trie.

Owns: ``_rules`` (llama.cpp's GBNF parser and the rules IR; ``parser`` holds the IR's element types and
bounds as Python constants), ``_grammar`` (the matcher, ``Grammar``, and the shared ``MatchContext``: stacks,
stack sets, the trie walk, the segment and mask caches, each part a ``.pxi`` of one translation unit),
``_trie`` (the decoded vocabulary and its code-point trie), ``_hash`` (mask hashes), ``vocab`` (``Vocab``:
pieces and end-of-generation ids read from GGUF files as llama.cpp renders them) and ``_triggers`` (lazy
grammars' trigger buffer). A serving engine's batch API: ``fill_next_token_bitmasks`` (a batch's rows in one call,
without the GIL, across threads) and ``apply_token_bitmask_inplace``.

Must not import: any other bankml package (``schema``, ``sampling``, ``chat``, ``serve``, ``integrations``);
only ``bankml.errors`` from outside this package.
"""

from bankml.engine._grammar import (
    DEFAULT_MAX_STACKS,
    Grammar,
    MatchContext,
    Rules,
    apply_token_bitmask_inplace,
    fill_next_token_bitmasks,
)
from bankml.engine._hash import mask_hash
from bankml.engine.vocab import Vocab

__all__ = [
    "DEFAULT_MAX_STACKS",
    "Grammar",
    "MatchContext",
    "Rules",
    "Vocab",
    "apply_token_bitmask_inplace",
    "fill_next_token_bitmasks",
    "mask_hash",
]
