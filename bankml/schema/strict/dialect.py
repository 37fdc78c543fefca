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
    if dialect == "python" or not isinstance(schema, dict) or not _has_pattern_key(schema):
        return schema
    order, kids, up, cycles = _schema_objects(schema)
    new = {}  # id(dict) -> its rewritten copy, for the objects that change
    for d in order:  # children before parents (a cycle's back edge keeps the original: the document refuses it)
        ptr = _Pointer(up, id(d))
        changed = {}
        if isinstance(d.get("pattern"), str):
            changed["pattern"] = _python(d["pattern"], "pattern", ptr, "/pattern")
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
            changed["patternProperties"] = _python_keys(pp, ptr)
        if changed:
            copy = dict(d)
            copy.update(changed)
            new[id(d)] = copy
    if new and cycles:  # a copy would leave the cycle's back edge on the original, untranslated patterns
        parent, k, slot = cycles[0]
        where = _Pointer(up, parent) + "/" + k + ("" if slot is None else "/" + escape(str(slot)))
        refuse("schema", where, "a schema object that contains itself (not JSON) beside a pattern")
    return new.get(id(schema), schema)


def _has_pattern_key(schema):
    """Whether any object under ``schema`` (any JSON object, a superset of the schema objects the rewrite reads)
    has a ``pattern`` or ``patternProperties`` key: without one the rewrite changes nothing, and this scan
    allocates nothing per object (a Kubernetes schema's rewrite walk took 1 ms of its 30)."""
    seen = set()
    stack = [schema]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue  # shared or (not JSON) inside itself
        seen.add(id(x))
        if isinstance(x, dict):
            if "pattern" in x or "patternProperties" in x:
                return True
            stack.extend(v for v in x.values() if isinstance(v, (dict, list)))
        else:
            stack.extend(v for v in x if isinstance(v, (dict, list)))
    return False


def _schema_objects(schema):
    """The schema objects under ``schema`` in a depth-first postorder (children before parents), each once; per
    object its subschema slots ``(keyword, index or name or None, child)``; the pointer each was first reached
    at (``(parent id, keyword, slot)``, None for the root); the edges back into an object being read (a Python
    object inside itself)."""
    order, kids, up, finished, cycles = [], {}, {}, set(), []
    stack = [(schema, None, False)]
    while stack:
        s, link, done = stack.pop()
        if done:
            order.append(s)
            finished.add(id(s))
            continue
        if not isinstance(s, dict):
            continue
        if id(s) in kids:
            if id(s) not in finished:  # an object inside itself: no JSON text makes one
                cycles.append(link)
            continue
        kids[id(s)] = slots = []
        up[id(s)] = link
        stack.append((s, link, True))
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
            stack.append((child, (id(s), k, slot), False))
    return order, kids, up, cycles


class _Pointer:
    """The JSON pointer of a schema object, written only when asked (``ptr + "/pattern"``): a pointer per object
    would cost the square of a deep schema's depth."""

    def __init__(self, up, key):
        self.up, self.key = up, key

    def __add__(self, tail):
        parts, link = [], self.up[self.key]
        while link is not None:
            parent, k, slot = link
            parts.append(k if slot is None else "%s/%s" % (k, escape(str(slot))))
            link = self.up[parent]
        return "#" + "".join("/" + p for p in reversed(parts)) + tail


def _python_keys(pp, ptr):
    out = {}
    for k, v in pp.items():
        py = _python(k, "patternProperties", ptr, "/patternProperties/" + escape(k))
        if py in out:
            where = ptr + "/patternProperties/" + escape(k)
            refuse("patternProperties", where, "two patterns are the same regex written twice")
        out[py] = v
    return out


def _python(pattern, keyword, ptr, tail):
    """The Python pattern of the ECMA-262 ``pattern``; a refusal at ``ptr + tail`` (the user's own pointer,
    written only then) when it is no regex or has what is not built."""
    if not isinstance(pattern, str):
        return pattern  # the readers refuse it, naming the keyword
    try:
        py = to_python(pattern, keyword)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Python's notes on future syntax
            re.compile(py)
    except LangError as e:
        refuse(keyword, ptr + tail, "%s: %s" % (keyword, e.reason))
    except (re.error, RecursionError, OverflowError) as e:
        refuse(keyword, ptr + tail, "%s: %r is no regex: %s" % (keyword, pattern, e))
    return py
