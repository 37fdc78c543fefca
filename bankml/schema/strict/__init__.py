"""Strict JSON Schema -> GBNF: every schema is compiled exactly, or refused with a SchemaError that names the
keyword (``SchemaError.keyword``) and the JSON pointer of the schema node (``SchemaError.pointer``).

This sits beside bankml's port of llama.cpp's converter (``bankml.schema``), never instead of it: that one is
byte-identical to llama.cpp and bends what it cannot enforce; this one accepts exactly the JSON texts that
``jsonschema`` (the validator of the schema's ``$schema`` draft, 2020-12 by default, with its FormatChecker)
accepts, within the policies below, and refuses what it cannot enforce.

Policies (what "exactly" means for texts, since a grammar sees text and jsonschema sees parsed values):

* **Whitespace**: llama.cpp's ``space ::= | " " | "\\n"{1,2} [ \\t]{0,20}`` may stand between any two tokens
  and after the root value; ``json.dumps(data, ensure_ascii=False)``'s ``", "`` and ``": "`` pass.
* **Strings** in every JSON spelling of every code point: raw UTF-8 (all but ``"``, ``\\`` and U+0000-U+001F),
  the short escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t``, ``\\uXXXX`` (hex of either case) and surrogate
  pairs for code points past U+FFFF; lone surrogates (``json.loads`` would give an unpaired surrogate) are not
  accepted. Every spelling decodes to one code point, so lengths, key exclusions, enums and patterns are
  exact on the decoded string (``lang.string_gbnf`` has the same policy).
* **Object keys**: each key at most once. An object schema of up to 8 listed keys (``properties``, and names
  that are only ``required`` or in dependencies) takes its members in any order, other keys
  (``additionalProperties``/``patternProperties``) anywhere among them: one rule per set of keys written,
  while the grammar's any-order objects have at most 4096 such sets in all (objects built first, outermost
  first, get them), and at most 512 of them go to objects the next form would also take. Past that (2^n
  rules would be too many: Kubernetes schemas spent the 4096 and wrote 750 KB of GBNF), when no
  minProperties or maxProperties counts keys and there are at most 12 required keys and keys named by a
  dependency, members come in any order with one rule per set of those written, and another key may come again
  (``json.loads`` keeps the last value; every value must pass, so the verdict on texts without repeated keys
  is jsonschema's). Otherwise the object
  is refused (keyword ``properties``: a grammar of one key order would reject valid texts); with
  ``lenient=["properties"]`` the listed keys come in schema order there, each optional one skippable, then the
  other keys in any order.
* **Numbers**: ``type: integer`` takes integer texts (``-?(0|[1-9][0-9]*)``) and, from draft 6 on (where
  jsonschema counts 1.0 as an integer), the same with an all-zero fraction (``5.0``, as ``json.dumps`` writes
  an integral float); no exponent (``json.dumps(1e16)`` is ``1e+16``: rejected, though draft 6+ accepts it).
  ``type: number`` takes every JSON number text;
  when bounds or ``multipleOf`` apply, exponent forms need a normalised mantissa (``1.5e+20``, ``1e-05``, as
  ``json.dumps`` writes floats): ``0.5e1`` is rejected. Bounds compare the text's exact decimal value with the
  bound's (a float bound as its shortest repr), digit by digit: exact for every text ``json.dumps`` writes.
  ``multipleOf`` is enforced for integral divisors (divisibility automaton); other divisors are refused.
* **const/enum**: jsonschema equality (``1 == 1.0``, ``true != 1``): an integral number also matches its
  ``.0``-fraction texts; an object value matches in every key order (up to 8 keys; more is refused).
* Keywords that are no validation keyword of the draft (annotations, vendor extensions such as
  ``x-kubernetes-*``, OpenAPI's ``nullable``, misspellings) are ignored, as jsonschema ignores them; so are
  ``format`` names jsonschema's FormatChecker does not check.

**Styles** (``style``, ``convert.STYLES``): the policies above are the ``"exact"`` style (the default here: every
JSON text of every instance, to judge texts with). ``"canonical"`` is the language to generate in, a subset of
the exact one (so every canonical text is valid) with one text per instance up to the order of its extra keys:
keys as literals (``json.dumps``'s spelling) in the schema's order, each optional one skippable, the
``additionalProperties``/``patternProperties`` keys after them (``objects._SchemaOrder``: no key-order sets);
strings raw but for the escapes JSON requires (``json.dumps(s, ensure_ascii=False)``'s text); numbers with no
exponent, integers with no fraction; no whitespace (``space ::= ""``). An object beside negated object keywords
keeps the exact any-order form. ``bankml.schema.grammar``'s generation surfaces default to canonical.

``lenient`` names keywords strict mode may treat as annotations instead of refusing them (``{"format",
"pattern", "uniqueItems", "multipleOf", "contains"}``), and ``"properties"`` takes the keys of an object too
large for every key order in the schema's order: that is an explicit opt-out of exactness for them.

The package is a pipeline of parts (each module's docstring says what it owns and what it must not import):

* ``convert``: the entry points (``strict_schema_to_grammar``, ``strict_schema_rules``) and the run of one
  conversion (a compiled conversion short of C stack is done again in a thread with a stack of its own);
* ``compiler``: one conversion's parts, and ``rule``, the dispatch from a conjunction of schemas to the emitters;
* reading: ``vocabulary`` (each draft's keywords, ``Refuse``), ``bounds``, ``document`` (the only owner of
  pointers, resources, ``$ref`` resolution and synthetic schemas), ``readers`` (a schema object's keywords read);
* the algebra: ``terms`` (a schema's disjunctive normal form), ``negation`` (that of "not s"), ``oneof``,
  ``merge`` (a term's per-type constraints: the intermediate representation the emitters write from), ``values``
  (jsonschema's equality), ``validate`` (its verdict on the values a grammar is built from);
* the emitters: ``numbers`` (with ``numeric``, the number automaton), ``strings`` (with ``patterns``, the string
  languages kept per process), ``consts``, ``arrays``, ``objects`` (with ``keys``), all writing into ``rules``
  with ``gbnf``'s text;
* ``lang``: the regular languages of strings (character sets, automata, regex, formats, GBNF writing).

Every module but this one and ``lang``'s ``__init__`` is compiled by Cython as it is (setup.py's SCHEMA list).

Must not import: ``chat``, ``serve``, ``integrations``, ``sampling`` or ``engine``.
"""

from bankml.schema.strict.convert import STYLES, check_style, strict_schema_rules, strict_schema_to_grammar
from bankml.schema.strict.vocabulary import LENIENT_KEYWORDS

__all__ = ["LENIENT_KEYWORDS", "STYLES", "check_style", "strict_schema_rules", "strict_schema_to_grammar"]
