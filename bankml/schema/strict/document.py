# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The schema document of one conversion: its draft, the JSON pointer and base URI of every schema object in it,
its ``$id``/``id`` resources and ``$anchor``s, ``$ref`` resolution, and the synthetic schemas the compiler adds
(a negation, a dependency's "the key is present"), each under the pointer of the keyword it stands for.

A schema object is a dict of the document (or a synthetic one, or a scope's copy, that the document keeps alive);
its pointer, base, chain and whether it is synthetic are kept by the dict's ``id()``: this object is the only one
that writes those tables.

The drafts' metaschemas are shipped (``bankml/schema/metaschemas.json.gz``, json-schema.org's, BSD-3-Clause): a
reference to one of the document's draft indexes them under the pointers ``URI#/...``; so is a reference to a
document of the caller's ``registry`` (nothing is fetched). A ``$dynamicRef`` (and 2019-09's ``$recursiveRef``)
lands where the dynamic scope of the referring object says (``resolve_dynamic``, ``resolve_recursive``): every
object has the chain of resources entered on the way to it (``chain_of``), and a reference made in a scope that
resolves some dynamic name otherwise than its target's own chain lands on a copy of the target for that scope
(``scoped``: one per target and scope state, so that recursion ends).

Owns: pointers (``p``, ``escape``), resources and resolution (``resolve``, ``resolve_dynamic``,
``resolve_recursive``, ``node_at``, the ``registry``), dynamic scopes (``chain_of``, ``state``, ``scoped``),
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
_RECURSIVE = ("$recursiveAnchor",)  # the name a 2019-09 resource root with $recursiveAnchor: true defines
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


def check_registry(registry):
    """``registry`` (a mapping of absolute URIs to schemas, or None) as ``{URI without fragment: schema}``; a
    ValueError naming ``registry`` for another value."""
    if registry is None:
        return {}
    if not hasattr(registry, "items"):
        raise ValueError("registry must map URIs to schemas, not %s" % type(registry).__name__)
    out = {}
    for uri, schema in registry.items():
        if not isinstance(uri, str) or not urllib.parse.urlsplit(uri).scheme:
            raise ValueError("registry: %r is not an absolute URI" % (uri,))
        if not isinstance(schema, (dict, bool)):
            raise ValueError(
                "registry: the schema of %r is a %s, not an object or a boolean" % (uri, type(schema).__name__)
            )
        url, frag = urllib.parse.urldefrag(uri)
        if frag:
            raise ValueError("registry: %r has a fragment (a document's URI has none)" % (uri,))
        out[url] = schema
    return out


class Document:
    """The document ``root`` (a dict or a bool), indexed when made; ``budget`` (a ``rules.Budget``) counts its
    nodes; ``registry`` (``{URI: schema}``) the other documents its references may name, each read through
    ``prepare`` (if given) and indexed when one is named. Refuses a draft-03 document and one nesting deeper than MAX_DEPTH."""

    def __init__(self, root, budget, registry=None, prepare=None):
        self.root = root
        self.registry = check_registry(registry)  # URI -> a schema the caller gives (never fetched)
        self.prepare = prepare  # a registry document -> the document as read (the regex dialect's rewrite)
        self.draft = draft_of(root)
        self.vocab = VOCAB.get(self.draft)
        self.budget = budget
        self.ptr = {}  # id(dict) -> JSON pointer
        self.base = {}  # id(dict) -> base URI
        self.ids = {}  # resource URI -> node
        self.anchors = {}  # (resource URI, anchor) -> node
        self.dynamic = {}  # $dynamicAnchor name -> {resource URI: node}
        self.recursive = {}  # resource URI -> its root, of the resources whose root has $recursiveAnchor: true
        self.defines = {}  # resource URI -> the names it defines for the dynamic scope (state)
        self.chain = {}  # id(dict) -> the resources entered on the way to it, outermost first (chain_of)
        self.scopes = {}  # (id(node), state) -> node's copy for that dynamic scope (scoped)
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

    def index(self, node, pointer, base, depth=0, chain=None):
        """Record the pointer, base and chain of resources of every object under ``node`` (``chain``: those
        entered before it; None when ``node`` starts a document), and the resources and anchors of those in a
        schema's place (an ``$id`` in an unknown keyword's value is no identifier)."""
        stack = [(node, pointer, base, depth, _SCHEMA, chain)]
        while stack:
            node, pointer, base, depth, kind, chain = stack.pop()
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
                    stack.append((x, "%s/%d" % (pointer, i), base, depth + 1, inner, chain))
                continue
            if not isinstance(node, dict) or id(node) in self.ptr:
                continue
            self.budget.tick(pointer)
            if kind == _SCHEMA:
                outer = base
                base = self._resource(node, pointer, base)
                if base != outer or chain is None:
                    chain = (chain or ()) + (base,)  # a resource entered in place (or by a reference to it)
            self.ptr[id(node)] = pointer
            self.base[id(node)] = base
            self.chain[id(node)] = chain or (base,)
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
                    stack.append((v, "%s/%s" % (pointer, escape(k)), base, depth + 1, sub, chain))

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
        if node.get("$recursiveAnchor") is True and self.draft == 2019 and self.ids.get(base) is node:
            self.recursive.setdefault(base, node)  # a resource's root: the only place the keyword means anything
            self.defines.setdefault(base, []).append(_RECURSIVE)
        if isinstance(node.get("$anchor"), str):
            self.anchors[(base, node["$anchor"])] = node
        name = node.get("$dynamicAnchor")
        if isinstance(name, str) and self.draft >= 2020:
            # a plain-name fragment to it, and the resources that define the name (resolve_dynamic)
            self.anchors.setdefault((base, name), node)
            if base not in self.dynamic.setdefault(name, {}):
                self.dynamic[name][base] = node
                self.defines.setdefault(base, []).append(name)
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
            doc = self._remote(url, keyword, pointer)
        if doc is None:
            refuse(keyword, pointer, "remote or unknown reference %r (not in the registry; nothing is fetched)" % ref)
        frag = urllib.parse.unquote(frag)
        node = self._walk(doc, url, frag, ref, keyword, pointer)
        # the reference enters the target's resource only: a pointer's way through others is no evaluation of them
        # (the suite's optional dynamicRef.json#0)
        entered = self.base.get(id(node), url) if isinstance(node, dict) else url
        return self.scoped(node, self.chain_of(where) + (entered,))

    def _walk(self, doc, url, frag, ref, keyword, pointer):
        """The node the fragment ``frag`` names in the resource ``doc`` (of URI ``url``)."""
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
            self.index(node, at, self.base.get(id(doc), url), chain=self.chain_of(doc))
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

    def _remote(self, url, keyword, pointer):
        """The registry's document of the URI ``url`` (None when it has none), indexed under the pointers
        ``URI#/...`` with ``url`` its base (its own ``$id``, if any, joined to it). A document that names another
        draft than this one's is refused: a document is read with one draft."""
        if url not in self.registry:
            return None
        remote = self.registry[url]
        if self.prepare is not None:
            try:
                remote = self.prepare(remote)
            except Refuse as e:
                raise Refuse(e.keyword, url + e.pointer, e.reason) from None
        draft = draft_of(remote) if isinstance(remote, dict) and "$schema" in remote else self.draft
        if draft != self.draft:
            refuse(
                keyword,
                pointer,
                "%r is a document of another draft than this one's (a document is read with one draft)" % url,
            )
        self.ids[url] = remote  # under the URI it was given at, whatever its own $id says
        if isinstance(remote, dict):
            self.index(remote, url + "#", url)
        return remote

    def resolve_dynamic(self, where):
        """The schema the ``$dynamicRef`` of the schema object ``where`` names: a reference that does not land on
        a ``$dynamicAnchor`` of its fragment's name is a ``$ref``; otherwise the outermost resource of the dynamic
        scope (``chain_of(where)``) defining that name wins, or the target when none does."""
        ref = where["$dynamicRef"]
        target = self.resolve(ref, where, "$dynamicRef")
        frag = urllib.parse.unquote(urllib.parse.urldefrag(join(self.base.get(id(where), ""), ref))[1])
        if not frag or frag.startswith("/") or not isinstance(target, dict) or target.get("$dynamicAnchor") != frag:
            return target
        return self._outermost(where, target, frag, self.dynamic.get(frag, {}))

    def resolve_recursive(self, where):
        """The schema the 2019-09 ``$recursiveRef`` of the schema object ``where`` names: its value resolved as
        a ``$ref``; when that lands on a resource whose root says ``"$recursiveAnchor": true``, the outermost
        resource of the dynamic scope whose root says so too."""
        target = self.resolve(where["$recursiveRef"], where, "$recursiveRef")
        if not isinstance(target, dict) or target.get("$recursiveAnchor") is not True:
            return target
        return self._outermost(where, target, _RECURSIVE, self.recursive)

    def _outermost(self, where, target, name, definers):
        chain = self.chain_of(where)
        b = self.state(chain).get(name)
        if b is None:
            return target
        return self.scoped(definers[b], chain + (b,))

    def chain_of(self, d):
        """The resources an evaluation of the schema object ``d`` has entered, outermost first: the way the
        document nests them, or for a copy ``scoped`` made, the way of the references that led to it."""
        return self.chain.get(id(d), ())

    def state(self, chain):
        """``{name: the outermost resource of chain defining it}``: where each ``$dynamicRef`` (``$recursiveRef``:
        the name ``_RECURSIVE``) evaluated in that dynamic scope lands."""
        out = {}
        for uri in chain:
            for name in self.defines.get(uri, ()):
                out.setdefault(name, uri)
        return out

    def _normal(self, chain):
        """chain less the resources that define no name first (its ``state`` is the same)."""
        seen, out = set(), []
        for uri in chain:
            new = [n for n in self.defines.get(uri, ()) if n not in seen]
            if new:
                seen.update(new)
                out.append(uri)
        return tuple(out)

    def scoped(self, node, chain):
        """``node`` as evaluated with the dynamic scope ``chain``: itself when the scope it was indexed with
        (``chain_of``) resolves every name alike, else its copy for that scope (one per state, so that a recursion
        ends), indexed under the same pointers and bases. A document that defines no dynamic name has none."""
        if not self.defines or not isinstance(node, dict):
            return node
        want = self.state(chain)
        if want == self.state(self.chain_of(node)):
            return node
        key = (id(node), frozenset(want.items()))
        if key not in self.scopes:
            self.scopes[key] = self._copy(node, self._normal(chain))
        return self.scopes[key]

    def _copy(self, node, chain):
        """A copy of the schema objects under ``node`` (values shared), each with the pointer and base of its
        original and the chain ``chain`` followed by the resources between ``node`` and the original."""
        cut = len(self.chain_of(node))
        top = dict(node)
        copies = {id(node): top}
        todo = [(node, top)]
        while todo:
            orig, c = todo.pop()
            pointer = self.ptr.get(id(orig), "#")
            self.budget.tick(pointer)
            if isinstance(orig, dict) and id(orig) in self.ptr:
                self.keep.append(c)  # (its id must stay unique)
                self.ptr[id(c)] = pointer
                self.base[id(c)] = self.base[id(orig)]
                self.chain[id(c)] = self._normal(chain + self.chain_of(orig)[cut:])
            for k, v in orig.items() if isinstance(orig, dict) else enumerate(orig):
                if isinstance(v, list) or (isinstance(v, dict) and id(v) in self.ptr):
                    if id(v) not in copies:
                        copies[id(v)] = dict(v) if isinstance(v, dict) else list(v)
                        todo.append((v, copies[id(v)]))
                    c[k] = copies[id(v)]
        return top

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
