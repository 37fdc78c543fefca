# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The strict compiler's entry points: ``strict_schema_to_grammar`` (a whole grammar) and ``strict_schema_rules``
(the rules of one schema node, to embed in a bigger grammar), and the run of one conversion.

A conversion runs in the caller's thread. Compiled, its recursion asks ``_cstack`` for C stack: short of it, the
conversion is done again from the start in a thread of its own with ``DEEP_STACK`` bytes of stack
(``_cstack.run_with_stack``), and past that it is refused. As plain Python, deep recursion ends in RecursionError,
a refusal too. No process-wide state changes: not the recursion limit, not the garbage collector.

Owns: the entry points, the deep rerun, the rule names of an embedded schema. Imports the compiler; no part of the
package imports it.
"""

from __future__ import annotations

import re
import types

from bankml.errors import SchemaError
from bankml.schema import jsondepth
from bankml.schema._cstack import run_with_stack
from bankml.schema.limits import DEFAULT_LIMITS, _TooDeep
from bankml.schema.strict.compiler import Compiler
from bankml.schema.strict.dialect import check_dialect, in_python_dialect
from bankml.schema.strict.document import check_registry
from bankml.schema.strict.gbnf import CANONICAL_FIXED_RULES, FIXED_RULES, GBNF_TOKEN, NEVER
from bankml.schema.strict.vocabulary import LENIENT_KEYWORDS, Refuse, refuse

_TOO_DEEP = "strict JSON schema conversion failed:\nthe schema nests too deeply"
# The languages a conversion writes (the package's docstring): "exact", every JSON text of every instance (to
# judge texts with); "canonical", one spelling per instance (up to its extra keys' order), the one to generate in.
STYLES = ("exact", "canonical")


def check_style(style, option="style"):
    """``style`` if it is one of STYLES; a ValueError naming ``option`` (the caller's name for it) otherwise."""
    if style not in STYLES:
        raise ValueError("%s must be 'canonical' or 'exact', not %r" % (option, style))
    return style


# the C stack of the thread a compiled conversion is done again in when its caller's thread runs short: about 8x
# the main thread's (Linux gives 8 MB); only the pages the recursion reaches are ever touched
DEEP_STACK = 64 * 1024 * 1024


def compile_schema(schema, lenient, limits, pointer="#", regex_dialect="ecma", style="exact", registry=None):
    """``(root expression, {name: body})``: the expression of the instances of the schema node at ``pointer``
    (a JSON pointer into ``schema``, the document its ``$ref``s resolve in, with ``registry``'s documents) and
    every rule it may use, the fixed ones (``space``, ``char``, ``value``...) last. Raises SchemaError as
    strict_schema_to_grammar does."""
    check_style(style)
    registry = check_registry(registry)
    try:
        return _compile(schema, lenient, limits, pointer, regex_dialect, style, registry)
    except _TooDeep:
        if not COMPILED:
            raise SchemaError(_TOO_DEEP, "#", keyword="SchemaLimits") from None
    # compiled, the recursion ran low on the caller's C stack: done again from the start with room
    try:
        return run_with_stack(
            lambda: _compile(schema, lenient, limits, pointer, regex_dialect, style, registry), DEEP_STACK
        )
    except _TooDeep:
        raise SchemaError(_TOO_DEEP, "#", keyword="SchemaLimits") from None


# Compiled, a function is a Cython function, not a Python one
COMPILED = not isinstance(compile_schema, types.FunctionType)


def _compile(schema, lenient, limits, pointer, regex_dialect, style, registry):
    check_dialect(regex_dialect)
    bad = set(lenient) - LENIENT_KEYWORDS
    if bad:
        raise ValueError("lenient takes %s; not %s" % (", ".join(sorted(LENIENT_KEYWORDS)), ", ".join(sorted(bad))))
    if isinstance(schema, (str, bytes)):
        try:
            schema = jsondepth.loads(schema)  # nesting bounded before the decoder recurses
        except ValueError as e:
            raise SchemaError(
                "strict JSON schema conversion failed:\nthe schema is not JSON: %s" % e, "#", keyword="schema"
            ) from None
    if limits is None:
        limits = DEFAULT_LIMITS  # the same bounds as the llama.cpp port: 30 s, 8 MB
    c = None
    try:
        schema = in_python_dialect(schema, regex_dialect)
        # a registry document is read in the dialect when a reference names it (not one it never names)
        c = Compiler(schema, lenient, limits, style, registry, lambda d: in_python_dialect(d, regex_dialect))
        node = c.doc.node_at(pointer)
        if node is True or node is False or isinstance(node, dict):
            root = c.rule([node], pointer)
        else:
            refuse("schema", pointer, "a schema must be an object or a boolean")
        rules = dict(c.rules.rules)
    except Refuse as e:
        raise SchemaError(
            "strict JSON schema conversion failed:\n%s (keyword %s at %s)" % (e.reason, e.keyword, e.pointer),
            e.pointer,
            keyword=e.keyword,
        ) from None
    except RecursionError:
        raise SchemaError(_TOO_DEEP, "#", keyword="SchemaLimits") from None
    finally:
        if c is not None:
            c.close()
    rules.update(CANONICAL_FIXED_RULES if style == "canonical" else FIXED_RULES)
    return (root if root is not None else NEVER), rules


def strict_schema_to_grammar(schema, *, lenient=(), limits=None, regex_dialect="ecma", style="exact", registry=None):
    """Compile a JSON schema (a dict, a bool, or JSON text) to GBNF whose root rule ``root`` accepts exactly
    the JSON texts (spelled as the package's docstring says) of the instances jsonschema accepts.

    ``lenient``: keywords to treat as annotations instead of refusing them where strict mode cannot enforce
    them (see LENIENT_KEYWORDS). ``limits``: a ``bankml.schema.SchemaLimits`` (size, nodes, seconds).
    ``regex_dialect``: ``"ecma"`` (JSON Schema's ECMA-262 regexes, the default) or ``"python"`` (Python's ``re``, as
    the ``jsonschema`` package searches with it; ``dialect``). ``style``: ``"exact"`` (every JSON text of each
    instance: the language to judge texts with) or ``"canonical"`` (the language to generate in: one spelling of
    each instance, a subset of the exact one; the package's docstring). ``registry``: ``{URI: schema}``, the
    other documents a ``$ref`` may name (as ``referencing.Registry`` gives python-jsonschema its remotes); nothing
    is fetched, and a reference to a URI outside the document, the registry and the drafts' shipped metaschemas is
    refused. Raises ``SchemaError`` with ``keyword`` and ``pointer`` set for every schema it refuses, ValueError
    for a bad ``style`` or ``registry``.
    """
    root, rules = compile_schema(schema, lenient, limits, regex_dialect=regex_dialect, style=style, registry=registry)
    lines = ["root ::= " + root + " space"]
    for name, body in rules.items():
        lines.append("%s ::= %s" % (name, body))
    return "\n".join(lines) + "\n"


def strict_schema_rules(
    schema, name, *, pointer="#", lenient=(), limits=None, regex_dialect="ecma", style="exact", registry=None
):
    """The strict rules of one schema, to embed in a bigger grammar: ``{rule name: body}`` where ``name``
    (a GBNF rule name) is the rule of the schema node at ``pointer`` (default the whole ``schema``; a pointer
    such as ``#/properties/a`` compiles one property, its ``$ref``s resolved in the whole document) followed
    by ``space``, as strict_schema_to_grammar's ``root``, and every other rule it reaches is named
    ``name + "-" + its own name``: no clash with another schema's rules under another name, nor with
    llama.cpp's converter rules (``space``, ``string``, ``value``... differ there). Raises SchemaError
    naming the keyword and pointer, as strict_schema_to_grammar does; ``style`` and ``registry`` are its too."""
    if not re.fullmatch(r"[a-zA-Z0-9-]+", name):
        raise ValueError("bad GBNF rule name %r" % (name,))
    root, rules = compile_schema(schema, lenient, limits, pointer, regex_dialect, style, registry)
    prefix = name + "-"
    out = {}
    pending = [(name, root + " space")]
    seen = {name}
    while pending:
        rule, body = pending.pop()
        parts = []
        for token in GBNF_TOKEN.findall(body):
            if token in rules:
                if token not in seen:
                    seen.add(token)
                    pending.append((prefix + token, rules[token]))
                token = prefix + token
            parts.append(token)
        out[rule] = "".join(parts)
    return out
