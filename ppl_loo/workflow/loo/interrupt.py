"""Ctrl-C in long computations that block in native code.

A jit-compiled search runs in XLA's native code; a model that calls Stan through
``jax.pure_callback`` spends its time there and in the Stan library, and Python's SIGINT handler
(which raises ``KeyboardInterrupt``) runs only in the main thread and only between bytecodes, so
Ctrl-C would wait for the whole batch to finish. :func:`run_interruptible` runs the
computation in a worker thread while the main thread waits in short joins, where
``KeyboardInterrupt`` is delivered at once. It then asks the model to stop (its ``Model.cancel``, for
models whose host callbacks check the request between short chunks of native calls and raise),
waits for the worker to end (a fraction of a second) and re-raises ``KeyboardInterrupt`` in the main
thread. For a model without
host callbacks (pure JAX, or a sampler in native code) there is nothing to stop early: the main
thread re-raises at once and the call running in the worker is abandoned (its result is
discarded). The worker is not a daemon thread: a daemon thread still inside XLA when the
interpreter shuts down is killed mid-C++ and aborts the process ("FATAL: exception not rethrown"),
so a script that ends with the ``KeyboardInterrupt`` exits once that call returns.
"""

from __future__ import annotations

import threading

__all__ = ["run_interruptible"]

#: how often the waiting main thread wakes up (seconds)
POLL_S = 0.05
#: how long the main thread waits for the worker of a model it asked to stop to stop after Ctrl-C (seconds)
GRACE_S = 1.5


def run_interruptible(fn, cancel=None):
    """``fn()`` in a worker thread; Ctrl-C in the main thread stops it (see the module docstring).

    ``cancel``: the ``Model.cancel`` of the model whose host callbacks ``fn`` calls, or None: called with
    ``True`` on Ctrl-C (then the worker is waited for) and with ``False`` before ``fn`` starts.
    Exceptions raised by ``fn`` are re-raised as themselves.
    """
    if cancel is not None:
        cancel(False)
    if threading.current_thread() is not threading.main_thread():
        return fn()  # signals are delivered to the main thread only: nothing to gain
    box = {}
    done = threading.Event()

    def work():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="ppl_loo-compiled", daemon=False)
    worker.start()
    try:
        # wait on an Event, not Thread.join: a KeyboardInterrupt inside join() makes CPython (3.12) mark a
        # running thread as stopped, so the interpreter no longer waits for it at exit and crashes under it
        while not done.wait(POLL_S):
            pass
    except KeyboardInterrupt:
        if cancel is not None:
            cancel(True)
            done.wait(GRACE_S)
        raise
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
