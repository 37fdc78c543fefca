"""bankml: llama.cpp's structured-output machinery for any Python runtime, exact and fast."""

from bankml.chat.constraint import (
    Constraint,
    chat_grammar,
    from_ollama,
    from_ollama_text,
    from_openai,
    from_openai_text,
    json_object_grammar,
)
from bankml.chat.content import ContentError, ContentStream, json_content, json_message
from bankml.engine._grammar import DEFAULT_MAX_STACKS, Grammar, MatchContext, Rules, fill_next_token_bitmasks
from bankml.engine._hash import mask_hash
from bankml.engine.vocab import Vocab
from bankml.errors import GrammarError, RequestError, SchemaError
from bankml.sampling._sampler import Rng, Sampler
from bankml.sampling.params import SamplerParams
from bankml.schema.grammar import json_schema_to_grammar, json_schema_to_rules

__all__ = [
    "Grammar",
    "GrammarError",
    "MatchContext",
    "Rng",
    "Rules",
    "Sampler",
    "SamplerParams",
    "SchemaError",
    "Vocab",
    "fill_next_token_bitmasks",
    "json_schema_to_grammar",
    "json_schema_to_rules",
    "mask_hash",
    "DEFAULT_MAX_STACKS",
    "Constraint",
    "RequestError",
    "chat_grammar",
    "from_ollama",
    "from_ollama_text",
    "from_openai",
    "from_openai_text",
    "json_object_grammar",
    "ContentError",
    "ContentStream",
    "json_content",
    "json_message",
]
__version__ = "0.1.0"
