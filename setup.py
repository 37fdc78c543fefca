"""Build the Cython extensions; every compiler directive lives here.

BANKML_DEBUG=1 turns bounds checks, wraparound checks and assertions back on
(the release build has them off) and builds with -O0 -g for debugging.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("BANKML_DEBUG", "") not in ("", "0")
# Cython and the C++ compiler run on every core this process may use
JOBS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}
# -g0 in the release build: Python's own CFLAGS carry -g, and the debug information changes no instruction but
# costs a third of each file's compile time (measured on strict/objects.cpp: 16.4 s of CPU with -g, 11.0 with -g0)
compile_args = ["-std=c++17"] + (["-O0", "-g"] if DEBUG else ["-O3", "-g0"])
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if not DEBUG:
    macros.append(("CYTHON_WITHOUT_ASSERTIONS", None))


def extension(name, extra_args=(), source=None):
    """The extension module ``bankml.<name>`` (a dotted path inside the package) from its .pyx (or ``source``)."""
    return Extension(
        f"bankml.{name}",
        [source or f"bankml/{name.replace('.', '/')}.pyx"],
        language="c++",
        include_dirs=[numpy.get_include()],
        extra_compile_args=compile_args + list(extra_args),
        define_macros=macros,
    )


# bankml/schema/{limits,jsontext,reader,converter}.py are plain Python, compiled as they are for speed (each .pxd
# declares its cdef classes and cpdef functions, cimported across the four; each file's own directive line keeps
# Python's indexing, which it relies on); Python imports an extension before the .py beside it. The strict
# compiler's modules (the package bankml/schema/strict and its lang/, their __init__ files left as Python) are
# compiled the same way with no .pxd; their recursion asks _cstack for stack.
STRICT = (
    "vocabulary",
    "bounds",
    "dialect",
    "values",
    "gbnf",
    "document",
    "rules",
    "readers",
    "merge",
    "terms",
    "negation",
    "oneof",
    "unevaluated",
    "validate",
    "patterns",
    "numeric",
    "numbers",
    "strings",
    "consts",
    "arrays",
    "keys",
    "objects",
    "compiler",
    "convert",
)
STRICT_LANG = (
    "bounds",
    "charsets",
    "minimize",
    "automaton",
    "algebra",
    "ecma",
    "regex",
    "format_langs",
    "formats",
    "gbnf",
)
SCHEMA = (
    [
        extension(f"schema.{name}", source=f"bankml/schema/{name}.py")
        for name in ("limits", "jsontext", "reader", "converter")
    ]
    + [extension(f"schema.strict.{name}", source=f"bankml/schema/strict/{name}.py") for name in STRICT]
    + [extension(f"schema.strict.lang.{name}", source=f"bankml/schema/strict/lang/{name}.py") for name in STRICT_LANG]
    + [extension("schema._cstack")]
)

# Functions start on a 64-byte line in the two hot extensions: a hot loop's speed depends on where its code
# falls, so code added elsewhere in the module must not move it. Measured: Sampler.set_logits, the same
# instructions 32 bytes further on, took a third longer (about 140 -> 185 us a draw of top-k 1 on 151,936
# logits); the engine's cold json.gbnf walk (bench/ab_engine.py, p50) moved 1.06-1.21x between two builds whose
# code differs only in declaration order, and 1.02x with the alignment. It changes no result, only the speed.
ALIGN_ARGS = [] if DEBUG else ["-falign-functions=64"]
# GCC 12's predictive commoning makes std::partial_sort (the sampler's top-k) about 1.8x slower at -O3;
# turning it off changes no result (the oracle draws stay identical), only the speed.
SAMPLER_ARGS = [] if DEBUG else ["-fno-predictive-commoning"] + ALIGN_ARGS


setup(
    ext_modules=cythonize(
        [
            extension("engine._trie"),
            extension("engine._rules"),
            extension("engine._grammar", ALIGN_ARGS),
            extension("engine._hash"),
            extension("sampling._sampler", SAMPLER_ARGS),
            extension("serve._cpu"),
            *SCHEMA,
        ],
        compiler_directives=directives,
        annotate=False,
        nthreads=JOBS,
    ),
    # the extensions compile side by side (pip install -e runs build_ext with these options)
    options={"build_ext": {"parallel": JOBS}},
)
