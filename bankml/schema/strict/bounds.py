# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The bounds of one strict conversion's forms: past each, strict mode refuses the schema (naming the keyword)
rather than write a grammar too large for the engine or the process. SchemaLimits (nodes, grammar bytes, seconds)
come on top of these (bankml.schema.limits; rules.Budget and rules.Rules count them).

Owns: the numbers. Imports nothing.
"""

MAX_TERMS = 1024  # alternatives one schema node may distribute into (anyOf/oneOf/if over allOf)
MAX_ENUM_OBJECT_KEYS = 8
MAX_PATTERN_REGIONS = 6  # patternProperties regexes of one object (2^n key regions)
MAX_STATES = 20000  # states of one object/array/number automaton
MAX_REPETITION = 2000  # bankml.parser.MAX_REPETITION_THRESHOLD (llama.cpp's)
ENGINE_MAX_GRAMMAR_BYTES = 4 << 20  # bankml.engine.parser.MAX_GRAMMAR_BYTES
MAX_DEPTH = 512  # nesting of the schema document (bankml.schema.MAX_JSON_DEPTH)
MAX_ANY_ORDER = 8  # objects of up to this many listed keys take them in any order (the package's docstring)
MAX_REQUIRED_ANY_ORDER = 12  # ... or this many required keys, the optional ones free to come again
ANY_ORDER_BUDGET = 4096  # ... while the any-order objects of one grammar have at most this many key sets
EXACT_ORDER_BUDGET = 512  # ... of which at most this many go to objects that could repeat optional keys instead
MAX_WITNESSES = 3  # negated object keywords met in one object (each doubles its states)
MAX_CONTAINS = 3  # contains schemas of one array (its items split 2^n ways)
MAX_UNIQUE_VALUES = 8  # uniqueItems: the distinct values an item may take (one rule per set of them)
