"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama-server's sampling parameters: ``SamplerParams`` (its names, defaults and limits), and the reading of a
request's sampler fields as ``params_from_json_cmpl`` reads them (``tools/server/server-schema.cpp``:
``SamplerParams.from_server``). Plain Python: nothing here runs per token. The chain that uses them is
``bankml.sampling._sampler``; this module must not import it.
"""

import math
import numbers
from typing import NamedTuple

import numpy as np

from bankml.errors import json_type_name

__all__ = [
    "DEFAULT_DRY_SEQUENCE_BREAKERS",
    "DEFAULT_SAMPLERS",
    "INT32_MAX",
    "LLAMA_DEFAULT_SEED",
    "OLLAMA_SAMPLER_OPTIONS",
    "SAMPLER_FIELDS",
    "Field",
    "SamplerParams",
]

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
DEFAULT_SAMPLERS = "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature"
FLT_MAX_VALUE = float(np.finfo(np.float32).max)
INT32_MAX = 2**31 - 1
DEFAULT_DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")


def _as_seed(seed, name):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"Invalid {name}: expected an integer in [-1, 4294967295], got {seed!r}")
    seed = int(seed)
    if seed == -1:
        return 0xFFFFFFFF
    if not 0 <= seed <= 0xFFFFFFFF:
        raise ValueError(f"Invalid {name}: expected an integer in [-1, 4294967295], got {seed}")
    return seed


def _vocab_tokenizer(vocab):
    """The vocabulary's tokenize(text, add_special, parse_special) hook, or None."""
    has = getattr(vocab, "has_tokenizer", None)
    if has is not None:
        return vocab.tokenize if has else None
    return getattr(vocab, "tokenize", None)


# common_sampler_types_from_names: canonical names, kebab-case and no-dash aliases, and three extras (the
# Sampler builds a stage per canonical name)
_CANONICAL_SAMPLERS = (
    "dry",
    "top_k",
    "top_p",
    "top_n_sigma",
    "typ_p",
    "min_p",
    "temperature",
    "xtc",
    "infill",
    "penalties",
    "adaptive_p",
)
_SAMPLER_NAMES = {name: name for name in _CANONICAL_SAMPLERS}
for _name in _CANONICAL_SAMPLERS:
    if "_" in _name:
        _SAMPLER_NAMES[_name.replace("_", "-")] = _name
        _SAMPLER_NAMES[_name.replace("_", "")] = _name
_SAMPLER_NAMES.update({"nucleus": "top_p", "temp": "temperature", "typ": "typ_p"})
_SAMPLER_CHARS = {
    "d": "dry",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "s": "top_n_sigma",
    "m": "min_p",
    "t": "temperature",
    "x": "xtc",
    "i": "infill",
    "e": "penalties",
    "a": "adaptive_p",
}


class Field(NamedTuple):
    """One sampler field of a request, declared once: everything else (SamplerParams' slots and checks,
    ``from_server``'s reading, the server's field tables, Ollama's option names, ``/props``) derives from
    ``SAMPLER_FIELDS``."""

    name: str  # llama-server's name (server-schema.cpp's params_from_json_cmpl) and SamplerParams' attribute
    kind: str  # "int" | "float" (numbers), or "seed" | "samplers" | "breakers" | "bias" (read by their own rules)
    default: object = None
    low: float | None = None  # SamplerParams' own bounds (its constructor refuses values outside them)
    high: float | None = None
    server: tuple | None = None  # llama-server's limit: ("clamp" | "hard", low, high), (None, None, None): none
    ollama: str | None = None  # the name in Ollama's options (api.Options), None: not an Ollama option
    props: bool = True  # in /props' default_generation_settings among the sampler settings (in this order)


_FLOAT_LOWEST = -FLT_MAX_VALUE
_ANY_FLOAT = ("clamp", _FLOAT_LOWEST, FLT_MAX_VALUE)  # field_num's default: the float range
_ANY_INT = ("hard", 0, INT32_MAX)

#: Every sampler field, in the order of llama-server's ``task_params::to_json`` (the /props order). Bounds are
#: llama-server's limits (server-schema.cpp); fields it gives no limits are clamped to the type's range
#: (field_num's defaults, numeric_limits<T>::lowest() and max()).
SAMPLER_FIELDS = (
    Field("seed", "seed", LLAMA_DEFAULT_SEED, ollama="seed"),
    Field("temperature", "float", 0.8, 0.0, math.inf, ("clamp", 0.0, math.inf), ollama="temperature"),
    Field("dynatemp_range", "float", 0.0, server=_ANY_FLOAT),
    Field("dynatemp_exponent", "float", 1.0, server=_ANY_FLOAT),
    Field("top_k", "int", 40, 0, INT32_MAX, ("clamp", 0, INT32_MAX), ollama="top_k"),
    Field("top_p", "float", 0.95, 0.0, 1.0, ("clamp", 0.0, 1.0), ollama="top_p"),
    Field("min_p", "float", 0.05, 0.0, 1.0, ("clamp", 0.0, 1.0), ollama="min_p"),
    Field("top_n_sigma", "float", -1.0, server=_ANY_FLOAT),
    Field("xtc_probability", "float", 0.0, 0.0, 1.0, ("clamp", 0.0, 1.0)),
    Field("xtc_threshold", "float", 0.1, 0.0, 1.0, ("clamp", 0.0, 1.0)),
    Field("typical_p", "float", 1.0, server=_ANY_FLOAT, ollama="typical_p"),
    Field("repeat_last_n", "int", 64, 0, INT32_MAX, _ANY_INT, ollama="repeat_last_n"),
    Field("repeat_penalty", "float", 1.0, server=_ANY_FLOAT, ollama="repeat_penalty"),
    Field("presence_penalty", "float", 0.0, server=_ANY_FLOAT, ollama="presence_penalty"),
    Field("frequency_penalty", "float", 0.0, server=_ANY_FLOAT, ollama="frequency_penalty"),
    Field("dry_multiplier", "float", 0.0, server=_ANY_FLOAT),
    Field("dry_base", "float", 1.75, server=(None, None, None)),  # its handler: below 1 becomes the default 1.75
    Field("dry_allowed_length", "int", 2, 0, INT32_MAX, _ANY_INT),
    Field("dry_penalty_last_n", "int", 64, 0, INT32_MAX, _ANY_INT),
    Field("mirostat", "int", 0, 0, 2, ("clamp", 0, 2), ollama="mirostat"),
    Field("mirostat_tau", "float", 5.0, server=_ANY_FLOAT, ollama="mirostat_tau"),
    Field("mirostat_eta", "float", 0.1, server=_ANY_FLOAT, ollama="mirostat_eta"),
    Field("adaptive_target", "float", -1.0, None, 1.0, ("clamp", _FLOAT_LOWEST, 1.0)),
    Field("adaptive_decay", "float", 0.9, 0.0, float(np.float32(0.99)), ("hard", 0.0, float(np.float32(0.99)))),
    Field("min_keep", "int", 0, 0, INT32_MAX, _ANY_INT, props=False),
    Field("samplers", "samplers", DEFAULT_SAMPLERS, props=False),
    Field("dry_sequence_breakers", "breakers", DEFAULT_DRY_SEQUENCE_BREAKERS, props=False),
    Field("logit_bias", "bias", (), props=False),
)
#: Ollama's option name -> the field's name
OLLAMA_SAMPLER_OPTIONS = {f.ollama: f.name for f in SAMPLER_FIELDS if f.ollama is not None}

# name -> (default, kind, low, high) of the numeric fields, and name -> (mode, low, high, kind) of the
# llama-server limits ``from_server`` applies: both read off SAMPLER_FIELDS
_NUMERIC_FIELDS = {f.name: (f.default, f.kind, f.low, f.high) for f in SAMPLER_FIELDS if f.kind in ("int", "float")}
_SERVER_LIMITS = {f.name: (*f.server, f.kind) for f in SAMPLER_FIELDS if f.server is not None}


def _server_number(name, value, mode, low, high, kind):
    # nlohmann's get<T> of a JSON number, then field_num's std::clamp or hard limit
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"Field '{name}': type must be number, but is {json_type_name(value)}")
    if kind == "int":
        if isinstance(value, numbers.Integral):
            v = (int(value) + 2**31) % 2**32 - 2**31  # static_cast<int32_t> wraps
        else:
            f = float(value)
            # static_cast<int32_t>(double) truncates; out of range, x86-64's cvttsd2si gives INT32_MIN
            v = int(f) if math.isfinite(f) and -(2**31) <= math.trunc(f) < 2**31 else -(2**31)
    else:
        if not math.isfinite(float(value)):
            raise ValueError(f"Field '{name}': must be a finite number, got {value!r}")
        with np.errstate(over="ignore"):
            v = float(np.float32(value))  # get<float>: may overflow to +-inf
    if mode == "hard":
        if v < low or v > high:
            raise ValueError(f"Field '{name}': Value must be between {low} <= value <= {high}, but got {v}")
    elif mode == "clamp":
        v = max(low, min(high, v))
    return v


def _server_seed(value):
    # get<uint32_t>: integers modulo 2^32 (so -1 is LLAMA_DEFAULT_SEED), other numbers truncated first
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"Field 'seed': type must be number, but is {json_type_name(value)}")
    if not isinstance(value, numbers.Integral):
        if not math.isfinite(float(value)):
            raise ValueError(f"Field 'seed': must be a finite number, got {value!r}")
        value = math.trunc(float(value))
    return int(value) % 2**32


_C_SPACE = " \t\n\v\f\r"


def _strtol_token(key):
    """llama-server's reading of a logit_bias object key: ``strtol(key.c_str(), &end, 10)``, accepted as an id when
    ``*end == 0``, then cast to llama_token. None when the key is not a number (llama-server tokenizes it)."""
    s = key.split("\0", 1)[0]  # c_str() ends at a NUL
    n = len(s)
    i = 0
    while i < n and s[i] in _C_SPACE:
        i += 1
    j = i + 1 if i < n and s[i] in "+-" else i
    k = j
    while k < n and "0" <= s[k] <= "9":
        k += 1
    if k == j:
        # no digits: strtol sets end to the start, so only the empty key reads as a number (0)
        return 0 if n == 0 else None
    if k != n:
        return None
    v = max(-(2**63), min(2**63 - 1, int(s[i:k])))  # strtol saturates at LONG_MIN / LONG_MAX
    return (v + 2**31) % 2**32 - 2**31  # the cast to int32_t wraps


def _server_bias(value):
    # parse_bias: a number as get<float> (overflowing to +-inf), false as -inf; anything else skips the entry
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if math.isnan(float(value)):
        raise ValueError("Field 'logit_bias': a bias must be a number, got NaN")
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _server_logit_bias(raw, vocab):
    """params_from_json_cmpl's logit_bias handler: [[token, bias], ...] or {"token": bias}; integer ids outside
    the vocabulary skipped, text keys tokenized (without special tokens) with every token biased, malformed
    entries skipped. Without a vocabulary, ids are kept for the Sampler to check and text is refused."""
    n_vocab = len(vocab) if vocab is not None else None
    out = []

    def add_id(token, bias):
        if token >= 0 and (n_vocab is None or token < n_vocab):
            out.append((token, bias))

    def add_text(text, bias):
        tokenize = _vocab_tokenizer(vocab) if vocab is not None else None
        if tokenize is None:
            raise ValueError(
                f"Field 'logit_bias': {text!r} is text, which llama-server tokenizes; "
                + (
                    "pass the vocabulary (from_server(..., vocab=...))"
                    if vocab is None
                    else "the vocabulary has no tokenizer hook (Vocab.with_tokenizer)"
                )
            )
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"Field 'logit_bias': {text!r} is not valid Unicode text") from None
        for token in tokenize(data, False, False):
            out.append((int(token), bias))

    if isinstance(raw, (list, tuple)):
        for el in raw:
            if not isinstance(el, (list, tuple)) or len(el) != 2:
                continue
            bias = _server_bias(el[1])
            if bias is None:
                continue
            token = el[0]
            if isinstance(token, numbers.Integral) and not isinstance(token, bool):
                token = int(token)
                if -(2**63) <= token < 2**64:  # larger integers are floats to nlohmann's parser
                    add_id((token + 2**31) % 2**32 - 2**31, bias)
            elif isinstance(token, str):
                add_text(token, bias)
    elif isinstance(raw, dict):
        # nlohmann::json keeps an object in a std::map: its items come in byte order of the keys, and the order
        # is the order the biases are added in (it rounds when two entries bias one token)
        items = sorted(((str(k), v) for k, v in raw.items()), key=lambda kv: kv[0].encode("utf-8", "surrogatepass"))
        for key, value in items:
            bias = _server_bias(value)
            if bias is None:
                continue
            token = _strtol_token(key)
            if token is not None:
                add_id(token, bias)
            else:
                add_text(key, bias)
    return out


def _float32(value):
    return float(np.float32(value))


class SamplerParams:
    """llama-server's sampling parameters, with its names and defaults.

    Values are stored as llama.cpp stores them (floats rounded to float32, seed as uint32 with
    -1 meaning LLAMA_DEFAULT_SEED). Out-of-range values raise ValueError naming the field, also for
    the fields llama-server would silently clamp; ``dry_base`` below 1 becomes the default 1.75 as in
    llama-server. ``samplers`` takes names separated by ';' (or a list of names, or a string of
    llama.cpp's one-letter codes) and is kept as a tuple of canonical names.
    """

    __slots__ = ("seed", "samplers", "dry_sequence_breakers", "logit_bias") + tuple(_NUMERIC_FIELDS)

    def __init__(self, **kwargs):
        self._init(kwargs, True)

    def _init(self, kwargs, strict):
        unknown = set(kwargs) - set(self.__slots__)
        if unknown:
            raise ValueError(f"Invalid sampler parameter: unknown field(s) {', '.join(sorted(unknown))}")
        for name, (default, kind, low, high) in _NUMERIC_FIELDS.items():
            object.__setattr__(self, name, self._check_number(name, kwargs.get(name, default), kind, low, high))
        if self.dry_base < 1.0:
            object.__setattr__(self, "dry_base", _float32(1.75))
        rp = self.repeat_penalty
        with np.errstate(over="ignore", divide="ignore"):
            inverse = float(np.float32(1.0) / np.float32(rp)) if rp != 0.0 else math.inf
        if strict and (rp <= 0.0 or not math.isfinite(inverse)):
            raise ValueError(f"Invalid repeat_penalty: must be finite and greater than 0, got {rp}")
        if not math.isfinite(inverse):
            # llama-server divides by it: a logit of +-inf, then NaN probabilities that its sorts are not defined on
            raise ValueError(f"Invalid repeat_penalty: 1 / {rp} is not a finite float")
        object.__setattr__(self, "seed", _as_seed(kwargs.get("seed", -1), "seed"))
        object.__setattr__(self, "samplers", self._check_samplers(kwargs.get("samplers", DEFAULT_SAMPLERS)))
        breakers = kwargs.get("dry_sequence_breakers", DEFAULT_DRY_SEQUENCE_BREAKERS)
        if isinstance(breakers, str) or not all(isinstance(b, str) for b in breakers) or len(breakers) == 0:
            raise ValueError("Invalid dry_sequence_breakers: must be a non-empty list of strings")
        object.__setattr__(self, "dry_sequence_breakers", tuple(breakers))
        object.__setattr__(self, "logit_bias", self._check_logit_bias(kwargs.get("logit_bias", ())))

    @staticmethod
    def _check_number(name, value, kind, low, high):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"Invalid {name}: expected a number, got {value!r}")
        if kind == "int":
            if not isinstance(value, numbers.Integral):
                if not float(value).is_integer():
                    raise ValueError(f"Invalid {name}: expected an integer, got {value!r}")
            value = int(value)
        else:
            if not math.isfinite(float(value)) and not (high == math.inf and value == math.inf):
                raise ValueError(f"Invalid {name}: must be finite, got {value!r}")
            value = _float32(value)
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"Invalid {name}: must be between {low} and {high}, got {value!r}")
        return value

    @staticmethod
    def _check_samplers(samplers):
        if isinstance(samplers, str):
            if ";" in samplers or samplers.lower() in _SAMPLER_NAMES:
                names = [s for s in samplers.split(";") if s != ""]
            else:
                names = []
                for c in samplers:
                    if c not in _SAMPLER_CHARS:
                        raise ValueError(f"Invalid samplers: unknown sampler code {c!r}")
                    names.append(_SAMPLER_CHARS[c])
        else:
            names = list(samplers)
        result = []
        for name in names:
            if not isinstance(name, str) or name.lower() not in _SAMPLER_NAMES:
                raise ValueError(f"Invalid samplers: unknown sampler {name!r}")
            result.append(_SAMPLER_NAMES[name.lower()])
        return tuple(result)

    @staticmethod
    def _check_logit_bias(logit_bias):
        items = logit_bias.items() if isinstance(logit_bias, dict) else logit_bias
        result = []
        for item in items:
            try:
                token, bias = item
            except (TypeError, ValueError):
                raise ValueError(f"Invalid logit_bias: expected [token, bias] pairs, got {item!r}") from None
            if isinstance(token, str) and token.strip().lstrip("-").isdigit():
                token = int(token)
            if isinstance(token, bool) or not isinstance(token, numbers.Integral):
                raise ValueError(f"Invalid logit_bias: token must be an integer id, got {token!r}")
            if bias is False:
                bias = -math.inf
            elif isinstance(bias, bool) or not isinstance(bias, numbers.Real) or math.isnan(bias):
                raise ValueError(f"Invalid logit_bias: bias must be a number or false, got {bias!r}")
            result.append((int(token), _float32(bias)))
        return tuple(result)

    @classmethod
    def from_server(cls, fields, n_ctx=None, vocab=None):
        """The parameters llama-server samples with for a request's sampler fields (``params_from_json_cmpl``,
        tools/server/server-schema.cpp of the pinned llama.cpp).

        Where llama-server clamps, this clamps (``temperature`` to [0, inf], ``top_k`` to [0, INT32_MAX],
        ``top_p``/``min_p``/``xtc_probability``/``xtc_threshold`` to [0, 1], ``mirostat`` to [0, 2],
        ``adaptive_target`` to at most 1, every other float to the float range, as its ``std::clamp`` of the
        ``get<float>`` value does); integers are read as ``get<int32_t>`` reads them (truncated, wrapped to
        32 bits), seeds as ``get<uint32_t>`` (modulo 2^32, so -1 is the random seed); ``samplers`` as a string
        is one-letter codes and as an array names, unknown ones skipped as llama-server skips them. Where
        llama-server answers 400 (a hard limit: ``repeat_last_n``, ``dry_allowed_length``,
        ``dry_penalty_last_n``, ``min_keep`` outside [0, INT32_MAX], ``adaptive_decay`` outside [0, 0.99]; a
        value of the wrong JSON type; an empty ``dry_sequence_breakers``), this raises ValueError with a
        message naming the field. ``None`` means absent. ``n_ctx`` is accepted for the callers that know the
        context; llama-server does not clamp history lengths to it (bankml's histories grow with the tokens
        accepted, so a history length beyond the context costs nothing).

        ``logit_bias`` is read as llama-server reads it: ``[[token, bias], ...]`` or ``{"token": bias}``, a bias
        being a number or ``false`` (-inf); malformed entries are skipped; with ``vocab``, integer ids outside the
        vocabulary are skipped and text (an array entry's string, an object key that is not all a base-10
        number as ``strtol`` reads it) is tokenized with the vocabulary's tokenizer hook (no special tokens),
        every token getting the bias. Without ``vocab``, ids are kept (``Sampler`` refuses those outside its
        vocabulary) and text raises ValueError.
        """
        values = {}
        for key, raw in fields.items():
            if raw is None:
                continue
            if key in _SERVER_LIMITS:
                values[key] = _server_number(key, raw, *_SERVER_LIMITS[key])
            elif key == "seed":
                values[key] = _server_seed(raw)
            elif key == "samplers":
                if isinstance(raw, str):
                    values[key] = tuple(_SAMPLER_CHARS[c] for c in raw if c in _SAMPLER_CHARS)
                elif isinstance(raw, list):
                    if not all(isinstance(name, str) for name in raw):
                        raise ValueError("Field 'samplers': type must be string, but is not")
                    values[key] = tuple(_SAMPLER_NAMES[name.lower()] for name in raw if name.lower() in _SAMPLER_NAMES)
                # any other JSON type: llama-server keeps its default order
            elif key == "logit_bias":
                values[key] = _server_logit_bias(raw, vocab)
            elif key == "dry_sequence_breakers":
                if not isinstance(raw, list) or not raw or not all(isinstance(b, str) for b in raw):
                    raise ValueError("Error: dry_sequence_breakers must be a non-empty array of strings")
                values[key] = tuple(raw)
            else:
                values[key] = raw
        obj = cls.__new__(cls)
        obj._init(values, False)
        return obj

    def __setattr__(self, name, value):
        raise AttributeError("SamplerParams is immutable; use replace()")

    def replace(self, **changes):
        values = self.as_dict()
        values.update(changes)
        return SamplerParams(**values)

    def as_dict(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __eq__(self, other):
        return isinstance(other, SamplerParams) and self.as_dict() == other.as_dict()

    def __hash__(self):
        return hash(tuple(self.as_dict().items()))

    def __repr__(self):
        return "SamplerParams(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def __reduce__(self):
        return (_rebuild_params, (self.as_dict(),))


def _rebuild_params(values):
    return SamplerParams(**values)
