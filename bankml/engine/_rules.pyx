# cython: language_level=3
"""The flat rules: llama.cpp's parsed grammar as one element array, rules addressed by position.

Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License,
Copyright (c) 2023-2026 The ggml authors: src/llama-grammar.cpp (llama_grammar_parser, in _gbnf.pxi;
llama_grammar_init_impl's checks: the root symbol, undefined rules, left recursion).

Owns: ``Rules`` (immutable, shareable, picklable), the GBNF parser that builds them (``_gbnf.pxi``) and
the grammar IR's element types, the one definition the engine uses (``_rules.pxd``; parser.py's
constants are checked against it at import). It must not match (the engine's other modules do).
"""
cimport cython
from cython.operator cimport dereference as deref
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

from bankml.engine._charclass cimport class_end, is_end_of_sequence, is_token_element
from bankml.engine._elements cimport (LLAMA_GRETYPE_ALT, LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_ALT, LLAMA_GRETYPE_CHAR_ANY,
                                      LLAMA_GRETYPE_CHAR_NOT, LLAMA_GRETYPE_CHAR_RNG_UPPER, LLAMA_GRETYPE_END,
                                      LLAMA_GRETYPE_RULE_REF, LLAMA_GRETYPE_TOKEN, LLAMA_GRETYPE_TOKEN_NOT,
                                      grammar_element)
from bankml.engine._typedefs cimport position_t

from bankml.engine import parser
from bankml.errors import GrammarError

# One grammar IR: parser.py's element types are llama.cpp's, as the engine's enum is.
if (parser.END, parser.ALT, parser.RULE_REF, parser.CHAR, parser.CHAR_NOT, parser.CHAR_RNG_UPPER, parser.CHAR_ALT,
        parser.CHAR_ANY, parser.TOKEN, parser.TOKEN_NOT) != (
        LLAMA_GRETYPE_END, LLAMA_GRETYPE_ALT, LLAMA_GRETYPE_RULE_REF, LLAMA_GRETYPE_CHAR, LLAMA_GRETYPE_CHAR_NOT,
        LLAMA_GRETYPE_CHAR_RNG_UPPER, LLAMA_GRETYPE_CHAR_ALT, LLAMA_GRETYPE_CHAR_ANY, LLAMA_GRETYPE_TOKEN,
        LLAMA_GRETYPE_TOKEN_NOT):
    raise ImportError("bankml.engine.parser's element types differ from _rules.pxd's llama_gretype")

include "_gbnf.pxi"


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
        cdef GbnfParser parsed = parse_gbnf(text, vocab)
        cdef Rules self = new_rules(root, vocab, text if isinstance(text, str) else None)
        cdef size_t rule_id, length
        cdef position_t start
        cdef unordered_map[string, uint32_t].iterator found = parsed.name_index.end()
        self.text_names.swap(parsed.text_names)
        self.symbols.swap(parsed.symbols)
        if root is not None:
            if parsed.rule_start.empty():
                raise GrammarError("failed to parse grammar: no rules")
            if isinstance(root, str):
                found = parsed.name_index.find(root.encode("utf-8", "surrogatepass"))
            if found != parsed.name_index.end():
                self.root_id = <int32_t>parsed.text_name_ids[deref(found).second]
            elif root in self.symbol_ids:   # a generated name ("root_1"): the whole table, once
                self.root_id = self.symbol_ids[root]
            else:
                raise GrammarError(f"grammar does not contain a '{root}' symbol")
        # The rules (every one defined: parse checked), then a sentinel END past the last one, so that
        # looking one element ahead never leaves the array.
        if parsed.n_elements + 1 >= (1 << 31) - 1:
            raise GrammarError("grammar has more elements than bankml's 32-bit positions can address")
        if not parsed.redefined:
            # every rule added once: the parser's pool holds exactly the rules (each contiguous, ending with
            # END, in the order they were finished), so it becomes the element array as it is
            self.elements.swap(parsed.pool)
            self.rule_start.swap(parsed.rule_start)
        else:
            # a rule added twice left its old elements behind: the rules one after another in id order
            self.elements.reserve(parsed.n_elements + 1)
            self.rule_start.reserve(parsed.rule_start.size())
            for rule_id in range(parsed.rule_start.size()):
                start = parsed.rule_start[rule_id]
                length = rule_length(parsed.pool.data() + start)
                self.rule_start.push_back(<position_t>self.elements.size())
                self.elements.append(parsed.pool.data() + start, parsed.pool.data() + start + length)
        self.elements.push_back(element_of(LLAMA_GRETYPE_END, 0))
        if root is not None:
            recursion = check_left_recursion(self)
            if recursion is not None and not recursion[1]:
                name = _rule_name(self.symbol_ids, recursion[0])
                raise GrammarError(
                    f"unsupported grammar, left recursion detected for nonterminal at index {recursion[0]} ({name})")
            # llama.cpp's check takes a rule for non-empty unless an alternative is empty as written; left
            # recursion through a rule that matches the empty string only through others passes it, and
            # where it pushes a frame on the way round llama.cpp's advance_stack grows a stack forever.
            # bankml refuses that (in llama.cpp's message shape).
            if recursion is not None:
                name = _rule_name(self.symbol_ids, recursion[0])
                raise GrammarError(
                    f"unsupported grammar, left recursion detected for nonterminal at index {recursion[0]} ({name}), "
                    "through rules that can match the empty string (llama.cpp's check misses it and hangs)")
        return self

    @property
    def symbol_ids(self):
        """llama.cpp's symbol_ids: name -> rule id, in first-insertion order (built on first use)."""
        if self._symbol_ids is None:
            self._symbol_ids = symbol_dict(self.text_names, self.symbols)
        return self._symbol_ids

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
                current.append((<int>self.elements[pos].type, self.elements[pos].value))
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


cdef Rules new_rules(root, vocab, text):
    cdef Rules self = Rules.__new__(Rules)
    self._symbol_ids = None
    self.root = root
    self.root_id = -1
    self.vocab = vocab
    self.text = text
    self.contexts = {}
    return self


cdef Rules make_rules(dict symbol_ids, list rules, root, vocab, text):
    """Rules from a symbol table and (type, value) lists (unpickling)."""
    cdef Rules self = new_rules(root, vocab, text)
    self._symbol_ids = dict(symbol_ids)
    if root is not None:
        self.root_id = symbol_ids[root]
    if sum(len(rule) for rule in rules) >= (1 << 31) - 2:
        raise GrammarError("grammar has more elements than bankml's 32-bit positions can address")
    for rule in rules:
        self.rule_start.push_back(<position_t>self.elements.size())
        for kind, value in rule:
            self.elements.push_back(element_of(kind, value))
    # A sentinel past the last rule, so that looking one element ahead never leaves the array.
    self.elements.push_back(element_of(LLAMA_GRETYPE_END, 0))
    return self


# -- llama_grammar_init_impl's left-recursion check, and the one it misses --------------------------------

cdef vector[uint8_t] rules_may_be_empty(Rules rules):
    """Per rule, whether one of its alternatives is empty as written (llama.cpp's rules_may_be_empty)."""
    cdef const grammar_element* elements = rules.elements.data()
    cdef size_t n_rules = rules.rule_start.size(), rule_id
    cdef vector[uint8_t] may_be_empty
    cdef position_t pos
    cdef bint at_start
    may_be_empty.assign(n_rules, 0)
    for rule_id in range(n_rules):
        pos = rules.rule_start[rule_id]
        at_start = True
        while True:
            if is_end_of_sequence(&elements[pos]):
                if at_start:
                    may_be_empty[rule_id] = 1
                    break
                if elements[pos].type == LLAMA_GRETYPE_END:
                    break
                at_start = True
            else:
                at_start = False
            pos += 1
    return may_be_empty


cdef vector[uint8_t] rules_nullable(Rules rules, const vector[uint8_t]& may_be_empty):
    """Per rule, whether it can match the empty string: the least fixpoint (an alternative made of
    references to nullable rules only is nullable), by a worklist, so linear in the grammar's size.
    Only the rules not already known nullable are read, and the alternatives waiting on each rule are
    kept flat (CSR), not in a vector per rule: a grammar of 10^5 rules costs no allocation per rule."""
    cdef const grammar_element* elements = rules.elements.data()
    cdef size_t n_rules = rules.rule_start.size(), rule_id, k
    cdef vector[uint8_t] nullable = may_be_empty
    cdef vector[int32_t] alternative_rule, alternative_pending, queue
    cdef vector[uint32_t] ref_target                # per candidate alternative, its references, flat
    cdef vector[int32_t] ref_alternative            # (the alternative each of those belongs to)
    cdef vector[uint32_t] waiting_start             # rule -> its slice of waiting (CSR)
    cdef vector[int32_t] waiting                    # the alternatives that reference each rule
    cdef bint blocked
    cdef int32_t alternative, index
    cdef size_t refs_start
    cdef position_t pos
    for rule_id in range(n_rules):
        if nullable[rule_id]:
            queue.push_back(<int32_t>rule_id)
            continue
        pos = rules.rule_start[rule_id]
        refs_start = ref_target.size()
        blocked = False
        while True:
            if is_end_of_sequence(&elements[pos]):
                if not blocked and ref_target.size() > refs_start:
                    alternative = <int32_t>alternative_rule.size()
                    alternative_rule.push_back(<int32_t>rule_id)
                    alternative_pending.push_back(<int32_t>(ref_target.size() - refs_start))
                    for k in range(refs_start, ref_target.size()):
                        ref_alternative.push_back(alternative)
                else:
                    ref_target.resize(refs_start)
                refs_start = ref_target.size()
                blocked = False
                if elements[pos].type == LLAMA_GRETYPE_END:
                    break
            elif not blocked:
                if elements[pos].type == LLAMA_GRETYPE_RULE_REF:
                    ref_target.push_back(<uint32_t>elements[pos].value)
                else:
                    blocked = True
            pos += 1
    waiting_start.assign(n_rules + 1, 0)
    for k in range(ref_target.size()):
        waiting_start[ref_target[k] + 1] += 1
    for rule_id in range(n_rules):
        waiting_start[rule_id + 1] += waiting_start[rule_id]
    waiting.resize(ref_target.size())
    for k in range(ref_target.size()):
        waiting[waiting_start[ref_target[k]]] = ref_alternative[k]
        waiting_start[ref_target[k]] += 1
    for rule_id in range(n_rules, 0, -1):      # (back to each slice's start)
        waiting_start[rule_id] = waiting_start[rule_id - 1]
    waiting_start[0] = 0
    while not queue.empty():
        index = queue.back()
        queue.pop_back()
        for k in range(waiting_start[index], waiting_start[index + 1]):
            alternative = waiting[k]
            alternative_pending[alternative] -= 1
            if alternative_pending[alternative] == 0 and not nullable[alternative_rule[alternative]]:
                nullable[alternative_rule[alternative]] = 1
                queue.push_back(alternative_rule[alternative])
    return nullable


cdef inline position_t next_leftmost_ref(const grammar_element* elements, position_t pos, bint* recurse) noexcept nogil:
    """From pos, the next reference llama.cpp's check walks -- the leftmost of an alternative, and the next
    one while the references before it may be empty (*recurse: the caller sets it after each reference)
    -- or the rule's END."""
    while True:
        if elements[pos].type == LLAMA_GRETYPE_RULE_REF and recurse[0]:
            return pos
        if elements[pos].type <= LLAMA_GRETYPE_ALT:  # the end of an alternative
            if elements[pos].type == LLAMA_GRETYPE_END:
                return pos
            recurse[0] = True
        else:
            recurse[0] = False
        pos += 1


cdef void leftmost_edges(Rules rules, const vector[uint8_t]& empty, vector[int64_t]& edge_start,
                         vector[uint32_t]& edge_target, vector[uint8_t]* edge_pushes):
    """Per rule (CSR), the references llama.cpp's check walks (next_leftmost_ref). With edge_pushes,
    whether the reference is followed by more of its alternative (it leaves a frame on the stack)."""
    cdef const grammar_element* elements = rules.elements.data()
    cdef size_t n_rules = rules.rule_start.size(), rule_id
    cdef position_t pos
    cdef bint recurse
    edge_start.resize(n_rules + 1)
    for rule_id in range(n_rules):
        edge_start[rule_id] = <int64_t>edge_target.size()
        pos = rules.rule_start[rule_id]
        recurse = True
        while True:
            pos = next_leftmost_ref(elements, pos, &recurse)
            if elements[pos].type == LLAMA_GRETYPE_END:
                break
            edge_target.push_back(elements[pos].value)
            if edge_pushes != NULL:
                edge_pushes.push_back(elements[pos + 1].type > LLAMA_GRETYPE_ALT)
            recurse = empty[elements[pos].value]
            pos += 1
    edge_start[n_rules] = <int64_t>edge_target.size()


cdef int64_t find_cycle(Rules rules, const vector[uint8_t]& empty):
    """The first rule (in llama.cpp's scan order) from which a cycle of leftmost references
    (next_leftmost_ref) is reachable, or -1. A depth-first walk that reads each rule's elements once, as it
    goes (each frame of the walk keeps where it is in its rule): nothing per reference is built, and each
    rule is walked once (llama.cpp re-walks shared rules)."""
    cdef const grammar_element* elements = rules.elements.data()
    cdef size_t n_rules = rules.rule_start.size(), start
    cdef vector[uint8_t] state      # 0 new, 1 in progress, 2 done
    cdef vector[uint32_t] work_node
    cdef vector[position_t] work_pos    # per frame: the next element of its rule to read
    cdef vector[uint8_t] work_recurse   # per frame: whether a reference there is walked
    cdef uint32_t node, child
    cdef position_t pos
    cdef bint recurse, descend
    state.assign(n_rules, 0)
    for start in range(n_rules):
        if state[start]:
            continue
        state[start] = 1
        work_node.push_back(<uint32_t>start)
        work_pos.push_back(rules.rule_start[start])
        work_recurse.push_back(True)
        while not work_node.empty():
            node = work_node.back()
            pos = work_pos.back()
            recurse = work_recurse.back()
            descend = False
            while True:
                pos = next_leftmost_ref(elements, pos, &recurse)
                if elements[pos].type == LLAMA_GRETYPE_END:
                    break
                child = <uint32_t>elements[pos].value
                recurse = empty[child]
                pos += 1
                if state[child] == 1:
                    return <int64_t>start
                if state[child] == 0:
                    descend = True
                    break
            if descend:
                work_pos[work_pos.size() - 1] = pos
                work_recurse[work_recurse.size() - 1] = recurse
                state[child] = 1
                work_node.push_back(child)
                work_pos.push_back(rules.rule_start[child])
                work_recurse.push_back(True)
            else:
                state[node] = 2
                work_node.pop_back()
                work_pos.pop_back()
                work_recurse.pop_back()
    return -1


cdef const vector[uint8_t]* nullable_kept(Rules rules, const vector[uint8_t]* may_be_empty) except NULL:
    if not rules.nullable_known:
        rules.nullable = rules_nullable(rules, may_be_empty[0] if may_be_empty != NULL else rules_may_be_empty(rules))
        rules.nullable_known = True
    return &rules.nullable


cdef const vector[uint8_t]* rules_nullable_of(Rules rules) except NULL:
    """Per rule id, whether it can match the empty string (the least fixpoint), computed once and kept
    on the Rules (parse's left-recursion check and each new MatchContext's segment cache both need it)."""
    return nullable_kept(rules, NULL)


cdef int64_t find_growing_left_recursion(Rules rules, const vector[uint8_t]& may_be_empty):
    """Left recursion that llama.cpp's check misses and on which its advance_stack never returns, or -1.

    llama.cpp's check takes a rule for non-empty unless one of its alternatives is empty as written, so
    left recursion through a rule that matches the empty string only through other rules (`b ::= c`,
    `c ::= ""`) passes it. Where such a cycle of leftmost references (each after a prefix that can match
    the empty string) pushes a frame on the way round -- some reference on it is followed by more of its
    alternative -- every turn leaves a deeper stack, which advance_stack's seen set never meets again:
    llama.cpp grows the stack until memory runs out. A cycle of references in tail position only leaves
    the same stacks and ends (llama.cpp's own test `root ::= ( [x]* )*` is one). Returns the lowest rule
    index on such a cycle.
    """
    cdef size_t n_rules = rules.rule_start.size(), index
    cdef const vector[uint8_t]* nullable = nullable_kept(rules, &may_be_empty)   # (kept for the matchers)
    cdef vector[int64_t] edge_start
    cdef vector[uint32_t] edge_target
    cdef vector[uint8_t] edge_pushes
    cdef vector[int64_t] component, order, low, lowest
    cdef vector[uint8_t] on_stack
    cdef vector[uint32_t] stack, work_node
    cdef vector[int64_t] work_edge
    cdef int64_t counter = 0, n_components = 0, found = -1, e
    cdef uint32_t node, child, member, parent
    cdef bint same = True
    for index in range(n_rules):
        if nullable[0][index] != may_be_empty[index]:
            same = False
            break
    if same:
        # the same leftmost references as llama.cpp's check follows: it found no cycle, so there is none
        return -1
    if find_cycle(rules, nullable[0]) < 0:
        # no cycle of leftmost references at all (the common case): nothing for the components to find
        return -1
    leftmost_edges(rules, nullable[0], edge_start, edge_target, &edge_pushes)
    # Tarjan's strongly connected components, iteratively: an edge lies on a cycle iff both ends are in one.
    component.assign(n_rules, -1)
    order.assign(n_rules, -1)
    low.assign(n_rules, 0)
    on_stack.assign(n_rules, 0)
    for index in range(n_rules):
        if order[index] >= 0:
            continue
        order[index] = low[index] = counter
        counter += 1
        stack.push_back(<uint32_t>index)
        on_stack[index] = 1
        work_node.push_back(<uint32_t>index)
        work_edge.push_back(edge_start[index])
        while not work_node.empty():
            node = work_node.back()
            if work_edge.back() < edge_start[node + 1]:
                child = edge_target[work_edge.back()]
                work_edge[work_edge.size() - 1] += 1
                if order[child] < 0:
                    order[child] = low[child] = counter
                    counter += 1
                    stack.push_back(child)
                    on_stack[child] = 1
                    work_node.push_back(child)
                    work_edge.push_back(edge_start[child])
                elif on_stack[child]:
                    low[node] = min(low[node], order[child])
                continue
            work_node.pop_back()
            work_edge.pop_back()
            if not work_node.empty():
                parent = work_node.back()
                low[parent] = min(low[parent], low[node])
            if low[node] == order[node]:
                while True:
                    member = stack.back()
                    stack.pop_back()
                    on_stack[member] = 0
                    component[member] = n_components
                    if member == node:
                        break
                n_components += 1
    lowest.assign(n_components, <int64_t>n_rules)
    for index in range(n_rules):
        lowest[component[index]] = min(lowest[component[index]], <int64_t>index)
    for index in range(n_rules):
        for e in range(edge_start[index], edge_start[index + 1]):
            if edge_pushes[e] and component[edge_target[e]] == component[index]:
                if found < 0 or lowest[component[index]] < found:
                    found = lowest[component[index]]
    return found


def check_left_recursion(Rules rules):
    """(index, grows) of the first left recursion: llama.cpp's check first (grows False), then the one it
    misses (find_growing_left_recursion, grows True); None when there is none."""
    cdef vector[uint8_t] may_be_empty = rules_may_be_empty(rules)
    cdef int64_t found = find_cycle(rules, may_be_empty)
    if found >= 0:
        return found, False
    found = find_growing_left_recursion(rules, may_be_empty)
    return (found, True) if found >= 0 else None
