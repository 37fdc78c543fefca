"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

``common/peg-parser.cpp``'s ``common_peg_arena``: parsers held in an arena, each with the id of its creation
order (``common_peg_parser_builder`` adds one per call, sequences and choices flattened as there), named rules
and refs (resolved by ``build()``), trigger rules, the lenient executor (``parser_executor``: input that ends
inside something asks for more instead of failing) with its AST arena, and ``build_grammar(builder, lazy)``,
which prints the GBNF of every reachable rule and the root as llama.cpp does (the builder is
``bankml.chat.peg_builder``), through ``bankml.schema.converter``'s
``common_grammar_builder`` (schema rules from its converter). The only id that shows in the grammar is that of
an ``until`` / ``ac`` parser (``until-<id>``, ``ac-<id>``); callers that port C++ expressions build their
operands in GCC's order (the right operand of ``+`` / ``|`` first) so that the ids are llama.cpp's.

Positions are byte offsets into the UTF-8 input; texts are bytes.
"""

from bankml.chat._peg import INCOMPLETE, INVALID, OK, utf8_at
from bankml.schema.converter import gbnf_format_literal
from bankml.schema.queries import may_be_string

FAIL, SUCCESS, NEED = 0, 1, 2
_C_SPACE = frozenset(b" \t\n\v\f\r")
_HEX = frozenset(b"0123456789abcdefABCDEF")


class Result:
    __slots__ = ("type", "start", "end", "nodes", "invalid")

    def __init__(self, type_, start, end=None, nodes=None, invalid=None):
        self.type, self.start = type_, start
        self.end = start if end is None else end
        self.nodes = nodes if nodes is not None else []
        self.invalid = invalid if invalid is not None else []


class AstNode:
    """common_peg_ast_node: ``rule`` / ``tag`` ("" when absent), byte span, children ids, partial flag and the
    invalid UTF-8 runs [(pos, len)] inside it."""

    __slots__ = ("id", "rule", "tag", "start", "end", "text", "children", "is_partial", "invalid")

    def __init__(self, id_, rule, tag, start, end, text, children, is_partial, invalid):
        self.id, self.rule, self.tag, self.start, self.end = id_, rule, tag, start, end
        self.text, self.children, self.is_partial, self.invalid = text, children, is_partial, invalid

    def sanitized_text(self):
        if not self.invalid:
            return self.text
        out, seg = [], self.start
        for pos, length in self.invalid:
            out.append(self.text[seg - self.start : pos - self.start])
            out.append(b"\xef\xbf\xbd")
            seg = pos + length
        out.append(self.text[seg - self.start : self.end - self.start])
        return b"".join(out)


class Context:
    """common_peg_parse_context: the input (bytes), the lenient flag and the AST arena."""

    def __init__(self, data, lenient=True):
        self.input, self.lenient, self.ast = data, lenient, []

    def add_node(self, rule, tag, start, end, children, is_partial, invalid):
        text = self.input[start:end] if start < len(self.input) else b""
        node = AstNode(len(self.ast), rule, tag, start, end, text, children, is_partial, list(invalid))
        self.ast.append(node)
        return node.id

    def visit(self, ids):
        """common_peg_ast_arena::visit: pre-order over the nodes of a result."""
        stack = list(reversed(ids))
        while stack:
            node = self.ast[stack.pop()]
            yield node
            stack.extend(reversed(node.children))


# -- the trie of common/trie.cpp (code points) --------------------------------------------------------------


def _codepoints(word):
    data = word.encode("utf-8") if isinstance(word, str) else word
    out, pos = [], 0
    while pos < len(data):
        status, cp, size = utf8_at(data, pos)
        if status != OK:
            break
        out.append(cp)
        pos += size
    return out


class Trie:
    def __init__(self, words=()):
        self.children, self.pattern = [{}], [-1]
        self.n_patterns = 0
        for w in words:
            self.insert(_codepoints(w))

    def insert(self, symbols):
        cur = 0
        for ch in symbols:
            nxt = self.children[cur].get(ch)
            if nxt is None:
                nxt = len(self.children)
                self.children.append({})
                self.pattern.append(-1)
                self.children[cur][ch] = nxt
            cur = nxt
        if self.pattern[cur] < 0:
            self.pattern[cur] = self.n_patterns
            self.n_patterns += 1
        return self.pattern[cur]

    NO_MATCH, PARTIAL_MATCH, COMPLETE_MATCH = 0, 1, 2

    def check_at(self, data, pos):
        cur = 0
        while pos < len(data):
            status, cp, size = utf8_at(data, pos)
            if status != OK:
                break
            cur = self.children[cur].get(cp)
            if cur is None:
                return self.NO_MATCH
            pos += size
            if self.pattern[cur] >= 0:
                return self.COMPLETE_MATCH
        return self.PARTIAL_MATCH if cur != 0 else self.NO_MATCH


class AhoCorasick:
    """common_aho_corasick: failure links over the trie, the longest match per state, the alphabet."""

    def __init__(self, words):
        t = self.t = Trie(words)
        n = len(t.children)
        self.fail = [0] * n
        order, queue = [], [0]
        while queue:
            u = queue.pop(0)
            order.append(u)
            for ch, v in sorted(t.children[u].items()):
                if u != 0:
                    f = self.fail[u]
                    while f and ch not in t.children[f]:
                        f = self.fail[f]
                    w = t.children[f].get(ch)
                    self.fail[v] = w if w is not None and w != v else 0
                queue.append(v)
        self.match = [-1] * n
        for u in order:
            self.match[u] = t.pattern[u] if t.pattern[u] >= 0 else (self.match[self.fail[u]] if u else -1)
        self.alphabet = sorted({ch for node in t.children for ch in node})

    def num_states(self):
        return len(self.t.children)

    def is_terminal(self, s):
        return self.match[s] >= 0

    def next(self, state, ch):
        ch_ = self.t.children
        while state and ch not in ch_[state]:
            state = self.fail[state]
        return ch_[state].get(ch, 0)


# -- parsers ------------------------------------------------------------------------------------------------


class _P:
    __slots__ = ()
    kind = ""
    child = None


class Epsilon(_P):
    kind = "epsilon"

    def parse(self, a, ctx, pos):
        return Result(SUCCESS, pos)


class Start(_P):
    kind = "start"

    def parse(self, a, ctx, pos):
        return Result(SUCCESS if pos == 0 else FAIL, pos)


class End(_P):
    kind = "end"

    def parse(self, a, ctx, pos):
        return Result(SUCCESS if pos >= len(ctx.input) else FAIL, pos)


class Literal(_P):
    __slots__ = ("literal",)
    kind = "literal"

    def __init__(self, literal):
        self.literal = literal

    def parse(self, a, ctx, start):
        data, lit, n = ctx.input, self.literal, len(ctx.input)
        if data.startswith(lit, start):
            return Result(SUCCESS, start, start + len(lit))
        pos = start
        for c in lit:
            if pos >= n:
                return Result(NEED, start, pos) if ctx.lenient else Result(FAIL, start)
            if data[pos] != c:
                return Result(FAIL, start)
            pos += 1
        return Result(SUCCESS, start, pos)


class Sequence(_P):
    __slots__ = ("children",)
    kind = "sequence"

    def __init__(self, children):
        # a tuple of ids (of ints only, so that the garbage collector stops tracking it once it has seen it: an
        # arena is kept, and each object it tracks costs each of its collections)
        self.children = children

    def parse(self, a, ctx, start):
        pos, nodes, invalid = start, [], []
        parsers = a.parsers
        for cid in self.children:
            r = parsers[cid].parse(a, ctx, pos)
            if r.type == FAIL:
                return Result(FAIL, start, r.end)
            if r.nodes:
                nodes += r.nodes
            if r.invalid:
                invalid += r.invalid
            if r.type == NEED:
                return Result(NEED, start, r.end, nodes, invalid)
            pos = r.end
        return Result(SUCCESS, start, pos, nodes, invalid)


class Choice(_P):
    __slots__ = ("children",)
    kind = "choice"

    def __init__(self, children):
        self.children = children  # a tuple of ids, as Sequence's

    def parse(self, a, ctx, start):
        parsers = a.parsers
        for cid in self.children:
            r = parsers[cid].parse(a, ctx, start)
            if r.type != FAIL:
                return r
        return Result(FAIL, start)


class Repetition(_P):
    __slots__ = ("child", "min_count", "max_count")
    kind = "repetition"

    def __init__(self, child, min_count, max_count):
        self.child, self.min_count, self.max_count = child, min_count, max_count

    def parse(self, a, ctx, start):
        pos, count, nodes, invalid = start, 0, [], []
        child, n = a.parsers[self.child], len(ctx.input)
        while self.max_count == -1 or count < self.max_count:
            if pos >= n:
                break
            r = child.parse(a, ctx, pos)
            if r.type == SUCCESS:
                if r.end == pos:
                    break
                nodes += r.nodes
                invalid += r.invalid
                pos = r.end
                count += 1
                continue
            if r.type == NEED:
                nodes += r.nodes
                invalid += r.invalid
                return Result(NEED, start, r.end, nodes, invalid)
            break
        if self.min_count > 0 and count < self.min_count:
            if pos >= n and ctx.lenient:
                return Result(NEED, start, pos, nodes, invalid)
            return Result(FAIL, start, pos)
        return Result(SUCCESS, start, pos, nodes, invalid)


class And(_P):
    __slots__ = ("child",)
    kind = "and"

    def __init__(self, child):
        self.child = child

    def parse(self, a, ctx, pos):
        return Result(a.parsers[self.child].parse(a, ctx, pos).type, pos)


class Not(_P):
    __slots__ = ("child",)
    kind = "not"

    def __init__(self, child):
        self.child = child

    def parse(self, a, ctx, pos):
        t = a.parsers[self.child].parse(a, ctx, pos).type
        return Result(FAIL if t == SUCCESS else NEED if t == NEED else SUCCESS, pos)


class Any(_P):
    kind = "any"

    def parse(self, a, ctx, pos):
        status, _, size = utf8_at(ctx.input, pos)
        if status == INCOMPLETE:
            return Result(NEED if ctx.lenient else FAIL, pos)
        if status == INVALID:
            return Result(FAIL, pos)
        return Result(SUCCESS, pos, pos + size)


class Space(_P):
    kind = "space"

    def parse(self, a, ctx, start):
        data, pos, n = ctx.input, start, len(ctx.input)
        while pos < n and data[pos] in _C_SPACE:
            pos += 1
        return Result(SUCCESS, start, pos)


def _parse_hex(s, pos, count):
    digits = s[pos : pos + count]
    if len(digits) < count or not all(c in "0123456789abcdefABCDEF" for c in digits):
        return 0, 0
    return int(digits, 16), count


def _class_char(s, pos):
    if s[pos] == "\\" and pos + 1 < len(s):
        c = s[pos + 1]
        for esc, count in (("x", 2), ("u", 4), ("U", 8)):
            if c == esc:
                value, used = _parse_hex(s, pos + 2, count)
                return (value, 2 + used) if used else (ord(esc), 2)
        return {"n": 10, "t": 9, "r": 13}.get(c, ord(c)), 2
    return ord(s[pos]), 1


def parse_char_classes(classes):
    """parse_char_classes: ([(lo, hi)], negated) of ``[...]`` / ``[^...]`` (escapes \\x \\u \\U \\n \\t \\r)."""
    content = classes
    if content.startswith("["):
        content = content[1:]
    if content.endswith("]"):
        content = content[:-1]
    negated = content.startswith("^")
    if negated:
        content = content[1:]
    ranges, i = [], 0
    while i < len(content):
        lo, used = _class_char(content, i)
        i += used
        if i + 1 < len(content) and content[i] == "-":
            hi, used = _class_char(content, i + 1)
            ranges.append((lo, hi))
            i += 1 + used
        else:
            ranges.append((lo, lo))
    return ranges, negated


class Chars(_P):
    __slots__ = ("pattern", "ranges", "negated", "min_count", "max_count")
    kind = "chars"

    def __init__(self, pattern, min_count, max_count):
        self.pattern = pattern
        self.ranges, self.negated = parse_char_classes(pattern)
        self.min_count, self.max_count = min_count, max_count

    def parse(self, a, ctx, start):
        data, pos, count = ctx.input, start, 0
        while self.max_count == -1 or count < self.max_count:
            status, cp, size = utf8_at(data, pos)
            if status == INCOMPLETE:
                if count >= self.min_count:
                    return Result(SUCCESS, start, pos)
                return Result(NEED, start, pos) if ctx.lenient else Result(FAIL, start)
            if status == INVALID:
                return Result(SUCCESS, start, pos) if count >= self.min_count else Result(FAIL, start)
            matches = any(lo <= cp <= hi for lo, hi in self.ranges)
            if self.negated:
                matches = not matches
            if not matches:
                break
            pos += size
            count += 1
        if count < self.min_count:
            if pos >= len(data) and ctx.lenient:
                return Result(NEED, start, pos)
            return Result(FAIL, start, pos)
        return Result(SUCCESS, start, pos)


class String(_P):
    """common_peg_string_parser: string content up to (not including) the delimiter."""

    __slots__ = ("delimiter",)
    kind = "string"

    def __init__(self, delimiter):
        self.delimiter = delimiter

    def parse(self, a, ctx, start):
        data, pos, n, d = ctx.input, start, len(ctx.input), ord(self.delimiter)
        while pos < n:
            c = data[pos]
            if c == d:
                return Result(SUCCESS, start, pos)
            if c == 0x5C:
                save = pos
                pos += 1
                if pos >= n:
                    return Result(NEED, start, save) if ctx.lenient else Result(FAIL, start)
                e = data[pos]
                if e == d or e in b"\\/bfnrt":
                    pos += 1
                    continue
                if e == 0x75:
                    pos += 1
                    for _ in range(4):
                        if pos >= n:
                            return Result(NEED, start, save) if ctx.lenient else Result(FAIL, start)
                        if data[pos] not in _HEX:
                            return Result(FAIL, start)
                        pos += 1
                    continue
                return Result(FAIL, start)
            status, _, size = utf8_at(data, pos)
            if status == INCOMPLETE:
                return Result(NEED, start, pos) if ctx.lenient else Result(FAIL, start)
            if status == INVALID:
                return Result(FAIL, start)
            pos += size
        return Result(NEED if ctx.lenient else FAIL, start, pos)


class Until(_P):
    __slots__ = ("delimiters", "trie", "first")
    kind = "until"

    def __init__(self, delimiters):
        self.delimiters = list(delimiters)
        self.trie = Trie(self.delimiters)
        self.first = frozenset(self.trie.children[0])

    def parse(self, a, ctx, start):
        data, n = ctx.input, len(ctx.input)
        pos = last_valid = start
        invalid = []
        trie, first = self.trie, self.first
        while pos < n:
            status, cp, size = utf8_at(data, pos)
            if status == INCOMPLETE and ctx.lenient:
                return Result(NEED, start, last_valid, None, invalid)
            if status != OK:
                invalid.append((pos, size))
                pos += size
                last_valid = pos
                continue
            if cp in first and trie.check_at(data, pos) != Trie.NO_MATCH:
                return Result(SUCCESS, start, pos, None, invalid)
            pos += size
            last_valid = pos
        if last_valid == n and ctx.lenient:
            return Result(NEED, start, last_valid, None, invalid)
        return Result(SUCCESS, start, last_valid, None, invalid)


class Schema(_P):
    """common_peg_schema_parser: parses as its child; the grammar is the schema's (``node`` a
    bankml.schema.reader node, or None). ``source``: ``(document, pointer)``, the JSON schema the node was
    read from and the node's JSON pointer in it, which strict mode compiles (None: no schema). ``style``: None,
    or how strict tool-call mode writes the value (a ``bankml.schema.tool_args`` style: raw XML text, Gemma 4's
    syntax...); a schema with a style is always written by the builder."""

    __slots__ = ("child", "name", "node", "raw", "source", "style")
    kind = "schema"

    def __init__(self, child, name, node, raw, source=None, style=None):
        self.child, self.name, self.node, self.raw, self.source = child, name, node, raw, source
        self.style = style

    def parse(self, a, ctx, pos):
        return a.parsers[self.child].parse(a, ctx, pos)


class Rule(_P):
    """A rule; ``gbnf``: None, or what ``Arena.build_grammar`` gives its body, ``(text, names of the rules it
    reaches)``, when its builder knows it (a body of rules only, which no ref resolution changes)."""

    __slots__ = ("name", "child", "trigger", "gbnf")
    kind = "rule"

    def __init__(self, name, child, trigger, gbnf=None):
        self.name, self.child, self.trigger, self.gbnf = name, child, trigger, gbnf

    def parse(self, a, ctx, pos):
        r = a.parsers[self.child].parse(a, ctx, pos)
        if r.type == FAIL:
            return r
        nid = ctx.add_node(self.name, "", r.start, r.end, r.nodes, r.type == NEED, r.invalid)
        return Result(r.type, r.start, r.end, [nid], r.invalid)


class Ref(_P):
    __slots__ = ("name",)
    kind = "ref"

    def __init__(self, name):
        self.name = name

    def parse(self, a, ctx, pos):
        return a.parsers[a.get_rule(self.name)].parse(a, ctx, pos)


class Atomic(_P):
    __slots__ = ("child",)
    kind = "atomic"

    def __init__(self, child):
        self.child = child

    def parse(self, a, ctx, pos):
        r = a.parsers[self.child].parse(a, ctx, pos)
        if r.type == NEED:
            r.nodes = []
        return r


class Tag(_P):
    __slots__ = ("child", "tag")
    kind = "tag"

    def __init__(self, child, tag):
        self.child, self.tag = child, tag

    def parse(self, a, ctx, pos):
        r = a.parsers[self.child].parse(a, ctx, pos)
        if r.type == FAIL:
            return r
        nid = ctx.add_node("", self.tag, r.start, r.end, r.nodes, r.type == NEED, r.invalid)
        return Result(r.type, r.start, r.end, [nid], r.invalid)


class Gbnf(_P):
    __slots__ = ("child", "grammar")
    kind = "gbnf"

    def __init__(self, child, grammar):
        self.child, self.grammar = child, grammar

    def parse(self, a, ctx, pos):
        return a.parsers[self.child].parse(a, ctx, pos)


class Ac(_P):
    __slots__ = ("child", "delimiters")
    kind = "ac"

    def __init__(self, child, delimiters):
        self.child, self.delimiters = child, list(delimiters)

    def parse(self, a, ctx, pos):
        return a.parsers[self.child].parse(a, ctx, pos)


_ONE_CHILD = (Repetition, And, Not, Tag, Atomic, Gbnf, Ac, Rule, Schema)
_ONE_CHILD_SET = frozenset(_ONE_CHILD)


class Arena:
    """common_peg_arena: ``parsers`` (by id), ``rules`` (name -> rule parser id, in insertion order), ``root``."""

    def __init__(self):
        self.parsers, self.rules, self.root = [], {}, None

    def get_rule(self, name):
        try:
            return self.rules[name]
        except KeyError:
            raise RuntimeError("Rule not found: " + name) from None

    def add_parser(self, parser):
        self.parsers.append(parser)
        return len(self.parsers) - 1

    def resolved(self, pid):
        """The id of the rule a ref parser ``pid`` names (RuntimeError when there is none), else ``pid``."""
        if pid is None:
            return None
        p = self.parsers[pid]
        return self.get_rule(p.name) if p.__class__ is Ref else pid

    def resolve_refs(self):
        """common_peg_arena::resolve_refs: every use of a ref parser becomes the rule it names (RuntimeError
        for a ref to no rule). A ref parser may also be left where it is: it parses as its rule does, and the
        grammar writes it as its name (``bankml.chat.peg_builder.Builder`` resolves its refs as it goes)."""
        resolve = self.resolved
        for p in self.parsers:
            cls = p.__class__
            if cls is Sequence or cls is Choice:
                p.children = tuple([resolve(c) for c in p.children])
            elif cls in _ONE_CHILD_SET:
                p.child = resolve(p.child)
        self.root = resolve(self.root)

    def resolve_span(self, start, end):
        """``resolve_refs`` for the parsers of ids ``start`` to ``end`` (their uses of refs; every ref names a
        rule)."""
        parsers, rules = self.parsers, self.rules
        for pid in range(start, end):
            p = parsers[pid]
            cls = p.__class__
            if cls is Sequence or cls is Choice:
                kids = p.children
                for c in kids:
                    if parsers[c].__class__ is Ref:
                        p.children = tuple([rules[parsers[c].name] if parsers[c].__class__ is Ref else c for c in kids])
                        break
            elif cls in _ONE_CHILD_SET:
                q = parsers[p.child]
                if q.__class__ is Ref:
                    p.child = rules[q.name]

    def redirect_replaced_rules(self):
        """Every use of a rule parser whose name was given to a later rule becomes that later rule (what
        resolving refs to the name does)."""
        parsers, rules = self.parsers, self.rules

        def current(pid):
            p = parsers[pid]
            return rules.get(p.name, pid) if p.__class__ is Rule else pid

        for p in parsers:
            cls = p.__class__
            if cls is Sequence or cls is Choice:
                p.children = tuple([current(c) for c in p.children])
            elif cls in _ONE_CHILD_SET:
                p.child = current(p.child)
        if self.root is not None:
            self.root = current(self.root)

    def parse(self, ctx, start=0, pid=None):
        if pid is None:
            if self.root is None:
                raise RuntimeError("No root parser set")
            pid = self.root
        return self.parsers[pid].parse(self, ctx, start)

    def build_grammar(self, builder, lazy=False):
        """common_peg_arena::build_grammar: adds the GBNF of the reachable rules (from the trigger rules when
        ``lazy``) and ``root`` to ``builder`` (a bankml.schema.converter GrammarBuilder).

        A rule is reachable through every child (the parsers that print nothing or something else, lookaheads,
        raw GBNF, schemas, included the rules of their children). One walk of each reachable rule's body
        gives both its GBNF and the rules it reaches; a body that adds rules to ``builder`` (schemas, the
        automata of ``until`` and ``ac``) is walked again when its rule is added, so that the builder sees its
        calls in llama.cpp's order (reachable rules in the order they were made, each body left to right,
        then the root)."""
        parsers, rules = self.parsers, self.rules
        strict = getattr(builder, "strict", False)  # a StrictGrammarBuilder or a ToolArgsBuilder: sources
        literal_gbnf = {}
        # per body walk: the names of the rules it reaches, and whether it adds rules to the builder (then
        # its text is not kept); ``emit``: the builder is called (the second walk), else only noted
        reached = []
        state = [False, False]  # [adds rules, emit]

        def delegates(s):
            return s.style is None and (s.node is None or (s.raw and may_be_string(s.node)))

        def effective(pid):
            while True:
                p = parsers[pid]
                cls = p.__class__
                if cls is Tag or cls is Atomic or (cls is Schema and delegates(p)):
                    pid = p.child
                else:
                    return cls

        def rep(body, lo, hi):
            if lo == 0 and hi == 1:
                return body + "?"
            if lo == 0 and hi == -1:
                return body + "*"
            if lo == 1 and hi == -1:
                return body + "+"
            if hi == -1:
                return body + "{%d,}" % lo
            if lo == hi:
                return body if lo == 1 else body + "{%d}" % lo
            return body + "{%d,%d}" % (lo, hi)

        def reach(pid):
            """Notes the rules reachable from a child that prints nothing of them (first walk only)."""
            if state[1]:
                return
            stack = [pid]
            while stack:
                p = parsers[stack.pop()]
                cls = p.__class__
                if cls is Sequence or cls is Choice:
                    stack.extend(p.children)
                elif cls is Rule or cls is Ref:
                    reached.append(p.name)
                elif cls in _ONE_CHILD_SET:
                    stack.append(p.child)

        def to_gbnf(pid):
            p = parsers[pid]
            cls = p.__class__
            while cls is Tag or cls is Atomic:  # they print as their child
                pid = p.child
                p = parsers[pid]
                cls = p.__class__
            if cls is Sequence or cls is Choice:
                # the children that print as a literal or a rule name are written here (most of them), the
                # others by to_gbnf; ``k``: the class the child prints as (through tags, atomics, schemas)
                s = ""
                seq = cls is Sequence
                for c in p.children:
                    q = parsers[c]
                    k = q.__class__
                    while k is Tag or k is Atomic:
                        q = parsers[q.child]
                        k = q.__class__
                    if k is Literal:
                        g = literal_gbnf.get(q.literal)
                        if g is None:
                            g = literal_gbnf[q.literal] = gbnf_format_literal(
                                q.literal.decode("utf-8", "surrogateescape")
                            )
                    elif k is Rule or k is Ref:
                        g = q.name
                        reached.append(g)
                    else:
                        g = to_gbnf(c)
                        if k is Schema:
                            k = effective(c)
                        if k is Choice or (seq and k is Sequence):
                            g = "(" + g + ")" if g or not seq else g
                    if seq:
                        if not g:
                            continue
                        if s:
                            s += " "
                    elif s:
                        s += " | "
                    s += g
                return s
            if cls is Literal:
                g = literal_gbnf.get(p.literal)
                if g is None:
                    g = literal_gbnf[p.literal] = gbnf_format_literal(p.literal.decode("utf-8", "surrogateescape"))
                return g
            if cls is Rule or cls is Ref:
                reached.append(p.name)
                return p.name
            if cls is Epsilon or cls is Start or cls is End:
                return ""
            if cls is Repetition:
                g = to_gbnf(p.child)
                k = effective(p.child)
                if k is Choice or k is Sequence:
                    g = "(" + g + ")"
                return rep(g, p.min_count, p.max_count)
            if cls is Any:
                return "."
            if cls is Space:
                return "space"
            if cls is Chars:
                return rep(p.pattern, p.min_count, p.max_count)
            if cls is String:
                d = p.delimiter
                return "( [^" + d + '\\\\] | "\\\\" ( [' + d + '\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )*'
            if cls is And or cls is Not:
                reach(p.child)
                return ""
            if cls is Until:
                if not p.delimiters:
                    return ".*"
                state[0] = True
                if not state[1]:
                    return "until"
                return excluding_grammar(builder, "until-%d" % pid, p.delimiters)
            if cls is Schema:
                if delegates(p):
                    return to_gbnf(p.child)
                reach(p.child)
                state[0] = True
                if not state[1]:
                    return "schema"
                if p.style is not None:
                    return builder.add_schema(p.name, p.node, p.source, p.style)
                if strict:
                    return builder.add_schema(p.name, p.node, p.source)
                return builder.add_schema(p.name, p.node)
            if cls is Gbnf:
                reach(p.child)
                return p.grammar
            if cls is Ac:
                reach(p.child)
                state[0] = True
                if not state[1]:
                    return "ac"
                return including_grammar(builder, "ac-%d" % pid, p.delimiters)
            raise TypeError(cls.__name__)

        try:
            # the first walk: from the root (or the trigger rules), each reachable rule's body once
            texts = {}  # rule name -> its GBNF (None: walked again when added)
            if lazy:
                pending = [p.name for p in map(parsers.__getitem__, rules.values()) if p.trigger]
                root_text = None
            else:
                pending = []
                if self.root is not None:
                    root = parsers[self.root]
                    if root.__class__ is Rule or root.__class__ is Ref:
                        pending.append(root.name)
                    root_text = to_gbnf(self.root)
                    if state[0]:
                        root_text = None
                    pending += reached
            while pending:
                name = pending.pop()
                if name in texts:
                    continue
                rid = rules.get(name)
                if rid is None:
                    raise RuntimeError("Rule not found: " + name)
                known = parsers[rid].gbnf
                if known is not None:
                    texts[name] = known[0]
                    pending += known[1]
                    continue
                reached.clear()
                state[0] = False
                text = to_gbnf(parsers[rid].child)
                texts[name] = None if state[0] else text
                pending += reached
            # the second walk: the builder's calls, in order
            state[1] = True
            for name, rid in rules.items():
                if name in texts:
                    p = parsers[rid]
                    text = texts[name]
                    builder.add_rule(p.name, to_gbnf(p.child) if text is None else text)
            if lazy:
                names = sorted(parsers[rid].name for rid in rules.values() if parsers[rid].trigger)
                builder.add_rule("root", " | ".join(names))
            elif self.root is not None:
                builder.add_rule("root", to_gbnf(self.root) if root_text is None else root_text)
        finally:
            to_gbnf = None  # a recursive closure is a cycle: freed now, not by the collector


# -- GBNF of an Aho-Corasick automaton (gbnf_ac_grammar) -----------------------------------------------------


def _escape_class_char(c):
    if c in (0x2D, 0x5D, 0x5B, 0x5C):
        return "\\" + chr(c)
    if c == 10:
        return "\\n"
    if c == 9:
        return "\\t"
    if c == 13:
        return "\\r"
    if 0x20 <= c <= 0x7E:
        return chr(c)
    if c <= 0xFF:
        return "\\x%02X" % c
    if c <= 0xFFFF:
        return "\\u%04X" % c
    return "\\U%08X" % c


def _char_class(chars, negate):
    return ("[^" if negate else "[") + "".join(_escape_class_char(c) for c in chars) + "]"


def _ac_grammar(builder, prefix, strings, build_rule):
    ac = AhoCorasick(strings)

    def state_name(s):
        return prefix if s == 0 else "%s-%02d" % (prefix, s)

    for q in range(ac.num_states()):
        if ac.is_terminal(q):
            continue
        buckets, completing, specific = {}, [], []
        for c in ac.alphabet:
            d = ac.next(q, c)
            if ac.is_terminal(d):
                completing.append(c)
                specific.append(c)
            elif d != 0:
                buckets.setdefault(d, []).append(c)
                specific.append(c)
        builder.add_rule(state_name(q), build_rule(completing, sorted(buckets.items()), specific, state_name))
    if ac.is_terminal(0):
        builder.add_rule(prefix, "|")
    return state_name(0)


def excluding_grammar(builder, prefix, strings):
    """gbnf_excluding_grammar: strings that contain none of ``strings``."""

    def rule(completing, buckets, specific, name):
        rhs = "|"
        for d, chars in buckets:
            rhs += " " + _char_class(chars, False) + " " + name(d) + " |"
        return rhs + " " + _char_class(specific, True) + " " + name(0)

    return _ac_grammar(builder, prefix, strings, rule)


def including_grammar(builder, prefix, strings):
    """gbnf_including_grammar: everything up to and including the first of ``strings``."""

    def rule(completing, buckets, specific, name):
        alts = [_char_class(completing, False)] if completing else []
        alts += [_char_class(chars, False) + " " + name(d) for d, chars in buckets]
        alts.append(_char_class(specific, True) + " " + name(0))
        return " | ".join(alts)

    return _ac_grammar(builder, prefix, strings, rule)
