"""The conformance suite's own helpers: skip reasons that say what the author declared, failure
messages that name what threads raised, and child processes released together that report a
child that could not start instead of waiting for it."""

from __future__ import annotations

from pathlib import Path

from context_gatekeeper.testing.store_builders import raised, run_together
from context_gatekeeper.testing.store_modes import lacking
from context_gatekeeper.testing.store_processes import commit_in_children


def test_a_skip_reason_says_declared_off_only_for_a_capability_on_by_default() -> None:
    assert lacking("TestMine", "reopens") == (
        "needs the 'reopens' capability, which TestMine declares off (Capabilities(reopens=False))")
    for later in ("processes", "tamper_evident"):  # off unless declared: an author who declared nothing is told so
        reason = lacking("TestMine", later)
        assert "declares off" not in reason
        assert f"off by default" in reason and f"Capabilities({later}=True) runs it" in reason


def test_a_failed_check_of_threads_names_what_they_raised() -> None:
    def fails() -> None:
        raise ValueError("the store refused a second thread")

    errors = run_together(fails, fails, lambda: None)
    message = raised(errors)
    assert message.startswith("the calls raised 2 error(s): 2 x ValueError: the store refused a second thread\n")
    assert 'in fails\n    raise ValueError("the store refused a second thread")' in message  # where it was raised
    assert raised([]) == "nothing was raised"


class MakeFails:
    """A suite class whose ``make`` fails in the child, before the child says it is ready."""

    def make(self, where: Path) -> None:
        raise RuntimeError(f"cannot open storage at {where.name} (on purpose)")


def test_children_that_fail_before_they_are_ready_are_reported_not_waited_for(tmp_path: Path) -> None:
    runs = commit_in_children(MakeFails, tmp_path, "s", [[("commit", [("p0", "user")])]] * 2)
    assert len(runs) == 2
    for run in runs:
        assert not run.committed and run.returncode == 1, run.stdout
        failure = run.failure("TestX")
        assert "did not finish its commits (exited with 1)" in failure and "(on purpose)" in failure, failure
