"""Test support: builds the pinned llama.cpp's own JSON-schema converter as a tiny program, and talks to it.

The program is compiled at test time, outside the repository (in ``$BANKML_ORACLE_CACHE``, by default
``~/.cache/bankml-oracle/``), against ``lib/libllama-common.so`` that llama-cpp-python 0.3.36 installs under
site-packages, with the headers of the same version's sdist (``pip download --no-deps --no-binary :all:``,
unpacked in the cache dir; ``$BANKML_LLAMA_SDIST`` may name an sdist tarball or an unpacked tree instead).

Protocol: one schema per line of JSON text on stdin; one JSON object per line on stdout:
``{"ok": true, "grammar": HEX, "stderr": HEX}`` or ``{"ok": false, "kind": ..., "error": HEX}``, the texts
hex-encoded so that any bytes survive. ``stderr`` is what llama.cpp printed during the conversion (its
"WARNING: JSON schema conversion was incomplete: ..." line).

Run by hand: ``python -m tests.oracle.build_converter`` builds it and prints the path.
"""

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

VERSION = "0.3.36"

PROGRAM = r"""
// bankml test support: llama.cpp's json_schema_to_grammar(schema, force_gbnf = true), one schema per line.
#include "json-schema-to-grammar.h"
#include "json.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <unistd.h>

static std::string hex(const std::string & s) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char c : s) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

int main() {
    std::string line;
    int saved_stderr = dup(2);
    while (std::getline(std::cin, line)) {
        if (line.rfind("#time ", 0) == 0) {
            // "#time N SCHEMA": N conversions of SCHEMA (parsed once), the mean time in nanoseconds
            size_t sp = line.find(' ', 6);
            long n = std::atol(line.substr(6, sp - 6).c_str());
            common_json schema = common_json::parse(line.substr(sp + 1));
            fflush(stderr);
            FILE * devnull = fopen("/dev/null", "w");
            dup2(fileno(devnull), 2);
            auto t0 = std::chrono::steady_clock::now();
            size_t total = 0;
            for (long k = 0; k < n; k++) {
                try {
                    total += json_schema_to_grammar(schema, true).size();
                } catch (const std::exception &) {
                }
            }
            auto t1 = std::chrono::steady_clock::now();
            fflush(stderr);
            dup2(saved_stderr, 2);
            fclose(devnull);
            double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / (n > 0 ? n : 1);
            std::cout << "{\"ok\":true,\"ns\":" << ns << ",\"chars\":" << total << "}" << std::endl;
            continue;
        }
        FILE * capture = tmpfile();
        fflush(stderr);
        dup2(fileno(capture), 2);
        std::string result;
        try {
            common_json schema;
            try {
                schema = common_json::parse(line);
            } catch (const std::exception & e) {
                throw std::logic_error(std::string("parse: ") + e.what());
            }
            std::string grammar = json_schema_to_grammar(schema, true);
            fflush(stderr);
            std::string err;
            long n = ftell(capture);
            if (n > 0) {
                err.resize(n);
                rewind(capture);
                size_t got = fread(&err[0], 1, n, capture);
                err.resize(got);
            }
            result = "{\"ok\":true,\"grammar\":\"" + hex(grammar) + "\",\"stderr\":\"" + hex(err) + "\"}";
        } catch (const std::invalid_argument & e) {
            result = "{\"ok\":false,\"kind\":\"invalid_argument\",\"error\":\"" + hex(e.what()) + "\"}";
        } catch (const std::runtime_error & e) {
            result = "{\"ok\":false,\"kind\":\"runtime_error\",\"error\":\"" + hex(e.what()) + "\"}";
        } catch (const std::exception & e) {
            result = "{\"ok\":false,\"kind\":\"exception\",\"error\":\"" + hex(e.what()) + "\"}";
        }
        fflush(stderr);
        dup2(saved_stderr, 2);
        fclose(capture);
        std::cout << result << std::endl;
    }
    return 0;
}
"""


class OracleUnavailable(RuntimeError):
    pass


def cache_dir():
    return pathlib.Path(os.environ.get("BANKML_ORACLE_CACHE", pathlib.Path.home() / ".cache" / "bankml-oracle"))


@contextlib.contextmanager
def cache_lock(name):
    """Held while one process builds or unpacks ``name`` in the cache: the test workers (pytest-xdist) and
    the test programs may ask for the same oracle at once; the others wait and then find it built."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / (name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def locked(name):
    """A cache-building function run under ``cache_lock(name)``."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with cache_lock(name):
                return fn(*args, **kwargs)

        return run

    return wrap


def libllama_dir():
    try:
        import llama_cpp
    except ImportError as e:
        raise OracleUnavailable("llama-cpp-python %s is not installed: pip install -e '.[test]'" % VERSION) from e
    version = getattr(llama_cpp, "__version__", None)
    if version != VERSION:
        raise OracleUnavailable("llama-cpp-python %s is installed, the oracle is %s" % (version, VERSION))
    lib = pathlib.Path(llama_cpp.__file__).resolve().parent.parent / "lib"
    if not (lib / "libllama-common.so").exists():
        raise OracleUnavailable("no libllama-common.so in %s" % lib)
    return lib


@locked("sdist-download")
def sdist_tarball(cache):
    """The llama-cpp-python sdist tarball: $BANKML_LLAMA_SDIST, the cache's copy, or a pip download into the cache."""
    given = os.environ.get("BANKML_LLAMA_SDIST")
    if given and pathlib.Path(given).is_file():
        return pathlib.Path(given)
    tarballs = sorted(cache.glob("llama_cpp_python-%s.tar.gz" % VERSION))
    if tarballs:
        return tarballs[0]
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--no-build-isolation",
        "llama-cpp-python==" + VERSION,
        "-d",
        str(cache),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    tarballs = sorted(cache.glob("llama_cpp_python-%s.tar.gz" % VERSION))
    if proc.returncode != 0 or not tarballs:
        raise OracleUnavailable("pip download of the llama-cpp-python %s sdist failed:\n%s" % (VERSION, proc.stderr))
    return tarballs[0]


@locked("programs")
def compile_program(name, program, lib, include_dirs, libraries, salt=""):
    """Build a C++ program against the pinned libraries once per cache dir and program text; its path."""
    cache = cache_dir()
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if compiler is None:
        raise OracleUnavailable("no C++ compiler (g++ or c++) on PATH")
    tag = hashlib.sha256((program + str(lib) + "".join(map(str, include_dirs[:1])) + salt).encode()).hexdigest()[:12]
    exe = cache / ("%s-%s" % (name, tag))
    if exe.exists():
        return exe
    src = cache / ("%s-%s.cpp" % (name, tag))
    src.write_text(program)
    tmp = cache / ("%s-%s.%d.tmp" % (name, tag, os.getpid()))
    # an RPATH (not RUNPATH), so that libllama-common's own dependencies (libllama, libggml) are found too
    cmd = [compiler, "-std=c++17", "-O1", "-o", str(tmp), str(src)]
    for include in include_dirs:
        cmd += ["-I", str(include)]
    cmd += ["-L", str(lib)] + ["-l" + library for library in libraries]
    cmd += ["-Wl,--disable-new-dtags,-rpath," + str(lib)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OracleUnavailable("building %s failed:\n%s\n%s" % (name, " ".join(cmd), proc.stderr))
    tmp.replace(exe)
    return exe


@locked("sdist-common")
def _sdist_tree(cache):
    """The unpacked sdist's vendor/llama.cpp directory."""
    tree = cache / ("llama_cpp_python-" + VERSION)
    vendor = tree / "vendor" / "llama.cpp"
    if (vendor / "common" / "json-schema-to-grammar.h").exists():
        return vendor
    given = os.environ.get("BANKML_LLAMA_SDIST")
    if given and pathlib.Path(given).is_dir():
        return pathlib.Path(given) / "vendor" / "llama.cpp"
    tarball = sdist_tarball(cache)
    with tarfile.open(tarball) as tf:
        members = [
            m
            for m in tf.getmembers()
            if "/vendor/llama.cpp/common/" in m.name or "/vendor/llama.cpp/include/" in m.name
        ]
        tf.extractall(cache, members=members, filter="data")
    if not (vendor / "common" / "json-schema-to-grammar.h").exists():
        raise OracleUnavailable("the sdist %s has no vendor/llama.cpp/common/json-schema-to-grammar.h" % tarball)
    return vendor


def build():
    """Path of the built converter program (built once per cache dir and program text)."""
    lib = libllama_dir()
    vendor = _sdist_tree(cache_dir())
    return compile_program(
        "json-schema-to-grammar", PROGRAM, lib, [vendor / "common", vendor / "include"], ["llama-common"], salt="rpath"
    )


class Converter:
    """The converter program, kept running; convert() sends one schema and reads one result."""

    def __init__(self, exe=None):
        self.exe = exe or build()
        self.proc = None

    def _start(self):
        self.proc = subprocess.Popen(
            [str(self.exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            self.proc.wait(timeout=10)
            self.proc = None

    def convert_text(self, schema_text):
        """(ok, text, kind, stderr): text is the grammar (ok) or the exception message, as str
        (surrogate escapes for bytes that are not UTF-8)."""
        if self.proc is None:
            self._start()
        line = schema_text.replace("\r", " ").replace("\n", " ")
        try:
            self.proc.stdin.write(line.encode("utf-8", "surrogateescape") + b"\n")
            self.proc.stdin.flush()
            out = self.proc.stdout.readline()
        except BrokenPipeError:
            out = b""
        if not out:
            # llama.cpp crashed (a stack overflow); the next call starts a new process
            self.proc.wait(timeout=10)
            self.proc = None
            raise RuntimeError("the converter program died on: %s" % schema_text[:200])
        res = json.loads(out)
        dec = lambda h: bytes.fromhex(h).decode("utf-8", "surrogateescape")
        if res["ok"]:
            return True, dec(res["grammar"]), None, dec(res["stderr"])
        return False, dec(res["error"]), res["kind"], ""

    def time_ns(self, schema, n):
        """Mean nanoseconds of n conversions of schema inside the program (the JSON parsed once, outside)."""
        if self.proc is None:
            self._start()
        text = schema if isinstance(schema, str) else json.dumps(schema, ensure_ascii=False)
        self.proc.stdin.write(b"#time %d " % n + text.replace("\n", " ").encode("utf-8") + b"\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["ns"]

    def convert(self, schema):
        return self.convert_text(schema if isinstance(schema, str) else json.dumps(schema, ensure_ascii=False))


if __name__ == "__main__":
    print(build())
