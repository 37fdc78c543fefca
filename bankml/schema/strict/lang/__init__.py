"""Regular languages of JSON-Schema strings, exact, as minimal DFAs over code points, and their GBNF: the strict
compiler's regular-language core.

Owns, module by module (each builds only on those before it):

* ``bounds``: what one construction may cost (``MAX_STATES`` DFA states per construction, fixed format
  constructions 3x that in intermediate automata; ``MAX_NFA_NODES`` regex NFA nodes; ``MAX_WORK`` thread steps and
  ``MAX_EDGES`` range transitions per regex) and ``LangError`` (``keyword``, ``reason``), raised for whatever cannot
  be built exactly or within them. The bounds are read at each construction: a caller may change them in
  ``bounds`` (not through the copies this package exports);
* ``charsets``: the alphabet (U+0000..U+10FFFF without the surrogates) and its sets of code points;
* ``minimize``: Hopcroft's partition of a DFA's states;
* ``automaton``: :class:`Lang`, an immutable regular language held as a trimmed, minimized, canonically numbered
  DFA whose edges are labelled with code-point ranges (builders ``Lang.literal``, ``Lang.literals``,
  ``Lang.any_string``, ``Lang.empty``, ``Lang.chars``, ``Lang.length``, ``Lang.regex``, ``Lang.format``; algebra
  ``&``, ``|``, ``-``, ``complement``, ``concat``; queries ``is_empty``, ``is_universal``, ``is_finite``,
  ``matches``, ``n_states``, ``==`` (language equality), ``example``), and the constructions it runs on;
* ``algebra``: :func:`intersect_all` (several parts, some complemented, in one product), the preimage of a
  per-character map, :func:`string_lang` (a string schema's keywords intersected, each refusal naming its keyword);
* ``regex``: ``Lang.regex(pattern)``, the strings ``s`` with ``re.search(pattern, s)`` (JSON Schema's
  ``pattern`` as the ``jsonschema`` package checks it: Python ``re`` semantics, unanchored);
* ``format_langs`` and ``formats``: ``Lang.format(name, bare_checker=False)``, the strings the ``jsonschema``
  format checker accepts for ``name``; :func:`is_known_format`, :func:`draft_checks_format`, ``FORMAT_DRAFTS``
  (which names jsonschema checks, and in which drafts); :func:`build_format_lang` and :func:`write_format_data`
  (the shipped tables of bankml.schema.format_data);
* ``gbnf``: :func:`string_gbnf` ``(lang, name, admit_surrogates=False) -> (expression, rules)``, GBNF for the whole
  quoted JSON text of a string whose decoded value is in a ``Lang``.

Must not import: the strict compiler above it (``bankml.schema.strict``'s other modules), bankml's engine (rules,
matcher), or ``jsonschema`` (whose behaviour it models; the tests compare). Pure Python on the standard library
and numpy; every module but this one is compiled by Cython as it is (setup.py).

Regex (``pattern``) support: parsed by Python's own parser (``re._parser``), so every quirk of Python's syntax
(what ``{`` means when it is not a quantifier, octal escapes, verbose mode...) is Python's: literals and all
escapes; classes with ranges and negation; ``\\d \\D \\w \\W \\s \\S`` Unicode-aware (or ASCII under ``(?a)``), their
code-point sets taken from ``re`` itself by one scan of the alphabet (cached); ``.`` (no ``\\n`` unless ``(?s)``);
anchors ``^ $ \\A \\Z`` and ``(?m)`` line anchors, anywhere in the pattern, with Python's meaning (``$`` also
before a final ``\\n``); word boundaries ``\\b \\B`` (whether ``\\B`` matches in the empty string is asked of the
running ``re``: not up to 3.13); groups of all capturing/non-capturing/named kinds; alternation; greedy and lazy
quantifiers (laziness does not change what ``re.search`` finds); inline and scoped flags ``i m s x a u`` —
``(?i)`` is exact because each case-folded class is computed by ``re`` itself over the alphabet.  Refused
(``LangError("pattern", ...)``): lookahead, lookbehind, backreferences, conditionals ``(?(1)..)``, atomic groups
and possessive quantifiers, and any pattern ``re.compile`` rejects.

Formats: ``Lang.format(name)`` follows the checkers of ``jsonschema`` 4.x with its format extras installed
(``jsonschema[format]``: uri/iri through ``rfc3987``, which jsonschema prefers to ``rfc3986-validator``;
date-time through ``rfc3339-validator``; duration through ``isoduration``), as
``Draft202012Validator.FORMAT_CHECKER`` (and ``Draft201909``/``Draft7``) applies them: ``date``, ``time``,
``date-time``, ``duration``, ``email``, ``idn-email``, ``ipv4``, ``ipv6``, ``uri``, ``uri-reference``, ``iri``,
``iri-reference``, ``json-pointer``, ``uuid``; each is the language of what the checker actually accepts (``email``
is "contains ``@``", ``date-time`` upper-cases the instance first and allows a trailing ``\\n`` through ``$``,
``ipv4`` refuses leading zeros, ``uuid`` is whatever ``uuid.UUID`` parses — braces, ``urn:uuid:``,
``int(..., 16)``'s whitespace, sign, ``0x`` and underscores — with '-' at 8, 13, 18, 23; that one is exact but
large: 6,938 states).  ``hostname`` is refused: exact, it needs 23,813 states before its case preimage (labels of
<= 63 inside <= 253 characters); so are ``idn-hostname``, ``regex`` (not regular), ``relative-json-pointer``,
``uri-template`` (and ``color`` but with ``bare_checker``). Note the bare ``FormatChecker()`` (class-level
registry) checks ``time`` with the draft-3 ``strptime('%H:%M:%S')`` checker instead, and checks draft 3's
``color`` (CSS3 keywords or ``#rgb``/``#rrggbb``); ``Lang.format(name, bare_checker=True)`` builds those.  Every
other name raises ``LangError("format", ...)``: ``jsonschema`` itself treats formats it has no checker for as
annotations, so a caller may treat the refusal of an *unknown* name (``is_known_format(name)`` is False) as "no
constraint", but must not do so for a known one — unless the draft's checker does not assert it
(``draft_checks_format(draft, name)``: e.g. draft 4 has no ``date``, ``uuid`` or ``duration`` checker).

JSON string encoding policy of :func:`string_gbnf` — *every* JSON encoding of every character: raw (anything but
``"``, ``\\`` and U+0000..U+001F, written as UTF-8), the short escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t``,
``\\uXXXX`` with hex digits of either case, and surrogate pairs ``\\uD8xx\\uDCxx`` (either case) for code points
above U+FFFF.  The grammar's language is therefore exactly the JSON texts whose decoded value is in the ``Lang``
(lone surrogates, which ``json.loads`` would decode to an unpaired surrogate, are never accepted).
"""

from bankml.schema.strict.lang.algebra import intersect_all, string_lang
from bankml.schema.strict.lang.automaton import Lang
from bankml.schema.strict.lang.bounds import MAX_STATES, LangError
from bankml.schema.strict.lang.formats import (
    FORMAT_DRAFTS,
    KNOWN_FORMATS,
    build_format_lang,
    draft_checks_format,
    is_known_format,
    write_format_data,
)
from bankml.schema.strict.lang.gbnf import string_gbnf

__all__ = [
    "LangError",
    "Lang",
    "string_gbnf",
    "string_lang",
    "intersect_all",
    "is_known_format",
    "draft_checks_format",
    "build_format_lang",
    "write_format_data",
    "MAX_STATES",
    "KNOWN_FORMATS",
    "FORMAT_DRAFTS",
]
