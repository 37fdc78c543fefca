# Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.
# cython: boundscheck=True, wraparound=True
"""The schema reader, as llama.cpp's ``common/json-schema.cpp`` reads a schema (``common_chat_schema_from_json``):
the JSON tree (read by ``jsontext``) becomes a tree of ``_Node`` (``kind`` one of ``ANY`` ... ``OBJECT``), and what
llama.cpp cannot convert is refused here, with its message and the JSON pointer of the node. ``SchemaDocument`` is
the public face; ``bankml.schema.converter`` and the chat layer's schema questions work on its nodes.

setup.py compiles this file with Cython as it is (``reader.pxd`` makes ``_Node`` and ``_Builder`` cdef classes; the
directive line above keeps Python's indexing). Past ``_COMPILED_MAX_DEPTH`` levels the compiled reader stops and
the document is read again by this file run as plain Python (``_python_module``).
"""

import math
import re
import types

from bankml.errors import SchemaError
from bankml.schema.jsontext import _INT64_MAX, _INT64_MIN, _UINT64_MAX, load_schema
from bankml.schema.limits import (
    _COMPILED_MAX_DEPTH,
    _LimitExceeded,
    _Meter,
    _plain_module,
    _raise_recursion_limit,
    _restore_recursion_limit,
    _TooDeep,
)

__all__ = ["SchemaDocument"]

_INT_MAX = 2**31 - 1  # C++'s int (std::stoi, get<int>(), llama.cpp's unbounded counts)


def _wrap64(v):
    v &= 0xFFFFFFFFFFFFFFFF
    return v - 2**64 if v >= 2**63 else v


def _wrap32(v):
    v &= 0xFFFFFFFF
    return v - 2**32 if v >= 2**31 else v


def _is_int(v):
    return type(v) is int


def _is_number(v):
    return type(v) is int or type(v) is float


ANY, REF, ANY_OF, ALL_OF, CONST, ENUM, NULL, BOOLEAN, NUMBER, INTEGER, STRING, ARRAY, TUPLE, OBJECT = range(14)
FORMAT_NONE, FORMAT_UUID, FORMAT_DATE, FORMAT_TIME, FORMAT_DATE_TIME = range(5)


class _Node:
    # compiled, a cdef class whose attributes reader.pxd declares
    def __init__(self, kind, path):
        self.kind = kind
        self.path = path


class _Fail(Exception):
    def __init__(self, message, pointer):
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def _fail(path, msg):
    raise _Fail("JSON schema error at " + path + ": " + msg, path)


def _stoull(s):
    """std::stoull's reading of an array index; None where it throws."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", s)
    if not m:
        return None
    v = int(m.group(2))
    if v > _UINT64_MAX:
        return None
    if m.group(1) == "-":
        v = (-v) & _UINT64_MAX
    return v


def _stoi(s):
    """std::stoi; None where it throws."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", s)
    if not m:
        return None
    v = int(m.group(1))
    if v < -(2**31) or v > _INT_MAX:
        return None
    return v


# Compiled, a function is a Cython function, not a Python one
_COMPILED = not isinstance(_stoi, types.FunctionType)


class _Builder:
    def __init__(self, root, meter=None):
        self.root = root
        self.refs = {}
        self.pending = []
        self.meter = meter or _Meter(None)
        self.depth = 0

    def build(self):
        node = self.build_node(self.root, "#")
        for ref in self.pending:
            ref.target = self.refs[ref.ref]
        return node

    @staticmethod
    def get_count(schema, key, path, default):
        if key not in schema:
            return default
        v = schema[key]
        if not _is_int(v) or _wrap32(v) < 0:
            _fail(path, key + " must be a non-negative integer")
        return _wrap32(v)

    @staticmethod
    def get_bound(schema, key, path, round_up):
        v = schema[key]
        if _is_int(v):
            return _wrap64(v)
        if not _is_number(v):
            _fail(path, key + " must be a number")
        d = math.ceil(v) if round_up else math.floor(v)
        if d < _INT64_MIN or d > _INT64_MAX:
            return _INT64_MIN  # what x86-64's conversion gives for a double out of range
        return d

    @staticmethod
    def get_format(schema, path):
        if "format" not in schema:
            return FORMAT_NONE
        v = schema["format"]
        if type(v) is not str:
            _fail(path, "format must be a string")
        if v == "date":
            return FORMAT_DATE
        if v == "time":
            return FORMAT_TIME
        if v == "date-time":
            return FORMAT_DATE_TIME
        if v == "uuid" or (len(v) == 5 and v.startswith("uuid") and "1" <= v[4] <= "5"):
            return FORMAT_UUID
        return FORMAT_NONE

    def resolve_ref(self, ref, path):
        target = self.root
        tokens = ref[1:].split("/")
        for sel in tokens[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = _stoull(sel)
                if idx is None:
                    idx = len(target)
                if idx >= len(target):
                    _fail(path, "cannot resolve $ref " + ref + ", " + sel + " is out of range")
                target = target[idx]
            else:
                _fail(path, "cannot resolve $ref " + ref + ", " + sel + " not found")
        return target

    def build_ref(self, value, path):
        if type(value) is not str:
            _fail(path, "$ref must be a string")
        ref = value
        if not ref.startswith("#/"):
            _fail(path, "unsupported $ref " + ref + ", only references into the same document are supported")
        if ref not in self.refs:
            self.refs[ref] = None
            self.refs[ref] = self.build_node(self.resolve_ref(ref, path), ref)
        node = _Node(REF, path)
        node.ref = ref
        node.target = None
        self.pending.append(node)
        return node

    def build_alternatives(self, kind, alts, path):
        if type(alts) is not list:
            _fail(path, "must be an array of schemas")
        if not alts:
            _fail(path, "must not be empty")
        node = _Node(kind, path)
        node.children = [self.build_node(alt, path + "/" + str(i)) for i, alt in enumerate(alts)]
        return node

    def build_object(self, schema, path):
        node = _Node(OBJECT, path)
        required = set()
        if type(schema.get("required")) is list:
            for name in schema["required"]:
                if type(name) is str:
                    required.add(name)
        node.properties = []
        if "properties" in schema:
            props = schema["properties"]
            if type(props) is not dict:
                _fail(path, "properties must be an object")
            for name, prop in props.items():
                node.properties.append((name, self.build_node(prop, path + "/properties/" + name), name in required))
        node.additional = None
        if "additionalProperties" in schema:
            additional = schema["additionalProperties"]
            if type(additional) is bool:
                if additional:
                    node.additional = _Node(ANY, path + "/additionalProperties")
            elif type(additional) is dict:
                node.additional = self.build_node(additional, path + "/additionalProperties")
            else:
                _fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            node.additional = _Node(ANY, path)
        return node

    def build_array(self, schema, path):
        node = _Node(ARRAY, path)
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if type(items) is list:
                tup = _Node(TUPLE, path)
                tup.items = [self.build_node(item, path + "/" + key + "/" + str(i)) for i, item in enumerate(items)]
                return tup
            node.items = self.build_node(items, path + "/" + key)
        else:
            node.items = _Node(ANY, path)
        node.min_items = self.get_count(schema, "minItems", path, 0)
        node.max_items = self.get_count(schema, "maxItems", path, -1)
        return node

    def build_string(self, schema, path):
        node = _Node(STRING, path)
        node.pattern = ""
        if "pattern" in schema:
            pattern = schema["pattern"]
            if type(pattern) is not str:
                _fail(path, "pattern must be a string")
            node.pattern = pattern
        node.format = self.get_format(schema, path)
        node.min_length = self.get_count(schema, "minLength", path, 0)
        node.max_length = self.get_count(schema, "maxLength", path, -1)
        return node

    def build_integer(self, schema, path):
        node = _Node(INTEGER, path)
        node.minimum = _INT64_MIN
        node.maximum = _INT64_MAX
        if "minimum" in schema:
            node.minimum = self.get_bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            node.minimum = _wrap64(self.get_bound(schema, "exclusiveMinimum", path, False) + 1)
        if "maximum" in schema:
            node.maximum = self.get_bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            node.maximum = _wrap64(self.get_bound(schema, "exclusiveMaximum", path, True) - 1)
        return node

    def build_node(self, schema, path):
        self.depth += 1
        try:
            if _COMPILED and self.depth > _COMPILED_MAX_DEPTH:
                raise _TooDeep()
            # a node keeps its JSON pointer: "type" lists that copy a schema per type make these grow with depth
            self.meter.node(path)
            self.meter.work(len(path), path)
            if type(schema) is not dict:
                _fail(path, "schema must be an object")
            if "$ref" in schema:
                return self.build_ref(schema["$ref"], path)
            if "oneOf" in schema or "anyOf" in schema:
                key = "oneOf" if "oneOf" in schema else "anyOf"
                return self.build_alternatives(ANY_OF, schema[key], path + "/" + key)

            typ = schema.get("type")
            if type(typ) is list:
                if not typ:
                    _fail(path, "type must not be empty")
                node = _Node(ANY_OF, path)
                node.children = []
                for i, t in enumerate(typ):
                    alt = dict(schema)
                    alt["type"] = t
                    node.children.append(self.build_node(alt, path + "/type/" + str(i)))
                return node
            if "const" in schema:
                node = _Node(CONST, path)
                node.value = schema["const"]
                return node
            if "enum" in schema:
                values = schema["enum"]
                if type(values) is not list or not values:
                    _fail(path, "enum must be a non-empty array")
                node = _Node(ENUM, path)
                node.values = list(values)
                return node
            if typ is not None and type(typ) is not str:
                _fail(path, "type must be a string or an array of strings")

            type_name = typ if type(typ) is str else ""
            has_properties = "properties" in schema or (
                "additionalProperties" in schema and schema["additionalProperties"] is not True
            )

            if type_name == "":
                if has_properties:
                    return self.build_object(schema, path)
                if "allOf" in schema:
                    return self.build_alternatives(ALL_OF, schema["allOf"], path + "/allOf")
                if "items" in schema or "prefixItems" in schema:
                    return self.build_array(schema, path)
                if (
                    "pattern" in schema
                    or "minLength" in schema
                    or "maxLength" in schema
                    or self.get_format(schema, path) != FORMAT_NONE
                ):
                    return self.build_string(schema, path)
                return _Node(ANY, path)
            if type_name == "object":
                if not has_properties and "allOf" in schema:
                    return self.build_alternatives(ALL_OF, schema["allOf"], path + "/allOf")
                return self.build_object(schema, path)
            if type_name == "string":
                if "allOf" in schema:
                    return self.build_alternatives(ALL_OF, schema["allOf"], path + "/allOf")
                return self.build_string(schema, path)
            if type_name == "array":
                return self.build_array(schema, path)
            if type_name == "integer":
                return self.build_integer(schema, path)
            if type_name == "number":
                return _Node(NUMBER, path)
            if type_name == "boolean":
                return _Node(BOOLEAN, path)
            if type_name == "null":
                return _Node(NULL, path)
            _fail(path, "unrecognized type " + type_name)
        finally:
            self.depth -= 1


class SchemaDocument:
    """A schema read as llama.cpp's ``common_chat_schema_from_json`` reads it: ``root`` is the tree's root
    node. Raises SchemaError as json_schema_to_grammar() does for a schema llama.cpp refuses, and for one
    past ``limits.max_nodes``.

    Nodes are opaque to callers except for what ``build_grammar`` needs: ``node.properties`` (for an object
    node) is the list of ``(name, node, required)`` in schema order.
    """

    def __init__(self, schema, limits=None):
        doc = load_schema(schema, limits)
        _raise_recursion_limit()
        try:
            self.root = _Builder(doc, _Meter(limits)).build()
        except _TooDeep:
            self.root = _python_module().SchemaDocument(schema, limits).root
        except _Fail as e:
            raise SchemaError("JSON schema conversion failed:\n" + e.message, e.pointer) from None
        except _LimitExceeded as e:
            raise SchemaError(e.message, e.pointer) from None  # ASCII: _Meter's wording
        except RecursionError:
            raise SchemaError("JSON schema conversion failed:\nthe schema nests too deeply to read", "#") from None
        finally:
            _restore_recursion_limit()


_PYTHON_MODULE = None


def _python_module():
    """This file run as plain Python (bankml.schema._reader_python), where deep recursion ends in RecursionError. Its
    nodes and its reading errors are this module's (a node's attributes are public), so its documents go into either
    converter."""
    global _PYTHON_MODULE
    if _PYTHON_MODULE is None:
        _PYTHON_MODULE = _plain_module("_reader_python", "reader.py", _Node=_Node, _Fail=_Fail)
    return _PYTHON_MODULE
