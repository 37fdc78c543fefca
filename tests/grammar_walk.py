"""Random complete texts of a grammar, for tests that judge every text a grammar lets through (the canonical style
of strict tool arguments, strict tool-call mode's forced calls): seeded walks over a byte vocabulary, each
step a byte the grammar allows, drawn with a bias toward the bytes that close things (quotes, brackets, tags,
line ends) so that most walks end; a walk ends where the grammar may end and the draw says so, or is dropped
after ``max_bytes``."""

import random

from bankml import Grammar, Rules, Vocab

EOG = 256
BYTES = Vocab([bytes([c]) for c in range(256)] + [b"</s>"], eog_ids=[EOG])
_CLOSING = frozenset(b'"}]>)\n')


def walk(grammar, rng, max_bytes=600, stop=0.5):
    """One walk from ``grammar`` (a Grammar over BYTES, advanced in place): the bytes written, or None when it
    ran past ``max_bytes``."""
    out = bytearray()
    while len(out) <= max_bytes:
        allowed = [int(t) for t in grammar.allowed_ids()]
        if not allowed:
            return None
        if EOG in allowed and (len(allowed) == 1 or rng.random() < stop):
            return bytes(out)
        # the bytes of valid UTF-8 text, what a tokenizer's pieces hold (llama.cpp's grammar is looser: it takes
        # 0xF5-0xFF as lead bytes, and a lead byte where a continuation byte is due)
        lo, hi = _next_range(out)
        allowed = [t for t in allowed if t != EOG and lo <= t <= hi and not (hi == 0xF4 and 0x80 <= t <= 0xC1)]
        if not allowed:
            return None
        closing = [t for t in allowed if t in _CLOSING]
        # once long, mostly the closing bytes; plain ASCII before the rest (tags are ASCII)
        if closing and rng.random() < (0.9 if len(out) > max_bytes // 3 else 0.4):
            t = rng.choice(closing)
        else:
            ascii_ = [t for t in allowed if t < 0x80]
            t = rng.choice(ascii_ if ascii_ and rng.random() < 0.9 else allowed)
        grammar.accept(t)
        out.append(t)
    return None


def _next_range(out):
    """The range of bytes valid UTF-8 allows after ``out`` (0x00-0xF4 at a character's start, less 0x80-0xC1)."""
    i = len(out) - 1
    while i >= 0 and 0x80 <= out[i] <= 0xBF and len(out) - i < 4:
        i -= 1
    if i < 0 or out[i] < 0x80:
        return 0x00, 0xF4
    lead, seen = out[i], len(out) - i - 1
    need = 1 if lead < 0xE0 else 2 if lead < 0xF0 else 3
    if seen >= need:
        return 0x00, 0xF4
    if seen == 0:
        return {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))
    return 0x80, 0xBF


def random_texts(gbnf, n, seed=0, prefix=b"", max_bytes=600, tries=None):
    """Up to ``n`` complete texts of the grammar text ``gbnf`` (after ``prefix``, fed first), from at most
    ``tries`` walks (default 4n)."""
    rules = Rules.parse(gbnf, vocab=BYTES)
    rng = random.Random(seed)
    texts = []
    for _ in range(tries or 4 * n):
        g = Grammar(rules, BYTES)
        if prefix:
            g.accept_bytes(prefix)
        text = walk(g, rng, max_bytes)
        if text is not None:
            texts.append(text)
            if len(texts) >= n:
                break
    return texts
