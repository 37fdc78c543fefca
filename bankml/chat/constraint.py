"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

What an OpenAI-style or Ollama-style request asks the output to be, resolved as the pinned llama-server
resolves it, and the grammar llama-server then samples with.

* ``from_openai(req)`` / ``from_openai_text(req, body)``: ``response_format`` (``text``, ``json_object``
  with or without ``schema``, ``json_schema`` with ``json_schema.schema``), the top-level ``json_schema``
  and ``grammar`` fields, with llama-server's precedence and refusals (``tools/server/server-common.cpp``,
  ``oaicompat_chat_params_parse``; ``tools/server/server-schema.cpp`` for a ``json_schema`` the chat
  template does not turn into a grammar).
* ``from_ollama(format)`` / ``from_ollama_text(req, body)``: Ollama's ``format`` (``"json"``, ``{}`` or a
  schema). The pinned llama-server has no Ollama endpoint; the refusal follows Ollama's own wording.
* ``chat_grammar(schema, template)`` / ``json_object_grammar(template)``: the grammar and generation prompt
  llama-server builds for a response format with a chat template, as ``bankml.chat.template`` derives them from the
  template (``common_chat_templates_apply``): ``template`` is a ``bankml.chat.template.ChatTemplate``, a template's
  Jinja text, or a name of ``bankml.chat.templates`` (``"chatml"``: llama.cpp's ChatML, SmolLM2's; ``"qwen3"``:
  ``Qwen-Qwen3-0.6B.jinja``).
"""

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from bankml.chat import templates
from bankml.chat.inputs import ChatInputs
from bankml.chat.template import ChatRequestError, ChatTemplate
from bankml.errors import RequestError, SchemaError
from bankml.schema.converter import gbnf_format_literal
from bankml.schema.grammar import check_mode, json_schema_to_grammar
from bankml.schema.jsontext import load_schema

__all__ = [
    "Constraint",
    "RequestError",
    "chat_grammar",
    "chat_template",
    "from_ollama",
    "from_ollama_text",
    "from_openai",
    "from_openai_text",
    "generation_prompt",
    "json_object_grammar",
]


_KINDS = ("none", "json_object", "json_schema", "gbnf")


@dataclass(frozen=True)
class Constraint:
    """What the output must be.

    ``kind`` is ``"none"``, ``"json_object"`` (any JSON object: ``schema`` is ``{"type": "object"}``),
    ``"json_schema"`` (``schema`` is the JSON value llama-server converts) or ``"gbnf"`` (``grammar`` is the
    text). ``chat`` says whether llama-server builds the grammar through the chat template (the
    ``response-format`` wrapper, ``chat_grammar``) — True for every schema it gets as a JSON object — or
    converts a top-level ``json_schema`` that is not an object directly (``bankml.json_schema_to_grammar``,
    errors prefixed ``Field 'json_schema': "json_schema": ``). ``source`` names the request field it came from.

    ``fallback`` is what llama-server samples with when the chat template builds no grammar for the response
    format (the handlers of GigaChat 3, Functionary v3.2, Kimi K2 / K3 and Ling 3): it then sets no ``grammar``
    from the template, and the request's own top-level ``json_schema`` (converted bare) or ``grammar`` fields
    decide (``server-common.cpp`` copies them, ``server-schema.cpp`` reads them). None: no grammar at all,
    llama-server's answer to a ``response_format`` alone.

    ``ignored_schema`` is a response format's schema that is no JSON object (``"schema": 123``): llama-server's
    Jinja chat layer ignores it, its chat layer without Jinja (``--no-jinja``) converts it, and so refuses it.
    """

    kind: str = "none"
    schema: Any = None
    grammar: Optional[str] = None
    chat: bool = True
    source: Optional[str] = None
    fallback: Optional["Constraint"] = None
    ignored_schema: Any = field(default=None, compare=False)  # no part of what is sampled

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"Constraint kind must be one of {', '.join(_KINDS)}, not {self.kind!r}")

    @property
    def is_json(self):
        """True when llama-server parses the answer as a JSON value (the JSON-mode content rule)."""
        return self.kind in ("json_object", "json_schema") and self.chat

    def to_grammar(self, template=None, thinking=False, json_schema_mode="llama.cpp", strict_style=None):
        """``(grammar, generation_prompt)`` llama-server samples with: ``grammar`` is None when unconstrained.

        With a ``template`` (see ``chat_template``), a JSON constraint gets the chat grammar (``chat_grammar``)
        and ``generation_prompt`` is that template's; without one, the schema's bare grammar (what
        ``/completion`` uses) and ``generation_prompt`` None. ``json_schema_mode="strict"`` compiles the schema
        (a ``json_schema`` constraint's; JSON mode's ``{"type": "object"}`` stays llama.cpp's) with bankml's
        strict compiler (``bankml.schema.grammar``): exactly what jsonschema accepts, or SchemaError naming
        the keyword and pointer, in ``strict_style`` (None: ``"canonical"``, the style to generate in; or
        ``"exact"``).
        """
        mode = check_mode(json_schema_mode) if self.kind == "json_schema" else "llama.cpp"
        style = strict_style if mode == "strict" else None
        prompt = generation_prompt(template, thinking) if template is not None else None
        if self.kind == "none":
            return None, prompt
        if self.kind == "gbnf":
            return self.grammar, prompt
        if self.chat and template is not None:
            return chat_grammar(self.schema, template, thinking, mode, style)
        try:
            return json_schema_to_grammar(_schema_text(self.schema), mode=mode, strict_style=style)[0], prompt
        except SchemaError as e:
            if self.chat:
                raise
            if self.source == "format":  # Ollama's field: the user sent no json_schema
                raise SchemaError("Field 'format': " + str(e), e.pointer, keyword=e.keyword) from None
            # the /completion field handler: "json_schema" prefix, then the field wrapper's
            raise SchemaError("Field 'json_schema': \"json_schema\": " + str(e), e.pointer, keyword=e.keyword) from None


def _schema_text(schema):
    # bankml's converter takes Python JSON values or JSON text: a schema that *is* a JSON string must go as text
    if isinstance(schema, (str, bytes, bytearray)):
        return json.dumps(schema if isinstance(schema, str) else bytes(schema).decode("utf-8"), ensure_ascii=False)
    return schema


def _value(obj, key, default, want=None):
    """llama-server's ``json_value``: a missing key, null, or (for a typed read) a value of the wrong type
    gives the default. ``obj`` that is not an object contains no key."""
    if not isinstance(obj, dict) or key not in obj or obj[key] is None:
        return default
    v = obj[key]
    if want is str and not isinstance(v, str):
        return default
    return v


def _empty(v):
    # nlohmann's empty(): null, {} and [] are empty; strings, numbers and booleans never are
    return v is None or (isinstance(v, (dict, list)) and not v)


def from_openai(req):
    """The constraint of an OpenAI-compatible ``/v1/chat/completions`` request (a dict), as llama-server reads it.

    Raises RequestError with llama-server's message: ``Cannot use both json_schema and grammar`` (a top-level
    ``json_schema`` that is not null together with a non-empty ``grammar``); ``response_format type must be
    one of "text" or "json_object", but got: X``. ``response_format`` wins over ``grammar`` (llama-server
    then drops the grammar). Schemas are not converted here (``Constraint.to_grammar`` does, and raises
    SchemaError as llama-server does).
    """
    if not isinstance(req, dict):
        raise RequestError("the request must be a JSON object")
    json_schema = _value(req, "json_schema", None)
    grammar = _value(req, "grammar", "", str)
    if json_schema is not None and grammar:
        raise RequestError("Cannot use both json_schema and grammar")
    source = "json_schema" if json_schema is not None else None
    json_object = False
    if "response_format" in req:
        response_format = _value(req, "response_format", {})
        response_type = _value(response_format, "type", "", str)
        if response_type == "json_object":
            if (isinstance(response_format, dict) and "schema" in response_format) or _empty(json_schema):
                json_schema = _value(response_format, "schema", {})
                source = "response_format"
                json_object = _empty(json_schema)
        elif response_type == "json_schema":
            wrapper = _value(response_format, "json_schema", {})
            json_schema = _value(wrapper, "schema", {})
            source = "response_format"
        elif response_type and response_type != "text":
            # llama-server's message, then what it leaves out: json_schema is accepted too
            raise RequestError(
                'response_format type must be one of "text" or "json_object", but got: '
                + response_type
                + ' (bankml and llama-server also take "json_schema")'
            )
    if isinstance(json_schema, dict) and not json_schema:
        json_schema = {"type": "object"}
        json_object = True
    if isinstance(json_schema, dict):
        # the chat template turns it into the response-format grammar; a user grammar is then dropped
        kind = "json_object" if json_object else "json_schema"
        return Constraint(kind, json_schema, None, True, source, _without_chat_grammar(req))
    # no chat grammar: the /completion field handler converts a top-level json_schema directly when the
    # request has no "grammar" key at all; otherwise it takes the grammar
    top = req.get("json_schema")
    if top is not None and "grammar" not in req:
        if isinstance(top, dict) and not top:
            top = {"type": "object"}
        return Constraint("json_schema", top, None, False, "json_schema")
    ignored = json_schema if source == "response_format" and json_schema is not None else None
    if grammar:
        return Constraint("gbnf", None, grammar, True, "grammar", ignored_schema=ignored)
    return Constraint(ignored_schema=ignored)


def _without_chat_grammar(req):
    """The request's own constraint where the chat template builds no response-format grammar: llama-server's
    field handler converts a top-level ``json_schema`` (bare, ``{}`` or null as any object) when the request
    has no ``grammar`` key, else takes a non-empty ``grammar`` string; None when neither gives a grammar."""
    if "json_schema" in req and "grammar" not in req:
        top = req["json_schema"]
        if top is None or (isinstance(top, dict) and not top):
            top = {"type": "object"}
        return Constraint("json_schema", top, None, False, "json_schema")
    grammar = req.get("grammar")
    if isinstance(grammar, str) and grammar:
        return Constraint("gbnf", None, grammar, True, "grammar")
    return None


def _read_body(body):
    try:
        return load_schema(body)
    except SchemaError as e:
        raise RequestError(str(e).replace("JSON schema conversion failed:\nJSON schema error at #: ", "", 1)) from None


_OPENAI_CONSTRAINT_FIELDS = ("response_format", "json_schema", "grammar")


def from_openai_text(req, body):
    """``from_openai`` reading the request from its raw JSON text ``body`` (str or bytes) with llama.cpp's
    JSON reader (``bankml.schema.jsontext.load_schema``): ``2.0`` stays a float, integers stay integers, keys keep
    their order, the last duplicate wins. ``req`` (the same request already parsed, or None) is used only
    when ``body`` is None.

    Only the members that decide the constraint (``response_format``, ``json_schema``, ``grammar``) go
    through the schema reader, so the messages of a large request do not count against its limits."""
    if body is None:
        return from_openai(req)
    members = _top_level_raw(body)
    text = (
        "{"
        + ",".join(json.dumps(key) + ":" + members[key] for key in _OPENAI_CONSTRAINT_FIELDS if key in members)
        + "}"
    )
    return from_openai(_read_body(text))


def _go_quote(raw):
    """Go's ``%q`` of a byte slice (strconv.Quote): what Ollama prints the bad ``format`` with."""
    text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, (bytes, bytearray)) else raw
    out = ['"']
    for ch in text:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0xDC80 <= o <= 0xDCFF:  # an invalid byte
            out.append("\\x%02x" % (o - 0xDC00))
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[ch])
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        elif o < 0x10000:
            out.append("\\u%04x" % o)
        else:
            out.append("\\U%08x" % o)
    out.append('"')
    return "".join(out)


def _ollama_from_raw(raw):
    raw = raw.strip()
    if raw in ("", "null", '""'):
        return Constraint()
    if raw == '"json"':
        return Constraint("json_object", {"type": "object"}, None, False, "format")
    if not raw.startswith("{"):
        raise RequestError('invalid format: %s; expected "json" or a valid JSON Schema object' % _go_quote(raw))
    try:
        schema = load_schema(raw)
    except SchemaError:
        raise RequestError("invalid JSON schema in format") from None
    if isinstance(schema, dict) and not schema:
        return Constraint("json_object", {"type": "object"}, None, False, "format")
    return Constraint("json_schema", schema, None, False, "format")


def from_ollama(format):
    """The constraint of an Ollama ``format`` value (Python JSON value): None / ``""`` → none, ``"json"`` →
    json_object, ``{}`` → json_object (bankml's reading, as llama-server reads an empty schema; Ollama
    itself would convert ``{}`` as any JSON value), an object → json_schema. Anything else raises
    RequestError with Ollama's message: ``invalid format: "X"; expected "json" or a valid JSON Schema object``.

    Ollama converts the schema directly (no chat-template wrapper): ``chat`` is False.
    """
    if format is None:
        return Constraint()
    if isinstance(format, dict):
        if not format:
            return Constraint("json_object", {"type": "object"}, None, False, "format")
        return Constraint("json_schema", format, None, False, "format")
    return _ollama_from_raw(json.dumps(format, ensure_ascii=False, separators=(",", ":")))


def _top_level_raw(body):
    """The raw text of each top-level member of a JSON object text (the last duplicate wins)."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(f"invalid JSON request body: invalid UTF-8 ({e.reason} at byte {e.start})") from None
    decoder = json.JSONDecoder()
    ws = " \t\n\r"
    i, n = 0, len(body)

    def skip(i):
        while i < n and body[i] in ws:
            i += 1
        return i

    i = skip(i)
    if i >= n or body[i] != "{":
        raise RequestError("the request must be a JSON object")
    i = skip(i + 1)
    members = {}
    if i < n and body[i] == "}":
        return members
    while True:
        if i >= n or body[i] != '"':
            raise RequestError("invalid JSON request body")
        try:
            key, i = json.decoder.scanstring(body, i + 1)
        except ValueError:
            raise RequestError("invalid JSON request body") from None
        i = skip(i)
        if i >= n or body[i] != ":":
            raise RequestError("invalid JSON request body")
        i = skip(i + 1)
        try:
            _, end = decoder.raw_decode(body, i)
        except (ValueError, RecursionError):
            raise RequestError("invalid JSON request body") from None
        members[key] = body[i:end]
        i = skip(end)
        if i < n and body[i] == ",":
            i = skip(i + 1)
            continue
        if i < n and body[i] == "}":
            return members
        raise RequestError("invalid JSON request body")


def from_ollama_text(req, body):
    """``from_ollama`` on the raw text of ``format`` in the request text ``body``: Ollama compares the raw
    bytes (``"json"``, ``null``, ``""``), and the schema is read with llama.cpp's JSON reader. ``req`` is
    used only when ``body`` is None."""
    if body is None:
        return from_ollama(None if req is None else req.get("format"))
    raw = _top_level_raw(body).get("format")
    if raw is None:
        return Constraint()
    return _ollama_from_raw(raw)


# ---------------------------------------------------------------------------------------------------------
# chat templates: the generation prompt and llama.cpp's auto-parser grammar for a response format


_TEMPLATES: dict = {}


def chat_template(template):
    """The ``bankml.chat.template.ChatTemplate`` for ``template``: a ChatTemplate as it is, a name of ``bankml.chat.templates``
    (``"chatml"``, ``"qwen3"``), or a template's Jinja text (parsed once per text). ValueError for an unknown
    name."""
    if isinstance(template, ChatTemplate):
        return template
    if not isinstance(template, str):
        raise ValueError(
            f"a chat template is a bankml.chat.template.ChatTemplate, a template text or a name, not "
            f"{type(template).__name__}"
        )
    tmpl = _TEMPLATES.get(template)
    if tmpl is None:
        if template == "chatml":
            tmpl = ChatTemplate("chatml")
        elif template == "qwen3":
            tmpl = ChatTemplate(templates.QWEN3)
        elif "{{" in template or "{%" in template:
            tmpl = ChatTemplate(template)
        else:
            raise ValueError(
                f"unknown template {template!r}: bankml knows chatml, qwen3 (or give the template's "
                "text, or a bankml.chat.template.ChatTemplate)"
            )
        if len(_TEMPLATES) >= 32:
            _TEMPLATES.pop(next(iter(_TEMPLATES)))
        _TEMPLATES[template] = tmpl
    return tmpl


_PROBE = [{"role": "user", "content": "x"}]


def _apply(template, schema, thinking, json_schema_mode="llama.cpp", strict_style=None):
    try:
        inputs = ChatInputs(
            _PROBE,
            json_schema=schema,
            enable_thinking=bool(thinking),
            json_schema_mode=json_schema_mode,
            strict_style=strict_style,
        )
        return chat_template(template).apply(inputs)
    except ChatRequestError as e:
        raise RequestError(str(e)) from None


def generation_prompt(template, thinking=False):
    """The generation prompt llama-server appends after the messages (and feeds the grammar first), as the chat
    layer derives it from the template: ``"<|im_start|>assistant\n"`` for chatml; for qwen3 with thinking off,
    followed by the empty ``<think>`` block the template writes."""
    return _apply(template, None, thinking).generation_prompt


_JSON_RULES = (
    ("json-array", '"[" space ("]" | json-value (space "," space json-value)* space "]")'),
    ("json-bool", '"true" | "false"'),
    ("json-null", '"null"'),
    ("json-number", '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? (("e" | "E") [+-]? [0-9]+)?'),
    (
        "json-object",
        '"{" space ("}" | json-string space ":" space json-value (space "," space json-string '
        'space ":" space json-value)* space "}")',
    ),
    ("json-string", '"\\"" ( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""'),
    ("json-value", "json-object | json-array | json-string | json-number | json-bool | json-null"),
)


def _char_class(chars, negate):
    out = "[^" if negate else "["
    for c in chars:
        out += "\\" + c if c in "]\\^-[" else c
    return out + "]"


def _excluding_grammar(builder, prefix, words):
    """gbnf_excluding_grammar: strings containing none of ``words``, as the complement of their Aho-Corasick
    automaton (states numbered as the trie is built, word by word)."""
    goto, terminal = [{}], [False]
    for w in words:
        q = 0
        for c in w:
            if c not in goto[q]:
                goto.append({})
                terminal.append(False)
                goto[q][c] = len(goto) - 1
            q = goto[q][c]
        terminal[q] = True
    fail = [0] * len(goto)
    order = list(goto[0].values())
    for q in order:
        for c, d in goto[q].items():
            f = fail[q]
            while f and c not in goto[f]:
                f = fail[f]
            fail[d] = goto[f][c] if c in goto[f] and goto[f][c] != d else 0
            terminal[d] = terminal[d] or terminal[fail[d]]
            order.append(d)
    alphabet = sorted({c for w in words for c in w})

    def nxt(q, c):
        while q and c not in goto[q]:
            q = fail[q]
        return goto[q].get(c, 0)

    def name(q):
        return prefix if q == 0 else "%s-%02d" % (prefix, q)

    for q in range(len(goto)):
        if terminal[q]:
            continue
        buckets, specific = {}, []
        for c in alphabet:
            d = nxt(q, c)
            if terminal[d]:
                specific.append(c)
            elif d != 0:
                buckets.setdefault(d, []).append(c)
                specific.append(c)
        rhs = "|"
        for d in sorted(buckets):
            rhs += " " + _char_class(buckets[d], False) + " " + name(d) + " |"
        rhs += " " + _char_class(specific, True) + " " + name(0)
        builder.add_rule(name(q), rhs)
    return name(0)


def _excluding_rules(builder, prefix, word):
    """llama.cpp's gbnf_excluding_grammar for one delimiter: strings that never contain ``word``."""
    return _excluding_grammar(builder, prefix, [word])


def _optspace(tag):
    core = tag.strip()
    lead = tag[: len(tag) - len(tag.lstrip())]
    trail = tag[len(tag.rstrip()) :]
    parts = [gbnf_format_literal(c) + "?" for c in lead]
    parts.append(gbnf_format_literal(core))
    parts += [gbnf_format_literal(c) + "?" for c in trail]
    return parts


def chat_grammar(schema, template, thinking=False, json_schema_mode="llama.cpp", strict_style=None):
    """``(grammar, generation_prompt)`` llama-server builds for a ``response_format`` schema (a JSON object)
    with ``template`` (see ``chat_template``), from ``bankml.chat.template``: for the auto-parser's templates the schema's
    rules under ``response-format-schema``, ``response-format``, the JSON rules of the parser, and ``root``: the
    generation prompt (up to the reasoning block), the optional reasoning block, then the value inside a
    ```` ```json ```` fence or bare, with whitespace around.

    Raises SchemaError for a schema llama.cpp refuses, with llama-server's message (the auto-parser's
    ``Unable to generate parser for this template. Automatic parser generation failed: `` before the
    converter's); ValueError for a template whose chat grammar bankml does not build yet.
    ``json_schema_mode="strict"``: the schema's rules are strict mode's (``bankml.schema.strict``), under
    ``response-format-schema`` as well, in the same wrapping, in ``strict_style`` (None: canonical); a schema it
    refuses raises its SchemaError."""
    if not isinstance(schema, dict) or not schema:
        raise ValueError(
            "chat_grammar needs a non-empty JSON schema object (llama-server sends {} as "
            '{"type": "object"} and builds no chat grammar for other values)'
        )
    out = _apply(template, schema, thinking, json_schema_mode, strict_style)
    if out.grammar is None:
        raise ValueError(f"bankml does not build the chat grammar of this template's handler ({out.handler}) yet")
    return out.grammar, out.generation_prompt


def json_object_grammar(template, thinking=False):
    """``chat_grammar({"type": "object"}, template)``: what ``response_format: {"type": "json_object"}`` gets."""
    return chat_grammar({"type": "object"}, template, thinking)
