"""Many calls in flight at once, answers handed back the moment each finishes.

The runner uses this to keep up to ``--server-concurrency`` prompts in flight against a serving
stack (a GPU server answers many requests at once; one at a time wastes it). Answers come back in
completion order so each can be written to the results file at once; a failure lets the calls
already in flight finish (their answers are kept) and sends nothing new.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["completed"]

T = TypeVar("T")
R = TypeVar("R")


def completed(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` for every item, with at most ``workers`` calls running at once.

    With ``workers == 1`` the calls run one after another in this thread. On the first exception
    no new call starts; the calls in flight are waited for and their answers still yielded, then
    the exception is raised. ``KeyboardInterrupt`` (or closing the iterator) stops at once:
    nothing new starts and answers still in flight are dropped.
    """
    if workers < 1:
        raise ValueError(f"workers={workers!r} must be >= 1")
    if workers == 1:
        for item in items:
            yield item, fn(item)
        return
    pending = iter(items)
    running: dict[Future[R], T] = {}
    failure: BaseException | None = None
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="equiv-inflight")
    try:
        for item in pending:
            running[pool.submit(fn, item)] = item
            if len(running) == workers:
                break
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            # a failure among calls that ended together counts before any of them is handed
            # back: no new call starts after it, whichever of them the set lists first
            failure = failure or next((e for f in done if (e := f.exception())), None)
            for future in done:
                item = running.pop(future)
                if future.exception() is not None:
                    continue
                yield item, future.result()
                if failure is None:
                    for nxt in pending:  # one new call per finished one
                        running[pool.submit(fn, nxt)] = nxt
                        break
        if failure is not None:
            raise failure
    finally:
        # Calls not started are dropped; calls in flight (Ctrl-C, or the caller stopped reading)
        # finish before this returns, so nobody closes an engine under a running request.
        pool.shutdown(wait=True, cancel_futures=True)
