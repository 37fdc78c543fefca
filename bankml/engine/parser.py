"""The grammar IR's element types and the GBNF parser's bounds, as Python constants.

The parser itself is ``bankml.engine._rules`` (``_gbnf.pxi``, a port of llama.cpp's ``llama_grammar_parser``):
``Rules.parse(text, root=None)`` is llama_grammar_parser::parse, and ``Rules.rules`` gives its rules as
``(type, value)`` lists. This module holds what Python code and tests name: llama.cpp's element types
(``_rules.pyx`` checks at import that they equal its ``llama_gretype``) and bankml's bounds, which the
parser reads at import. It must not parse.
"""

# llama.cpp's element types (enum llama_gretype), same numeric values.
END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)

MAX_REPETITION_THRESHOLD = 2000
# bankml's own bounds (llama.cpp has none). The element budget is checked while the rules are built,
# before a repetition is expanded, so a short text cannot make the parser build hundreds of millions of
# elements first (`"<100,000 bytes>"{0,2000}` would be 200M); 8M elements are 64 MiB once flattened.
MAX_ELEMENTS = 1 << 23
# A bound on the text, so a request cannot hold the parser (about 1 GB/s-class C code, but the rules it
# builds are kept) with an arbitrarily large grammar.
MAX_GRAMMAR_BYTES = 4 << 20
# Groups nest by recursion in the parser (C frames, a few hundred bytes each): bounded well inside the stack.
MAX_GROUP_NESTING = 400
