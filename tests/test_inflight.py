"""`equiv.run.inflight.completed`: bounded concurrency, answers as they finish, failures drained."""

from __future__ import annotations

import threading
import time

import pytest

from equiv.run.inflight import completed


class Counter:
    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.started: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, x: int) -> int:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.started.append(x)
        time.sleep(0.02 if x != 0 else 0.15)
        with self._lock:
            self.now -= 1
        if x == 3:
            raise RuntimeError("item 3 failed")
        return x * 10


def test_one_worker_runs_in_order_in_this_thread():
    seen = []

    def fn(x: int) -> int:
        seen.append(threading.current_thread() is threading.main_thread())
        return x + 1

    assert list(completed(fn, [1, 2, 4], 1)) == [(1, 2), (2, 3), (4, 5)]
    assert all(seen)


def test_at_most_workers_run_at_once_and_every_answer_comes_back():
    fn = Counter()
    out = dict(completed(fn, [0, 1, 2, 4, 5, 6, 7], 3))
    assert out == {x: x * 10 for x in [0, 1, 2, 4, 5, 6, 7]}
    assert fn.peak == 3


def test_answers_come_in_completion_order():
    fn = Counter()
    order = [x for x, _ in completed(fn, [0, 1, 2], 3)]
    assert order[-1] == 0  # the slow one finishes last


def test_a_failure_keeps_the_calls_in_flight_and_starts_nothing_new():
    fn = Counter()
    got: list[tuple[int, int]] = []
    with pytest.raises(RuntimeError, match="item 3 failed"):
        got.extend(completed(fn, [0, 1, 2, 3, 4, 5, 6, 7, 8], 2))
    # 0 is slow and still in flight when 3 fails: its answer is still handed back
    assert (0, 0) in got
    assert 3 not in dict(got)
    assert fn.started[-1] <= 5, fn.started  # nothing started long after the failure
    assert not {7, 8} & set(fn.started)


def test_workers_below_one_is_refused():
    with pytest.raises(ValueError, match="workers=0"):
        list(completed(abs, [1], 0))


def test_a_caller_that_stops_reading_waits_for_the_calls_in_flight():
    """Ctrl-C or an error while answers are handed back: no call is still running when the
    generator is closed, so the caller may close the engines at once."""
    release = threading.Event()
    running: list[int] = []
    finished: list[int] = []

    def call(item: int) -> int:
        running.append(item)
        if item != 0:
            release.wait(timeout=30)
        finished.append(item)
        return item

    answers = completed(call, range(4), 3)
    assert next(answers) == (0, 0)
    threading.Timer(0.2, release.set).start()  # the calls in flight end a little later
    answers.close()
    assert sorted(finished) == sorted(running)
