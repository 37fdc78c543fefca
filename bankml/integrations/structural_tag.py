"""Ports semantics of XGrammar (https://github.com/mlc-ai/xgrammar), Apache License 2.0, Copyright (c) 2024 by Contributors.

XGrammar's structural tags (what vLLM and SGLang send for strict tool calls, reasoning sections and
``response_format: {"type": "structural_tag"}``), compiled to llama.cpp GBNF for bankml's matcher.

``structural_tag_to_grammar(tag)`` takes the request's structural tag (a dict or JSON text) in either form:

* ``{"type": "structural_tag", "format": {...}}`` (``type`` optional): one format, nested;
* the legacy ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers": [...]}``
  (vLLM's and SGLang's older tool-call form; SGLang adds ``at_least_one``), read as XGrammar reads it: a
  ``triggered_tags`` of one tag per structure, its content the structure's schema (null: ``{}``, as SGLang).

The formats and their languages are XGrammar's as of xgrammar 0.2.8 (what vLLM 0.32 pins; SGLang 0.5.23 pins
0.2.7): its docs where they speak, else its code (``cpp/structural_tag.cc``) and tests. ``const_string``,
``json_schema``, ``grammar`` (XGrammar's EBNF), ``regex`` (XGrammar's regex dialect), ``any_text``
(``excludes``), ``sequence``, ``or``, ``optional``, ``plus``, ``star``, ``repeat``, ``tag`` (``end`` a string
or a list), ``triggered_tags``, ``tags_with_separator``, ``dispatch`` and the deprecated ``qwen_xml_parameter``;
a format without ``type`` is read as XGrammar guesses it. As XGrammar's analyzer does, free text (``any_text``,
``triggered_tags``) inside a ``tag`` may not contain that tag's end strings. Where bankml's language differs,
on purpose (docs/modules/engines.md lists them):

* ``json_schema`` content is written as XGrammar's default reads it (declared order, fully validated) by
  bankml's canonical style for tool arguments (``bankml.schema.tool_args``): the listed properties in schema
  order, each once, only the escapes JSON requires, ``json.dumps``'s separators: a subset of the JSON texts
  jsonschema accepts, or the schema is refused with the keyword and JSON pointer. With ``any_order`` it is
  bankml's strict compiler's (``bankml.schema.StrictGrammarBuilder``): exactly the texts jsonschema accepts,
  members in any order, keys in any JSON spelling, llama.cpp's whitespace rule between tokens (none after the
  value, as XGrammar). ``max_whitespace_cnt`` other than null is refused.
* Refused, naming the field: the token-level formats (``token``, ``exclude_token``, ``any_tokens``,
  ``token_triggered_tags``, ``token_dispatch``, a ``tag`` whose ``begin``/``end`` is a token), ``any_text``'s
  ``max_tokens`` and ``max_chars`` budgets, the XML ``style``s of ``json_schema`` (not supported yet), and
  what XGrammar's EBNF has and GBNF has not (``bankml.integrations.xgrammar_ebnf``).

Errors are ``StructuralTagError``: the path of the field in the request (``structural_tag.format.tags[1]
.content.json_schema``) and the reason; a refused schema adds its ``keyword`` and ``pointer``.

This module owns no engine: it must not import vLLM, SGLang or ``bankml.integrations.spec`` (which imports it).
"""

from bankml.errors import SchemaError
from bankml.integrations.xgrammar_ebnf import EbnfTranslator
from bankml.integrations.xgrammar_lang import (
    MAX_REPETITION,
    NEVER,
    RuleSet,
    XGrammarSyntaxError,
    dispatch_rules,
    literal,
)
from bankml.integrations.xgrammar_regex import regex_to_ebnf
from bankml.schema import jsondepth, tool_args
from bankml.schema.grammar import StrictGrammarBuilder

__all__ = ["FORMAT_TYPES", "XML_STYLES", "StructuralTagError", "read_structural_tag", "structural_tag_to_grammar"]

XML_STYLES = (
    "qwen_xml",
    "minimax_xml",
    "minimax_m3_xml",
    "deepseek_xml",
    "glm_xml",
    "cohere_xml",
    "kimi_k3_xml",
    "deepseek_v4_1_xml",
)
TOKEN_TYPES = ("token", "exclude_token", "any_tokens", "token_triggered_tags", "token_dispatch")
FORMAT_TYPES = (
    "const_string",
    "json_schema",
    "grammar",
    "regex",
    "any_text",
    "sequence",
    "or",
    "optional",
    "plus",
    "star",
    "repeat",
    "tag",
    "triggered_tags",
    "tags_with_separator",
    "dispatch",
    "qwen_xml_parameter",
) + TOKEN_TYPES
_MAX_DEPTH = 100  # nesting of formats: XGrammar 0.2.8's kMaxFormatDepth


class StructuralTagError(ValueError):
    """A structural tag bankml refuses: ``path`` names the field (``structural_tag.format.elements[0]``), the
    message says why; for a JSON schema the strict compiler refuses, ``keyword`` and ``pointer`` are its."""

    def __init__(self, path, reason, keyword=None, pointer=None):
        self.path = path
        self.reason = reason
        self.keyword = keyword
        self.pointer = pointer
        super().__init__("%s: %s" % (path, reason))


# -- the formats, read


class Format:
    """One format of a structural tag: ``kind`` (its type) and ``path`` (where it sits in the request)."""

    __slots__ = ("kind", "path", "fields")

    def __init__(self, kind, path, **fields):
        self.kind = kind
        self.path = path
        self.fields = fields

    def __getattr__(self, name):
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self):
        return "Format(%r, %r)" % (self.kind, self.fields)


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _check_text(value, path):
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise StructuralTagError(path, "the string holds a lone surrogate (not valid UTF-8)")
    return value


def _string(obj, key, path, required=True, non_empty=False, default=None):
    if key not in obj:
        if required:
            raise StructuralTagError(path, "the field %r is required" % key)
        return default
    value = obj[key]
    if not isinstance(value, str):
        raise StructuralTagError("%s.%s" % (path, key), "must be a string, got %s" % _type_name(value))
    if non_empty and not value:
        raise StructuralTagError("%s.%s" % (path, key), "must be a non-empty string")
    return _check_text(value, "%s.%s" % (path, key))


def _bool(obj, key, path):
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise StructuralTagError("%s.%s" % (path, key), "must be a boolean, got %s" % _type_name(value))
    return value


def _strings(obj, key, path, required=False, non_empty_items=False):
    if key not in obj:
        if required:
            raise StructuralTagError(path, "the field %r is required" % key)
        return []
    value = obj[key]
    where = "%s.%s" % (path, key)
    if not isinstance(value, list):
        raise StructuralTagError(where, "must be an array of strings, got %s" % _type_name(value))
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise StructuralTagError("%s[%d]" % (where, i), "must be a string, got %s" % _type_name(item))
        if non_empty_items and not item:
            raise StructuralTagError("%s[%d]" % (where, i), "must be a non-empty string")
        out.append(_check_text(item, "%s[%d]" % (where, i)))
    return out


class _Reader:
    def __init__(self):
        self.depth = 0

    def format(self, value, path):
        if not isinstance(value, dict):
            raise StructuralTagError(path, "a format must be an object, got %s" % _type_name(value))
        self.depth += 1
        try:
            if self.depth > _MAX_DEPTH:
                raise StructuralTagError(path, "formats nest deeper than %d levels" % _MAX_DEPTH)
            if "type" not in value:
                return self.untyped(value, path)
            kind = value["type"]
            if not isinstance(kind, str):
                raise StructuralTagError(path + ".type", "must be a string, got %s" % _type_name(kind))
            if kind in TOKEN_TYPES:
                raise StructuralTagError(
                    path + ".type",
                    "the token-level format %r is not supported by bankml (structural tags are compiled to "
                    "llama.cpp GBNF, whose token elements cannot express token sets)" % kind,
                )
            reader = getattr(self, "read_" + kind, None) if kind in FORMAT_TYPES else None
            if reader is None:
                raise StructuralTagError(
                    path + ".type", "unknown format type %r (expected one of %s)" % (kind, ", ".join(FORMAT_TYPES))
                )
            return reader(value, path)
        finally:
            self.depth -= 1

    def untyped(self, value, path):
        """A format without ``type``: XGrammar tries each format in turn (tag first) and takes the first that
        reads; bankml does the same and reports the tag's reason when none does."""
        if "begin" in value or "end" in value:
            return self.read_tag(value, path)
        attempts = (
            ("value", self.read_const_string),
            ("json_schema", self.read_json_schema),
            ("excludes", self.read_any_text),
            ("elements", self.read_sequence),
            ("triggers", self.read_triggered_tags),
            ("separator", self.read_tags_with_separator),
            ("content", self.read_optional),
            ("rules", self.read_dispatch),
        )
        for key, reader in attempts:
            if key in value:
                return reader(value, path)
        raise StructuralTagError(path, "a format needs a 'type' (none of XGrammar's formats reads this object)")

    def read_const_string(self, obj, path):
        return Format("const_string", path, value=_string(obj, "value", path))

    def read_qwen_xml_parameter(self, obj, path):
        return self.read_json_schema(obj, path, style="qwen_xml")

    def read_json_schema(self, obj, path, style=None):
        if "json_schema" not in obj:
            raise StructuralTagError(path, "the field 'json_schema' is required")
        schema = obj["json_schema"]
        if not isinstance(schema, (dict, bool)):
            raise StructuralTagError(
                path + ".json_schema", "must be a JSON schema (an object or a boolean), got %s" % _type_name(schema)
            )
        if style is None:
            style = obj.get("style", "json")
            if not isinstance(style, str) or style not in ("json",) + XML_STYLES:
                raise StructuralTagError(
                    path + ".style", "must be one of %s, got %r" % (", ".join(("json",) + XML_STYLES), style)
                )
        any_order = _bool(obj, "any_order", path)
        excludes = _strings(obj, "excludes", path, non_empty_items=True)
        if excludes:
            raise StructuralTagError(
                path + ".excludes",
                "substrings excluded from a JSON schema's strings are not supported by bankml's strict compiler",
            )
        whitespace = obj.get("max_whitespace_cnt")
        if whitespace is not None:
            if isinstance(whitespace, bool) or not isinstance(whitespace, int):
                raise StructuralTagError(path + ".max_whitespace_cnt", "must be an integer or null")
            raise StructuralTagError(
                path + ".max_whitespace_cnt",
                "a whitespace cap is not supported: bankml's strict compiler keeps llama.cpp's whitespace rule "
                "(at most one space, or one or two newlines and 20 spaces or tabs, between tokens)",
            )
        return Format("json_schema", path, schema=schema, style=style, any_order=any_order)

    def read_grammar(self, obj, path):
        return Format("grammar", path, grammar=_string(obj, "grammar", path, non_empty=True))

    def read_regex(self, obj, path):
        return Format("regex", path, pattern=_string(obj, "pattern", path, non_empty=True))

    def read_any_text(self, obj, path):
        for budget in ("max_tokens", "max_chars"):
            value = obj.get(budget)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
                raise StructuralTagError(path + "." + budget, "must be a non-negative 32-bit integer or null")
            raise StructuralTagError(
                path + "." + budget,
                "a %s budget is not supported by bankml (llama.cpp GBNF has no %s counter)"
                % ("token" if budget == "max_tokens" else "character", "token" if budget == "max_tokens" else "length"),
            )
        return Format("any_text", path, excludes=_strings(obj, "excludes", path))

    def _elements(self, obj, path, kind):
        if "elements" not in obj:
            raise StructuralTagError(path, "the field 'elements' is required")
        elements = obj["elements"]
        if not isinstance(elements, list):
            raise StructuralTagError(path + ".elements", "must be an array of formats, got %s" % _type_name(elements))
        if not elements:
            raise StructuralTagError(path + ".elements", "must hold at least one format")
        return Format(
            kind, path, elements=[self.format(e, "%s.elements[%d]" % (path, i)) for i, e in enumerate(elements)]
        )

    def read_sequence(self, obj, path):
        return self._elements(obj, path, "sequence")

    def read_or(self, obj, path):
        return self._elements(obj, path, "or")

    def _content(self, obj, path):
        if "content" not in obj:
            raise StructuralTagError(path, "the field 'content' is required")
        return self.format(obj["content"], path + ".content")

    def read_optional(self, obj, path):
        return Format("optional", path, content=self._content(obj, path))

    def read_plus(self, obj, path):
        return Format("plus", path, content=self._content(obj, path))

    def read_star(self, obj, path):
        return Format("star", path, content=self._content(obj, path))

    def read_repeat(self, obj, path):
        bounds = []
        for key in ("min", "max"):
            if key not in obj:
                raise StructuralTagError(path, "the field %r is required" % key)
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                raise StructuralTagError("%s.%s" % (path, key), "must be an integer, got %r" % (value,))
            bounds.append(int(value))
        low, high = bounds
        if low < 0:
            raise StructuralTagError(path + ".min", "must be >= 0")
        if high < -1:
            raise StructuralTagError(path + ".max", "must be -1 (unbounded) or >= 0")
        if high >= 0 and low > high:
            raise StructuralTagError(path, "min must be <= max")
        for key, value in (("min", low), ("max", high)):
            if value > MAX_REPETITION:
                raise StructuralTagError(
                    "%s.%s" % (path, key),
                    "repetitions past %d are not supported (llama.cpp's grammar parser refuses them)" % MAX_REPETITION,
                )
        return Format("repeat", path, min=low, max=high, content=self._content(obj, path))

    def read_tag(self, obj, path):
        if "type" in obj and obj["type"] != "tag":
            raise StructuralTagError(path + ".type", 'must be "tag", got %r' % (obj["type"],))
        if "begin" not in obj:
            raise StructuralTagError(path, "the field 'begin' is required")
        begin = obj["begin"]
        if isinstance(begin, dict):
            raise StructuralTagError(path + ".begin", "a token begin is not supported by bankml (token-level format)")
        if not isinstance(begin, str):
            raise StructuralTagError(path + ".begin", "must be a string, got %s" % _type_name(begin))
        _check_text(begin, path + ".begin")
        content = self._content(obj, path)
        if "end" not in obj:
            raise StructuralTagError(path, "the field 'end' is required")
        end = obj["end"]
        if isinstance(end, str):
            ends = [_check_text(end, path + ".end")]
        elif isinstance(end, list):
            if not end:
                raise StructuralTagError(path + ".end", "an array of end strings cannot be empty")
            ends = _strings(obj, "end", path)
        elif isinstance(end, dict):
            raise StructuralTagError(path + ".end", "a token end is not supported by bankml (token-level format)")
        else:
            raise StructuralTagError(path + ".end", "must be a string or an array of strings, got %s" % _type_name(end))
        return Format("tag", path, begin=begin, content=content, ends=ends)

    def _tags(self, obj, path):
        if "tags" not in obj:
            raise StructuralTagError(path, "the field 'tags' is required")
        tags = obj["tags"]
        if not isinstance(tags, list):
            raise StructuralTagError(path + ".tags", "must be an array of tags, got %s" % _type_name(tags))
        if not tags:
            raise StructuralTagError(path + ".tags", "must hold at least one tag")
        out = []
        for i, tag in enumerate(tags):
            where = "%s.tags[%d]" % (path, i)
            if not isinstance(tag, dict):
                raise StructuralTagError(where, "a tag must be an object, got %s" % _type_name(tag))
            out.append(self.read_tag(tag, where))
        return out

    def read_triggered_tags(self, obj, path):
        triggers = _strings(obj, "triggers", path, required=True, non_empty_items=True)
        if not triggers:
            raise StructuralTagError(path + ".triggers", "must hold at least one trigger")
        tags = self._tags(obj, path)
        excludes = _strings(obj, "excludes", path, non_empty_items=True)
        return Format(
            "triggered_tags",
            path,
            triggers=triggers,
            tags=tags,
            excludes=excludes,
            at_least_one=_bool(obj, "at_least_one", path),
            stop_after_first=_bool(obj, "stop_after_first", path),
        )

    def read_tags_with_separator(self, obj, path):
        tags = self._tags(obj, path)
        return Format(
            "tags_with_separator",
            path,
            tags=tags,
            separator=_string(obj, "separator", path),
            at_least_one=_bool(obj, "at_least_one", path),
            stop_after_first=_bool(obj, "stop_after_first", path),
        )

    def read_dispatch(self, obj, path):
        if "rules" not in obj:
            raise StructuralTagError(path, "the field 'rules' is required")
        pairs = obj["rules"]
        if not isinstance(pairs, list):
            raise StructuralTagError(path + ".rules", "must be an array of [pattern, format] pairs")
        if not pairs:
            raise StructuralTagError(path + ".rules", "must hold at least one pair")
        rules = []
        for i, pair in enumerate(pairs):
            where = "%s.rules[%d]" % (path, i)
            if not isinstance(pair, list) or len(pair) != 2:
                raise StructuralTagError(where, "must be a [pattern, format] pair")
            if not isinstance(pair[0], str):
                raise StructuralTagError(where + "[0]", "the pattern must be a string, got %s" % _type_name(pair[0]))
            rules.append((_check_text(pair[0], where + "[0]"), self.format(pair[1], where + "[1]")))
        loop = obj.get("loop", True)
        if not isinstance(loop, bool):
            raise StructuralTagError(path + ".loop", "must be a boolean, got %s" % _type_name(loop))
        excludes = _strings(obj, "excludes", path, non_empty_items=True)
        return Format("dispatch", path, rules=rules, loop=loop, excludes=excludes)


def read_structural_tag(tag, path="structural_tag"):
    """The request's structural tag (a dict, or JSON text) as its root ``Format``; StructuralTagError
    naming the field for a malformed one."""
    if isinstance(tag, (bytes, bytearray)):
        tag = bytes(tag).decode("utf-8")
    if isinstance(tag, str):
        try:
            tag = jsondepth.loads(tag)
        except jsondepth.NestingError:
            raise StructuralTagError(path, "the JSON text nests deeper than %d levels" % jsondepth.MAX_DEPTH) from None
        except ValueError as e:
            raise StructuralTagError(path, "not valid JSON: %s" % e) from None
    if not isinstance(tag, dict):
        raise StructuralTagError(path, "a structural tag must be an object, got %s" % _type_name(tag))
    if "type" in tag and tag["type"] != "structural_tag":
        raise StructuralTagError(path + ".type", 'must be "structural_tag", got %r' % (tag["type"],))
    reader = _Reader()
    if tag.get("structures") is not None:
        return _read_legacy(tag, path, reader)
    if "format" not in tag:
        raise StructuralTagError(path, "the field 'format' is required (or 'structures' and 'triggers')")
    return reader.format(tag["format"], path + ".format")


def _read_legacy(tag, path, reader):
    structures = tag["structures"]
    if not isinstance(structures, list):
        raise StructuralTagError(path + ".structures", "must be an array, got %s" % _type_name(structures))
    if not structures:
        raise StructuralTagError(path + ".structures", "must hold at least one structure")
    triggers = _strings(tag, "triggers", path, required=True, non_empty_items=True)
    if not triggers:
        raise StructuralTagError(path + ".triggers", "must hold at least one trigger")
    tags = []
    for i, structure in enumerate(structures):
        where = "%s.structures[%d]" % (path, i)
        if not isinstance(structure, dict):
            raise StructuralTagError(where, "a structure must be an object, got %s" % _type_name(structure))
        schema = structure.get("schema")
        if schema is None:
            schema = {}
        if not isinstance(schema, (dict, bool)):
            raise StructuralTagError(
                where + ".schema", "must be a JSON schema (an object), got %s" % _type_name(schema)
            )
        content = Format("json_schema", where + ".schema", schema=schema, style="json", any_order=False, legacy=True)
        tags.append(
            Format(
                "tag",
                where,
                begin=_string(structure, "begin", where),
                content=content,
                ends=[_string(structure, "end", where)],
            )
        )
    return Format(
        "triggered_tags",
        path,
        triggers=triggers,
        tags=tags,
        excludes=[],
        at_least_one=_bool(tag, "at_least_one", path),
        stop_after_first=_bool(tag, "stop_after_first", path),
    )


# the XML styles bankml writes: (the opening tag of a parameter, from its name and whether it is a string; the
# closing tag), as XGrammar's json_schema_converter writes them
_XML_STYLES = {
    "qwen_xml": (lambda name, is_string: "<parameter=%s>" % name, "</parameter>"),
    "minimax_xml": (lambda name, is_string: '<parameter name="%s">' % name, "</parameter>"),
    "deepseek_xml": (
        lambda name, is_string: (
            '<\uff5cDSML\uff5cparameter name="%s" string="%s">' % (name, "true" if is_string else "false")
        ),
        "</\uff5cDSML\uff5cparameter>",
    ),
    "glm_xml": (lambda name, is_string: "<arg_key>%s</arg_key><arg_value>" % name, "</arg_value>"),
}


# -- analysis: XGrammar's StructuralTagAnalyzer


def _is_unlimited(fmt):
    kind = fmt.kind
    if kind in ("any_text", "triggered_tags", "dispatch", "tags_with_separator", "star", "plus"):
        return True
    if kind in ("sequence", "or"):
        return any(_is_unlimited(e) and not _is_excluded(e) for e in fmt.elements)
    if kind == "optional":
        return _is_unlimited(fmt.content)
    if kind == "repeat":
        return fmt.max == -1 or (fmt.max != 0 and _is_unlimited(fmt.content))
    return False


def _is_excluded(fmt):
    return fmt.kind in ("any_text", "triggered_tags", "dispatch") and bool(fmt.excludes)


# -- emission


class _Emitter:
    def __init__(self):
        self.rules = RuleSet()
        self.schemas = StrictGrammarBuilder(self.rules)
        self.ebnf = EbnfTranslator(self.rules)

    def emit(self, fmt, ends):
        """GBNF for ``fmt``; ``ends``: the end strings of the nearest enclosing tag (XGrammar's detected ends)."""
        try:
            return getattr(self, "emit_" + fmt.kind)(fmt, ends)
        except XGrammarSyntaxError as e:  # a TagDispatch's automaton past its bound
            raise StructuralTagError(fmt.path, str(e)) from None

    def emit_const_string(self, fmt, ends):
        return literal(fmt.value)

    def emit_json_schema(self, fmt, ends):
        if fmt.style != "json":
            return self.xml_arguments(fmt)
        if not fmt.any_order:
            # XGrammar's default: the declared order, fully validated. bankml's canonical style writes that
            # (bankml.schema.tool_args: schema-order keys, each once, only the escapes JSON requires), a subset
            # of the texts the schema accepts: a model writes keys as literals, not "timezo\u006e\u0065"
            base = self.rules.name("json")
            try:
                return tool_args.write(fmt.schema, "#", base, self.rules.add_rule, tool_args.JsonStyle())
            except SchemaError as e:
                raise self.schema_error(fmt, e) from None
        try:
            name = self.schemas.add_schema("schema", source=(fmt.schema, "#"))
        except SchemaError as e:
            raise self.schema_error(fmt, e) from None
        # the strict compiler's rule is the value and then llama.cpp's whitespace; XGrammar's JSON ends at the
        # value: what follows it (a tag's end) is the next format's, so the value is taken without it
        body = self.rules.rules[name]
        trailing = " %s-space" % name
        if body.endswith(trailing):
            return self.rules.add("json", body[: -len(trailing)])
        return name  # pragma: no cover - the strict compiler's rule shape

    @staticmethod
    def schema_error(fmt, e):
        where = fmt.path if fmt.fields.get("legacy") else fmt.path + ".json_schema"
        reason = str(e).replace("\n", " ")
        if e.keyword and "keyword %s" % e.keyword not in reason:
            reason += " (keyword %s at %s)" % (e.keyword, e.pointer)
        return StructuralTagError(where, reason, keyword=e.keyword, pointer=e.pointer)

    def xml_arguments(self, fmt):
        """A tool's arguments in one of XGrammar's XML styles, written by ``bankml.schema.tool_args``: each listed
        parameter once, in schema order (the optional ones skippable), a string parameter as raw text up to the
        closing tag, any other as canonical JSON; a newline may stand before, between and after them."""
        wrap = _XML_STYLES.get(fmt.style)
        if wrap is None:
            raise StructuralTagError(
                fmt.path + ".style",
                'the style %r is not supported yet by bankml (only "json", %s)'
                % (fmt.style, ", ".join(repr(k) for k in _XML_STYLES)),
            )
        opening, closing = wrap
        schema = fmt.schema
        try:
            params = tool_args.params(schema)
            parts = []
            for param in params:
                if any(c in param.name for c in '<>"\n'):
                    raise StructuralTagError(
                        fmt.path + ".json_schema",
                        "the parameter name %r cannot be written in the %s style" % (param.name, fmt.style),
                    )
                is_string = tool_args.kind(schema, param.pointer) == "string"
                style = tool_args.RawStyle(closing) if is_string else tool_args.JsonStyle()
                value = tool_args.write(schema, param.pointer, self.rules.name("xml-value"), self.rules.add_rule, style)
                element = "%s %s %s %s" % (literal(opening(param.name, is_string)), value, literal(closing), '"\n"?')
                parts.append(element if param.required else "(%s)?" % element)
        except SchemaError as e:
            raise self.schema_error(fmt, e) from None
        return self.rules.add("xml-arguments", " ".join(['"\n"?'] + parts))

    def emit_grammar(self, fmt, ends):
        try:
            return self.ebnf.translate(fmt.grammar, prefix="grammar")
        except XGrammarSyntaxError as e:
            raise StructuralTagError(fmt.path + ".grammar", str(e)) from None

    def emit_regex(self, fmt, ends):
        try:
            return self.ebnf.translate(regex_to_ebnf(fmt.pattern), prefix="regex")
        except XGrammarSyntaxError as e:
            raise StructuralTagError(fmt.path + ".pattern", str(e)) from None

    def emit_any_text(self, fmt, ends):
        excludes = list(fmt.excludes) + [e for e in ends or () if e]
        if not excludes:
            return self.rules.add("any-text", ".*")
        return dispatch_rules(self.rules, "any-text", [], False, excludes)

    def emit_sequence(self, fmt, ends):
        return self.rules.add("sequence", " ".join(self.emit(e, ends) for e in fmt.elements))

    def emit_or(self, fmt, ends):
        return self.rules.add("or", " | ".join(self.emit(e, ends) for e in fmt.elements))

    def emit_optional(self, fmt, ends):
        return self.rules.add("optional", "(%s)?" % self.emit(fmt.content, ends))

    def emit_plus(self, fmt, ends):
        return self.rules.add("plus", "(%s)+" % self.emit(fmt.content, ends))

    def emit_star(self, fmt, ends):
        return self.rules.add("star", "(%s)*" % self.emit(fmt.content, ends))

    def emit_repeat(self, fmt, ends):
        content = self.emit(fmt.content, ends)
        if fmt.max == -1:
            return self.rules.add("repeat", "(%s){%d,}" % (content, fmt.min))
        return self.rules.add("repeat", "(%s){%d,%d}" % (content, fmt.min, fmt.max))

    def end_expression(self, tag):
        if len(tag.ends) == 1:
            return literal(tag.ends[0])
        return self.rules.add("tag-end", " | ".join(literal(e) for e in tag.ends))

    def tag_content(self, tag):
        content = tag.content
        # XGrammar's analyzer: unlimited content needs an end to stop at
        if _is_unlimited(content) and not any(tag.ends) and not _is_excluded(content):
            raise StructuralTagError(
                tag.path + ".end", "when the content is unlimited, at least one end string must be non-empty"
            )
        return self.emit(content, tag.ends)

    def emit_tag(self, fmt, ends):
        content = self.tag_content(fmt)
        return self.rules.add("tag", "%s %s %s" % (literal(fmt.begin), content, self.end_expression(fmt)))

    def emit_triggered_tags(self, fmt, ends):
        groups = [[] for _ in fmt.triggers]
        contents = []
        for tag in fmt.tags:
            matched = [i for i, trigger in enumerate(fmt.triggers) if tag.begin.startswith(trigger)]
            if len(matched) > 1:
                raise StructuralTagError(tag.path + ".begin", "the tag matches more than one trigger")
            if not matched:
                raise StructuralTagError(tag.path + ".begin", "the tag matches no trigger (none is a prefix of it)")
            groups[matched[0]].append(tag)
            contents.append(self.tag_content(tag))
        full = ["%s %s %s" % (literal(t.begin), c, self.end_expression(t)) for t, c in zip(fmt.tags, contents)]
        if fmt.at_least_one and fmt.stop_after_first:
            return self.rules.add("triggered-tags", " | ".join(full))
        content_of = dict(zip(map(id, fmt.tags), contents))
        dispatched = []
        for trigger, tags in zip(fmt.triggers, groups):
            rests = [
                "%s %s %s" % (literal(t.begin[len(trigger) :]), content_of[id(t)], self.end_expression(t)) for t in tags
            ]
            dispatched.append((trigger, self.rules.add("triggered-tags-group", " | ".join(rests) or NEVER)))
        excludes = list(fmt.excludes) + [e for e in ends or () if e]
        body = dispatch_rules(self.rules, "triggered-tags-text", dispatched, not fmt.stop_after_first, excludes)
        if fmt.at_least_one:
            first = self.rules.add("triggered-tags-first", " | ".join(full))
            body = first + " " + body
        return self.rules.add("triggered-tags", body)

    def emit_tags_with_separator(self, fmt, ends):
        tags = self.rules.add("tags-with-separator-tags", " | ".join(self.emit_tag(t, ends) for t in fmt.tags))
        if fmt.stop_after_first:
            body = tags if fmt.at_least_one else tags + ' | ""'
            return self.rules.add("tags-with-separator", body)
        more = "(%s%s)*" % (literal(fmt.separator) + " " if fmt.separator else "", tags)
        body = tags + " " + more
        if not fmt.at_least_one:
            body += ' | ""'
        return self.rules.add("tags-with-separator", body)

    def emit_dispatch(self, fmt, ends):
        rules = [(pattern, self.emit(content, ends)) for pattern, content in fmt.rules]
        return self.rules.add("dispatch", dispatch_rules(self.rules, "dispatch-text", rules, fmt.loop, fmt.excludes))


def structural_tag_to_grammar(tag):
    """GBNF (root rule ``root``) whose language is the structural tag's (a dict or JSON text, either form; see
    the module docstring); StructuralTagError naming the field for a tag bankml refuses."""
    root = read_structural_tag(tag)
    emitter = _Emitter()
    return emitter.rules.text(emitter.emit(root, None))
