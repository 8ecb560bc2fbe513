"""The chunk threads the pipeline lends a rule (issue #40): results in the items' order,
on a worker thread only while lent, never more than the calls asked ahead."""

from __future__ import annotations

import threading
import time

import pytest

from stabilitycli.core import threads


def _slow_square(x: int) -> tuple[int, str]:
    # the later items finish first: order must come from the items, not from the clock
    time.sleep(0.002 * (10 - x))
    return x * x, threading.current_thread().name


def test_unlent_calls_run_in_the_callers_thread() -> None:
    got = list(threads.in_order(_slow_square, range(10), workers=2))
    assert [v for v, _ in got] == [x * x for x in range(10)]
    assert {name for _, name in got} == {threading.current_thread().name}


@pytest.mark.parametrize("workers", [1, 2])
def test_lent_calls_come_back_in_order_from_workers(workers: int) -> None:
    with threads.lending(2):
        got = list(threads.in_order(_slow_square, range(10), workers=workers))
    assert [v for v, _ in got] == [x * x for x in range(10)]
    assert all(name.startswith("stab-chunk") for _, name in got)


def test_one_worker_makes_one_result_ahead_of_the_caller() -> None:
    """A caller holding chunk i's result has at most chunk i + 1's being made: the memory
    of two chunks, whatever the number of chunks."""
    started: list[int] = []

    def record(x: int) -> int:
        started.append(x)
        return x

    with threads.lending(2):
        results = threads.in_order(record, range(6))
        for got in results:
            time.sleep(0.01)  # the worker has had time to run ahead if it could
            assert max(started) <= got + 1  # the next one only
    assert started == list(range(6))


def test_one_item_or_a_single_thread_lent_takes_no_worker() -> None:
    with threads.lending(1):
        got = list(threads.in_order(_slow_square, range(3), workers=2))
    assert {name for _, name in got} == {threading.current_thread().name}
    with threads.lending(2):
        got = list(threads.in_order(_slow_square, [3], workers=2))
    assert {name for _, name in got} == {threading.current_thread().name}


def test_a_workers_error_reaches_the_caller() -> None:
    def boom(x: int) -> int:
        if x == 3:
            raise ValueError("chunk 3")
        return x

    with threads.lending(2), pytest.raises(ValueError, match="chunk 3"):
        list(threads.in_order(boom, range(6), workers=2))
