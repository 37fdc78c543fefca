"""bankml: llama.cpp's structured-output machinery for any Python runtime, exact and fast."""
from ._grammar import DEFAULT_MAX_STACKS, Grammar, MatchContext, Rules, fill_next_token_bitmasks
from ._hash import mask_hash
from ._sampler import Rng, Sampler, SamplerParams
from .errors import GrammarError, SchemaError
from .schema import json_schema_to_grammar, json_schema_to_rules
from .vocab import Vocab
from .constraint import (Constraint, RequestError, chat_grammar, from_ollama, from_ollama_text, from_openai,
                         from_openai_text, json_object_grammar)
from .content import ContentError, ContentStream, json_content, json_message

__all__ = ["Grammar", "GrammarError", "MatchContext", "Rng", "Rules", "Sampler", "SamplerParams", "SchemaError",
           "Vocab", "fill_next_token_bitmasks", "json_schema_to_grammar", "json_schema_to_rules", "mask_hash",
           "DEFAULT_MAX_STACKS", "Constraint", "RequestError", "chat_grammar", "from_ollama", "from_ollama_text",
           "from_openai", "from_openai_text", "json_object_grammar", "ContentError", "ContentStream", "json_content",
           "json_message"]
__version__ = "0.1.0"
