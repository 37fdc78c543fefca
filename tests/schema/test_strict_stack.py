"""The strict compiler and its string languages are compiled by Cython, where recursion runs on the C stack and
Python's recursion limit does not bound it (``bankml.schema._cstack``). These tests hold that:

* every recursion of the package ``bankml.schema.strict`` (its ``lang`` included) passes through a function that
  checks the C stack first, or is one of the few bounded ones named here (read from the sources with ``ast``, one
  call graph over all the package's modules, by name, which over-approximates: a name calls every function of that
  name, a table's name every function it holds), and the check fails when a recursive function forgets its check;
* its modules stay small: none over 700 lines, no function over 80 (STYLE.md 3a);
* hostile schemas that recurse deep (a long ``$ref`` chain, a deep ``const``, a long excluded key, deeply
  nested pattern groups, deep ``not``) end in a SchemaError or a grammar, never a crash or a hang, in a child
  process under ``tests/bounded.py``'s hang guard and memory limit, in its main thread and in a thread with a
  small stack (where the compiled conversion is done again in a thread of its own with a large stack).
"""

import ast
import collections
import json
import pathlib
import threading

import pytest

from bankml.errors import SchemaError
from bankml.schema import strict as strict_pkg
from bankml.schema.strict import convert, patterns, strict_schema_to_grammar

from ..bounded import run_bounded
from ..graphs import cycles
from .test_schema_strict import accepts, oracle

PACKAGE_DIR = pathlib.Path(strict_pkg.__file__).resolve().parent
SOURCES = sorted(p.relative_to(PACKAGE_DIR).as_posix() for p in PACKAGE_DIR.rglob("*.py"))

# recursions bounded by construction, so they need no check: "module:function" -> why
BOUNDED = {
    "gbnf.py:hex_except_steps.node": "one level per hex digit: 4",
    "lang/gbnf.py:_hex_expr": "one level per hex digit: 4",
    "lang/gbnf.py:_StringRules.body": "inlining stops at _MAX_INLINE levels",
    "lang/gbnf.py:_StringRules.target": "inlining stops at _MAX_INLINE levels",
    "lang/gbnf.py:_StringRules.charset_ref": "a name, not a call back into the walk",
    "lang/gbnf.py:charset_gbnf": "a name shared with string_gbnf's helpers, not a call back",
    "lang/gbnf.py:_charset_alts": "a name shared with string_gbnf's helpers, not a call back",
    "vocabulary.py:Refuse.__init__": "super().__init__, the base class's",
    "lang/bounds.py:LangError.__init__": "super().__init__, the base class's",
    "readers.py:Readers.search": "calls re's search, not itself",
    "readers.py:Readers.regex": "calls re's compile (compile_pattern), not itself",
    "convert.py:compile_schema": "calls _compile, then once more in a thread of its own",
}
BOUNDED_PREFIXES = (
    # the fixed formats build each other once, by name (date-time uses date and time...)
    "lang/automaton.py:Lang.format",
    "lang/formats.py:format_lang",
    "lang/formats.py:build_format_lang",
    "lang/formats.py:_build_format",
    "lang/format_langs.py:duration_lang",
    "lang/format_langs.py:uuid_lang",
)
# the package's limits on size (STYLE.md 3a)
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def _parse_all():
    return {rel: ast.parse((PACKAGE_DIR / rel).read_text()) for rel in SOURCES}


def _call_graph():
    """({"module:function": the functions it may call}, {"module:function": checks the stack first}) over every
    module of the package. A bare name calls the functions of that name in its module (closures included) or
    imported into it, a class's name its ``__init__``; an attribute ``x.name`` every method or module function of
    that name in the package; a module-level table (a dict of handlers, a registry) every function it holds."""
    trees = _parse_all()
    uses, checks = {}, {}
    local = collections.defaultdict(lambda: collections.defaultdict(set))  # module -> bare name -> functions
    anywhere = collections.defaultdict(set)  # name -> methods and module functions of that name
    imports = collections.defaultdict(dict)  # module -> bare name -> (module it comes from, its name there)
    table_names = collections.defaultdict(list)  # table name -> [(module, names in its entries)]

    def names_in(node):
        bare, attrs = set(), set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                bare.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                attrs.add(sub.attr)
        return bare, attrs

    def visit(node, module, scope, in_class):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef):
                full = f"{module}:{scope}.{child.name}" if scope else f"{module}:{child.name}"
                local[module][child.name].add(full)
                if in_class or not scope:
                    anywhere[child.name].add(full)
                uses[full] = (module, *names_in(child))
                body = [s for s in child.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                checks[full] = bool(body) and ast.unparse(body[0]) == "_check_stack()"
                visit(child, module, full.split(":", 1)[1], False)
            elif isinstance(child, ast.ClassDef):
                local[module][child.name].add(f"{module}:{child.name}.__init__")
                visit(child, module, child.name, True)
            else:
                visit(child, module, scope, in_class)

    for rel, tree in trees.items():
        visit(tree, rel, "", False)
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("bankml.schema.strict"):
                source = stmt.module[len("bankml.schema.strict") :].lstrip(".").replace(".", "/")
                for alias in stmt.names:
                    imports[rel][alias.asname or alias.name] = (source, alias.name)
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    name = target.value if isinstance(target, ast.Subscript) else target
                    if isinstance(name, ast.Name):
                        table_names[name.id].append((rel, names_in(stmt.value)))

    def resolve(module, bare, attrs, seen=()):
        out = set()
        for n in bare:
            out |= local[module].get(n, set())
            if n in imports[module]:
                source, name = imports[module][n]
                for candidate in (source + ".py", source + "/__init__.py"):
                    out |= local[candidate].get(name, set()) if candidate in trees else set()
            if n in table_names and n not in seen:
                for where, (tb, ta) in table_names[n]:
                    out |= resolve(where, tb, ta, (*seen, n))
        for n in attrs:
            out |= anywhere.get(n, set())
        return out

    graph = {f: {g for g in resolve(*u) if g in uses} for f, u in uses.items()}
    return graph, checks


def _unchecked(graph, checks):
    """The graph of the functions that neither check the stack nor are exempt: a cycle there is a recursion
    no check bounds."""
    exempt = set(BOUNDED) | {f for f in graph if f.startswith(BOUNDED_PREFIXES)}
    free = {f for f in graph if not checks[f] and f not in exempt}
    return {f: {g for g in graph[f] if g in free} for f in free}


def test_every_recursion_checks_the_stack():
    graph, checks = _call_graph()
    assert not set(BOUNDED) - set(graph), "BOUNDED names a function that is gone"
    # a checking or exempt function breaks every cycle through it
    assert cycles(_unchecked(graph, checks)) == []
    assert sum(checks.values()) >= 10


def test_call_graph_finds_recursion():
    """The check above can fail: without the stack checks, the compiler's recursions are found, and a recursive
    function that forgot its check leaves a cycle."""
    graph, checks = _call_graph()
    found = cycles(graph)
    assert any("compiler.py:Compiler.rule" in c for c in found)
    assert any("strings.py:_KeyTrie.node" in c for c in found)
    assert any("lang/regex.py:_RegexBuilder.item" in c for c in found)
    for forgetful in (
        "compiler.py:Compiler.rule",
        "terms.py:Terms._expand",
        "negation.py:Negation._negate",
        "consts.py:Consts.value_expr",
        "strings.py:_KeyTrie.node",
        "objects.py:_SchemaOrder.seq",
        "lang/regex.py:_RegexBuilder.item",
        "values.py:equal",
    ):
        assert checks[forgetful], forgetful
        assert cycles(_unchecked(graph, {**checks, forgetful: False})), forgetful


def test_modules_and_functions_stay_small():
    """No module of the package over MAX_MODULE_LINES lines, no function over MAX_FUNCTION_LINES."""
    too_long = []
    for rel, tree in _parse_all().items():
        lines = len((PACKAGE_DIR / rel).read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{rel}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    too_long.append(f"{rel}:{node.lineno} {node.name}: {node.end_lineno - start + 1} lines")
    assert not too_long, "\n".join(too_long)


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
    """A chain of 150 references converts compiled, and in a small thread, past the compiled recursion's reach
    there, done again in a thread of its own with a large stack: the grammar's verdicts are jsonschema's either
    way. Longer chains are refused by the nesting bound, quickly (from source, by the process's recursion limit
    first: the conversion does not raise it)."""
    schema = _ref_chain(150)
    reruns = []
    real = convert.run_with_stack

    def counted(fn, stack):
        reruns.append(threading.current_thread().name)
        return real(fn, stack)

    monkeypatch.setattr(convert, "run_with_stack", counted)
    for small in (False, True):
        got = _in_thread(lambda: strict_schema_to_grammar(schema)) if small else strict_schema_to_grammar(schema)
        for text in ("5", '"x"', "5.5", "-12"):
            assert accepts(got, text) is oracle(schema, json.loads(text)), (small, text)
        if convert.COMPILED:
            # the main thread's conversion stays in it; the small thread's is done again with room
            assert len(reruns) == (1 if small else 0), reruns
    with pytest.raises(SchemaError) as e:
        strict_schema_to_grammar(_ref_chain(3000))
    assert e.value.keyword == ("SchemaLimits.max_depth" if convert.COMPILED else "SchemaLimits")


@pytest.mark.parametrize("n", [3000, 100000])
def test_pattern_nesting_is_refused_not_crashed(n):
    """Nested groups in a 512 KB thread, in a child under the hang guard: a LangError, never a crash."""
    out = run_bounded(
        f"""
        from bankml.schema.strict.lang import Lang, LangError
        from tests.schema.test_strict_stack import _in_thread
        try:
            _in_thread(lambda: Lang.regex("(" * {n} + "a" + ")" * {n}))
        except LangError as e:
            print(e)
        """
    )
    assert "nests too deeply" in out or "re rejects" in out, out


def test_conversions_leave_no_cyclic_garbage():
    """The recursive closures (array items, unique items, const objects, contains) are let go when their walk ends,
    and the compiler's parts, which refer to each other, when the conversion ends: a conversion's tables are freed
    by reference counting, not left for the cyclic collector (whose pass over them cost a fifth of a Kubernetes
    schema's conversion)."""
    import gc

    from bankml.schema.strict import gbnf

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
            patterns.LANG_CACHE.clear()
            patterns.GBNF_CACHE.clear()
            gbnf._HEX_STEPS.clear()
            convert(schema)
            # the youngest generation holds everything the conversion made (the collector is off, nothing was
            # promoted): collecting it alone finds the conversion's cycles without walking the whole process
            assert gc.collect(0) == 0, schema
    finally:
        if was:
            gc.enable()
