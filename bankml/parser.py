"""GBNF text -> llama.cpp's rule lists.

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
Copyright (c) 2023-2026 The ggml authors: `llama_grammar_parser` of
src/llama-grammar.cpp (parse_space, parse_name, parse_char, parse_token,
parse_sequence with its repetition rewrite, parse_alternates, parse_rule, parse)
and the left-recursion check of `llama_grammar_init_impl`.

This module owns the text: it produces ``symbol_ids`` (name -> rule id) and
``rules`` (per rule id, a list of ``(type, value)`` elements ending with END),
exactly as llama.cpp's parser does, element for element. It must not touch
matching; the Cython engine (``_grammar.pyx``) flattens its output.

Where llama.cpp would hang or exhaust memory (a ``{m,n}`` with n < m, an
integer past 64 bits, a repetition that would build more than MAX_ELEMENTS
elements, a text longer than MAX_GRAMMAR_BYTES, groups nested deeper than
MAX_GROUP_NESTING, left recursion through rules that match the empty string
only indirectly) this raises ``GrammarError`` instead.
"""

import re

from .errors import GrammarError

# llama.cpp's element types (enum llama_gretype), same numeric values.
END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)

MAX_REPETITION_THRESHOLD = 2000
# bankml's own bounds (llama.cpp has none). The element budget is checked while the rules are built,
# before a repetition is expanded, so a short text cannot make the parser build hundreds of millions of
# elements first (`"<100,000 bytes>"{0,2000}` would be 200M); 8M elements are 64 MiB once flattened.
MAX_ELEMENTS = 1 << 23
# The parser reads about 0.5 MB/s (measured 2.8 s for 1.4 MB of alternatives): 4 MiB stays within seconds.
MAX_GRAMMAR_BYTES = 4 << 20
# Each level of group nesting takes two Python frames of the recursive-descent parser.
MAX_GROUP_NESTING = 400
UINT64_MAX = (1 << 64) - 1
UINT32_MAX = (1 << 32) - 1

# Byte lengths by lead-byte high nibble for the parser's own decoder, which
# (unlike the matcher's) takes a stray continuation byte as a one-byte character.
_PARSER_UTF8_LENGTH = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)


class _Fail(Exception):
    def __init__(self, reason, pos):
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


def _is_digit(c):
    return 48 <= c <= 57


def _is_word(c):
    return 97 <= c <= 122 or 65 <= c <= 90 or c == 45 or 48 <= c <= 57


class _Parser:
    def __init__(self, src, vocab):
        self.src = src
        self.n = len(src)
        self.vocab = vocab
        self.symbol_ids = {}
        self.rules = []
        self.n_elements = 0      # elements of every rule added so far (the element budget)
        self.open_groups = []    # byte offsets of the groups being parsed, innermost last

    def at(self, pos):
        return self.src[pos] if pos < self.n else 0

    # -- lexical helpers ---------------------------------------------------
    def parse_space(self, pos, newline_ok):
        while True:
            c = self.at(pos)
            if c == 35:  # '#': comment to end of line
                while True:
                    c = self.at(pos)
                    if c == 0 or c == 13 or c == 10:
                        break
                    pos += 1
            elif c == 32 or c == 9 or (newline_ok and (c == 13 or c == 10)):
                pos += 1
            else:
                return pos

    def parse_name(self, pos):
        start = pos
        while _is_word(self.at(pos)):
            pos += 1
        if pos == start:
            raise _Fail("expecting name", start)
        return pos

    def parse_int(self, pos):
        start = pos
        while _is_digit(self.at(pos)):
            pos += 1
        if pos == start:
            raise _Fail("expecting integer", start)
        return pos

    def parse_hex(self, pos, size):
        start = pos
        end = pos + size
        value = 0
        while pos < end:
            c = self.at(pos)
            if c == 0:
                break
            if 97 <= c <= 102:
                digit = c - 87
            elif 65 <= c <= 70:
                digit = c - 55
            elif 48 <= c <= 57:
                digit = c - 48
            else:
                break
            value = ((value << 4) + digit) & UINT32_MAX
            pos += 1
        if pos != end:
            raise _Fail(f"expecting {size} hex chars", start)
        return value, pos

    def decode_char(self, pos):
        first = self.at(pos)
        length = _PARSER_UTF8_LENGTH[first >> 4]
        value = first & ((1 << (8 - length)) - 1)
        end = pos + length
        pos += 1
        while pos < end and self.at(pos):
            value = (value << 6) + (self.at(pos) & 0x3F)
            pos += 1
        return value, pos

    def parse_char(self, pos):
        c = self.at(pos)
        if c == 92:  # backslash
            e = self.at(pos + 1)
            if e == 120:  # x
                return self.parse_hex(pos + 2, 2)
            if e == 117:  # u
                return self.parse_hex(pos + 2, 4)
            if e == 85:  # U
                return self.parse_hex(pos + 2, 8)
            if e == 116:
                return 9, pos + 2
            if e == 114:
                return 13, pos + 2
            if e == 110:
                return 10, pos + 2
            if e in (92, 34, 91, 93, 45):  # \ " [ ] -
                return e, pos + 2
            raise _Fail("unknown escape", pos)
        if c:
            return self.decode_char(pos)
        raise _Fail("unexpected end of input", pos)

    def parse_token(self, pos):
        start = pos
        if self.at(pos) != 60:  # '<'
            raise _Fail("expecting '<'", pos)
        pos += 1
        if self.at(pos) == 91:  # '[': <[id]>
            pos += 1
            int_end = self.parse_int(pos)
            token_id = int(self.src[pos:int_end])
            if token_id > UINT64_MAX:
                raise _Fail("stoul: out of range", pos)
            if token_id > UINT32_MAX:
                raise _Fail("parsed token id is too big", pos)
            if self.vocab is not None and token_id >= len(self.vocab):
                # llama.cpp takes it and no token ever matches (<[id]>) or every token does (!<[id]>)
                raise _Fail(f"token id {token_id} is outside the vocabulary [0, {len(self.vocab)})", pos)
            pos = int_end
            if self.at(pos) != 93:
                raise _Fail("expecting ']'", pos)
            pos += 1
            if self.at(pos) != 62:
                raise _Fail("expecting '>'", pos)
            return token_id, pos + 1
        if self.vocab is None:
            raise _Fail("no vocab to parse token", start)
        while self.at(pos) and self.at(pos) != 62:
            pos += 1
        if self.at(pos) != 62:
            raise _Fail("expecting '>'", pos)
        pos += 1
        text = self.src[start:pos]
        token_id = self.vocab.token_for_text(text)
        if token_id is None:
            raise _Fail(f"invalid token '{text.decode('utf-8', 'replace')}'", start)
        return token_id, pos

    # -- symbols and rules -------------------------------------------------
    def get_symbol_id(self, name):
        return self.symbol_ids.setdefault(name, len(self.symbol_ids))

    def generate_symbol_id(self, base_name):
        next_id = len(self.symbol_ids)
        # Overwrites an existing entry of that name, as llama.cpp's std::map does.
        self.symbol_ids[f"{base_name}_{next_id}"] = next_id
        return next_id

    def add_rule(self, rule_id, rule):
        if len(self.rules) <= rule_id:
            self.rules.extend([] for _ in range(rule_id + 1 - len(self.rules)))
        self.n_elements += len(rule) - len(self.rules[rule_id])
        self.rules[rule_id] = list(rule)

    def check_element_budget(self, adding, at):
        if self.n_elements + adding > MAX_ELEMENTS:
            raise _Fail(f"grammar exceeds bankml's element budget: {self.n_elements + adding:,} elements "
                        f"(MAX_ELEMENTS is {MAX_ELEMENTS:,}); reduce the repetitions or their size", at)

    def parse_alternates(self, pos, rule_name, rule_id, is_nested):
        rule = []
        pos = self.parse_sequence(pos, rule_name, rule, is_nested)
        while self.at(pos) == 124:  # '|'
            rule.append((ALT, 0))
            pos = self.parse_space(pos + 1, True)
            pos = self.parse_sequence(pos, rule_name, rule, is_nested)
        rule.append((END, 0))
        self.add_rule(rule_id, rule)
        return pos

    def parse_sequence(self, pos, rule_name, rule, is_nested):
        last_sym_start = len(rule)
        n_prev_rules = 1

        def handle_repetitions(min_times, max_times, at):
            nonlocal n_prev_rules
            no_max = max_times == UINT64_MAX
            if last_sym_start == len(rule):
                raise _Fail("expecting preceding item to */+/?/{", at)
            prev_rule = rule[last_sym_start:]
            total_rules = 1
            if not no_max and max_times > 0:
                total_rules = max_times
            elif min_times > 0:
                total_rules = min_times
            if n_prev_rules * total_rules > MAX_REPETITION_THRESHOLD:
                raise _Fail(
                    "number of rules that are going to be repeated multiplied by the new repetition "
                    "exceeds sane defaults, please reduce the number of repetitions or rule complexity",
                    at,
                )
            if not no_max and max_times < min_times:
                # llama.cpp computes n - m in unsigned arithmetic here and then loops
                # about 2**64 times, generating rules until memory runs out.
                raise _Fail(f"repetition {{{min_times},{max_times}}} has its maximum below its minimum", at)
            # Checked before anything is built: what this expansion adds (and the rule so far).
            n_opt = 1 if no_max else max_times - min_times
            self.check_element_budget(
                len(rule) + max(0, min_times - 1) * len(prev_rule) + n_opt * (len(prev_rule) + 3), at)
            if min_times == 0:
                del rule[last_sym_start:]
            else:
                for _ in range(1, min_times):
                    rule.extend(prev_rule)
            last_rec_rule_id = 0
            for i in range(n_opt):
                rec_rule = list(prev_rule)
                rec_rule_id = self.generate_symbol_id(rule_name)
                if i > 0 or no_max:
                    rec_rule.append((RULE_REF, rec_rule_id if no_max else last_rec_rule_id))
                rec_rule.append((ALT, 0))
                rec_rule.append((END, 0))
                self.add_rule(rec_rule_id, rec_rule)
                last_rec_rule_id = rec_rule_id
            if n_opt > 0:
                rule.append((RULE_REF, last_rec_rule_id))
            n_prev_rules *= total_rules

        while True:
            c = self.at(pos)
            if c == 0:
                break
            if c == 34:  # '"': literal string
                pos += 1
                last_sym_start = len(rule)
                n_prev_rules = 1
                while self.at(pos) != 34:
                    if not self.at(pos):
                        raise _Fail("unexpected end of input", pos)
                    value, pos = self.parse_char(pos)
                    rule.append((CHAR, value))
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 91:  # '[': character class
                pos += 1
                start_type = CHAR
                if self.at(pos) == 94:  # '^'
                    pos += 1
                    start_type = CHAR_NOT
                last_sym_start = len(rule)
                n_prev_rules = 1
                while self.at(pos) != 93:
                    if not self.at(pos):
                        raise _Fail("unexpected end of input", pos)
                    value, pos = self.parse_char(pos)
                    rule.append((CHAR_ALT if last_sym_start < len(rule) else start_type, value))
                    if self.at(pos) == 45 and self.at(pos + 1) != 93:
                        if not self.at(pos + 1):
                            raise _Fail("unexpected end of input", pos + 1)
                        value, pos = self.parse_char(pos + 1)
                        rule.append((CHAR_RNG_UPPER, value))
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 60 or c == 33:  # '<' or '!': token
                kind = TOKEN
                if c == 33:
                    kind = TOKEN_NOT
                    pos += 1
                token_id, token_end = self.parse_token(pos)
                last_sym_start = len(rule)
                n_prev_rules = 1
                rule.append((kind, token_id))
                pos = self.parse_space(token_end, is_nested)
            elif _is_word(c):  # rule reference
                name_end = self.parse_name(pos)
                ref_rule_id = self.get_symbol_id(self.src[pos:name_end].decode("ascii"))
                pos = self.parse_space(name_end, is_nested)
                last_sym_start = len(rule)
                n_prev_rules = 1
                rule.append((RULE_REF, ref_rule_id))
            elif c == 40:  # '(': group
                if len(self.open_groups) >= MAX_GROUP_NESTING:
                    raise _Fail(f"groups nested deeper than {MAX_GROUP_NESTING} levels (bankml's MAX_GROUP_NESTING)",
                                pos)
                self.open_groups.append(pos)
                pos = self.parse_space(pos + 1, True)
                n_rules_before = len(self.symbol_ids)
                sub_rule_id = self.generate_symbol_id(rule_name)
                pos = self.parse_alternates(pos, rule_name, sub_rule_id, True)
                self.open_groups.pop()
                n_prev_rules = max(1, len(self.symbol_ids) - n_rules_before)
                last_sym_start = len(rule)
                rule.append((RULE_REF, sub_rule_id))
                if self.at(pos) != 41:
                    raise _Fail("expecting ')'", pos)
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 46:  # '.'
                last_sym_start = len(rule)
                n_prev_rules = 1
                rule.append((CHAR_ANY, 0))
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 42:  # '*'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                handle_repetitions(0, UINT64_MAX, at)
            elif c == 43:  # '+'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                handle_repetitions(1, UINT64_MAX, at)
            elif c == 63:  # '?'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                handle_repetitions(0, 1, at)
            elif c == 123:  # '{'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                if not _is_digit(self.at(pos)):
                    raise _Fail("expecting an int", pos)
                int_end = self.parse_int(pos)
                min_times = self._stoull(pos, int_end)
                pos = self.parse_space(int_end, is_nested)
                max_times = UINT64_MAX
                if self.at(pos) == 125:  # '}'
                    max_times = min_times
                    pos = self.parse_space(pos + 1, is_nested)
                elif self.at(pos) == 44:  # ','
                    pos = self.parse_space(pos + 1, is_nested)
                    if _is_digit(self.at(pos)):
                        int_end = self.parse_int(pos)
                        max_times = self._stoull(pos, int_end)
                        pos = self.parse_space(int_end, is_nested)
                    if self.at(pos) != 125:
                        raise _Fail("expecting '}'", pos)
                    pos = self.parse_space(pos + 1, is_nested)
                else:
                    raise _Fail("expecting ','", pos)
                if min_times > MAX_REPETITION_THRESHOLD:
                    raise _Fail(
                        "number of repetitions exceeds sane defaults, please reduce the number of repetitions",
                        at,
                    )
                if max_times != UINT64_MAX and max_times > MAX_REPETITION_THRESHOLD:
                    max_times = UINT64_MAX
                handle_repetitions(min_times, max_times, at)
            else:
                break
        return pos

    def _stoull(self, start, end):
        value = int(self.src[start:end])
        if value > UINT64_MAX:
            raise _Fail("stoull: out of range", start)
        return value

    def parse_rule(self, pos):
        name_end = self.parse_name(pos)
        name = self.src[pos:name_end].decode("ascii")
        after_name = self.parse_space(name_end, False)
        rule_id = self.get_symbol_id(name)
        if self.src[after_name:after_name + 3] != b"::=":
            raise _Fail("expecting ::=", after_name)
        pos = self.parse_space(after_name + 3, True)
        pos = self.parse_alternates(pos, name, rule_id, False)
        c = self.at(pos)
        if c == 13:
            pos += 2 if self.at(pos + 1) == 10 else 1
        elif c == 10:
            pos += 1
        elif c:
            raise _Fail("expecting newline or end", pos)
        return self.parse_space(pos, True)

    def parse(self):
        pos = self.parse_space(0, True)
        while self.at(pos):
            pos = self.parse_rule(pos)
        self.check_element_budget(0, pos)
        for rule in self.rules:
            if not rule:
                raise _Fail("Undefined rule", None)
            for kind, value in rule:
                if kind == RULE_REF and (value >= len(self.rules) or not self.rules[value]):
                    for name in sorted(self.symbol_ids, key=lambda s: s.encode()):
                        if self.symbol_ids[name] == value:
                            raise _Fail(f"Undefined rule identifier '{name}'", None)


_LINE_END = re.compile(r"\r\n|\r|\n")


def _location(src, pos):
    """1-based line and column (in characters) of byte offset pos, and the text there.

    A line ends at \\r\\n, \\r or \\n, as llama.cpp's parse_space reads them.
    """
    before = src[:pos].decode("utf-8", "replace")
    line_start = 0
    line = 1
    for match in _LINE_END.finditer(before):
        line += 1
        line_start = match.end()
    column = len(before) - line_start + 1
    context = _LINE_END.split(src[pos:pos + 24].decode("utf-8", "replace"))[0]
    return line, column, context


def parse_gbnf(text, vocab=None):
    """Parse GBNF text as llama.cpp's parser does: (symbol_ids, rules).

    Raises GrammarError with llama.cpp's reason and the line and column.
    """
    if isinstance(text, str):
        src = text.encode("utf-8", "surrogatepass")
    elif isinstance(text, (bytes, bytearray, memoryview)):
        src = bytes(text)
    else:
        raise TypeError(f"grammar text must be str or bytes, got {type(text).__name__}")
    nul = src.find(b"\0")
    if nul >= 0:
        src = src[:nul]  # llama.cpp reads the grammar as a C string
    if len(src) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"grammar text of {len(src):,} bytes exceeds bankml's MAX_GRAMMAR_BYTES "
                           f"({MAX_GRAMMAR_BYTES:,})")
    parser = _Parser(src, vocab)
    try:
        parser.parse()
    except _Fail as fail:
        if fail.pos is None:
            raise GrammarError(fail.reason) from None
        line, column, context = _location(src, fail.pos)
        raise GrammarError(fail.reason, line, column, context) from None
    except RecursionError:
        # (the caller's own frames left less room than MAX_GROUP_NESTING needs)
        at = parser.open_groups[-1] if parser.open_groups else 0
        line, column, context = _location(src, at)
        raise GrammarError("grammar nests groups too deeply (more than Python's recursion limit allows)",
                           line, column, context) from None
    return parser.symbol_ids, parser.rules


def _is_end_of_sequence(kind):
    return kind == END or kind == ALT


def _directly_empty(rules):
    """Per rule, whether one of its alternatives is empty (llama.cpp's rules_may_be_empty)."""
    may_be_empty = [False] * len(rules)
    for index, rule in enumerate(rules):
        at_start = True
        for kind, _ in rule:
            if kind <= ALT:  # END or ALT: the end of an alternative
                if at_start:
                    may_be_empty[index] = True
                    break
                at_start = True
            else:
                at_start = False
    return may_be_empty


def nullable_rules(rules, may_be_empty=None):
    """Per rule, whether it can match the empty string: the least fixpoint (an alternative made of
    references to nullable rules only is nullable), by a worklist, so linear in the grammar's size."""
    n_rules = len(rules)
    nullable = list(may_be_empty) if may_be_empty is not None else _directly_empty(rules)
    waiting = [[] for _ in range(n_rules)]   # rule -> the alternatives that reference it
    alternative_rule = []
    alternative_pending = []                 # references in the alternative not yet known nullable
    queue = [index for index in range(n_rules) if nullable[index]]
    for index, rule in enumerate(rules):
        if nullable[index]:
            continue
        refs = []
        blocked = False
        for kind, value in rule:
            if kind <= ALT:
                if not blocked and refs:
                    alternative = len(alternative_rule)
                    alternative_rule.append(index)
                    alternative_pending.append(len(refs))
                    for ref in refs:
                        waiting[ref].append(alternative)
                refs = []
                blocked = False
            elif blocked:
                continue
            elif kind == RULE_REF:
                refs.append(value)
            else:
                blocked = True
    while queue:
        for alternative in waiting[queue.pop()]:
            alternative_pending[alternative] -= 1
            index = alternative_rule[alternative]
            if alternative_pending[alternative] == 0 and not nullable[index]:
                nullable[index] = True
                queue.append(index)
    return nullable


def _find_cycle(rules, may_be_empty):
    """The first rule (in llama.cpp's scan order) from which a cycle of leftmost references is reachable."""
    n_rules = len(rules)

    def left_refs(index):
        refs = []
        recurse = True
        for kind, value in rules[index]:
            if kind == RULE_REF and recurse:
                refs.append(value)
                if not may_be_empty[value]:
                    recurse = False
            elif kind <= ALT:  # the end of an alternative
                recurse = True
            else:
                recurse = False
        return refs

    state = [0] * n_rules  # 0 new, 1 in progress, 2 done
    for start in range(n_rules):
        if state[start]:
            continue
        state[start] = 1
        work = [(start, iter(left_refs(start)))]
        while work:
            index, refs = work[-1]
            child = next(refs, None)
            if child is None:
                state[index] = 2
                work.pop()
            elif state[child] == 1:
                return start
            elif state[child] == 0:
                state[child] = 1
                work.append((child, iter(left_refs(child))))
        # state 2 children were fully explored without finding a cycle
    return None


def find_left_recursion(rules):
    """The index of the first rule (in llama.cpp's scan order) from which left recursion is reachable, or None.

    llama.cpp's check walks, from each rule, the leftmost rule reference of
    every alternative, and the next one while the previous rule has an empty
    alternative. A cycle in that walk is left recursion. Iterative here, so a
    long chain of rules cannot overflow the stack, and each rule is walked
    once (llama.cpp re-walks shared rules, which can take exponential time).
    """
    return _find_cycle(rules, _directly_empty(rules))


def check_left_recursion(rules):
    """(index, grows) of the first left recursion: llama.cpp's check first (grows False), then the one it
    misses (find_growing_left_recursion, grows True); None when there is none."""
    may_be_empty = _directly_empty(rules)
    found = _find_cycle(rules, may_be_empty)
    if found is not None:
        return found, False
    found = find_growing_left_recursion(rules, may_be_empty)
    return (found, True) if found is not None else None


def find_growing_left_recursion(rules, may_be_empty=None):
    """Left recursion that llama.cpp's check misses and on which its advance_stack never returns, or None.

    llama.cpp's check takes a rule for non-empty unless one of its alternatives is empty as written, so
    left recursion through a rule that matches the empty string only through other rules (`b ::= c`,
    `c ::= ""`) passes it. Where such a cycle of leftmost references (each after a prefix that can match
    the empty string) pushes a frame on the way round -- some reference on it is followed by more of its
    alternative -- every turn leaves a deeper stack, which advance_stack's seen set never meets again:
    llama.cpp grows the stack until memory runs out. A cycle of references in tail position only leaves
    the same stacks and ends (llama.cpp's own test `root ::= ( [x]* )*` is one). Returns the lowest rule
    index on such a cycle.
    """
    n_rules = len(rules)
    if may_be_empty is None:
        may_be_empty = _directly_empty(rules)
    nullable = nullable_rules(rules, may_be_empty)
    if nullable == may_be_empty:
        # the same leftmost references as llama.cpp's check follows: it found no cycle, so there is none
        return None
    edges = [[] for _ in range(n_rules)]   # rule -> [(rule it reaches leftmost, the reference pushes a frame)]
    for index, rule in enumerate(rules):
        recurse = True
        for at, (kind, value) in enumerate(rule):
            if kind == RULE_REF and recurse:
                edges[index].append((value, rule[at + 1][0] > ALT))
                if not nullable[value]:
                    recurse = False
            elif kind <= ALT:  # the end of an alternative
                recurse = True
            else:
                recurse = False
    # Tarjan's strongly connected components, iteratively: an edge lies on a cycle iff both ends are in one.
    component = [-1] * n_rules
    order = [-1] * n_rules
    low = [0] * n_rules
    on_stack = [False] * n_rules
    stack = []
    counter = 0
    n_components = 0
    for start in range(n_rules):
        if order[start] >= 0:
            continue
        work = [(start, 0)]
        order[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack[start] = True
        while work:
            node, i = work[-1]
            if i < len(edges[node]):
                work[-1] = (node, i + 1)
                child = edges[node][i][0]
                if order[child] < 0:
                    order[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack[child] = True
                    work.append((child, 0))
                elif on_stack[child]:
                    low[node] = min(low[node], order[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == order[node]:
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = n_components
                    if member == node:
                        break
                n_components += 1
    lowest = [n_rules] * n_components
    for index in range(n_rules):
        lowest[component[index]] = min(lowest[component[index]], index)
    found = None
    for index in range(n_rules):
        for target, pushes in edges[index]:
            if pushes and component[target] == component[index]:
                found = lowest[component[index]] if found is None else min(found, lowest[component[index]])
    return found
