"""Build the Cython extensions; every compiler directive lives here.

BANKML_DEBUG=1 turns bounds checks, wraparound checks and assertions back on
(the release build has them off) and builds with -O0 -g for debugging.
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("BANKML_DEBUG", "") not in ("", "0")

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}
compile_args = ["-std=c++17"] + (["-O0", "-g"] if DEBUG else ["-O3"])
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if not DEBUG:
    macros.append(("CYTHON_WITHOUT_ASSERTIONS", None))


def extension(name):
    return Extension(
        f"bankml.{name}",
        [f"bankml/{name}.pyx"],
        language="c++",
        include_dirs=[numpy.get_include()],
        extra_compile_args=compile_args,
        define_macros=macros,
    )


setup(
    ext_modules=cythonize(
        [extension("_trie"), extension("_grammar"), extension("_hash")],
        compiler_directives=directives,
        annotate=False,
    ),
)
