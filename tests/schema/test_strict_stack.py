"""The strict compiler and its string languages are compiled by Cython, where recursion runs on the C stack and
Python's recursion limit does not bound it (``bankml.schema._cstack``). These tests hold that:

* every recursion of ``strict.py`` and ``strict_lang.py`` passes through a function that checks the C stack
  first, or is one of the few bounded ones named here (read from the sources with ``ast``, a call graph by
  name, which over-approximates: a name calls every function of that name);
* hostile schemas that recurse deep (a long ``$ref`` chain, a deep ``const``, a long excluded key, deeply
  nested pattern groups, deep ``not``) end in a SchemaError or a grammar, never a crash or a hang, in a child
  process under ``tests/bounded.py``'s hang guard and memory limit, in its main thread and in a thread with a
  small stack.
"""

import ast
import collections
import json
import pathlib
import threading

import pytest

from bankml.errors import SchemaError
from bankml.schema import strict as strict_mod
from bankml.schema.strict import strict_schema_to_grammar

from ..bounded import run_bounded
from ..graphs import cycles
from .test_schema_strict import accepts, oracle

SCHEMA_DIR = pathlib.Path(strict_mod.__file__).resolve().parent
SOURCES = ("strict.py", "strict_lang.py")

# recursions bounded by construction, so they need no check: (file, function) -> why
BOUNDED = {
    ("strict.py", "_hex_except_steps.node"): "one level per hex digit: 4",
    ("strict_lang.py", "_hex_expr"): "one level per hex digit: 4",
    ("strict_lang.py", "string_gbnf.body"): "inlining stops at _MAX_INLINE levels",
    ("strict_lang.py", "string_gbnf.target"): "inlining stops at _MAX_INLINE levels",
    ("strict_lang.py", "string_gbnf.charset_ref"): "a name, not a call back into the walk",
    ("strict_lang.py", "_charset_gbnf"): "a name shared with string_gbnf's helpers, not a call back",
    ("strict_lang.py", "_charset_alts"): "a name shared with string_gbnf's helpers, not a call back",
    ("strict.py", "_Refuse.__init__"): "super().__init__, the base class's",
    ("strict_lang.py", "LangError.__init__"): "super().__init__, the base class's",
    ("strict.py", "_Compiler.search"): "calls re's search, not itself",
    ("strict.py", "_compile"): "calls the plain-Python module's _compile, once",
}
BOUNDED_PREFIXES = {
    # the fixed formats build each other once, by name (date-time uses date and time...)
    ("strict_lang.py", "Lang.format"),
    ("strict_lang.py", "_build_format"),
    ("strict_lang.py", "_format_lang"),
    ("strict_lang.py", "build_format_lang"),
    ("strict_lang.py", "_duration_lang"),
    ("strict_lang.py", "_uuid_lang"),
}


def _call_graph(filename):
    """({qualified function: names it uses}, {qualified function: checks the stack first})."""
    tree = ast.parse((SCHEMA_DIR / filename).read_text())
    uses, checks, by_name = {}, {}, collections.defaultdict(set)

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef):
                full = f"{scope}.{child.name}" if scope else child.name
                by_name[child.name].add(full)
                names = set()
                for sub in ast.walk(child):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute):
                        names.add(sub.attr)
                uses[full] = names
                body = [s for s in child.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                checks[full] = bool(body) and ast.unparse(body[0]) == "_check_stack()"
                visit(child, full)
            elif isinstance(child, ast.ClassDef):
                visit(child, child.name)
            else:
                visit(child, scope)

    visit(tree, "")
    graph = {f: {g for n in names for g in by_name.get(n, ())} for f, names in uses.items()}
    return graph, checks


@pytest.mark.parametrize("filename", SOURCES)
def test_every_recursion_checks_the_stack(filename):
    graph, checks = _call_graph(filename)
    exempt = {f for (file, f) in BOUNDED if file == filename} | {
        f for (file, f) in BOUNDED_PREFIXES if file == filename
    }
    # a checking or exempt function breaks every cycle through it
    rest = {
        f: {g for g in gs if not checks[g] and g not in exempt}
        for f, gs in graph.items()
        if not checks[f] and f not in exempt
    }
    assert cycles(rest) == []
    assert any(checks.values())


def test_call_graph_finds_recursion():
    """The check above can fail: without the stack checks, strict.py's compiler recursion is found."""
    graph, _ = _call_graph("strict.py")
    found = cycles(graph)
    assert any("_Compiler.rule" in c for c in found)
    assert any("_Compiler.excluding_string.node" in c for c in found)


def _ref_chain(n):
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}]} for i in range(n)}
    defs[f"d{n}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def _deep_const(n):
    v = 1
    for _ in range(n):
        v = [v]
    return {"const": v}


def _deep_not(n):
    s = {"type": "integer"}
    for _ in range(n):
        s = {"not": s}
    return s


HOSTILE = {
    "ref chain": lambda n: _ref_chain(n),
    "const": lambda n: _deep_const(n),
    "not": lambda n: _deep_not(n),
    "excluded key": lambda n: {"type": "object", "properties": {"k" * n: {"type": "integer"}}},
    "pattern groups": lambda n: {"type": "string", "pattern": "(" * n + "a" + ")" * n},
}


def _convert(schema):
    try:
        return strict_schema_to_grammar(schema)
    except SchemaError as e:
        assert e.keyword and e.pointer
        return e


def _outcomes(kind):
    """What converting HOSTILE[kind] at each depth gives, in the main thread and in a 512 KB thread: "grammar",
    "refused" (a SchemaError naming keyword and pointer) or the unexpected exception's name."""
    out = {}
    for n, small in ((50, False), (3000, False), (60000, False), (3000, True)):
        schema = HOSTILE[kind](n)
        try:
            got = _in_thread(lambda: _convert(schema)) if small else _convert(schema)
        except Exception as e:  # reported, and the test fails on it
            got = e
        label = "grammar" if isinstance(got, str) else "refused" if isinstance(got, SchemaError) else repr(got)
        out["%d%s" % (n, " small" if small else "")] = label
    return out


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_deep_schemas_end_cleanly(kind):
    """In a child process under the hang guard and memory limit (a crash or a hang fails the test, not the run):
    every depth ends in a grammar or a refusal, in the main thread and in a thread of a 512 KB stack (where the
    compiled recursion hands over to plain Python, or refuses, before the stack runs out)."""
    got = json.loads(
        run_bounded(
            "import json\nfrom tests.schema.test_strict_stack import _outcomes\nprint(json.dumps(_outcomes(%r)))" % kind
        )
    )
    assert set(got.values()) <= {"grammar", "refused"}, got
    if kind != "const":
        assert got["50"] == "grammar", got  # shallow: compiled, not refused


def _in_thread(fn, stack=512 * 1024):
    results = []

    def run():
        try:
            results.append(fn())
        except Exception as e:  # handed to the caller
            results.append(e)

    old = threading.stack_size()
    threading.stack_size(stack)
    try:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    assert len(results) == 1
    if isinstance(results[0], Exception) and not isinstance(results[0], SchemaError):
        raise results[0]
    return results[0]


def test_a_deep_chain_gives_the_exact_language(monkeypatch):
    """A chain of 150 references converts compiled, and in a small thread as plain Python past the compiled
    recursion's reach: the grammar's verdicts are jsonschema's either way. Longer chains are refused by the
    nesting bound, quickly."""
    schema = _ref_chain(150)
    reruns = []
    plain = strict_mod._python_module

    def counted():
        reruns.append(threading.current_thread().name)
        return plain()

    monkeypatch.setattr(strict_mod, "_python_module", counted)
    for small in (False, True):
        got = _in_thread(lambda: strict_schema_to_grammar(schema)) if small else strict_schema_to_grammar(schema)
        for text in ("5", '"x"', "5.5", "-12"):
            assert accepts(got, text) is oracle(schema, json.loads(text)), (small, text)
        if strict_mod._COMPILED:
            # the main thread's conversion stays compiled; the small thread's is redone as plain Python
            assert len(reruns) == (1 if small else 0), reruns
    with pytest.raises(SchemaError) as e:
        strict_schema_to_grammar(_ref_chain(3000))
    assert e.value.keyword == "SchemaLimits.max_depth"


@pytest.mark.parametrize("n", [3000, 100000])
def test_pattern_nesting_is_refused_not_crashed(n):
    """Nested groups in a 512 KB thread, in a child under the hang guard: a LangError, never a crash."""
    out = run_bounded(
        f"""
        from bankml.schema.strict_lang import Lang, LangError
        from tests.schema.test_strict_stack import _in_thread
        try:
            _in_thread(lambda: Lang.regex("(" * {n} + "a" + ")" * {n}))
        except LangError as e:
            print(e)
        """
    )
    assert "nests too deeply" in out or "re rejects" in out, out


def test_conversions_leave_no_cyclic_garbage():
    """The recursive closures (key tries, array items, any-order objects, unique items, const objects, contains,
    a pattern's rules) are let go when their walk ends: a conversion's tables are freed by reference counting,
    not left for the cyclic collector (whose pass over them cost a fifth of a Kubernetes schema's conversion)."""
    import gc

    schemas = [
        {"type": "object", "properties": {k: {"type": "string"} for k in ("alpha", "beta", "gamma")}},
        {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(12)}, "required": ["k1"]},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": {"type": "boolean"}},
        {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True},
        {"const": {"a": 1, "b": [2, 3]}},
        {"type": "array", "contains": {"type": "integer"}, "minContains": 2, "maxItems": 4},
        {"type": "string", "pattern": "^[a-z]+-[0-9]{2,4}$", "maxLength": 12},
    ]
    # past every key order (13 required keys): the schema's order, with lenient=["properties"]
    big = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(14)}}
    big["required"] = [f"p{i}" for i in range(13)]
    lenient = {id(big): ["properties"]}
    schemas.append(big)

    def convert(schema):
        return strict_schema_to_grammar(schema, lenient=lenient.get(id(schema), ()))

    for schema in schemas:
        convert(schema)  # the process caches filled first
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for schema in schemas:
            strict_mod._LANG_CACHE.clear()
            strict_mod._GBNF_CACHE.clear()
            strict_mod._HEX_STEPS.clear()
            convert(schema)
            assert gc.collect() == 0, schema
    finally:
        if was:
            gc.enable()
