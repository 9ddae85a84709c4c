"""The conversions of ``caffetool upgrade`` run in worker processes, their results in order.

Converting a Python file is nearly all fissix's parsing (about 8 ms a small script on one core);
writing the copy is not. So where a project has many files to convert, they are converted in a
pool of processes, one for each core this process may use (its CPU affinity), each with its own
RefactoringTool (built once a process, :mod:`caffetool.upgrade.python2`), and the results come
back in the order the files were given, for the caller to write: the copy and its report are the
same whatever the number of workers. Fewer than :data:`POOL_FROM` files are converted in this
process, where starting workers would cost more than they save.

Workers are forked: they start with fissix and caffetool already imported, where a forkserver's or
a spawned worker imports them again (1,000 small scripts on 2 cores: 3.8 s forked, 4.7 s from a
forkserver, 4.9 s spawned, 8.9 s in one process). A fork copies only the thread that forks, so
where this process runs other threads (whose locks a fork could copy held) the forkserver starts
them instead. Workers ignore Ctrl-C (it reaches the whole process group): the parent takes
it, and on it or any other error the work not started is cancelled and the pool is ended before the
error goes on, so no worker outlives the command. A worker that dies (killed, out of memory) is
:class:`ConversionWorkerDied`, not a wait for a result that never comes.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from caffetool.engine import cpu_threads
from caffetool.errors import CaffetoolError

POOL_FROM = 50  # files: about 0.4 s of converting in one process; below it a pool is not worth starting
CHUNK = 16  # files handed to a worker at once: fewer round trips, and still an even share at the end
START_METHOD = "fork"
THREADED_START_METHOD = "forkserver"
INTERRUPTS = {signal.SIGINT, signal.SIGTERM}
Result = TypeVar("Result")


class ConversionWorkerDied(CaffetoolError):
    """A worker process converting files ended without its result (killed, or out of memory)."""


def in_order(convert: Callable[..., Result], items: Sequence[tuple]) -> Iterator[Result]:
    """``convert(*item)`` for each of ``items``, in their order: in worker processes where there are
    :data:`POOL_FROM` or more and more than one core, else here. ``convert`` must be a module's own
    function (workers find it by name). Close the iterator (``contextlib.closing``) where it is not
    run to its end: that ends the pool."""
    workers = min(cpu_threads.available(), -(-len(items) // CHUNK))
    if len(items) < POOL_FROM or workers < 2:
        yield from (convert(*item) for item in items)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(_start_method()),
                               initializer=_ignore_interrupts)
    try:
        # Ctrl-C or SIGTERM while a worker is forked would be lost in the parent (raised inside a
        # fork handler, where Python ignores it) or reach a worker before it ignores it: they wait
        # until every worker has started (map submits every chunk, which starts them all).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
        try:
            results = pool.map(convert, *zip(*items), chunksize=CHUNK)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        yield from results
    except BrokenProcessPool:
        raise ConversionWorkerDied("a process converting the project's files ended without its result (killed, or "
                                   "out of memory); nothing was written: run the upgrade again, with more memory free "
                                   "or on a smaller folder") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _start_method() -> str:
    return START_METHOD if threading.active_count() == 1 else THREADED_START_METHOD


def _ignore_interrupts() -> None:
    """Ctrl-C is the parent's to handle: a worker interrupted mid-file would only print a traceback.
    The pool ends its workers with SIGTERM, which the parent may turn into KeyboardInterrupt (the
    task layer does, to clean up): a forked worker takes the default, ending quietly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)  # blocked by the parent while it forked
