# Included by _rules.pyx (one extension: the parser's pool of elements becomes Rules' element array).
# GBNF text -> llama.cpp's rules: a port of llama_grammar_parser in src/llama-grammar.cpp (parse_space,
# parse_name, parse_int, parse_hex, parse_char, parse_token, get_symbol_id, generate_symbol_id, add_rule,
# parse_alternates, parse_sequence with its repetition rewrite, parse_rule, parse), element for element and
# symbol id for symbol id. Owns the text; must not match. Declarations: _rules.pxd.
#
# Where llama.cpp would hang or exhaust memory (a `{m,n}` with n < m, an integer past 64 bits, a repetition
# that would build more than MAX_ELEMENTS elements, a text longer than MAX_GRAMMAR_BYTES, groups nested
# deeper than MAX_GROUP_NESTING) this raises GrammarError instead; the bounds are parser.py's.

import re

from bankml.engine.parser import MAX_ELEMENTS as _MAX_ELEMENTS
from bankml.engine.parser import MAX_GRAMMAR_BYTES as _MAX_GRAMMAR_BYTES
from bankml.engine.parser import MAX_GROUP_NESTING as _MAX_GROUP_NESTING
from bankml.engine.parser import MAX_REPETITION_THRESHOLD as _MAX_REPETITION_THRESHOLD

cdef int64_t MAX_ELEMENTS = _MAX_ELEMENTS
cdef Py_ssize_t MAX_GRAMMAR_BYTES = _MAX_GRAMMAR_BYTES
cdef Py_ssize_t MAX_GROUP_NESTING = _MAX_GROUP_NESTING
cdef uint64_t MAX_REPETITION_THRESHOLD = _MAX_REPETITION_THRESHOLD
cdef uint64_t NO_MAX = 0xFFFFFFFFFFFFFFFFULL    # UINT64_MAX: "no maximum", as llama.cpp spells it

# Byte lengths by lead-byte high nibble for the parser's own decoder, which (unlike the matcher's) takes a
# stray continuation byte as a one-byte character.
cdef int PARSER_UTF8_LENGTH[16]
PARSER_UTF8_LENGTH[:] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4]


cdef inline size_t rule_length(const grammar_element* rule) noexcept nogil:
    """A rule's elements, its END included."""
    cdef size_t n = 0
    while rule[n].type != LLAMA_GRETYPE_END:
        n += 1
    return n + 1


class _Fail(Exception):
    """A parse error: llama.cpp's reason and the byte offset (None: not tied to a place in the text)."""

    def __init__(self, reason, pos):
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


cdef inline bint is_digit_char(unsigned char c) noexcept:
    return 48 <= c <= 57


cdef inline bint is_word_char(unsigned char c) noexcept:
    return 97 <= c <= 122 or 65 <= c <= 90 or c == 45 or 48 <= c <= 57


cdef inline grammar_element element_of(uint32_t kind, uint32_t value) noexcept:
    cdef grammar_element element
    element.type = kind
    element.value = value
    return element


cdef inline void append_decimal(string& out, uint64_t value):
    """std::to_string for an unsigned value."""
    cdef char digits[24]
    cdef int n = 0
    while True:
        digits[n] = <char>(48 + value % 10)
        n += 1
        value //= 10
        if value == 0:
            break
    while n > 0:
        n -= 1
        out.push_back(digits[n])


@cython.final
cdef class GbnfParser:
    """One parse of one text (llama_grammar_parser): symbol ids and rules, built as llama.cpp builds them."""

    def __cinit__(self, bytes text, vocab):
        self.text = text
        self.src = <const unsigned char*>text
        self.n = len(text)
        self.vocab = vocab
        self.n_elements = 0
        self.n_open_groups = 0
        self.redefined = False
        # About one element per byte of text, and a symbol per dozen: grown once, not doubled from nothing.
        self.pool.reserve(self.n + 16)
        self.symbols.reserve(self.n // 12 + 16)
        self.rule_start.reserve(self.n // 12 + 16)

    cdef inline unsigned char at(self, Py_ssize_t pos) noexcept:
        # llama.cpp reads a C string: past the end is its NUL
        return self.src[pos] if pos < self.n else 0

    # -- lexical helpers ---------------------------------------------------------------------------------
    cdef Py_ssize_t parse_space(self, Py_ssize_t pos, bint newline_ok) noexcept:
        cdef unsigned char c
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

    cdef Py_ssize_t parse_name(self, Py_ssize_t pos) except -1:
        cdef Py_ssize_t start = pos
        while is_word_char(self.at(pos)):
            pos += 1
        if pos == start:
            raise _Fail("expecting name", start)
        return pos

    cdef Py_ssize_t parse_int(self, Py_ssize_t pos) except -1:
        cdef Py_ssize_t start = pos
        while is_digit_char(self.at(pos)):
            pos += 1
        if pos == start:
            raise _Fail("expecting integer", start)
        return pos

    cdef Py_ssize_t parse_hex(self, Py_ssize_t pos, int size, uint32_t* value) except -1:
        cdef Py_ssize_t start = pos, end = pos + size
        cdef unsigned char c
        cdef uint32_t digit
        value[0] = 0
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
            value[0] = (value[0] << 4) + digit
            pos += 1
        if pos != end:
            raise _Fail(f"expecting {size} hex chars", start)
        return pos

    cdef Py_ssize_t decode_char(self, Py_ssize_t pos, uint32_t* value) noexcept:
        cdef unsigned char first = self.at(pos)
        cdef int length = PARSER_UTF8_LENGTH[first >> 4]
        cdef Py_ssize_t end = pos + length
        value[0] = first & ((1 << (8 - length)) - 1)
        pos += 1
        while pos < end and self.at(pos):
            value[0] = (value[0] << 6) + (self.at(pos) & 0x3F)
            pos += 1
        return pos

    cdef Py_ssize_t parse_char(self, Py_ssize_t pos, uint32_t* value) except -1:
        cdef unsigned char c = self.at(pos), e
        if c == 92:  # backslash
            e = self.at(pos + 1)
            if e == 120:  # x
                return self.parse_hex(pos + 2, 2, value)
            if e == 117:  # u
                return self.parse_hex(pos + 2, 4, value)
            if e == 85:  # U
                return self.parse_hex(pos + 2, 8, value)
            if e == 116:
                value[0] = 9
                return pos + 2
            if e == 114:
                value[0] = 13
                return pos + 2
            if e == 110:
                value[0] = 10
                return pos + 2
            if e == 92 or e == 34 or e == 91 or e == 93 or e == 45:  # \ " [ ] -
                value[0] = e
                return pos + 2
            raise _Fail("unknown escape", pos)
        if c:
            return self.decode_char(pos, value)
        raise _Fail("unexpected end of input", pos)

    cdef uint64_t stoull(self, Py_ssize_t start, Py_ssize_t end, str what) except? 0:
        """std::stoull / std::stoul of the digits [start, end): out of range past 64 bits."""
        cdef uint64_t value = 0, digit
        cdef Py_ssize_t pos
        for pos in range(start, end):
            digit = self.src[pos] - 48
            if value > (NO_MAX - digit) // 10:
                raise _Fail(f"{what}: out of range", start)
            value = value * 10 + digit
        return value

    cdef Py_ssize_t parse_token(self, Py_ssize_t pos, uint32_t* value) except -1:
        cdef Py_ssize_t start = pos, int_end
        cdef uint64_t token_id
        if self.at(pos) != 60:  # '<'
            raise _Fail("expecting '<'", pos)
        pos += 1
        if self.at(pos) == 91:  # '[': <[id]>
            pos += 1
            int_end = self.parse_int(pos)
            token_id = self.stoull(pos, int_end, "stoul")
            if token_id > 0xFFFFFFFFULL:
                raise _Fail("parsed token id is too big", pos)
            if self.vocab is not None and token_id >= <uint64_t>len(self.vocab):
                # llama.cpp takes it and no token ever matches (<[id]>) or every token does (!<[id]>)
                raise _Fail(f"token id {token_id} is outside the vocabulary [0, {len(self.vocab)})", pos)
            pos = int_end
            if self.at(pos) != 93:
                raise _Fail("expecting ']'", pos)
            pos += 1
            if self.at(pos) != 62:
                raise _Fail("expecting '>'", pos)
            value[0] = <uint32_t>token_id
            return pos + 1
        if self.vocab is None:
            raise _Fail("no vocab to parse token", start)
        while self.at(pos) and self.at(pos) != 62:
            pos += 1
        if self.at(pos) != 62:
            raise _Fail("expecting '>'", pos)
        pos += 1
        text = self.text[start:pos]
        found = self.vocab.token_for_text(text)
        if found is None:
            raise _Fail(f"invalid token '{text.decode('utf-8', 'replace')}'", start)
        value[0] = <uint32_t>found
        return pos

    # -- symbols and rules -------------------------------------------------------------------------------
    cdef uint32_t get_symbol_id(self, const unsigned char* name, size_t length, uint32_t* name_index):
        """llama.cpp's get_symbol_id of a name written in the text; name_index gets its text_names index."""
        cdef symbol_entry entry
        cdef string key = string(<const char*>name, length)
        it = self.name_index.find(key)
        if it != self.name_index.end():
            name_index[0] = deref(it).second
            return self.text_name_ids[deref(it).second]
        entry.name = <uint32_t>self.text_names.size()
        entry.id = <uint32_t>self.symbols.size()
        entry.generated = False
        self.name_index[key] = entry.name
        self.text_names.push_back(key)
        self.text_name_ids.push_back(entry.id)
        self.symbols.push_back(entry)
        name_index[0] = entry.name
        return entry.id

    cdef uint32_t generate_symbol_id(self, uint32_t base_name):
        """llama.cpp's generate_symbol_id: base_name + '_' + the next id. That name is always new (the id
        is the number of symbols so far, and a '_' never occurs in a written name), so it is recorded,
        not looked up."""
        cdef symbol_entry entry
        entry.name = base_name
        entry.id = <uint32_t>self.symbols.size()
        entry.generated = True
        self.symbols.push_back(entry)
        return entry.id

    cdef void add_rule(self, uint32_t rule_id, const vector[grammar_element]& rule):
        if self.rule_start.size() <= rule_id:
            self.rule_start.resize(rule_id + 1, -1)
        if self.rule_start[rule_id] >= 0:
            # defined again: the new elements replace the old, which stay behind in the pool
            self.redefined = True
            self.n_elements -= rule_length(self.pool.data() + self.rule_start[rule_id])
        self.n_elements += <int64_t>rule.size()
        self.rule_start[rule_id] = <position_t>self.pool.size()
        self.pool.append(rule.data(), rule.data() + rule.size())

    cdef int check_element_budget(self, int64_t adding, Py_ssize_t at) except -1:
        if self.n_elements + adding > MAX_ELEMENTS:
            raise _Fail(f"grammar exceeds bankml's element budget: {self.n_elements + adding:,} elements "
                        f"(MAX_ELEMENTS is {MAX_ELEMENTS:,}); reduce the repetitions or their size", at)
        return 0

    cdef Py_ssize_t parse_alternates(self, Py_ssize_t pos, uint32_t rule_name, uint32_t rule_id,
                                     bint is_nested) except -1:
        cdef vector[grammar_element] rule
        pos = self.parse_sequence(pos, rule_name, rule, is_nested)
        while self.at(pos) == 124:  # '|'
            rule.push_back(element_of(LLAMA_GRETYPE_ALT, 0))
            pos = self.parse_space(pos + 1, True)
            pos = self.parse_sequence(pos, rule_name, rule, is_nested)
        rule.push_back(element_of(LLAMA_GRETYPE_END, 0))
        self.add_rule(rule_id, rule)
        return pos

    cdef int handle_repetitions(self, vector[grammar_element]& rule, size_t last_sym_start, uint64_t* n_prev_rules,
                                uint32_t rule_name, uint64_t min_times, uint64_t max_times,
                                Py_ssize_t at) except -1:
        # S{m,n} --> S S S (m times) S'(n-m);  S'(x) ::= S S'(x-1) |  ...  S'(1) ::= S |
        # S{m,}  --> S S S (m times) S';       S'    ::= S S' |
        cdef bint no_max = max_times == NO_MAX
        cdef vector[grammar_element] prev_rule
        cdef uint64_t total_rules = 1, n_opt, i
        cdef int64_t offset
        cdef uint32_t last_rec_rule_id = 0, rec_rule_id
        cdef int64_t prev_size
        if last_sym_start == rule.size():
            raise _Fail("expecting preceding item to */+/?/{", at)
        prev_rule.assign(rule.begin() + last_sym_start, rule.end())
        prev_size = <int64_t>prev_rule.size()
        if not no_max and max_times > 0:
            total_rules = max_times
        elif min_times > 0:
            total_rules = min_times
        if n_prev_rules[0] * total_rules > MAX_REPETITION_THRESHOLD:
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
            <int64_t>rule.size() + (<int64_t>min_times - 1 if min_times > 0 else 0) * prev_size
            + <int64_t>n_opt * (prev_size + 3), at)
        if min_times == 0:
            rule.resize(last_sym_start)
        else:
            for i in range(1, min_times):
                rule.insert(rule.end(), prev_rule.begin(), prev_rule.end())
        # Each S' goes straight into the pool (add_rule's bookkeeping, without a rule vector per S'): its
        # id is new, so it was never added before.
        for i in range(n_opt):
            rec_rule_id = self.generate_symbol_id(rule_name)
            if self.rule_start.size() <= rec_rule_id:
                self.rule_start.resize(rec_rule_id + 1, -1)
            offset = <int64_t>self.pool.size()
            self.pool.append(prev_rule.data(), prev_rule.data() + prev_rule.size())
            if i > 0 or no_max:
                self.pool.push_back(element_of(LLAMA_GRETYPE_RULE_REF, rec_rule_id if no_max else last_rec_rule_id))
            self.pool.push_back(element_of(LLAMA_GRETYPE_ALT, 0))
            self.pool.push_back(element_of(LLAMA_GRETYPE_END, 0))
            self.rule_start[rec_rule_id] = <position_t>offset
            self.n_elements += <int64_t>self.pool.size() - offset
            last_rec_rule_id = rec_rule_id
        if n_opt > 0:
            rule.push_back(element_of(LLAMA_GRETYPE_RULE_REF, last_rec_rule_id))
        n_prev_rules[0] *= total_rules
        return 0

    cdef Py_ssize_t parse_sequence(self, Py_ssize_t pos, uint32_t rule_name, vector[grammar_element]& rule,
                                   bint is_nested) except -1:
        cdef size_t last_sym_start = rule.size()
        cdef uint64_t n_prev_rules = 1, min_times, max_times
        cdef unsigned char c
        cdef uint32_t value, start_type, kind, ref_rule_id, sub_rule_id
        cdef Py_ssize_t at, name_end, int_end, n_rules_before
        cdef uint32_t name_index
        while True:
            c = self.at(pos)
            if c == 0:
                break
            if c == 34:  # '"': literal string
                pos += 1
                last_sym_start = rule.size()
                n_prev_rules = 1
                while self.at(pos) != 34:
                    if not self.at(pos):
                        raise _Fail("unexpected end of input", pos)
                    pos = self.parse_char(pos, &value)
                    rule.push_back(element_of(LLAMA_GRETYPE_CHAR, value))
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 91:  # '[': character class
                pos += 1
                start_type = LLAMA_GRETYPE_CHAR
                if self.at(pos) == 94:  # '^'
                    pos += 1
                    start_type = LLAMA_GRETYPE_CHAR_NOT
                last_sym_start = rule.size()
                n_prev_rules = 1
                while self.at(pos) != 93:
                    if not self.at(pos):
                        raise _Fail("unexpected end of input", pos)
                    pos = self.parse_char(pos, &value)
                    rule.push_back(element_of(LLAMA_GRETYPE_CHAR_ALT if last_sym_start < rule.size() else start_type,
                                              value))
                    if self.at(pos) == 45 and self.at(pos + 1) != 93:
                        if not self.at(pos + 1):
                            raise _Fail("unexpected end of input", pos + 1)
                        pos = self.parse_char(pos + 1, &value)
                        rule.push_back(element_of(LLAMA_GRETYPE_CHAR_RNG_UPPER, value))
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 60 or c == 33:  # '<' or '!': token
                kind = LLAMA_GRETYPE_TOKEN
                if c == 33:
                    kind = LLAMA_GRETYPE_TOKEN_NOT
                    pos += 1
                pos = self.parse_token(pos, &value)
                last_sym_start = rule.size()
                n_prev_rules = 1
                rule.push_back(element_of(kind, value))
                pos = self.parse_space(pos, is_nested)
            elif is_word_char(c):  # rule reference
                name_end = self.parse_name(pos)
                ref_rule_id = self.get_symbol_id(self.src + pos, name_end - pos, &name_index)
                pos = self.parse_space(name_end, is_nested)
                last_sym_start = rule.size()
                n_prev_rules = 1
                rule.push_back(element_of(LLAMA_GRETYPE_RULE_REF, ref_rule_id))
            elif c == 40:  # '(': group
                if self.n_open_groups >= MAX_GROUP_NESTING:
                    raise _Fail(f"groups nested deeper than {MAX_GROUP_NESTING} levels (bankml's MAX_GROUP_NESTING)",
                                pos)
                self.n_open_groups += 1
                pos = self.parse_space(pos + 1, True)
                n_rules_before = self.symbols.size()
                sub_rule_id = self.generate_symbol_id(rule_name)
                pos = self.parse_alternates(pos, rule_name, sub_rule_id, True)
                self.n_open_groups -= 1
                n_prev_rules = max(1, <Py_ssize_t>self.symbols.size() - n_rules_before)
                last_sym_start = rule.size()
                rule.push_back(element_of(LLAMA_GRETYPE_RULE_REF, sub_rule_id))
                if self.at(pos) != 41:
                    raise _Fail("expecting ')'", pos)
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 46:  # '.'
                last_sym_start = rule.size()
                n_prev_rules = 1
                rule.push_back(element_of(LLAMA_GRETYPE_CHAR_ANY, 0))
                pos = self.parse_space(pos + 1, is_nested)
            elif c == 42:  # '*'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                self.handle_repetitions(rule, last_sym_start, &n_prev_rules, rule_name, 0, NO_MAX, at)
            elif c == 43:  # '+'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                self.handle_repetitions(rule, last_sym_start, &n_prev_rules, rule_name, 1, NO_MAX, at)
            elif c == 63:  # '?'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                self.handle_repetitions(rule, last_sym_start, &n_prev_rules, rule_name, 0, 1, at)
            elif c == 123:  # '{'
                at = pos
                pos = self.parse_space(pos + 1, is_nested)
                if not is_digit_char(self.at(pos)):
                    raise _Fail("expecting an int", pos)
                int_end = self.parse_int(pos)
                min_times = self.stoull(pos, int_end, "stoull")
                pos = self.parse_space(int_end, is_nested)
                max_times = NO_MAX
                if self.at(pos) == 125:  # '}'
                    max_times = min_times
                    pos = self.parse_space(pos + 1, is_nested)
                elif self.at(pos) == 44:  # ','
                    pos = self.parse_space(pos + 1, is_nested)
                    if is_digit_char(self.at(pos)):
                        int_end = self.parse_int(pos)
                        max_times = self.stoull(pos, int_end, "stoull")
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
                if max_times != NO_MAX and max_times > MAX_REPETITION_THRESHOLD:
                    max_times = NO_MAX
                self.handle_repetitions(rule, last_sym_start, &n_prev_rules, rule_name, min_times, max_times, at)
            else:
                break
        return pos

    cdef Py_ssize_t parse_rule(self, Py_ssize_t pos) except -1:
        cdef Py_ssize_t name_end = self.parse_name(pos)
        cdef Py_ssize_t after_name = self.parse_space(name_end, False)
        cdef uint32_t name
        cdef uint32_t rule_id = self.get_symbol_id(self.src + pos, name_end - pos, &name)
        cdef unsigned char c
        if not (self.at(after_name) == 58 and self.at(after_name + 1) == 58 and self.at(after_name + 2) == 61):
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

    cdef int parse(self) except -1:
        cdef Py_ssize_t pos = self.parse_space(0, True)
        cdef size_t rule_id, k, n_rules
        cdef uint32_t value
        cdef const grammar_element* rule
        while self.at(pos):
            pos = self.parse_rule(pos)
        self.check_element_budget(0, pos)
        # llama.cpp's validation: every rule defined, every reference to a defined rule. A reference's
        # value is a symbol id, so when every symbol has its rule no reference can miss: the rules are
        # read only to find which error llama.cpp meets first.
        n_rules = self.rule_start.size()
        if n_rules == self.symbols.size():
            for rule_id in range(n_rules):
                if self.rule_start[rule_id] < 0:
                    break
            else:
                return 0
        for rule_id in range(n_rules):
            if self.rule_start[rule_id] < 0:
                raise _Fail("Undefined rule", None)
            rule = self.pool.data() + self.rule_start[rule_id]
            for k in range(<size_t>rule_length(rule)):
                if rule[k].type != LLAMA_GRETYPE_RULE_REF:
                    continue
                value = rule[k].value
                if value >= n_rules or self.rule_start[value] < 0:
                    # the first of its names in std::map's (byte) order: symbol ids are unique, so its name
                    raise _Fail(f"Undefined rule identifier '{symbol_name(self.text_names, self.symbols[value])}'",
                                None)
        return 0


cdef str symbol_name(const vector[string]& text_names, symbol_entry entry):
    cdef str name = text_names[entry.name].decode("ascii")
    return f"{name}_{entry.id}" if entry.generated else name


cdef dict symbol_dict(const vector[string]& text_names, pod_vector[symbol_entry]& symbols):
    """llama.cpp's symbol_ids: name -> symbol id, in first-insertion order."""
    cdef dict out = {}
    cdef list written = []
    cdef size_t i
    for i in range(text_names.size()):
        written.append(text_names[i].decode("ascii"))
    cdef symbol_entry entry
    for i in range(symbols.size()):
        entry = symbols[i]
        if entry.generated:
            out[f"{written[entry.name]}_{entry.id}"] = entry.id
        else:
            out[written[entry.name]] = entry.id
    return out


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


cdef GbnfParser parse_gbnf(text, vocab):
    """Parse GBNF text as llama.cpp's parser does. Raises GrammarError with llama.cpp's reason and the line
    and column."""
    cdef bytes src
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
    cdef GbnfParser parser = GbnfParser(src, vocab)
    try:
        parser.parse()
    except _Fail as fail:
        if fail.pos is None:
            raise GrammarError(fail.reason) from None
        line, column, context = _location(src, fail.pos)
        raise GrammarError(fail.reason, line, column, context) from None
    return parser
