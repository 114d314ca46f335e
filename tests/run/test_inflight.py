"""`equiv.run.inflight.completed`: bounded concurrency, answers as they finish, failures drained."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from equiv.run.inflight import completed

WAIT_S = 30  # an upper bound only: every wait below ends on an event, not on time


class Counter:
    """Counts calls in flight; ``gate(x)``, run once call ``x`` is counted in, is where it
    waits (on events, not sleeps)."""

    def __init__(self, gate: Callable[[int], object] | None = None) -> None:
        self.now = 0
        self.peak = 0
        self.started: list[int] = []
        self.gate = gate
        self.failed = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, x: int) -> int:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.started.append(x)
        if self.gate is not None:
            self.gate(x)
        with self._lock:
            self.now -= 1
        if x == 3:
            self.failed.set()
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
    all_in = threading.Barrier(3, timeout=WAIT_S)  # the first three meet: three at once

    def gate(x: int) -> None:
        if x in (0, 1, 2):
            all_in.wait()

    fn = Counter(gate)
    out = dict(completed(fn, [0, 1, 2, 4, 5, 6, 7], 3))
    assert out == {x: x * 10 for x in [0, 1, 2, 4, 5, 6, 7]}
    assert fn.peak == 3


def test_answers_come_back_while_others_are_still_in_flight():
    release = threading.Event()
    fn = Counter(lambda x: x != 0 or release.wait(WAIT_S))
    answers = completed(fn, [0, 1, 2], 3)
    assert {next(answers)[0], next(answers)[0]} == {1, 2}  # 0 is still running
    release.set()
    assert next(answers) == (0, 0)


def test_a_failure_keeps_the_calls_in_flight_and_starts_nothing_new():
    fn = Counter(lambda x: x != 0 or fn.failed.wait(WAIT_S))  # 0 ends after 3 has failed
    got: list[tuple[int, int]] = []
    with pytest.raises(RuntimeError, match="item 3 failed"):
        got.extend(completed(fn, [0, 1, 2, 3, 4, 5, 6, 7, 8], 2))
    assert (0, 0) in got  # in flight at the failure: its answer is still handed back
    assert 3 not in dict(got)
    assert sorted(fn.started) == [0, 1, 2, 3]  # one slot ran 1, 2, 3; nothing after the failure


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
