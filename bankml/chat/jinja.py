"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

Chat templates rendered with ``jinja2`` so that the bytes are those of llama.cpp's own engine
(``common/jinja``): the lexer's options (``trim_blocks``, ``lstrip_blocks``, one trailing newline dropped), what
an output statement prints (``None`` and mappings print nothing, lists print their items, floats as
``std::to_string`` with the zeros trimmed), lenient undefined values, ``for`` over a mapping yielding
``(key, value)`` pairs and refusing a string, ``tojson`` with llama.cpp's separators and no HTML escaping,
``raise_exception``, ``strftime_now`` at a given time, the ``{% generation %}`` block; and the capability probe
of ``common/jinja/caps.cpp`` (``caps_get``), which renders the template over fixed inputs and records which
input values the template touched. Private to bankml; ``bankml.chat.template`` owns what is rendered.
"""

import inspect
import json
import math
import re
import time
from json.encoder import encode_basestring

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox


class TemplateError(ValueError):
    """A chat template that cannot be parsed or rendered; the message is llama.cpp's where it differs."""


# -- values as llama.cpp prints them --------------------------------------------------------------------------


def float_str(value):
    """llama.cpp's value_float as_string: std::to_string (6 decimals), zeros trimmed, one kept after the point."""
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    out = "%f" % value
    out = out.rstrip("0")
    if out.endswith("."):
        out += "0"
    return out


def _json_float(value):
    """``std::ostringstream << double`` (the %g of six significant digits)."""
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    return "%g" % value


# nlohmann's string escaping (quote, backslash, \b \f \n \r \t, other controls as \u00xx, the rest as it
# is) is exactly what Python's json escapes with ensure_ascii=False; its C function does it
_json_string = encode_basestring


class JSONDict(dict):
    """A JSON object that remembers its ``to_json`` texts (per indent and separators): the tools that the chat
    layer caches by content (``bankml.chat.cache``) are made of these, so a template's ``tool | tojson`` is
    computed once per tool, not on every render. The sandbox refuses a template's mutation of it."""

    __slots__ = ("json_texts",)


class JSONList(list):
    """A JSON array that remembers its ``to_json`` texts (see ``JSONDict``)."""

    __slots__ = ("json_texts",)


def memo_json(value, depth=4):
    """A copy of a JSON value whose objects and arrays down to ``depth`` levels are ``JSONDict`` / ``JSONList``
    (deeper values are shared): for tools, the list, each tool, its function and its parameters, what templates
    print with ``tojson``."""
    if depth == 0:
        return value
    if isinstance(value, dict):
        out = JSONDict()
        for k, v in value.items():
            out[k] = memo_json(v, depth - 1)
    elif isinstance(value, (list, tuple)):
        out = JSONList([memo_json(v, depth - 1) for v in value])
    else:
        return value
    out.json_texts = {}
    return out


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_FLOAT = re.compile(r"[0-9][.eE]|Infinity|NaN")


def json_has_float(text):
    """Whether a text of Python's JSON encoder holds a float (its strings taken out, a number with a point or
    an exponent, or a non-finite one, is left)."""
    return _JSON_FLOAT.search(_JSON_STRING.sub("", text)) is not None


_TOJSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "), check_circular=False)


def tojson_text(value):
    """The text ``prime_tojson`` gives a JSON value: Python's C encoder with the default separators."""
    return _TOJSON_ENCODER.encode(value)


def prime_tojson(items, text=None, floats=None, texts=None):
    """Gives each ``JSONDict`` of ``items`` (values read from JSON text: string keys, no other types) its
    ``tojson`` text with the default separators, from Python's C JSON encoder, which writes such a value as
    ``to_json`` does except for floats (``%g`` there): a value with a float is left to ``to_json``. ``text``:
    the items' JSON text, when known (one float check for all of them); ``floats``: whether the items hold a
    float, when known (False: no check at all); ``texts``: each item's ``tojson_text``, when known."""
    if floats is None:
        floats = text is None or json_has_float(text)
    encode = _TOJSON_ENCODER.encode
    for i, item in enumerate(items):
        if type(item) is JSONDict:
            out = encode(item) if texts is None else texts[i]
            if not floats or not json_has_float(out):
                item.json_texts[(", ", ": ")] = out


def to_json(value, indent=-1, item_sep=None, key_sep=": ", level=0):
    """llama.cpp's value_to_json (common/jinja/value.cpp): objects in insertion order, no escaping beyond JSON's."""
    if item_sep is None:
        item_sep = ", " if indent < 0 else ","
    if indent < 0:
        return _to_json_flat(value, item_sep, key_sep)
    return _to_json_indented(value, indent, item_sep, key_sep, level)


def _to_json_scalar(value):
    if value is None or isinstance(value, jinja2.Undefined):
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    return "null"


def _to_json_flat(value, item_sep, key_sep):
    """to_json without indentation: one line (the common case, kept apart for speed)."""
    cls = type(value)
    if cls is str:
        return _json_string(value)
    if cls is JSONDict or cls is JSONList:
        key = (item_sep, key_sep)
        text = value.json_texts.get(key)
        if text is None:
            text = value.json_texts[key] = _to_json_flat_container(value, item_sep, key_sep)
        return text
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, (list, tuple, dict)):
        return _to_json_flat_container(value, item_sep, key_sep)
    return _to_json_scalar(value)


def _to_json_flat_container(value, item_sep, key_sep):
    if isinstance(value, dict):
        if not value:
            return "{}"
        return (
            "{"
            + item_sep.join(
                [_json_string(str(k)) + key_sep + _to_json_flat(v, item_sep, key_sep) for k, v in value.items()]
            )
            + "}"
        )
    if not value:
        return "[]"
    return "[" + item_sep.join([_to_json_flat(v, item_sep, key_sep) for v in value]) + "]"


def _to_json_indented(value, indent, item_sep, key_sep, level):
    pad = lambda lvl: " " * (lvl * indent) if indent > 0 else ""
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        parts = [pad(level + 1) + _to_json_indented(v, indent, item_sep, key_sep, level + 1) for v in value]
        return "[\n" + (item_sep + "\n").join(parts) + "\n" + pad(level) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        parts = [
            pad(level + 1) + _json_string(str(k)) + key_sep + _to_json_indented(v, indent, item_sep, key_sep, level + 1)
            for k, v in value.items()
        ]
        return "{\n" + (item_sep + "\n").join(parts) + "\n" + pad(level) + "}"
    return _to_json_scalar(value)


def _ensure_ascii(text):
    out = []
    for c in text:
        cp = ord(c)
        if cp < 0x80:
            out.append(c)
        elif cp < 0x10000:
            out.append("\\u%04x" % cp)
        else:
            cp -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)))
    return "".join(out)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if sort_keys:
        raise TemplateError("tojson sort_keys=true not implemented")
    ind = indent if isinstance(indent, int) and not isinstance(indent, bool) else -1
    seps = list(separators) if isinstance(separators, (list, tuple)) else []
    item_sep = seps[0] if len(seps) > 0 else (", " if ind < 0 else ",")
    key_sep = seps[1] if len(seps) > 1 else ": "
    _mark_deep(value)
    text = to_json(value, ind, item_sep, key_sep)
    return _ensure_ascii(text) if ensure_ascii else text


def _print(value):
    """What an output statement prints (gather_string_parts_recursive)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float_str(value)
    if isinstance(value, (list, tuple)):
        return "".join(_print(v) for v in value)
    return ""


# -- usage tracking for the capability probe ------------------------------------------------------------------


class _Stats:
    __slots__ = ("used", "ops")

    def __init__(self):
        self.used = False
        self.ops = set()


class TDict(dict):
    __slots__ = ("stats",)


class TList(list):
    __slots__ = ("stats",)

    def __iter__(self):
        self.stats.used = True
        self.stats.ops.add("array_access")
        return list.__iter__(self)


class TStr(str):
    __slots__ = ("stats",)


def track(value):
    """A copy of a JSON value whose containers and strings record how the template used them."""
    if isinstance(value, dict):
        out = TDict((k, track(v)) for k, v in value.items())
    elif isinstance(value, list):
        out = TList(track(v) for v in value)
    elif isinstance(value, str):
        out = TStr(value)
    else:
        return value
    out.stats = _Stats()
    return out


def _stats(value):
    return getattr(value, "stats", None) if isinstance(value, (TDict, TList, TStr)) else None


def _mark(value, op=None):
    st = _stats(value)
    if st is not None:
        st.used = True
        if op:
            st.ops.add(op)


def _mark_deep(value):
    st = _stats(value)
    if st is None:
        return
    st.used = True
    if isinstance(value, dict):
        for v in value.values():
            _mark_deep(v)
    elif isinstance(value, list):
        for v in list.__iter__(value):
            _mark_deep(v)


# -- the environment ------------------------------------------------------------------------------------------


class _GenerationExtension(jinja2.ext.Extension):
    """HF's ``{% generation %}...{% endgeneration %}`` marker: the body renders as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _llama_iter(value, single=False):
    """A ``for`` loop's iterable as llama.cpp's for_statement takes it (a mapping gives its (key, value) pairs,
    or its keys when the loop has one variable)."""
    _mark(value, "array_access")
    if isinstance(value, jinja2.Undefined):
        return []
    if isinstance(value, dict):
        _mark(value, "object_access")
        if single:
            return list(value.keys())
        return [(k, v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return value
    if isinstance(value, str):
        raise TemplateError("Expected iterable or object type in for loop: got String")
    if value is None:
        raise TemplateError("Expected iterable or object type in for loop: got None")
    if isinstance(value, (jinja2.runtime.LoopContext,)):
        return value
    try:
        return list(value)
    except TypeError:
        raise TemplateError("Expected iterable or object type in for loop: got %s" % type(value).__name__) from None


def _llama_in(left, right, negate):
    """``left in right`` as llama.cpp's binary_expression takes it: anything in undefined is false, while an
    undefined left operand (over a defined right one) is an error, not false."""
    if isinstance(right, jinja2.Undefined):
        return negate
    if isinstance(left, jinja2.Undefined):
        raise TemplateError("Cannot perform operation %s on undefined values" % ("not in" if negate else "in"))
    member = left in right
    return not member if negate else member


class _ForIterables(jinja2.visitor.NodeTransformer):
    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1 or node.ops[0].op not in ("in", "notin"):
            return node
        negate = jinja2.nodes.Const(node.ops[0].op == "notin")
        return jinja2.nodes.Call(
            jinja2.nodes.Name("__llama_in", "load"),
            [node.expr, node.ops[0].expr, negate],
            [],
            None,
            None,
            lineno=node.lineno,
        )

    def visit_For(self, node):
        self.generic_visit(node)
        single = jinja2.nodes.Const(isinstance(node.target, jinja2.nodes.Name))
        node.iter = jinja2.nodes.Call(
            jinja2.nodes.Name("__llama_iter", "load"), [node.iter, single], [], None, None, lineno=node.lineno
        )
        return node


class _Context(jinja2.runtime.Context):
    def resolve_or_missing(self, key):
        value = super().resolve_or_missing(key)
        _mark(value)
        return value


class _Undefined(jinja2.ChainableUndefined):
    """llama.cpp's undefined: attribute and item access give undefined again; it prints nothing."""

    __slots__ = ()

    def __add__(self, other):
        if isinstance(other, str):
            return other
        return jinja2.ChainableUndefined.__add__(self, other)

    def __radd__(self, other):
        if isinstance(other, str):
            return other
        return jinja2.ChainableUndefined.__radd__(self, other)


class _Environment(jinja2.sandbox.ImmutableSandboxedEnvironment):
    context_class = _Context

    def is_safe_attribute(self, obj, attr, value):
        return True

    def is_safe_callable(self, obj):
        return True

    def _parse(self, source, name, filename):
        tree = super()._parse(source, name, filename)
        return _ForIterables().visit(tree)

    def getattr(self, obj, attribute):
        if inspect.isroutine(obj) or isinstance(obj, jinja2.runtime.Macro):
            # llama.cpp's value_func has no builtins, so ``f.x`` is an error, not undefined
            raise TemplateError("Function has no builtins")
        value = jinja2.sandbox.SandboxedEnvironment.getattr(self, obj, attribute)
        self._mark_access(obj, attribute, value)
        return value

    def getitem(self, obj, argument):
        value = jinja2.sandbox.SandboxedEnvironment.getitem(self, obj, argument)
        self._mark_access(obj, argument, value)
        return value

    @staticmethod
    def _mark_access(obj, key, value):
        if _stats(obj) is None and _stats(value) is None:
            return
        _mark(value)
        is_index = isinstance(key, (int, bool)) and not isinstance(obj, dict)
        _mark(obj, "array_access" if is_index else "object_access")


def _wrap_filter_passing(name, fn):
    """Filters declared with jinja2's pass_* decorators get the context/environment first."""
    passing = getattr(fn, "jinja_pass_arg", None)
    if passing is None:

        def filt(value, *args, **kwargs):
            _mark(value, name)
            return fn(value, *args, **kwargs)

        return filt

    def filt(ctx, value, *args, **kwargs):
        _mark(value, name)
        return fn(ctx, value, *args, **kwargs)

    filt.jinja_pass_arg = passing
    return filt


def _wrap_test(name, fn):
    passing = getattr(fn, "jinja_pass_arg", None)
    op = "test_is_" + name
    if passing is None:

        def test(value, *args, **kwargs):
            _mark(value, op)
            return fn(value, *args, **kwargs)

        return test

    def test(ctx, value, *args, **kwargs):
        _mark(value, op)
        return fn(ctx, value, *args, **kwargs)

    test.jinja_pass_arg = passing
    return test


def _raise_exception(message):
    raise TemplateError("Jinja Exception: " + str(message))


def _as_list(fn):
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return list(fn(*args, **kwargs))

    if getattr(fn, "jinja_pass_arg", None) is not None:
        wrapper.jinja_pass_arg = fn.jinja_pass_arg
    return wrapper


def make_environment():
    env = _Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        undefined=_Undefined,
        finalize=_print,
        autoescape=False,
        extensions=[jinja2.ext.loopcontrols, _GenerationExtension],
    )
    env.filters["tojson"] = _tojson
    # llama.cpp's safe marks nothing (there is no escaping), and its map / select / reject filters give arrays
    env.filters["safe"] = lambda value: value
    for name in ("map", "select", "reject", "selectattr", "rejectattr"):
        env.filters[name] = _as_list(env.filters[name])
    env.filters = {name: _wrap_filter_passing(name, fn) for name, fn in env.filters.items()}
    env.tests = {name: _wrap_test(name, fn) for name, fn in env.tests.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["__llama_iter"] = _llama_iter
    env.globals["__llama_in"] = _llama_in
    return env


_ENV = make_environment()


class Program:
    """A parsed template (llama.cpp's jinja::program)."""

    def __init__(self, source):
        self.source = source
        try:
            self.template = _ENV.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError("chat template syntax error: %s (line %d)" % (e.message, e.lineno)) from None

    def render(self, variables, now=None):
        """The rendered text; ``now`` (a POSIX time, default the wall clock) is what ``strftime_now`` formats,
        in local time as llama.cpp's ``std::localtime``."""
        stamp = time.time() if now is None else now

        def strftime_now(fmt):
            return time.strftime(str(fmt), time.localtime(stamp))

        variables = dict(variables)
        variables.setdefault("strftime_now", strftime_now)
        try:
            return self.template.render(variables)
        except TemplateError:
            raise
        except jinja2.TemplateError as e:
            raise TemplateError(str(e)) from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError, RecursionError) as e:
            raise TemplateError("%s: %s" % (type(e).__name__, e)) from None


# -- capabilities (common/jinja/caps.cpp) ---------------------------------------------------------------------


class Caps:
    __slots__ = (
        "supports_tools",
        "supports_tool_calls",
        "supports_system_role",
        "supports_parallel_tool_calls",
        "supports_preserve_reasoning",
        "supports_reasoning_effort",
        "supports_string_content",
        "supports_typed_content",
        "supports_object_arguments",
    )

    def __init__(self):
        self.supports_tools = True
        self.supports_tool_calls = True
        self.supports_system_role = True
        self.supports_parallel_tool_calls = True
        self.supports_preserve_reasoning = False
        self.supports_reasoning_effort = False
        self.supports_string_content = True
        self.supports_typed_content = False
        self.supports_object_arguments = False

    def to_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


def _try_execute(program, messages, tools=None, extra=None):
    variables = {
        "messages": track(messages),
        "tools": track(tools if tools is not None else []),
        "bos_token": "",
        "eos_token": "",
        "add_generation_prompt": True,
    }
    if extra:
        variables.update(extra)
    try:
        out = program.render(variables, now=0)
        ok = True
    except Exception:  # the probe ignores failures, as caps_try_execute does
        out, ok = "", False
    return ok, variables, out


def _used(value):
    st = _stats(value)
    return bool(st and st.used)


def _ops(value):
    st = _stats(value)
    return st.ops if st else set()


def _tool_call(i, arguments):
    return {"id": "call0000%d" % i, "type": "function", "function": {"name": "tool1", "arguments": arguments}}


def _tool_messages(calls):
    return [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]


_TOOLS = [
    {
        "name": "tool",
        "type": "function",
        "function": {
            "name": "tool1",
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Arg description"}},
                "required": ["arg"],
            },
        },
    }
]


def caps_get(program):
    """llama.cpp's jinja::caps_get."""
    caps = Caps()
    marker = "STRING_MARKER"

    ok, v, out = _try_execute(program, [{"role": "user", "content": marker}])
    content = v["messages"][0]["content"]
    checks_for_string = "test_is_string" in _ops(content)
    used_as_array = bool({"selectattr", "array_access"} & _ops(content))
    if used_as_array:
        caps.supports_typed_content = True
    if not ok:
        caps.supports_string_content = False
    elif used_as_array and marker not in out:
        caps.supports_string_content = False

    if checks_for_string:
        ok, v, out = _try_execute(program, [{"role": "user", "content": []}])
        content = v["messages"][0]["content"]
        if {"selectattr", "array_access"} & _ops(content) and ok:
            caps.supports_typed_content = True

    ok, v, out = _try_execute(
        program, [{"role": "system", "content": "System message"}, {"role": "user", "content": "User message"}]
    )
    if not _used(v["messages"][0]["content"]):
        caps.supports_system_role = False

    ok, v, out = _try_execute(program, _tool_messages([_tool_call(1, {"arg": "value"})]), _TOOLS)
    if ok:
        if not _used(v["tools"][0]["function"]["name"]):
            caps.supports_tools = False
        tool_calls = v["messages"][1]["tool_calls"]
        if not _used(tool_calls):
            caps.supports_tool_calls = False
        elif _used(tool_calls[0]["function"]["arguments"]["arg"]):
            caps.supports_object_arguments = True

    if not caps.supports_object_arguments:
        ok, v, out = _try_execute(program, _tool_messages([_tool_call(1, '{"arg": "value"}')]), _TOOLS)
        if not ok:
            caps.supports_tool_calls = False
            caps.supports_tools = False
        else:
            if not _used(v["tools"][0]["function"]["name"]):
                caps.supports_tools = False
            if not _used(v["messages"][1]["tool_calls"]):
                caps.supports_tool_calls = False

    args = {"arg": "value"} if caps.supports_object_arguments else '{"arg": "value"}'
    ok, v, out = _try_execute(program, _tool_messages([_tool_call(1, args), _tool_call(2, args)]), _TOOLS)
    if not ok:
        caps.supports_parallel_tool_calls = False
    elif not _used(v["messages"][1]["tool_calls"][1]["function"]):
        caps.supports_parallel_tool_calls = False

    placeholder = "<REASONING_CONTENT_PLACEHOLDER>"
    history = [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "Assistant message", "reasoning_content": placeholder},
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "Assistant message", "reasoning_content": "Reasoning content"},
        {"role": "user", "content": "User message"},
    ]
    ok, v, out = _try_execute(program, history, extra=dict(enable_thinking=True, **preserve_reasoning(True)))
    if placeholder in out:
        caps.supports_preserve_reasoning = True

    effort = track("low")
    ok, v, out = _try_execute(
        program,
        [{"role": "user", "content": "User message"}],
        extra={"enable_thinking": True, "reasoning_effort": effort, "reasoning_strength": effort},
    )
    caps.supports_reasoning_effort = _used(effort)
    return caps


def preserve_reasoning(enabled):
    """caps_apply_preserve_reasoning: the variables templates use for it."""
    return {
        "preserve_thinking": enabled,
        "clear_thinking": not enabled,
        "truncate_history_thinking": not enabled,
        "drop_thinking": not enabled,
    }
