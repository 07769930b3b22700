"""``stores.postgres_ops`` without a server: the steps an operation sends and what a failure of
the server is reported as (the store's tests on a real server are in ``test_postgres_*.py``)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("psycopg_pool")

from psycopg import errors as pg_errors  # noqa: E402

from context_gatekeeper.stores import postgres_ops as ops  # noqa: E402


def _sent(steps: ops.Steps[Any]) -> list[ops.Step]:
    """The steps an operation sends, each answered with None."""
    sent, stepper = [], ops.Stepper(steps)
    step = stepper.next(None)
    while step is not None:
        sent.append(step)
        step = stepper.next(None)
    return sent


def _nothing() -> ops.Steps[None]:
    return None
    yield  # a generator that sends no step


@pytest.mark.parametrize(("lock_timeout", "setting"), [(None, None), (0.0004, "1ms"), (2.5, "2500ms")])
def test_a_locked_transaction_sets_its_lock_timeout_for_itself_alone(lock_timeout: float | None, setting: str | None) -> None:
    """0 is no limit at all, whatever the server, database or role sets (setup waits out another
    worker's migration: with ``lock_timeout`` left to the server, a role's ``SET lock_timeout =
    '1s'`` made setup give up after a second); None leaves the server's; set_config(..., true)
    keeps the setting to the transaction."""
    q = ops.compose("cg_")[1]
    sent = _sent(ops.locked(q, 42, _nothing(), lock_timeout))
    set_timeout = [step for step in sent if step.query is q["lock_timeout"]]
    assert [step.params for step in set_timeout] == ([] if setting is None else [(setting,)])
    assert "set_config('lock_timeout', %s, true)" in q["lock_timeout"].as_string(None)
    assert sent[-1].query is q["lock"] and sent[-1].params == (42,)


def test_no_limit_covers_the_advisory_lock_alone_then_the_setting_before_it_is_restored() -> None:
    """0 (setup) lifts the limit for the advisory lock wait alone (another worker's migration), then
    restores the setting it read: the migration's DDL keeps the lock_timeout the role or connection
    sets, so it gives up behind a reader idle in a transaction instead of waiting forever."""
    q = ops.compose("cg_")[1]
    stepper = ops.Stepper(ops.locked(q, 42, _nothing(), 0))
    assert stepper.next(None).query is q["read_committed"]  # type: ignore[union-attr]
    lift = stepper.next(None)
    assert lift is not None and lift.query is q["lift_lock_timeout"] and lift.fetch == "one"
    assert "current_setting('lock_timeout')" in q["lift_lock_timeout"].as_string(None)
    lock = stepper.next(("2s", "0"))
    assert lock is not None and lock.query is q["lock"] and lock.params == (42,)
    restore = stepper.next(None)
    assert restore is not None and restore.query is q["lock_timeout"] and restore.params == ("2s",)
    assert stepper.next(None) is None


def test_a_statement_cancelled_by_statement_timeout_names_statement_timeout_not_lock_timeout() -> None:
    """A read that takes no lock, cancelled by the role's statement_timeout, was reported as "timed
    out or lost a race waiting for a lock ... give the store a longer lock_timeout"."""
    error = ops.postgres_unavailable(pg_errors.QueryCanceled("canceling statement due to statement timeout"), "store")
    assert error is not None
    text = str(error)
    assert "statement_timeout" in text and "ALTER ROLE" in text and "nothing was written" in text
    assert "lock_timeout" not in text and "race" not in text


def test_a_statement_cancelled_otherwise_says_it_was_cancelled() -> None:
    error = ops.postgres_unavailable(pg_errors.QueryCanceled("canceling statement due to user request"), "store")
    assert error is not None and "cancelled" in str(error) and "pg_cancel_backend" in str(error)
    assert "lock_timeout" not in str(error)


@pytest.mark.parametrize("error", [pg_errors.LockNotAvailable("canceling statement due to lock timeout"),
                                   pg_errors.DeadlockDetected("deadlock detected")])
def test_a_lock_wait_given_up_still_names_lock_timeout(error: Exception) -> None:
    said = ops.postgres_unavailable(error, "store")
    assert said is not None and "waiting for a lock" in str(said) and "lock_timeout" in str(said)
