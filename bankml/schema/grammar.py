"""The public entry points of bankml.schema: a JSON schema to GBNF (``json_schema_to_grammar``) and to parsed
rules (``json_schema_to_rules``), in either mode.

* ``mode="llama.cpp"`` (the default): ``bankml.schema.converter``, llama.cpp's converter byte for byte, with its
  warnings; what llama-server samples with.
* ``mode="strict"``: ``bankml.schema.strict``: the JSON texts of exactly the instances the schema accepts
  (jsonschema's reading), or a SchemaError naming the keyword and its JSON pointer; ``lenient`` names the
  keywords strict mode may treat as annotations instead of refusing them. Its warnings list is always empty.
  ``strict_style``: ``"canonical"`` (the default here: the language to generate in, one spelling of each
  instance, keys in schema order, no whitespace) or ``"exact"`` (every JSON text of each instance: the language
  to judge texts with, as MaskBench and the JSON-Schema-Test-Suite runs do).

``StrictGrammarBuilder`` gives the strict mode to grammars built of several parts (the chat layer's, where a
response format's or a tool's parameters' schema sits inside the template's wrapping): it stands for the
converter's ``GrammarBuilder`` and compiles each schema strictly under its own rule name prefix.

Owns the choice of mode only; must not import the chat layer.
"""

import re

from bankml.engine._grammar import Rules
from bankml.errors import GrammarError, SchemaError
from bankml.schema import converter
from bankml.schema import limits as _limits
from bankml.schema.strict import STYLES, check_style, strict_schema_rules, strict_schema_to_grammar

__all__ = [
    "MODES",
    "STRICT_STYLES",
    "StrictGrammarBuilder",
    "check_mode",
    "check_strict_style",
    "json_schema_to_grammar",
    "json_schema_to_rules",
]

MODES = ("llama.cpp", "strict")
STRICT_STYLES = STYLES  # ("exact", "canonical")
# the style of the strict grammars bankml generates with (server, generate, chat, engines)
DEFAULT_STRICT_STYLE = "canonical"

_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")


def check_mode(mode):
    """``mode`` if it is one of MODES; ValueError otherwise."""
    if mode not in MODES:
        raise ValueError("json_schema_mode must be 'llama.cpp' or 'strict', not %r" % (mode,))
    return mode


def check_strict_style(style):
    """``style`` if it is one of STRICT_STYLES; a ValueError naming ``strict_style`` otherwise."""
    return check_style(style, "strict_style")


class StrictGrammarBuilder:
    """A ``bankml.schema.converter.GrammarBuilder`` (``builder``) whose schemas strict mode compiles: what a
    ``build_grammar`` callback adds rules with when the grammar's JSON schemas are to be exact.

    ``add_rule`` is the converter builder's. ``add_schema(name, node, source)`` takes the schema's
    ``source``: ``(document, pointer)``, the JSON schema document (a dict, a bool or JSON text) and the JSON
    pointer of the node in it (``"#"`` for the whole document); ``node`` (the converter's reading) is not
    used. The schema's rule is ``name`` (its characters outside ``[a-zA-Z0-9-]`` made ``-``, as the
    converter names rules; a second, different schema under a taken name gets ``name0``, ``name1``...), its
    other rules ``name-...`` (``strict_schema_rules``). A schema strict mode refuses raises its SchemaError
    (keyword and pointer). ``style``: the strict style (STRICT_STYLES), canonical by default."""

    strict = True

    def __init__(self, builder, lenient=(), limits=None, style=DEFAULT_STRICT_STYLE):
        self._builder = builder
        self.lenient = tuple(lenient)
        self.limits = limits
        self.style = check_strict_style(style)
        self._names = {}  # rule name -> (document, pointer) compiled under it (the document kept alive)

    def add_rule(self, name, rule):
        return self._builder.add_rule(name, rule)

    def add_schema(self, name, node=None, source=None):
        if source is None:
            if not isinstance(node, (dict, bool, str, bytes)):
                raise ValueError("strict mode needs the schema itself (source=(document, pointer))")
            source = (node, "#")
        document, pointer = source
        base = _INVALID_RULE_CHARS.sub("-", name) or "schema"
        rule_name, i = base, 0
        while rule_name in self._names:
            known, known_pointer = self._names[rule_name]
            if known is document and known_pointer == pointer:
                return rule_name
            rule_name, i = base + str(i), i + 1
        rules = strict_schema_rules(
            document, rule_name, pointer=pointer, lenient=self.lenient, limits=self.limits, style=self.style
        )
        self._names[rule_name] = (document, pointer)
        for rule, body in rules.items():
            got = self._builder.add_rule(rule, body)
            if got != rule:
                # the converter renamed it (the name holds another rule): references to it would be wrong
                raise SchemaError(
                    "strict JSON schema conversion failed:\nthe rule name %s is taken in the grammar (keyword "
                    "schema at %s)" % (rule, pointer),
                    pointer,
                    keyword="schema",
                )
        return rule_name


def json_schema_to_grammar(
    schema, limits=None, *, mode="llama.cpp", lenient=(), regex_dialect=None, strict_style=None, registry=None
):
    """``(grammar, warnings)`` for a JSON schema (a dict, or JSON text): llama.cpp's converter (the default; see
    ``bankml.schema.converter.json_schema_to_grammar``) or the strict compiler (``mode="strict"``). Raises
    SchemaError for a schema the mode refuses or past ``limits`` (a ``SchemaLimits``), ValueError for an unknown
    mode or a ``lenient``, ``regex_dialect`` or ``strict_style`` outside strict mode. ``regex_dialect`` (strict
    mode): ``"ecma"`` (JSON Schema's ECMA-262, the default) or ``"python"`` (Python's ``re``, as ``jsonschema``
    reads ``pattern``). ``strict_style`` (strict mode): ``"canonical"`` (the default) or ``"exact"`` (the module
    docstring). ``registry`` (strict mode): ``{URI: schema}``, the documents a remote ``$ref`` may name (nothing
    is fetched; ``strict_schema_to_grammar``)."""
    if mode == "llama.cpp":
        if lenient or regex_dialect is not None or registry is not None:
            raise ValueError("lenient, regex_dialect and registry apply to mode='strict' only")
        if strict_style is not None:
            raise ValueError("strict_style applies to mode='strict' only")
        return converter.json_schema_to_grammar(schema, limits)
    if mode != "strict":
        raise ValueError("mode must be 'llama.cpp' or 'strict', not %r" % (mode,))
    dialect = "ecma" if regex_dialect is None else regex_dialect
    style = check_strict_style(DEFAULT_STRICT_STYLE if strict_style is None else strict_style)
    grammar = strict_schema_to_grammar(
        schema, lenient=lenient, limits=limits, regex_dialect=dialect, style=style, registry=registry
    )
    return grammar, []


def json_schema_to_rules(
    schema,
    vocab=None,
    limits=None,
    *,
    mode="llama.cpp",
    lenient=(),
    regex_dialect=None,
    strict_style=None,
    registry=None,
):
    """Convert a JSON schema (``mode``/``lenient``/``regex_dialect``/``strict_style``/``registry`` as
    json_schema_to_grammar's)
    and parse the grammar, as llama.cpp does before it samples with it. Returns ``(rules, grammar, warnings)``; a
    grammar the GBNF parser refuses raises SchemaError with the parser's reason (``__cause__`` is the
    GrammarError)."""
    if mode == "llama.cpp" and not lenient and regex_dialect is None and strict_style is None and registry is None:
        return converter.json_schema_to_rules(schema, vocab, limits)
    grammar, warnings = json_schema_to_grammar(
        schema,
        limits,
        mode=mode,
        lenient=lenient,
        regex_dialect=regex_dialect,
        strict_style=strict_style,
        registry=registry,
    )
    try:
        rules = Rules.parse(grammar, vocab=vocab)
    except GrammarError as e:
        raise SchemaError(
            _limits._PREFIX + "the grammar converted from the schema is refused by the GBNF parser: " + str(e), "#"
        ) from e
    return rules, grammar, warnings
