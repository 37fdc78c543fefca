"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

Questions about the nodes of a schema document (``bankml.schema.reader.SchemaDocument``) that the chat
layer asks: ``common_chat_schema::may_be_string`` and ``value_types`` (``common/json-schema.cpp``). Owns
nothing else; must not import the chat layer.
"""

from bankml.errors import json_type_name
from bankml.schema import reader as s

__all__ = [
    "may_be_string",
    "value_types",
    "TYPE_NULL",
    "TYPE_BOOLEAN",
    "TYPE_NUMBER",
    "TYPE_INTEGER",
    "TYPE_STRING",
    "TYPE_ARRAY",
    "TYPE_OBJECT",
]

TYPE_NULL, TYPE_BOOLEAN, TYPE_NUMBER, TYPE_INTEGER, TYPE_STRING, TYPE_ARRAY, TYPE_OBJECT = (
    "null",
    "boolean",
    "number",
    "integer",
    "string",
    "array",
    "object",
)
_ALL_TYPES = frozenset((TYPE_NULL, TYPE_BOOLEAN, TYPE_NUMBER, TYPE_INTEGER, TYPE_STRING, TYPE_ARRAY, TYPE_OBJECT))


def may_be_string(node, visited=None):
    visited = set() if visited is None else visited
    k = node.kind
    if k == s.STRING:
        return True
    if k == s.CONST:
        return isinstance(node.value, str)
    if k == s.ENUM:
        return any(isinstance(v, str) for v in node.values)
    if k == s.REF:
        target = getattr(node, "target", None)
        if target is None or id(target) in visited:
            return False
        visited.add(id(target))
        result = may_be_string(target, visited)
        visited.discard(id(target))
        return result
    if k == s.ANY_OF:
        return any(may_be_string(c, visited) for c in node.children)
    if k == s.ALL_OF:
        # every child must allow a string, an any child constrains nothing
        any_string = False
        for c in node.children:
            if c.kind == s.ANY:
                continue
            if not may_be_string(c, visited):
                return False
            any_string = True
        return any_string
    return False


def value_types(node, visited=None):
    visited = set() if visited is None else visited
    k = node.kind
    simple = {
        s.ANY: _ALL_TYPES,
        s.NULL: {TYPE_NULL},
        s.BOOLEAN: {TYPE_BOOLEAN},
        s.NUMBER: {TYPE_NUMBER, TYPE_INTEGER},
        s.INTEGER: {TYPE_INTEGER},
        s.STRING: {TYPE_STRING},
        s.ARRAY: {TYPE_ARRAY},
        s.TUPLE: {TYPE_ARRAY},
        s.OBJECT: {TYPE_OBJECT},
    }
    if k in simple:
        return set(simple[k])
    if k == s.CONST:
        return {json_type_name(node.value, integer=True)}
    if k == s.ENUM:
        return {json_type_name(v, integer=True) for v in node.values}
    if k == s.REF:
        target = getattr(node, "target", None)
        if target is None or id(target) in visited:
            return set()
        visited.add(id(target))
        types = value_types(target, visited)
        visited.discard(id(target))
        return types
    if k == s.ANY_OF:
        out = set()
        for c in node.children:
            out |= value_types(c, visited)
        return out
    if k == s.ALL_OF:
        out = set(_ALL_TYPES)
        for c in node.children:
            out &= value_types(c, visited)
        return out
    return set()
