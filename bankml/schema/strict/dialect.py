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
    no pattern). Each schema object is read once however many paths reach it (shared sub-objects stay shared),
    without recursion: a deep schema is the document's to refuse."""
    check_dialect(dialect)
    if dialect == "python" or not isinstance(schema, dict):
        return schema
    order, kids, first_ptr, cycles = _schema_objects(schema)
    new = {}  # id(dict) -> its rewritten copy, for the objects that change
    for d in order:  # children before parents (a cycle's back edge keeps the original: the document refuses it)
        ptr = first_ptr[id(d)]
        changed = {}
        if isinstance(d.get("pattern"), str):
            changed["pattern"] = _python(d["pattern"], "pattern", ptr + "/pattern")
        for k, slot, child in kids[id(d)]:
            if id(child) not in new:
                continue
            if slot is None:
                changed[k] = new[id(child)]
            else:
                if k not in changed:
                    changed[k] = list(d[k]) if isinstance(d[k], list) else dict(d[k])
                changed[k][slot] = new[id(child)]
        pp = changed.get("patternProperties", d.get("patternProperties"))
        if isinstance(pp, dict) and pp:
            changed["patternProperties"] = _python_keys(pp, ptr + "/patternProperties")
        if changed:
            copy = dict(d)
            copy.update(changed)
            new[id(d)] = copy
    if new and cycles:  # a copy would leave the cycle's back edge on the original, untranslated patterns
        refuse("schema", cycles[0], "a schema object that contains itself (not JSON) beside a pattern")
    return new.get(id(schema), schema)


def _schema_objects(schema):
    """The schema objects under ``schema`` in a depth-first postorder (children before parents), each once; per
    object its subschema slots ``(keyword, index or name or None, child)``; the pointer each was first reached
    at; the pointers of the edges back into an object being read (a Python object inside itself)."""
    order, kids, first_ptr, finished, cycles = [], {}, {}, set(), []
    stack = [(schema, "#", False)]
    while stack:
        s, ptr, done = stack.pop()
        if done:
            order.append(s)
            finished.add(id(s))
            continue
        if not isinstance(s, dict):
            continue
        if id(s) in kids:
            if id(s) not in finished:  # an object inside itself: no JSON text makes one
                cycles.append(ptr)
            continue
        kids[id(s)] = slots = []
        first_ptr[id(s)] = ptr
        stack.append((s, ptr, True))
        for k in _ONE:
            if isinstance(s.get(k), dict):
                slots.append((k, None, s[k]))
        for k in _LIST:
            if isinstance(s.get(k), list):
                slots += [(k, i, sub) for i, sub in enumerate(s[k]) if isinstance(sub, dict)]
        for k in _MAP:
            if isinstance(s.get(k), dict):
                slots += [(k, name, sub) for name, sub in s[k].items() if isinstance(sub, dict)]
        for k, slot, child in reversed(slots):
            where = ptr + "/" + k if slot is None else "%s/%s/%s" % (ptr, k, escape(str(slot)))
            stack.append((child, where, False))
    return order, kids, first_ptr, cycles


def _python_keys(pp, ptr):
    out = {}
    for k, v in pp.items():
        py = _python(k, "patternProperties", ptr + "/" + escape(k))
        if py in out:
            refuse("patternProperties", ptr + "/" + escape(k), "two patterns are the same regex written twice")
        out[py] = v
    return out


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
