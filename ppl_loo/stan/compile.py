"""Translate a Stan program with httpstan's ``stanc`` and compile it with the bridge into a
shared library, cached on disk.

Everything needed ships in the ``httpstan`` wheel (the ``stanc`` binary, the Stan / Stan Math /
Eigen / Boost / Sundials / TBB headers under ``httpstan/include`` and ``libtbb`` / sundials under
``httpstan/lib``); only a system C++17 compiler is required. The compiler flags, macros, include
directories and libraries are the ones ``httpstan.models.build_services_extension_module`` uses
(notably ``-D_GLIBCXX_USE_CXX11_ABI=0`` for the manylinux-built ``libtbb``), plus ``-fPIC
-shared``. The library is one translation unit: ``bridge.cpp`` with the stanc output force-included
(``-include model.hpp``).

Cache layout: ``<cache>/<key>/`` with ``model.stan``, ``model.hpp``, ``bridge.so``,
``build.log`` and ``stanc_warnings.txt``. ``<cache>`` is ``$PPL_LOO_STAN_CACHE`` or
``~/.cache/ppl_loo/stan``; ``<key>`` is a SHA-256 over the Stan code, the stanc version, the
httpstan version, the bridge source, the compiler (path and ``--version``) and the full flag list,
so a change to any of them builds a new library.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BuildResult",
    "StanCompileError",
    "build_library",
    "cache_dir",
    "compiler_command",
    "httpstan_dir",
    "stanc_path",
    "stanc_version",
]

BRIDGE_SOURCE = Path(__file__).with_name("bridge.cpp")

#: Preprocessor macros of httpstan's model extension modules (httpstan/models.py).
STAN_MACROS = (
    "-DBOOST_DISABLE_ASSERTS",
    "-DBOOST_PHOENIX_NO_VARIADIC_EXPRESSION",
    "-DSTAN_THREADS",
    "-D_REENTRANT",
    "-D_GLIBCXX_USE_CXX11_ABI=0",
)
#: httpstan's default ``extra_compile_args`` plus what a standalone shared library needs, and
#: silencers for the (harmless, very long) warnings from Eigen/Boost headers.
BASE_CXXFLAGS = (
    "-O3",
    "-std=c++17",
    "-fPIC",
    "-Wno-sign-compare",
    "-Wno-ignored-attributes",
    "-Wno-deprecated-declarations",
)
#: Libraries httpstan links its extension modules against (from httpstan/lib).
LIBRARIES = ("sundials_cvodes", "sundials_idas", "sundials_nvecserial", "tbb")
#: stanc options httpstan uses (httpstan/compile.py), besides ``--name``.
STANC_OPTIONS = ("--warn-pedantic",)


class StanCompileError(RuntimeError):
    """stanc rejected the program, or the C++ compiler failed; the message carries their output."""


@dataclass(frozen=True)
class BuildResult:
    library: Path
    directory: Path
    key: str
    compiled: bool  # True when this call ran the C++ compiler, False on a cache hit
    seconds: float
    stanc_warnings: str


def httpstan_dir() -> Path:
    try:
        import httpstan
    except ImportError as exc:  # pragma: no cover - environment problem
        raise ImportError(
            "ppl_loo.stan needs the 'httpstan' package (pip install httpstan); it ships stanc and "
            "the Stan headers"
        ) from exc
    return Path(httpstan.__file__).resolve().parent


def stanc_path() -> Path:
    return httpstan_dir() / "stanc"


@functools.cache
def stanc_version() -> str:
    out = subprocess.run([str(stanc_path()), "--version"], capture_output=True, text=True, timeout=60, check=False)
    return out.stdout.strip()


@functools.cache
def _compiler_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError as exc:
        raise StanCompileError(f"C++ compiler {cxx!r} not found (set $CXX)") from exc
    return out.stdout.splitlines()[0] if out.stdout else ""


def cache_dir() -> Path:
    env = os.environ.get("PPL_LOO_STAN_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "ppl_loo" / "stan"
    return root.expanduser()


def _cxx() -> str:
    return os.environ.get("CXX", "g++")


def compiler_command(
    model_hpp: Path | str, output: Path | str, extra_cxxflags: tuple[str, ...] = ()
) -> list[str]:
    """The full compiler command line (also part of the cache key, with placeholder paths)."""
    hs = httpstan_dir()
    lib = hs / "lib"
    return [
        _cxx(),
        *BASE_CXXFLAGS,
        *extra_cxxflags,
        *STAN_MACROS,
        f"-I{hs / 'include'}",
        "-include",
        str(model_hpp),
        str(BRIDGE_SOURCE),
        "-shared",
        "-o",
        str(output),
        f"-L{lib}",
        *(f"-l{name}" for name in LIBRARIES),
        f"-Wl,-rpath,{lib}",
    ]


def cache_key(code: str, extra_cxxflags: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    parts = [
        "ppl_loo-stan-bridge-v1",
        code,
        stanc_version(),
        " ".join(STANC_OPTIONS),
        importlib.metadata.version("httpstan"),
        BRIDGE_SOURCE.read_text(),
        shutil.which(_cxx()) or _cxx(),
        _compiler_version(_cxx()),
        " ".join(compiler_command("MODEL_HPP", "OUTPUT", extra_cxxflags)),
    ]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def run_stanc(code: str, model_name: str, workdir: Path, filename_in_msg: str | None = None) -> tuple[Path, str]:
    """Translate ``code`` to C++ (``workdir/model.hpp``); returns (path, warnings)."""
    stan_file = workdir / "model.stan"
    stan_file.write_text(code)
    hpp = workdir / "model.hpp"
    args = [str(stanc_path()), "--name", model_name, *STANC_OPTIONS, "--o", str(hpp)]
    args.append(f"--filename-in-msg={filename_in_msg or 'model.stan'}")
    args.append(str(stan_file))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip()) or f"stanc exited with {proc.returncode}"
        raise StanCompileError(f"stanc failed to translate the Stan program:\n{msg}")
    return hpp, proc.stderr.strip()


def build_library(
    code: str,
    *,
    extra_cxxflags: tuple[str, ...] = (),
    filename_in_msg: str | None = None,
    force: bool = False,
) -> BuildResult:
    """Return the cached bridge library of ``code``, translating and compiling it if needed.

    Concurrent builds of the same program (several processes) are serialized with a file lock.
    Broken Stan code raises :class:`StanCompileError` with stanc's message and caches nothing.
    """
    t0 = time.perf_counter()
    key = cache_key(code, tuple(extra_cxxflags))
    directory = cache_dir() / key
    library = directory / "bridge.so"
    if library.exists() and not force:
        return BuildResult(library, directory, key, False, time.perf_counter() - t0, _warnings(directory))
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if library.exists() and not force:  # built by another process meanwhile
                return BuildResult(
                    library, directory, key, False, time.perf_counter() - t0, _warnings(directory)
                )
            try:
                hpp, warnings = run_stanc(code, f"model_{key}", directory, filename_in_msg)
            except StanCompileError:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            (directory / "stanc_warnings.txt").write_text(warnings)
            tmp = directory / f"bridge.{os.getpid()}.tmp.so"
            cmd = compiler_command(hpp, tmp, tuple(extra_cxxflags))
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            (directory / "build.log").write_text(
                shlex.join(cmd) + "\n\n" + proc.stdout + proc.stderr
            )
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise StanCompileError(
                    f"C++ compilation of the Stan model failed (log: {directory / 'build.log'}):\n"
                    + _tail(proc.stderr)
                )
            os.replace(tmp, library)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return BuildResult(library, directory, key, True, time.perf_counter() - t0, warnings)


def _warnings(directory: Path) -> str:
    p = directory / "stanc_warnings.txt"
    return p.read_text() if p.exists() else ""


def _tail(text: str, n: int = 60) -> str:
    lines = [ln for ln in text.splitlines() if "error" in ln.lower()] or text.splitlines()
    return "\n".join(lines[:n])
