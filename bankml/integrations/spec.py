"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

A serving engine's constraint request, turned into bankml Rules as llama-server would build them.

* ``"grammar"`` / ``"ebnf"``: GBNF text (root rule ``root``).
* ``"json"``: a JSON schema (dict or JSON text) through bankml's strict compiler by default
  (``bankml.schema.strict``: exactly the JSON texts jsonschema accepts, or the schema is refused naming the
  keyword and pointer; what users of these engines compare with XGrammar and llguidance), or, with
  ``json_schema_mode="llama.cpp"`` (``Compiler``'s argument, or ``BANKML_JSON_SCHEMA_MODE=llama.cpp`` in the
  engine's environment), through bankml's port of llama.cpp's converter (what llama-server's ``json_schema``
  field samples with, byte for byte).
* ``"json_object"``: llama-server's JSON mode on a bare grammar (``response_format: {"type": "json_object"}``
  without a chat template, i.e. the converter's grammar for ``{"type": "object"}``).
* ``"regex"``: a regular expression through the converter's ``pattern`` translation (llama.cpp's
  ``_visit_pattern``): the whole output must match; a pattern the converter does not support is refused
  (the converter, inside a schema, would accept any string instead).
* ``"structural_tag"``: an XGrammar structural tag (dict or JSON text, the current form or the legacy
  ``structures``/``triggers`` one) through ``bankml.integrations.structural_tag``: XGrammar's language for
  each format, its JSON schemas through the strict compiler; a refusal names the tag's field.

``Compiler`` keeps one template matcher per (kind, text) in a bounded LRU; matchers for requests are clones of
it, so every request with the same constraint shares one MatchContext (stack nodes, mask caches).

This module owns no engine: it must not import vLLM or SGLang.
"""

import collections
import json
import os
import threading

from bankml.engine._grammar import Grammar, Rules
from bankml.errors import GrammarError, SchemaError
from bankml.integrations.structural_tag import StructuralTagError, structural_tag_to_grammar
from bankml.schema.converter import _Converter, _Invalid, _Unsupported
from bankml.schema.grammar import MODES, check_strict_style, json_schema_to_grammar

__all__ = [
    "DEFAULT_JSON_SCHEMA_MODE",
    "JSON_SCHEMA_MODE_ENV",
    "KINDS",
    "Compiler",
    "SpecError",
    "grammar_text",
    "resolve_json_schema_mode",
    "regex_to_grammar",
]

KINDS = ("grammar", "ebnf", "json", "json_object", "regex", "structural_tag")

# the engines' default for "json" constraints, and the environment variable that overrides it
DEFAULT_JSON_SCHEMA_MODE = "strict"
JSON_SCHEMA_MODE_ENV = "BANKML_JSON_SCHEMA_MODE"


class SpecError(ValueError):
    """A constraint bankml refuses (bad GBNF, a schema llama.cpp refuses, an unsupported regex)."""


def regex_to_grammar(pattern):
    """GBNF whose ``root`` matches exactly the strings ``pattern`` (a regular expression) matches in full,
    through llama.cpp's schema-pattern translation. ``^`` and ``$`` around it are optional."""
    if not isinstance(pattern, str):
        raise SpecError(f"a regex must be a string, got {type(pattern).__name__}")
    anchored = pattern
    if not anchored.startswith("^"):
        anchored = "^" + anchored
    if not anchored.endswith("$") or anchored.endswith("\\$"):
        anchored = anchored + "$"
    conv = _Converter(False)
    try:
        name = conv.pattern_to_rule(anchored, "root")
    except _Unsupported as e:
        raise SpecError(f"regex {pattern!r} is not supported by llama.cpp's pattern translation ({e})") from None
    except _Invalid as e:
        raise SpecError(f"invalid regex {pattern!r}: {e}") from None
    rule = conv.rules[name]
    # pattern_to_rule quotes the match as a JSON string: '"\\"" (' body ') "\\""'
    head, tail = '"\\"" (', ') "\\""'
    if name != "root" or not (rule.startswith(head) and rule.endswith(tail)):  # pragma: no cover - converter shape
        raise SpecError(f"unexpected rule shape from the pattern translation: {rule!r}")
    conv.rules[name] = rule[len(head) : len(rule) - len(tail)]
    return conv.format_grammar()


def resolve_json_schema_mode(mode=None):
    """The mode of ``"json"`` constraints: ``mode`` when given, else ``BANKML_JSON_SCHEMA_MODE`` from the
    environment, else ``"strict"``; SpecError for a name outside ``bankml.schema.MODES``."""
    if mode is None:
        mode = os.environ.get(JSON_SCHEMA_MODE_ENV) or DEFAULT_JSON_SCHEMA_MODE
    if mode not in MODES:
        raise SpecError(
            f"unknown JSON schema mode {mode!r} (from {JSON_SCHEMA_MODE_ENV}?): expected one of {', '.join(MODES)}"
        )
    return mode


def grammar_text(kind, spec, json_schema_mode=None, strict_style=None):
    """The GBNF text for a constraint of ``kind`` (one of KINDS) and ``spec``; SpecError if refused. A
    ``"json"`` schema is compiled in ``json_schema_mode`` (None: ``resolve_json_schema_mode()``'s default, strict),
    strict mode in ``strict_style`` (None: ``"canonical"``, the language to generate in; or ``"exact"``);
    ``"json_object"`` is llama-server's JSON mode in either."""
    if kind in ("grammar", "ebnf"):
        if not isinstance(spec, (str, bytes)):
            raise SpecError(f"a GBNF grammar must be text, got {type(spec).__name__}")
        return spec if isinstance(spec, str) else bytes(spec).decode("utf-8")
    if kind in ("json", "json_object"):
        mode, style = "llama.cpp", None
        if kind == "json_object":
            spec = {"type": "object"}
        else:
            mode = resolve_json_schema_mode(json_schema_mode)
            style = strict_style if mode == "strict" else None
            if isinstance(spec, (bytes, bytearray)):
                spec = bytes(spec).decode("utf-8")
        try:
            return json_schema_to_grammar(spec, mode=mode, strict_style=style)[0]
        except SchemaError as e:
            # strict mode's message names the keyword and pointer already
            raise SpecError(str(e) if e.keyword else f"{e} (at {e.pointer})") from None
    if kind == "regex":
        return regex_to_grammar(spec)
    if kind == "structural_tag":
        try:
            return structural_tag_to_grammar(spec)
        except StructuralTagError as e:
            raise SpecError(str(e)) from e
    raise SpecError(f"unknown constraint kind {kind!r}: expected one of {', '.join(KINDS)}")


def _key(kind, spec):
    if kind == "json_object":
        return ("json_object", "")
    if kind in ("json", "structural_tag") and not isinstance(spec, (str, bytes)):
        spec = json.dumps(spec, sort_keys=True, ensure_ascii=False)
    if kind == "ebnf":
        kind = "grammar"
    return (kind, spec)


class Compiler:
    """Rules per constraint over one Vocab, compiled once and kept (LRU, ``max_entries``).

    ``matcher(kind, spec)`` is a fresh Grammar for one request (a clone of the cached template: clones share
    the template's MatchContext). Thread-safe: engines compile on worker threads. ``json_schema_mode``:
    how ``"json"`` schemas are compiled (None: ``resolve_json_schema_mode()``, read once here: strict unless the
    environment says ``BANKML_JSON_SCHEMA_MODE=llama.cpp``); ``strict_style``: strict mode's style (None:
    ``"canonical"``; ``"exact"`` takes every JSON text of each valid instance).
    """

    def __init__(self, vocab, max_entries=256, max_rollback=None, json_schema_mode=None, strict_style=None):
        self.json_schema_mode = resolve_json_schema_mode(json_schema_mode)
        self.strict_style = None if strict_style is None else check_strict_style(strict_style)
        self.vocab = vocab
        self.max_entries = max_entries
        self.max_rollback = max_rollback
        self._templates = collections.OrderedDict()
        self._lock = threading.Lock()
        self.compiled = 0

    def rules(self, kind, spec):
        text = grammar_text(kind, spec, self.json_schema_mode, self.strict_style)
        try:
            return Rules.parse(text, "root", self.vocab)
        except GrammarError as e:
            raise SpecError(f"invalid GBNF grammar: {e}") from None

    def template(self, kind, spec):
        key = _key(kind, spec)
        with self._lock:
            hit = self._templates.get(key)
            if hit is not None:
                self._templates.move_to_end(key)
                return hit
        template = self._new_grammar(self.rules(kind, spec))
        with self._lock:
            self.compiled += 1
            self._templates[key] = template
            while len(self._templates) > self.max_entries:
                self._templates.popitem(last=False)
        return template

    def _new_grammar(self, rules):
        if self.max_rollback is None:
            return Grammar(rules, self.vocab)
        return Grammar(rules, self.vocab, max_rollback=self.max_rollback)

    def matcher(self, kind, spec):
        template = self.template(kind, spec)
        with self._lock:
            return template.clone()
