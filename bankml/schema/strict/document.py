# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The schema document of one conversion: its draft, the JSON pointer and base URI of every schema object in it,
its ``$id``/``id`` resources and ``$anchor``s, ``$ref`` resolution, and the synthetic schemas the compiler adds
(a negation, a dependency's "the key is present"), each under the pointer of the keyword it stands for.

A schema object is a dict of the document (or a synthetic one the document keeps alive); its pointer, base and
whether it is synthetic are kept by the dict's ``id()``: this object is the only one that writes those tables.

The drafts' metaschemas are shipped (``bankml/schema/metaschemas.json.gz``, json-schema.org's, BSD-3-Clause): a
reference to one of the document's draft indexes them under the pointers ``URI#/...``. A ``$dynamicRef`` is
resolved where its dynamic scope does not change its target (``resolve_dynamic``: over the graph of the resources
an evaluation may enter, one resource defining the name is on every path to it before the others).

Owns: pointers (``p``, ``escape``), resources and resolution (``resolve``, ``resolve_dynamic``, ``node_at``),
synthetic schemas (``synth``, ``synthetic``, ``vocab_of``). Must not import the compiler's other parts.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import urllib.parse

from bankml.schema._cstack import check_stack as _check_stack
from bankml.schema.strict.bounds import MAX_DEPTH
from bankml.schema.strict.vocabulary import (
    SUBSCHEMA_LIST,
    SUBSCHEMA_MAP,
    SUBSCHEMA_ONE,
    VOCAB,
    Refuse,
    draft_of,
    refuse,
)

_METASCHEMAS = pathlib.Path(__file__).resolve().parent.parent / "metaschemas.json.gz"
_SCHEMA, _SCHEMAS, _OTHER = 0, 1, 2  # what an indexed node is: a schema, a list or object of schemas, other JSON


def escape(k):
    """A key as a JSON pointer token."""
    return str(k).replace("~", "~0").replace("/", "~1")


def _shipped_metaschemas():
    """The drafts' metaschemas (``bankml/schema/metaschemas.json.gz``, json-schema.org's; the file's ``notice``
    holds their licence), read anew for each conversion that refers to one."""
    return json.loads(gzip.decompress(_METASCHEMAS.read_bytes()))


def join(base, ref):
    """The URI ``ref`` means inside the resource ``base``: a fragment alone stays in it whatever its scheme
    (Python's urljoin leaves a fragment of a ``urn:`` base as it is)."""
    if not base:
        return ref
    if ref.startswith("#"):
        return urllib.parse.urldefrag(base)[0] + ref
    return urllib.parse.urljoin(base, ref)


class Document:
    """The document ``root`` (a dict or a bool), indexed when made; ``budget`` (a ``rules.Budget``) counts its
    nodes. Refuses a draft-03 document and one nesting deeper than MAX_DEPTH."""

    def __init__(self, root, budget):
        self.root = root
        self.draft = draft_of(root)
        self.vocab = VOCAB.get(self.draft)
        self.budget = budget
        self.ptr = {}  # id(dict) -> JSON pointer
        self.base = {}  # id(dict) -> base URI
        self.ids = {}  # resource URI -> node
        self.anchors = {}  # (resource URI, anchor) -> node
        self.dynamic = {}  # $dynamicAnchor name -> {resource URI: node}
        self.parent = {}  # resource URI -> the resource it is embedded in
        self.entered = []  # (resource, resource embedded in it in an applicator's place)
        self.refs = []  # schema objects holding $ref or $dynamicRef
        self.graph = None  # resource URI -> the resources an evaluation may enter from it (resources_graph)
        self.keep = []  # synthetic dicts (their ids must stay unique)
        self.syn = set()  # ids of synthetic dicts
        if self.draft == 3:
            raise Refuse("$schema", "#", "draft-03 schemas are not supported")
        if self.draft is None:
            raise Refuse(
                "$schema",
                "#/$schema",
                "%r names no draft strict mode reads (draft-04, -06, -07, 2019-09, 2020-12; a custom metaschema's "
                "vocabularies are not read)" % (root["$schema"][:200],),
            )
        self.index(root, "#", "")

    def p(self, d):
        """The pointer of the schema object d ("#" for one the document does not hold)."""
        return self.ptr.get(id(d), "#")

    def synth(self, d, pointer):
        """d, a synthetic schema, kept under ``pointer``."""
        self.keep.append(d)
        self.syn.add(id(d))
        self.ptr[id(d)] = pointer
        return d

    def synthetic(self, d):
        return id(d) in self.syn

    def vocab_of(self, d):
        """The keywords d is read with: its draft's, or every 2020-12 keyword for a synthetic schema."""
        return VOCAB[2020] if id(d) in self.syn else self.vocab

    def index(self, node, pointer, base, depth=0):
        """Record the pointer and base of every object under ``node``, and the resources and anchors of those in
        a schema's place (an ``$id`` in an unknown keyword's value is no identifier)."""
        stack = [(node, pointer, base, depth, _SCHEMA)]
        while stack:
            node, pointer, base, depth, kind = stack.pop()
            if depth > MAX_DEPTH:
                # every node's pointer is kept: past this, pointers alone would cost depth^2 bytes
                raise Refuse(
                    "SchemaLimits.max_depth",
                    pointer[:200] + "...",
                    "the schema nests deeper than %d levels" % MAX_DEPTH,
                )
            inner = _SCHEMA if kind == _SCHEMAS else _OTHER
            if isinstance(node, list):
                for i, x in enumerate(node):
                    stack.append((x, "%s/%d" % (pointer, i), base, depth + 1, inner))
                continue
            if not isinstance(node, dict) or id(node) in self.ptr:
                continue
            self.budget.tick(pointer)
            if kind == _SCHEMA:
                outer = base
                base = self._resource(node, pointer, base)
                if base != outer:
                    self.parent.setdefault(base, outer)
                    up = pointer.rsplit("/", 2)
                    if len(up) < 3 or up[-2] not in ("$defs", "definitions"):
                        self.entered.append((outer, base))  # evaluated in place, not only by reference
                if "$ref" in node or "$dynamicRef" in node:
                    self.refs.append(node)
                self.graph = None
            self.ptr[id(node)] = pointer
            self.base[id(node)] = base
            for k, v in node.items():
                if kind != _SCHEMAS and k in ("enum", "const", "default", "examples", "required", "example"):
                    continue  # values, not schemas (in a map of schemas, property names: schemas)
                if isinstance(v, (dict, list)):
                    if kind == _SCHEMA and isinstance(v, dict) and k in SUBSCHEMA_ONE:
                        sub = _SCHEMA
                    elif kind == _SCHEMA and (k in SUBSCHEMA_LIST and isinstance(v, list) or k in SUBSCHEMA_MAP):
                        sub = _SCHEMAS
                    else:
                        sub = inner
                    stack.append((v, "%s/%s" % (pointer, escape(k)), base, depth + 1, sub))

    def _resource(self, node, pointer, base):
        """The base URI inside ``node`` (its ``$id`` joined to ``base``), its resource and anchors recorded."""
        idkey = "id" if self.draft <= 4 else "$id"
        sid = node.get(idkey)
        if isinstance(sid, str) and not (self.draft <= 7 and "$ref" in node):
            if sid.startswith("#"):
                self.anchors[(base, sid[1:])] = node
            else:
                base = urllib.parse.urldefrag(join(base, sid))[0]
                self.ids.setdefault(base, node)
        if pointer == "#":
            self.ids.setdefault(base, node)
            self.ids.setdefault("", node)
        if isinstance(node.get("$anchor"), str):
            self.anchors[(base, node["$anchor"])] = node
        name = node.get("$dynamicAnchor")
        if isinstance(name, str) and self.draft >= 2020:
            # a plain-name fragment to it, and the resources that define the name (resolve_dynamic)
            self.anchors.setdefault((base, name), node)
            self.dynamic.setdefault(name, {}).setdefault(base, node)
        return base

    def resolve(self, ref, where, keyword="$ref"):
        """The schema the ``$ref`` ``ref`` of the schema object ``where`` names (a resource, an anchor, a pointer
        into a resource; nothing remote)."""
        pointer = self.p(where) + "/" + keyword
        if not isinstance(ref, str):
            refuse(keyword, pointer, "%s is not a string" % keyword)
        full = join(self.base.get(id(where), ""), ref)
        url, frag = urllib.parse.urldefrag(full)
        doc = self.ids.get(url)
        if doc is None:
            doc = self._metaschema(url, keyword, pointer)
        if doc is None:
            refuse(keyword, pointer, "remote or unknown reference %r" % ref)
        frag = urllib.parse.unquote(frag)
        if frag == "":
            return doc
        if not frag.startswith("/"):
            node = self.anchors.get((url, frag))
            if node is None:
                refuse(keyword, pointer, "unknown anchor in %r" % ref)
            return node
        node = doc
        at = self.p(doc)
        for part in frag[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            at += "/" + escape(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                refuse(keyword, pointer, "unresolvable reference %r" % ref)
        if isinstance(node, dict) and id(node) not in self.ptr:
            self.index(node, at, self.base.get(id(doc), url))
        return node

    def _metaschema(self, url, keyword, pointer):
        """The shipped metaschema of the URI ``url`` (none for another URI), indexed with the rest of its draft's
        (its vocabularies' metaschemas refer to each other) under the pointers ``URI#/...``; one of another draft
        than the document's is refused."""
        _check_stack()
        drafts = _shipped_metaschemas()["drafts"]
        for draft, docs in drafts.items():
            if url not in docs:
                continue
            if int(draft) != self.draft:
                refuse(
                    keyword,
                    pointer,
                    "%r is the metaschema of another draft than the document's (a document is read with one draft)"
                    % url,
                )
            for u, schema in docs.items():
                self.index(schema, u + "#", u)
            return self.ids.get(url)
        return None

    def resolve_dynamic(self, where):
        """The schema the ``$dynamicRef`` of the schema object ``where`` names, where its dynamic scope does not
        matter: a reference that does not land on a ``$dynamicAnchor`` of its fragment's name is a ``$ref``;
        otherwise the outermost resource of the dynamic scope defining that name wins, which is the document's
        root resource when it defines the name (every evaluation starts there), or the target's own resource
        when no other defines it. Any other case depends on the path the instance takes: refused."""
        ref = where["$dynamicRef"]
        target = self.resolve(ref, where, "$dynamicRef")
        frag = urllib.parse.unquote(urllib.parse.urldefrag(join(self.base.get(id(where), ""), ref))[1])
        if not frag or frag.startswith("/") or not isinstance(target, dict) or target.get("$dynamicAnchor") != frag:
            return target
        definers = self.dynamic.get(frag, {})
        home = self.base.get(id(where), "")
        for b, node in definers.items():
            # b is on every path to the reference, before any other resource defining the name
            if all(not self.reachable_without(b, x) for x in [home] + [x for x in definers if x != b]):
                return node
        if set(definers) == {self.base.get(id(target))}:
            return target  # no other resource defines it: in scope or not, the target
        refuse(
            "$dynamicRef",
            self.p(where) + "/$dynamicRef",
            "the $dynamicAnchor %r is defined by %d resources, none of them on every path to the reference before "
            "the others: which one it means depends on the path of the evaluation" % (frag, len(definers)),
        )

    def reachable_without(self, avoid, goal):
        """Whether an evaluation may enter the resource ``goal`` from the root's without entering ``avoid``."""
        graph = self.resources_graph()
        start = self.base.get(id(self.root), "")
        if avoid in (start, goal):
            return False
        seen, todo = {start}, [start]
        while todo:
            b = todo.pop()
            if b == goal:
                return True
            for n in graph.get(b, ()):
                if n != avoid and n not in seen:
                    seen.add(n)
                    todo.append(n)
        return False

    def resources_graph(self):
        """Resource -> the resources an evaluation may enter from it (a superset): those embedded in it in an
        applicator's place, the targets of its references (every resource on a pointer's way to the target, and
        every resource defining a ``$dynamicRef``'s name), as the dynamic scope grows along them."""
        while self.graph is None:
            self.graph = graph = {}
            for a, b in self.entered:
                graph.setdefault(a, set()).add(b)
            for node in list(self.refs):
                home = self.base.get(id(node), "")
                for k in ("$ref", "$dynamicRef"):
                    if isinstance(node.get(k), str):
                        graph.setdefault(home, set()).update(self._entered_by(node, k))
            # resolving may index more of the document (graph is None again then): build it again
        return self.graph

    def _entered_by(self, node, k):
        try:
            target = self.resolve(node[k], node, k)
        except Refuse:
            return ()  # refused where it is evaluated
        url, frag = urllib.parse.urldefrag(join(self.base.get(id(node), ""), node[k]))
        frag = urllib.parse.unquote(frag)
        b = self.base.get(id(target), "") if isinstance(target, dict) else url
        out = {b}
        while frag.startswith("/") and b != url and b in self.parent:
            b = self.parent[b]  # a pointer passes through the resources between the named one and the target
            out.add(b)
        if k == "$dynamicRef":
            out.update(self.dynamic.get(frag, {}))
        return out

    def node_at(self, pointer):
        """The node of the document at the JSON pointer ``pointer`` (``#``, ``#/properties/a~1b``...: ``~0``/``~1``
        escapes only, no percent-encoding, so a property name with ``%`` is spelled as it is)."""
        if pointer == "#":
            return self.root
        if not pointer.startswith("#/"):
            raise Refuse("schema", pointer, "not a JSON pointer into the schema")
        node = self.root
        for part in pointer[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise Refuse("schema", pointer, "no schema at this pointer")
        return node
