# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The regex dialect of a conversion: JSON Schema's own, ECMA-262 (``"ecma"``, the default), or Python's ``re``
(``"python"``, for users who validate with Python's ``jsonschema``, whose ``pattern`` is ``re.search``).

``in_python_dialect(schema, dialect)`` is the schema with every ``pattern`` value and ``patternProperties`` key
rewritten as the Python pattern of the same language (``lang.ecma.to_python``): the rest of the compiler reads
patterns as Python's. Only the objects on the way to a rewritten pattern are copied (the caller's schema is never
changed); a pattern the translation refuses is refused naming its keyword and pointer.

Owns: the dialect names and the rewrite. Imports ``document`` (pointer escapes), ``vocabulary`` and ``lang``.
"""

from __future__ import annotations

import re
import warnings

from bankml.schema.strict.document import escape
from bankml.schema.strict.lang.bounds import LangError
from bankml.schema.strict.lang.ecma import to_python
from bankml.schema.strict.vocabulary import SUBSCHEMA_LIST, SUBSCHEMA_MAP, SUBSCHEMA_ONE, refuse

REGEX_DIALECTS = ("ecma", "python")
_ONE, _LIST, _MAP = sorted(SUBSCHEMA_ONE), sorted(SUBSCHEMA_LIST), sorted(SUBSCHEMA_MAP)


def check_dialect(dialect):
    if dialect not in REGEX_DIALECTS:
        raise ValueError("regex_dialect must be one of %s, not %r" % (", ".join(REGEX_DIALECTS), dialect))


def in_python_dialect(schema, dialect):
    """``schema`` with its patterns in Python's dialect (itself when ``dialect`` is ``"python"`` or when it has
    no pattern)."""
    check_dialect(dialect)
    if dialect == "python":
        return schema
    edits = []  # (path of keys to the schema object, "pattern" or "patternProperties", its pointer)
    stack = [(schema, (), "#")]
    while stack:
        s, path, ptr = stack.pop()
        if not isinstance(s, dict):
            continue
        if isinstance(s.get("pattern"), str):
            edits.append((path, "pattern", ptr + "/pattern"))
        if isinstance(s.get("patternProperties"), dict) and s["patternProperties"]:
            edits.append((path, "patternProperties", ptr + "/patternProperties"))
        for k in _ONE:
            if isinstance(s.get(k), dict):
                stack.append((s[k], path + (k,), ptr + "/" + k))
        for k in _LIST:
            if isinstance(s.get(k), list):
                for i, sub in enumerate(s[k]):
                    stack.append((sub, path + (k, i), "%s/%s/%d" % (ptr, k, i)))
        for k in _MAP:
            if isinstance(s.get(k), dict):
                for name, sub in s[k].items():
                    stack.append((sub, path + (k, name), "%s/%s/%s" % (ptr, k, escape(name))))
    if not edits:
        return schema
    # deepest first, so that a rewritten patternProperties key is not on the path of an edit still to do
    edits.sort(key=lambda e: -len(e[0]))
    for path, keyword, ptr in edits:
        schema = _rewrite(schema, path, keyword, ptr)
    return schema


def _rewrite(schema, path, keyword, ptr):
    nodes = [schema]
    for k in path:
        nodes.append(nodes[-1][k])
    node = dict(nodes[-1])
    if keyword == "pattern":
        node["pattern"] = _python(node["pattern"], "pattern", ptr)
    else:
        out = {}
        for k, v in node["patternProperties"].items():
            py = _python(k, "patternProperties", ptr + "/" + escape(k))
            if py in out:
                refuse("patternProperties", ptr + "/" + escape(k), "two patterns are the same regex written twice")
            out[py] = v
        node["patternProperties"] = out
    for parent, k in zip(reversed(nodes[:-1]), reversed(path)):
        copy = list(parent) if isinstance(parent, list) else dict(parent)
        copy[k] = node
        node = copy
    return node


def _python(pattern, keyword, ptr):
    """The Python pattern of the ECMA-262 ``pattern``; a refusal at ``ptr`` (the user's own pointer) when it is no
    regex or has what is not built."""
    if not isinstance(pattern, str):
        return pattern  # the readers refuse it, naming the keyword
    try:
        py = to_python(pattern, keyword)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Python's notes on future syntax
            re.compile(py)
    except LangError as e:
        refuse(keyword, ptr, "%s: %s" % (keyword, e.reason))
    except (re.error, RecursionError, OverflowError) as e:
        refuse(keyword, ptr, "%s: %r is no regex: %s" % (keyword, pattern, e))
    return py
