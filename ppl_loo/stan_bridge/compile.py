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
``bridge.so.sha256`` (checked before each load), ``build.log`` and ``stanc_warnings.txt``; the
folder ``<cache>`` has mode 0700. ``<cache>`` is ``$PPL_LOO_STAN_CACHE`` or
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
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BuildResult",
    "StanCacheError",
    "StanCompileError",
    "SAMPLER_FLAG",
    "build_library",
    "cache_dir",
    "cached_build",
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
#: compiler flag that adds Stan's NUTS (``ppl_loo.stan_bridge.sampler``) to the bridge library; the library built with
#: it holds every function of the one built without it (``bridge.cpp`` only appends the sampler), so it can
#: serve a model that does not sample (:func:`cached_build`)
SAMPLER_FLAG = "-DPLSTAN_WITH_SAMPLER"


class StanCompileError(RuntimeError):
    """stanc rejected the program, or the C++ compiler failed; the message carries their output."""


class StanCacheError(OSError):
    """The compiled-model cache folder cannot be created or written (read-only, full disk, not a
    folder) or is not private; the message names the folder and ``$PPL_LOO_STAN_CACHE``."""


@dataclass(frozen=True)
class BuildResult:
    """A compiled Stan program: its library, folder and cache key, and whether this call compiled it."""

    library: Path
    directory: Path
    key: str
    compiled: bool  # True when this call ran the C++ compiler, False on a cache hit
    seconds: float
    stanc_warnings: str


def httpstan_dir() -> Path:
    """The folder of the installed ``httpstan`` package (its stanc and Stan headers)."""
    try:
        import httpstan
    except ImportError as exc:  # pragma: no cover - environment problem
        raise ImportError(
            "ppl_loo.stan_bridge needs the 'httpstan' package (pip install httpstan); it ships stanc and "
            "the Stan headers"
        ) from exc
    return Path(httpstan.__file__).resolve().parent


def stanc_path() -> Path:
    """The ``stanc`` executable shipped with ``httpstan``."""
    return httpstan_dir() / "stanc"


@functools.cache
def stanc_version() -> str:
    """What ``stanc --version`` prints (part of the cache key)."""
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
    """The compiled-program cache folder: ``$PPL_LOO_STAN_CACHE``, by default ``~/.cache/ppl_loo/stan``."""
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


def _run_tool(args: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run stanc or the C++ compiler in its own process group; on Ctrl-C (or any other exception) the
    whole group (the driver and its ``cc1plus``) is killed before the exception goes on, so nothing
    is left running."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except Exception:  # noqa: BLE001 - best effort: the group is killed already
        pass


def run_stanc(code: str, model_name: str, workdir: Path, filename_in_msg: str | None = None) -> tuple[Path, str]:
    """Translate ``code`` to C++ (``workdir/model.hpp``); returns (path, warnings)."""
    stan_file = workdir / "model.stan"
    stan_file.write_text(code)
    hpp = workdir / "model.hpp"
    args = [str(stanc_path()), "--name", model_name, *STANC_OPTIONS, "--o", str(hpp)]
    args.append(f"--filename-in-msg={filename_in_msg or 'model.stan'}")
    args.append(str(stan_file))
    proc = _run_tool(args, timeout=300)
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

    A build runs in a private temporary folder of the cache (``.tmp-<key>-<pid>-*``) that is renamed
    into place only once the library and its SHA-256 (``bridge.so.sha256``) are written: an entry is
    complete or absent, whatever happens to the build (Ctrl-C kills the compiler's process group and
    removes the folder). Concurrent builds of the same program (several processes) are serialized
    with a lock file (``.<key>.lock``, removed after); broken Stan code raises
    :class:`StanCompileError` with stanc's or the compiler's message in every process and caches
    nothing. A cached library is used only when its recorded hash matches; otherwise it is rebuilt.
    """
    t0 = time.perf_counter()
    key = cache_key(code, tuple(extra_cxxflags))
    root = _private_cache_root()
    directory = root / key
    library = directory / "bridge.so"
    if not force and _verified(library):
        return BuildResult(library, directory, key, False, time.perf_counter() - t0, _warnings(directory))
    lock = _acquire_lock(root / f".{key}.lock")
    try:
        if not force and _verified(library):  # built by another process meanwhile
            return BuildResult(library, directory, key, False, time.perf_counter() - t0, _warnings(directory))
        _remove_stale_builds(root)
        warnings = _build_into_cache(code, key, root, directory, tuple(extra_cxxflags), filename_in_msg)
    finally:
        _release_lock(lock, root / f".{key}.lock")
    return BuildResult(library, directory, key, True, time.perf_counter() - t0, warnings)


def cached_build(code: str, extra_cxxflags: tuple[str, ...] = (), *,
                 accept_sampler: bool = False) -> BuildResult | None:
    """The verified cached library of ``code`` built with ``extra_cxxflags``, or ``None``; nothing is compiled.

    With ``accept_sampler=True``, the library built with :data:`SAMPLER_FLAG` as well serves when the one
    without it is not cached: ``ppl-loo sample`` then ``ppl-loo loo`` of the same program compile it once.
    """
    t0 = time.perf_counter()
    flag_sets = [tuple(extra_cxxflags)]
    if accept_sampler and SAMPLER_FLAG not in extra_cxxflags:
        flag_sets.append((*extra_cxxflags, SAMPLER_FLAG))
    root = _private_cache_root()  # as build_library: a folder others can write is refused, not read
    for flags in flag_sets:
        key = cache_key(code, flags)
        directory = root / key
        if _verified(directory / "bridge.so"):
            return BuildResult(directory / "bridge.so", directory, key, False, time.perf_counter() - t0,
                               _warnings(directory))
    return None


def _build_into_cache(code, key, root: Path, directory: Path, extra_cxxflags, filename_in_msg) -> str:
    """stanc and the compiler in a temporary folder of ``root``, then an atomic rename to ``directory``."""
    try:
        tmpdir = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-{os.getpid()}-", dir=root))
    except OSError as exc:
        raise _cache_error(root, exc) from exc
    try:
        hpp, warnings = run_stanc(code, f"model_{key}", tmpdir, filename_in_msg)
        (tmpdir / "stanc_warnings.txt").write_text(warnings)
        cmd = compiler_command(hpp, tmpdir / "bridge.so", extra_cxxflags)
        proc = _run_tool(cmd)
        log = shlex.join(cmd) + "\n\n" + proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise StanCompileError(
                "C++ compilation of the Stan model failed (log below; the build folder is removed):\n"
                + _tail(proc.stderr)
            )
        (tmpdir / "build.log").write_text(log)
        (tmpdir / "bridge.so.sha256").write_text(_sha256(tmpdir / "bridge.so"))
        _install(tmpdir, directory, root)
    except OSError as exc:
        raise _cache_error(root, exc) from exc
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return warnings


def _install(tmpdir: Path, directory: Path, root: Path) -> None:
    """Rename the finished build into place (an old or corrupt entry is moved aside first)."""
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".old-{directory.name}-{os.getpid()}-", dir=root))
        os.rename(directory, old / "entry")
        shutil.rmtree(old, ignore_errors=True)
    os.rename(tmpdir, directory)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(library: Path) -> bool:
    """The library exists and its SHA-256 is the one recorded when it was built."""
    record = library.with_name(library.name + ".sha256")
    try:
        return library.is_file() and record.read_text().strip() == _sha256(library)
    except OSError:
        return False


def _cache_error(root: Path, exc: OSError) -> StanCacheError:
    return StanCacheError(
        f"cannot write the compiled-model cache folder {root} ({exc.strerror or exc}): free some disk space "
        "or make it writable, or set the environment variable PPL_LOO_STAN_CACHE to a writable folder."
    )


def _private_cache_root() -> Path:
    """The cache folder, created with mode 0700; an existing one that other users can write is made
    private when it is ours and refused when it is not (they could plant a library in it)."""
    root = cache_dir()
    try:
        if not root.is_dir():
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
    except OSError as exc:
        if not (root.exists() and not root.is_dir()):
            raise _cache_error(root, exc) from exc
        st = root.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise StanCacheError(f"the compiled-model cache {root} is not a folder: remove it, or set the environment "
                             "variable PPL_LOO_STAN_CACHE to a folder of your own.")
    if st.st_mode & 0o077:
        if st.st_uid != os.getuid():
            raise StanCacheError(
                f"the compiled-model cache folder {root} belongs to another user and others can write to it "
                f"(mode {stat.S_IMODE(st.st_mode):o}): set the environment variable PPL_LOO_STAN_CACHE to a "
                "folder of your own.")
        try:
            os.chmod(root, 0o700)
        except OSError as exc:
            raise _cache_error(root, exc) from exc
    return root


def _acquire_lock(path: Path) -> int:
    """An exclusive lock on ``path`` (created if needed). The holder unlinks the file on release, so a
    waiter that then locks an unlinked file retries on the path's current file."""
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise _cache_error(path.parent, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _release_lock(fd: int, path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def _remove_stale_builds(root: Path) -> None:
    """Remove the temporary folders of builds whose process is gone (killed hard mid-build)."""
    for p in [*root.glob(".tmp-*"), *root.glob(".old-*")]:
        try:
            pid = int(p.name.split("-")[2])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            continue


def _warnings(directory: Path) -> str:
    p = directory / "stanc_warnings.txt"
    return p.read_text() if p.exists() else ""


def _tail(text: str, n: int = 60) -> str:
    lines = [ln for ln in text.splitlines() if "error" in ln.lower()] or text.splitlines()
    return "\n".join(lines[:n])
