"""The package layout holds: imports point down the packages (serve, integrations -> chat -> schema, sampling ->
engine), no module imports itself back through others, and bankml's own modules are imported at the top of a
module, never inside a function (the one exception: the server extra, imported by ``bankml serve`` only).

Read from the sources (Python's ``ast`` for ``.py``; the import lines of the Cython files), nothing imported."""

import ast
import pathlib
import re

import pytest

from .graphs import cycles

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bankml"

# a package may import only packages of a lower rank (errors is the floor every package may use)
RANK = {
    "errors": 0,
    "engine": 1,
    "schema": 2,
    "sampling": 2,
    "chat": 3,
    "serve": 4,
    "integrations": 4,
    "cli": 5,
    "__main__": 6,
}
# function-level imports of bankml's own modules that are allowed: (module, imported module, why)
LAZY_ALLOWED = {("bankml.cli.serve", "bankml.serve.app")}  # the server extra (Starlette, uvicorn) is optional
CYTHON_IMPORT = re.compile(
    r"^([ \t]*)(?:from\s+(bankml(?:\.\w+)*)\s+c?import\s+(\([^)]*\)|[^\n#]*)|import\s+(bankml(?:\.\w+)*))", re.M
)


def module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path):
    """[(imported module, at top level)] of one source file; ``from bankml.x import y`` names ``bankml.x.y``
    when ``y`` is a module of the package."""
    out = []
    if path.suffix == ".py":
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bankml":
                assert node.level == 0, f"{path}: relative import"
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    target = sub if _is_module(sub) else node.module
                    out.append((target, id(node) in top))
            elif isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "bankml":
                        out.append((alias.name, id(node) in top))
    else:
        for m in CYTHON_IMPORT.finditer(path.read_text()):
            if m.group(4):
                out.append((m.group(4), m.group(1) == ""))
                continue
            for name in (n.strip().split(" ")[0] for n in m.group(3).strip("()").split(",")):
                sub = f"{m.group(2)}.{name}"
                out.append((sub if name and _is_module(sub) else m.group(2), m.group(1) == ""))
    return out


def _is_module(dotted):
    base = ROOT / dotted.replace(".", "/")
    return base.is_dir() or any(base.with_suffix(s).exists() for s in (".py", ".pyx", ".pxd"))


def sources():
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".pyx", ".pxd", ".pxi") and p.is_file())


def package_of(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def owner_module(path):
    """The module a .pxi/.pxd belongs to (its .pyx's), for the import graph."""
    return module_name(
        path.with_suffix(".pyx") if path.suffix in (".pxd",) and path.with_suffix(".pyx").exists() else path
    )


GRAPH = {}
for _p in sources():
    GRAPH.setdefault(owner_module(_p), []).extend((_p, t, top) for t, top in imports_of(_p))


def test_every_package_is_ranked():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert packages | modules <= set(RANK), sorted((packages | modules) - set(RANK))


def test_imports_point_down():
    wrong = []
    for module, edges in GRAPH.items():
        src = package_of(module)
        if src is None:  # bankml/__init__.py: the package's face re-exports from every package
            continue
        for path, target, _ in edges:
            dst = package_of(target)
            if target == "bankml" or dst is None:
                wrong.append(f"{path.relative_to(ROOT)} imports the package's face ({target})")
            elif dst != src and RANK[dst] >= RANK[src]:
                wrong.append(f"{path.relative_to(ROOT)} ({src}) imports {target} ({dst})")
    assert not wrong, "\n".join(wrong)


def test_no_function_level_imports():
    lazy = [
        f"{path.relative_to(ROOT)}: {target}"
        for module, edges in GRAPH.items()
        for path, target, top in edges
        if not top and (module, target) not in LAZY_ALLOWED
    ]
    assert not lazy, "\n".join(lazy)


def test_no_import_circles():
    graph = {m: {t for _, t, top in edges if t != m and t in GRAPH} for m, edges in GRAPH.items()}
    circles = cycles(graph)
    assert not circles, circles


@pytest.mark.parametrize("package", sorted(n for n, r in RANK.items() if (PACKAGE / n / "__init__.py").exists()))
def test_package_states_what_it_owns(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text())) or ""
    assert "Owns" in doc or "owns" in doc, package
    assert "Must not import" in doc, package
