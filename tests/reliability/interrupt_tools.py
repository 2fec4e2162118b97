"""Helpers of the interrupt tests and of ``benchmarks/interrupts.py``: run a script in a subprocess,
send SIGINT once it reaches a phase, time signal to exit, and list the processes left."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def _stat(pid):
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return {"state": fields[0], "ppid": int(fields[1]), "pgid": int(fields[2])}


def descendants(pid):
    """The live descendants of ``pid`` (a /proc scan; zombies left out)."""
    children = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            st = _stat(int(p))
            if st and st["state"] != "Z":
                children.setdefault(st["ppid"], []).append(int(p))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def processes_mentioning(text):
    """Live processes whose command line contains ``text`` (e.g. a private cache path)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            st = _stat(int(p))
            if text in cmd and st and st["state"] != "Z":
                out.append((int(p), cmd))
    return out


#: wrapped around each script: the time at which ``KeyboardInterrupt`` reaches its top level is printed
#: (``time.monotonic`` is system-wide on Linux, so comparable with the parent's clock)
WRAP = """
import time as _t
try:
{body}
except KeyboardInterrupt:
    print(f"INTERRUPTED {{_t.monotonic()!r}}", flush=True)
    raise
"""


def wrap(script):
    return WRAP.format(body="\n".join("    " + ln for ln in script.strip().splitlines()))


def interrupt_when(script, ready, *, env=None, after_s=0.0, timeout_s=600.0, cwd=ROOT):
    """Run ``python -c script`` (wrapped, :data:`WRAP`); once ``ready(proc, output_so_far)`` is true wait
    ``after_s`` more and send SIGINT. Returns a dict: ``stop_s`` (signal to ``KeyboardInterrupt`` at the
    script's top level, None if it never got there), ``exit_s`` (signal to process exit: ``stop_s`` plus
    the interpreter's shutdown, 1-4 s for a process that imported JAX on a loaded machine), ``returncode``,
    ``output`` and ``signalled``."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen([PYTHON, "-c", wrap(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd,
                            env=full_env)
    chunks = []
    reader = threading.Thread(target=lambda: [chunks.append(b) for b in iter(lambda: proc.stdout.read1(4096), b"")],
                              daemon=True)
    reader.start()
    t_end = time.monotonic() + timeout_s
    signalled = False
    while time.monotonic() < t_end and proc.poll() is None:
        if ready(proc, b"".join(chunks).decode(errors="replace")):
            time.sleep(after_s)
            signalled = proc.poll() is None
            break
        time.sleep(0.02)
    if not signalled:
        proc.kill()
        proc.wait()
        reader.join(5)
        return {"stop_s": None, "exit_s": None, "returncode": proc.returncode,
                "output": b"".join(chunks).decode(errors="replace"), "signalled": False}
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    exit_s = time.monotonic() - t0
    reader.join(5)
    out = b"".join(chunks).decode(errors="replace")
    stop = [float(v) for v in re.findall(r"INTERRUPTED ([0-9.]+)", out)]
    return {"stop_s": stop[0] - t0 if stop else None, "exit_s": exit_s, "returncode": proc.returncode,
            "output": out, "signalled": True}


def has_child_named(name):
    """A ``ready`` predicate: the process has a descendant whose command is ``name`` (e.g. cc1plus)."""
    def ready(proc, _out):
        for c in descendants(proc.pid):
            try:
                if Path(f"/proc/{c}/comm").read_text().strip() == name:
                    return True
            except OSError:
                pass
        return False
    return ready


def printed(marker):
    """A ``ready`` predicate: the process printed ``marker``."""
    return lambda _proc, out: marker in out


def bar_moved(desc):
    """A ``ready`` predicate: the tqdm bar ``desc`` counted at least one item (the first compiled batch is
    done, so the signal lands in a running batch, not in XLA's compilation)."""
    pattern = re.compile(re.escape(desc) + r":\s+\d+%\|[^|]*\|\s*[1-9]\d*/\d+")
    return lambda _proc, out: bool(pattern.search(out))
