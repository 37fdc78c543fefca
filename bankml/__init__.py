"""bankml: llama.cpp's structured-output machinery for any Python runtime, exact and fast."""
from ._grammar import DEFAULT_MAX_STACKS, Grammar, MatchContext, Rules, fill_next_token_bitmasks
from ._hash import mask_hash
from .errors import GrammarError
from .vocab import Vocab

__all__ = ["Grammar", "GrammarError", "MatchContext", "Rules", "Vocab", "fill_next_token_bitmasks", "mask_hash",
           "DEFAULT_MAX_STACKS"]
__version__ = "0.1.0"
