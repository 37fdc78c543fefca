"""The public entry points of bankml.schema: a JSON schema to GBNF (``json_schema_to_grammar``) and to parsed
rules (``json_schema_to_rules``), in either mode.

* ``mode="llama.cpp"`` (the default): ``bankml.schema.converter``, llama.cpp's converter byte for byte, with its
  warnings; what llama-server samples with.
* ``mode="strict"``: ``bankml.schema.strict``: exactly the JSON texts the schema accepts (jsonschema's reading),
  or a SchemaError naming the keyword and its JSON pointer; ``lenient`` names the keywords strict mode may
  treat as annotations instead of refusing them. Its warnings list is always empty.

Owns the choice of mode only; must not import the chat layer.
"""

from bankml.engine._grammar import Rules
from bankml.errors import GrammarError, SchemaError
from bankml.schema import converter
from bankml.schema.strict import strict_schema_to_grammar

__all__ = ["MODES", "json_schema_to_grammar", "json_schema_to_rules"]

MODES = ("llama.cpp", "strict")


def json_schema_to_grammar(schema, limits=None, *, mode="llama.cpp", lenient=()):
    """``(grammar, warnings)`` for a JSON schema (a dict, or JSON text): llama.cpp's converter (the default; see
    ``bankml.schema.converter.json_schema_to_grammar``) or the strict compiler (``mode="strict"``). Raises
    SchemaError for a schema the mode refuses or past ``limits`` (a ``SchemaLimits``), ValueError for an unknown
    mode or a ``lenient`` outside strict mode."""
    if mode == "llama.cpp":
        if lenient:
            raise ValueError("lenient applies to mode='strict' only")
        return converter.json_schema_to_grammar(schema, limits)
    if mode != "strict":
        raise ValueError("mode must be 'llama.cpp' or 'strict', not %r" % (mode,))
    converter._raise_recursion_limit()
    try:
        return strict_schema_to_grammar(schema, lenient=lenient, limits=limits), []
    finally:
        converter._restore_recursion_limit()


def json_schema_to_rules(schema, vocab=None, limits=None, *, mode="llama.cpp", lenient=()):
    """Convert a JSON schema (``mode``/``lenient`` as json_schema_to_grammar's) and parse the grammar, as
    llama.cpp does before it samples with it. Returns ``(rules, grammar, warnings)``; a grammar the GBNF parser
    refuses raises SchemaError with the parser's reason (``__cause__`` is the GrammarError)."""
    if mode == "llama.cpp" and not lenient:
        return converter.json_schema_to_rules(schema, vocab, limits)
    grammar, warnings = json_schema_to_grammar(schema, limits, mode=mode, lenient=lenient)
    try:
        rules = Rules.parse(grammar, vocab=vocab)
    except GrammarError as e:
        raise SchemaError(
            converter._PREFIX + "the grammar converted from the schema is refused by the GBNF parser: " + str(e), "#"
        ) from e
    return rules, grammar, warnings
