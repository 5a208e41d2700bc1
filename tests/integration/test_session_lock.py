"""The session lock: shared per session per process, re-entrant, exclusive (S4.4)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.session import open_session

from support.tiers import HANG_GUARD_SECONDS
from support.workers import try_lock

if TYPE_CHECKING:
    from pathlib import Path


def other_process_can_lock(path: Path) -> str:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    worker = context.Process(target=try_lock, args=(str(path), results))
    worker.start()
    worker.join(30)
    assert worker.exitcode == 0
    return results.get(timeout=HANG_GUARD_SECONDS)


def test_objects_on_one_session_share_one_lock(tmp_path: Path) -> None:
    with open_session(tmp_path / "a") as one, open_session(tmp_path / "a") as two:
        assert one.lock is two.lock
        with open_session(tmp_path / "b") as other:
            assert other.lock is not one.lock


def test_lock_is_reentrant_and_released_by_the_last_release(tmp_path: Path) -> None:
    with open_session(tmp_path / "a") as session:
        lock = session.lock
        assert not lock.held
        with lock:
            with lock:
                assert lock.held
                assert other_process_can_lock(tmp_path / "a") == "blocked"
            assert lock.held
            assert other_process_can_lock(tmp_path / "a") == "blocked"
        assert not lock.held
        assert other_process_can_lock(tmp_path / "a") == "acquired"


def test_lock_excludes_other_threads(tmp_path: Path) -> None:
    with open_session(tmp_path / "a") as session:
        order: list[str] = []
        entered = threading.Event()

        def competitor() -> None:
            entered.set()
            with session.lock:
                order.append("competitor")

        with session.lock:
            thread = threading.Thread(target=competitor)
            thread.start()
            entered.wait(HANG_GUARD_SECONDS)
            time.sleep(0.1)
            assert order == []
            order.append("holder")
        thread.join(HANG_GUARD_SECONDS)
        assert order == ["holder", "competitor"]


def test_held_is_false_in_a_thread_that_does_not_hold(tmp_path: Path) -> None:
    with open_session(tmp_path / "a") as session, session.lock:
        seen: list[bool] = []
        thread = threading.Thread(target=lambda: seen.append(session.lock.held))
        thread.start()
        thread.join(HANG_GUARD_SECONDS)
        assert seen == [False]


def test_releasing_an_unheld_lock_is_an_error(tmp_path: Path) -> None:
    with open_session(tmp_path / "a") as session:
        with pytest.raises(RuntimeError, match="released more often"):
            session.lock.release()
        with session.lock:
            pass


def test_lock_outlives_the_session_that_opened_it(tmp_path: Path) -> None:
    first = open_session(tmp_path / "a")
    second = open_session(tmp_path / "a")
    lock = first.lock
    first.close()
    with lock:
        assert other_process_can_lock(tmp_path / "a") == "blocked"
    second.close()
