"""Test support: builds the pinned llama-server (llama.cpp of llama-cpp-python 0.3.36) as an oracle.

Run by hand: ``python -m tests.oracle.build_server`` builds it (once per machine) and prints the binary's path;
``from tests.oracle.build_server import build_server`` gives the same path. Progress goes to stderr.

How: only the server's own translation units are compiled, from the sdist's ``vendor/llama.cpp/tools/server/``
(the ``server-context`` and ``llama-server-impl`` targets of its ``CMakeLists.txt``, and ``main.cpp``), plus
the ``ui.cpp`` that ``tools/ui/CMakeLists.txt`` generates, here with no assets (what a build without npm or the
prebuilt-UI download gives: the web UI is absent, the API is whole). Everything else is LINKED from the shared
libraries that llama-cpp-python installed: libllama, libggml* and libmtmd from ``llama_cpp/lib`` (the copies that
``llama_cpp`` itself loads), libllama-common from ``site-packages/lib`` (``llama_cpp/lib`` has none; the libraries
present in both directories are byte-identical, which the build checks), through an RPATH naming both, in that
order. cpp-httplib is not compiled either: libllama-common already contains it, built with
``CPPHTTPLIB_OPENSSL_SUPPORT``, so the server is compiled with that definition (and ``LLAMA_SUBPROCESS``,
the other public definition of libllama-common on Linux) to see the same class layouts. The server therefore
runs the very ggml kernels, sampler and grammar code that llama-cpp-python runs.

The binary and its objects live outside the repository, in ``$BANKML_ORACLE_CACHE`` (default
``~/.cache/bankml-oracle``), under ``llama-server-HASH/``, HASH covering the sources, the libraries, the flags
and the compiler; the sources are extracted from the sdist tarball that ``build_converter.sdist_tarball``
provides (``$BANKML_LLAMA_SDIST`` may name an unpacked sdist instead). ``$BANKML_JOBS`` sets the number of
parallel compiles (default: all cores).

llama.cpp is under the MIT License, Copyright (c) 2023-2026 The ggml authors: the generated ``ui.cpp``/``ui.h``
follow its ``tools/ui/ui.cpp.in``/``ui.h.in`` and ``scripts/ui-assets.cmake``. Permission is hereby granted,
free of charge, to any person obtaining a copy of this software and associated documentation files (the
"Software"), to deal in the Software without restriction, including without limitation the rights to use, copy,
modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom
the Software is furnished to do so, subject to the following conditions: The above copyright notice and this
permission notice shall be included in all copies or substantial portions of the Software. THE SOFTWARE IS
PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES
OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR
COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""

import concurrent.futures
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import time

from .build_converter import VERSION, OracleUnavailable, cache_dir, libllama_dir, locked, sdist_tarball

# tools/server/CMakeLists.txt: server-context + llama-server-impl + llama-server
SERVER_SOURCES = [
    "server-chat.cpp",
    "server-task.cpp",
    "server-queue.cpp",
    "server-common.cpp",
    "server-context.cpp",
    "server-stream.cpp",
    "server-tools.cpp",
    "server-mcp.cpp",
    "server-schema.cpp",
    "server.cpp",
    "server-http.cpp",
    "server-models.cpp",
    "main.cpp",
]
LIBRARIES = ["llama-common", "mtmd", "llama", "ggml", "ggml-base"]
# public definitions of libllama-common on Linux (LLAMA_SUBPROCESS) and of cpp-httplib as built into it
DEFINES = ["NDEBUG", "LLAMA_SUBPROCESS", "CPPHTTPLIB_OPENSSL_SUPPORT", "LLAMA_SHARED", "GGML_SHARED"]
CXXFLAGS = ["-std=c++17", "-O2", "-pthread", "-w"]

_WANTED = (
    "/vendor/llama.cpp/tools/server/",
    "/vendor/llama.cpp/tools/mtmd/",
    "/vendor/llama.cpp/tools/ui/ui.",
    "/vendor/llama.cpp/common/",
    "/vendor/llama.cpp/include/",
    "/vendor/llama.cpp/ggml/include/",
    "/vendor/llama.cpp/vendor/",
    "/vendor/llama.cpp/LICENSE",
)
_UNWANTED = ("/tools/server/tests/", "/tools/server/bench/")


def _log(msg):
    print("[build_server] " + msg, file=sys.stderr, flush=True)


@locked("sdist-server")
def source_tree(cache=None):
    """The vendor/llama.cpp directory holding the server's sources and every header they include."""
    cache = cache or cache_dir()
    given = os.environ.get("BANKML_LLAMA_SDIST")
    if given and pathlib.Path(given).is_dir():
        return pathlib.Path(given) / "vendor" / "llama.cpp"
    root = cache / "server-src"
    vendor = root / ("llama_cpp_python-" + VERSION) / "vendor" / "llama.cpp"
    if (vendor / "tools" / "server" / "server-context.cpp").exists() and (vendor / ".complete").exists():
        return vendor
    tarball = sdist_tarball(cache)
    _log("extracting the server sources from %s" % tarball)
    with tarfile.open(tarball) as tf:
        members = [
            m for m in tf.getmembers() if any(w in m.name for w in _WANTED) and not any(u in m.name for u in _UNWANTED)
        ]
        tf.extractall(root, members=members, filter="data")
    if not (vendor / "tools" / "server" / "server-context.cpp").exists():
        raise OracleUnavailable("the sdist %s has no vendor/llama.cpp/tools/server/" % tarball)
    (vendor / ".complete").write_text("ok\n")
    return vendor


def _ui_sources(vendor, out):
    """ui.h / ui.cpp as scripts/ui-assets.cmake writes them when there are no UI assets."""
    h = (vendor / "tools" / "ui" / "ui.h.in").read_text()
    h = h.replace("#cmakedefine LLAMA_UI_HAS_ASSETS 1", "/* #undef LLAMA_UI_HAS_ASSETS */")
    h = h.replace("@N_ASSETS@", "0")
    cpp = (vendor / "tools" / "ui" / "ui.cpp.in").read_text()
    cpp = cpp.replace("@ASSET_ARRAYS@", "").replace("@ASSET_TABLE@", "").replace("@N_ASSETS@", "0")
    cpp = cpp.replace("@USE_GZIP@", "false")
    if "@" in h.replace("@brief", "") or "#cmakedefine" in h or "@" in cpp:
        raise OracleUnavailable("unexpected placeholders left in tools/ui/ui.*.in")
    (out / "ui.h").write_text(h)
    (out / "ui.cpp").write_text(cpp)
    return out / "ui.cpp"


def runtime_lib_dirs():
    """[the directory llama-cpp-python loads libllama/libggml from (``llama_cpp/lib``), the directory holding
    libllama-common (``site-packages/lib``)], without repeats: the binary's RPATH, searched in this order."""
    common = libllama_dir()
    import llama_cpp.llama_cpp as bindings

    loaded = pathlib.Path(bindings._lib._name).resolve().parent
    dirs = [loaded] + ([common] if common != loaded else [])
    for name in LIBRARIES[1:]:
        found = [d / ("lib%s.so" % name) for d in dirs if (d / ("lib%s.so" % name)).exists()]
        if len(found) > 1 and len({f.read_bytes() for f in found}) > 1:
            _log("warning: lib%s.so differs between %s" % (name, " and ".join(map(str, dirs))))
    return dirs


def _fingerprint(vendor, lib, compiler):
    h = hashlib.sha256()
    for part in (VERSION, str(lib), compiler, " ".join(CXXFLAGS + DEFINES + LIBRARIES), " ".join(SERVER_SOURCES)):
        h.update(part.encode() + b"\0")
    h.update(subprocess.run([compiler, "--version"], capture_output=True).stdout)
    for sub in ("tools/server", "tools/mtmd", "tools/ui", "common", "include", "ggml/include", "vendor"):
        for path in sorted((vendor / sub).rglob("*")):
            if path.is_file() and path.suffix in (".h", ".hpp", ".cpp", ".c", ".in", ""):
                h.update(str(path.relative_to(vendor)).encode() + b"\0" + path.read_bytes())
    for name in LIBRARIES:
        for d in lib:
            if (d / ("lib%s.so" % name)).exists():
                h.update(str(d).encode() + (d / ("lib%s.so" % name)).read_bytes())
    # this builder's own text: a change in how it builds rebuilds
    h.update(pathlib.Path(__file__).read_bytes())
    return h.hexdigest()[:12]


@locked("llama-server")
def build_server(jobs=None):
    """Path of the llama-server binary (compiled once per cache dir and set of inputs)."""
    lib = runtime_lib_dirs()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if compiler is None:
        raise OracleUnavailable("no C++ compiler (g++ or c++) on PATH")
    vendor = source_tree(cache)
    tag = _fingerprint(vendor, lib, compiler)
    out = cache / ("llama-server-" + tag)
    exe = out / "llama-server"
    if exe.exists():
        return exe
    objdir = out / "obj"
    objdir.mkdir(parents=True, exist_ok=True)
    sources = [vendor / "tools" / "server" / s for s in SERVER_SOURCES] + [_ui_sources(vendor, objdir)]
    includes = [
        objdir,
        vendor / "tools" / "server",
        vendor / "tools" / "mtmd",
        vendor,
        vendor / "common",
        vendor / "include",
        vendor / "ggml" / "include",
        vendor / "vendor",
    ]
    base = [compiler] + CXXFLAGS + ["-D" + d for d in DEFINES]
    for include in includes:
        base += ["-I", str(include)]
    jobs = jobs or int(os.environ.get("BANKML_JOBS", "0")) or os.cpu_count() or 1
    _log("compiling %d translation units with %d jobs into %s" % (len(sources), jobs, out))
    t_start = time.monotonic()

    def compile_one(src):
        obj = objdir / (src.stem + ".o")
        if obj.exists():
            return obj, 0.0
        tmp = obj.with_suffix(".o.%d.tmp" % os.getpid())
        t0 = time.monotonic()
        cmd = base + ["-c", str(src), "-o", str(tmp)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise OracleUnavailable("compiling %s failed:\n%s\n%s" % (src.name, " ".join(cmd), proc.stderr[-6000:]))
        tmp.replace(obj)
        return obj, time.monotonic() - t0

    objects = []
    # the largest units first, so that the two cores finish together
    order = sorted(sources, key=lambda s: -s.stat().st_size)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(compile_one, s): s for s in order}
        for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            obj, secs = fut.result()
            objects.append(obj)
            _log(
                "[%d/%d] %s (%.0f s, %.0f s elapsed)"
                % (done, len(sources), futures[fut].name, secs, time.monotonic() - t_start)
            )
    tmp = out / ("llama-server.%d.tmp" % os.getpid())
    # an RPATH (not RUNPATH), so that the libraries' own dependencies resolve through the same directories:
    # libllama, libggml* and libmtmd from llama_cpp/lib (what llama-cpp-python loads), libllama-common from lib/
    cmd = [compiler, "-pthread", "-o", str(tmp)] + [str(o) for o in sorted(objects)]
    for d in lib:
        cmd += ["-L", str(d)]
    cmd += ["-l" + name for name in LIBRARIES] + ["-lssl", "-lcrypto"]
    cmd += ["-Wl,--disable-new-dtags,-rpath," + ":".join(map(str, lib))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OracleUnavailable("linking llama-server failed:\n%s\n%s" % (" ".join(cmd), proc.stderr[-6000:]))
    tmp.replace(exe)
    _log("built %s in %.0f s" % (exe, time.monotonic() - t_start))
    return exe


if __name__ == "__main__":
    print(build_server())
