# cython: language_level=3
"""The flat rules: llama.cpp's parsed grammar as one element array, rules addressed by position.

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
Copyright (c) 2023-2026 The ggml authors: src/llama-grammar.cpp (llama_grammar_init_impl's
checks: the root symbol, undefined rules, left recursion).

Owns: ``Rules`` (immutable, shareable, picklable) and the grammar IR's element types, the one
definition the engine uses (``_rules.pxd``; parser.py's constants are checked against it at import).
It must not parse text (parser.py does) nor match (the engine's other modules do).
"""
from libc.stdint cimport int32_t, uint32_t

from bankml._charclass cimport class_end, is_end_of_sequence, is_token_element
from bankml._typedefs cimport position_t

from bankml import parser
from bankml.errors import GrammarError
from bankml.parser import check_left_recursion, parse_gbnf

# One grammar IR: parser.py's element types are llama.cpp's, as the engine's enum is.
if (parser.END, parser.ALT, parser.RULE_REF, parser.CHAR, parser.CHAR_NOT, parser.CHAR_RNG_UPPER, parser.CHAR_ALT,
        parser.CHAR_ANY, parser.TOKEN, parser.TOKEN_NOT) != (
        LLAMA_GRETYPE_END, LLAMA_GRETYPE_ALT, LLAMA_GRETYPE_RULE_REF, LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_NOT,
        LLAMA_GRETYPE_CHAR_RNG_UPPER, LLAMA_GRETYPE_CHAR_ALT, LLAMA_GRETYPE_CHAR_ANY, LLAMA_GRETYPE_TOKEN,
        LLAMA_GRETYPE_TOKEN_NOT):
    raise ImportError("bankml.parser's element types differ from _rules.pxd's llama_gretype")


cdef class Rules:
    """Parsed GBNF rules: immutable, shareable by any number of matchers, picklable.

    ``Rules.parse(text, root="root", vocab=None)`` is llama.cpp's grammar build:
    the parser, the undefined-rule check, the root symbol and the left-recursion
    check. ``root=None`` runs the parser alone (llama_grammar_parser::parse).
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("use Rules.parse(text, root='root', vocab=None)")

    @staticmethod
    def parse(text, root="root", vocab=None):
        symbol_ids, rules = parse_gbnf(text, vocab)
        if root is not None:
            if not rules:
                raise GrammarError("failed to parse grammar: no rules")
            if root not in symbol_ids:
                raise GrammarError(f"grammar does not contain a '{root}' symbol")
            recursion = check_left_recursion(rules)
            if recursion is not None and not recursion[1]:
                name = _rule_name(symbol_ids, recursion[0])
                raise GrammarError(
                    f"unsupported grammar, left recursion detected for nonterminal at index {recursion[0]} ({name})")
            # llama.cpp's check takes a rule for non-empty unless an alternative is empty as written; left
            # recursion through a rule that matches the empty string only through others passes it, and
            # where it pushes a frame on the way round llama.cpp's advance_stack grows a stack forever.
            # bankml refuses that (in llama.cpp's message shape).
            if recursion is not None:
                name = _rule_name(symbol_ids, recursion[0])
                raise GrammarError(
                    f"unsupported grammar, left recursion detected for nonterminal at index {recursion[0]} ({name}), "
                    "through rules that can match the empty string (llama.cpp's check misses it and hangs)")
        return make_rules(symbol_ids, rules, root, vocab, text if isinstance(text, str) else None)

    @property
    def rules(self):
        """Per rule id, its elements as (type, value) tuples, END included."""
        cdef list out = []
        cdef size_t rule_id
        cdef position_t pos
        for rule_id in range(self.rule_start.size()):
            current = []
            pos = self.rule_start[rule_id]
            while True:
                current.append((<int>self.elements[pos].type, <int>self.elements[pos].value))
                if self.elements[pos].type == LLAMA_GRETYPE_END:
                    break
                pos += 1
            out.append(current)
        return out

    @property
    def n_elements(self):
        return self.elements.size()

    def __len__(self):
        return self.rule_start.size()

    def __reduce__(self):
        return (_rebuild_rules, (self.symbol_ids, self.rules, self.root, self.text))

    def __repr__(self):
        return f"<Rules: {self.rule_start.size()} rules, {self.elements.size()} elements, root={self.root!r}>"

    def alternative_starts(self, rule_id):
        """The first element of each alternative of a rule (an end element for an empty one)."""
        cdef const grammar_element* elements = self.elements.data()
        cdef position_t pos = self.rule_start[rule_id]
        starts = [pos]
        while True:
            while not is_end_of_sequence(&elements[pos]):
                pos += 1
            if elements[pos].type == LLAMA_GRETYPE_END:
                return starts
            pos += 1
            starts.append(pos)

    def after_terminal(self, position_t pos):
        """The element after the terminal at pos (past a class's alternatives and ranges)."""
        if is_token_element(&self.elements[pos]):
            return pos + 1
        return <position_t>(class_end(&self.elements[pos]) - self.elements.data())

    def rule_of(self):
        """Per element position, the id of the rule it lies in (the final sentinel excluded)."""
        cdef const grammar_element* elements = self.elements.data()
        cdef Py_ssize_t n_rules = self.rule_start.size(), rule_id
        cdef position_t pos
        out = [0] * (<Py_ssize_t>self.elements.size())
        for rule_id in range(n_rules):
            pos = self.rule_start[rule_id]
            while True:
                out[pos] = rule_id
                if elements[pos].type == LLAMA_GRETYPE_END:
                    break
                pos += 1
        return out


def _rule_name(symbol_ids, rule_id):
    for name in sorted(symbol_ids):
        if symbol_ids[name] == rule_id:
            return name
    return str(rule_id)


def _rebuild_rules(symbol_ids, rules, root, text):
    return make_rules(symbol_ids, rules, root, None, text)


cdef Rules make_rules(dict symbol_ids, list rules, root, vocab, text):
    cdef Rules self = Rules.__new__(Rules)
    cdef grammar_element element
    self.symbol_ids = dict(symbol_ids)
    self.root = root
    self.root_id = symbol_ids[root] if root is not None else -1
    self.vocab = vocab
    self.text = text
    self.contexts = {}
    if sum(len(rule) for rule in rules) >= (1 << 31) - 2:
        raise GrammarError("grammar has more elements than bankml's 32-bit positions can address")
    for rule in rules:
        self.rule_start.push_back(<position_t>self.elements.size())
        for kind, value in rule:
            element.type = kind
            element.value = value
            self.elements.push_back(element)
    # A sentinel past the last rule, so that looking one element ahead never leaves the array.
    element.type = LLAMA_GRETYPE_END
    element.value = 0
    self.elements.push_back(element)
    return self
