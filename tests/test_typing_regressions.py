"""Defects the type checker found (issue #14: the package claims ``Typing :: Typed``
and CI runs mypy over the core and both adapters).  Each test fails on the code as
it was before its fix."""

from __future__ import annotations

import pytest

import llamaindex_gatekeeper.memory as li_memory
from context_gatekeeper import BudgetError
from llamaindex_gatekeeper import GatekeeperMemory


class _BudgetErrorOnPython310(BudgetError):
    """A BudgetError as Python 3.10 (which the package supports) builds it: exceptions
    there have no ``add_note`` (PEP 678 came in 3.11)."""

    def __getattribute__(self, name: str) -> object:
        if name == "add_note":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute 'add_note'")
        return super().__getattribute__(name)


def test_memory_get_over_its_budget_raises_budget_error_on_python_310(monkeypatch: pytest.MonkeyPatch) -> None:
    # mypy (python_version 3.10): "BudgetError" has no attribute "add_note"; the memory
    # raised AttributeError there instead of ChatMemoryBuffer's BudgetError.
    monkeypatch.setattr(li_memory, "BudgetError", _BudgetErrorOnPython310)
    memory = GatekeeperMemory.from_defaults(token_limit=10)
    with pytest.raises(BudgetError) as caught:
        memory.get(initial_token_count=11)
    assert str(caught.value) == "Initial token count exceeds token limit"  # ChatMemoryBuffer's text
    notes = caught.value.__dict__.get("__notes__", [])
    assert any("initial_token_count=11" in note and "token_limit=10" in note for note in notes), notes


def test_the_histories_position_view_is_a_whole_sequence() -> None:
    # mypy: its __getitem__ overrode Sequence's without the slice overload (an ignore hid
    # it); a slice failed with TypeError (a list of ids used as one dict key).
    from context_gatekeeper.selection.history import _ByPosition

    view = _ByPosition([3, 1, 2], {1: "one", 2: "two", 3: "three"})  # strings stand in for the inputs
    assert view[0] == "three" and view[-1] == "two"
    assert view[1:] == ["one", "two"]
    assert list(reversed(view)) == ["two", "one", "three"] and view.index("one") == 1
