"""The exceptions bankml raises, and the JSON type names their messages print. llama.cpp's aborts and throws
become these; nothing reaches abort()."""

import numbers


class GrammarError(ValueError):
    """A grammar that llama.cpp refuses, or an operation llama.cpp's matcher would throw on.

    ``reason`` is llama.cpp's wording; ``line`` and ``column`` (1-based, counted in
    characters of the grammar text) say where, when the error comes from the text.
    """

    def __init__(self, reason, line=None, column=None, context=None):
        self.reason = reason
        self.line = line
        self.column = column
        self.context = context
        message = reason
        if line is not None:
            message = f"{reason} at line {line}, column {column}"
            if context:
                message += f": {context!r}"
        super().__init__(message)


class SchemaError(ValueError):
    """A JSON schema that llama.cpp's converter refuses (or that bankml refuses before converting: text that
    is not JSON, nesting deeper than bankml.schema.jsontext.MAX_JSON_DEPTH).

    The message is llama.cpp's (``"JSON schema conversion failed:\\n..."``); ``pointer`` is the JSON pointer
    of the offending node as llama.cpp writes it in that message (``"#"``, ``"#/properties/a"``, ...).
    ``keyword`` is the schema keyword that strict mode (bankml.schema.strict) refused or the limit it ran past
    (``"pattern"``, ``"uniqueItems"``, ``"SchemaLimits.max_seconds"``); None for llama.cpp's refusals.
    """

    def __init__(self, message, pointer="#", keyword=None):
        self.pointer = pointer
        self.keyword = keyword
        super().__init__(message)


class RequestError(ValueError):
    """A request llama-server (or Ollama, for ``format``) refuses; the message is the server's."""


def json_type_name(value, *, integer=False):
    """The name of a JSON value's type as the messages bankml reproduces print it: nlohmann::json's
    ``type_name()`` ("null", "boolean", "number", "string", "array", "object"; llama.cpp's ``type must be number,
    but is string``). ``integer=True`` names an integral number "integer" (JSON schema's type names, for the
    types a const or enum value can take). A Python value JSON has no type for is named by its Python type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, numbers.Real):
        return "integer" if integer and isinstance(value, numbers.Integral) else "number"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
