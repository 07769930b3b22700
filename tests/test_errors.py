"""The error hierarchy: one root, each error also the built-in it behaves like."""

from __future__ import annotations

import pytest

import context_gatekeeper
from context_gatekeeper import errors
from context_gatekeeper.errors import (
    BudgetError,
    EditError,
    GatekeeperError,
    InvalidInputError,
    InvalidTypeError,
    ModelUnavailableError,
    StaleHeadError,
    StoreClosedError,
    UnknownMessageError,
    UnknownTurnError,
)

BUILTIN_BASE = {
    BudgetError: ValueError,
    InvalidInputError: ValueError,
    InvalidTypeError: TypeError,
    EditError: ValueError,
    UnknownTurnError: KeyError,
    UnknownMessageError: KeyError,
    ModelUnavailableError: RuntimeError,
    StoreClosedError: RuntimeError,
}


def test_all_lists_exactly_the_error_classes():
    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    }
    assert set(errors.__all__) == classes
    assert "GatekeeperError" in classes


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_derives_from_the_root(name):
    cls = getattr(errors, name)
    assert issubclass(cls, GatekeeperError)
    assert issubclass(cls, Exception)


@pytest.mark.parametrize(("cls", "builtin"), list(BUILTIN_BASE.items()))
def test_errors_are_caught_by_their_builtin(cls, builtin):
    with pytest.raises(builtin):
        raise cls("boom")
    with pytest.raises(GatekeeperError):
        raise cls("boom")


def test_stale_head_is_not_a_value_or_key_error():
    # A concurrent change is neither bad input nor a missing key: callers must not
    # swallow it with `except ValueError`.
    assert not issubclass(StaleHeadError, (ValueError, KeyError, RuntimeError))


def test_value_errors_are_not_key_errors_and_vice_versa():
    for cls in (BudgetError, InvalidInputError, EditError):
        assert not issubclass(cls, KeyError)
    for cls in (UnknownTurnError, UnknownMessageError):
        assert not issubclass(cls, ValueError)


@pytest.mark.parametrize("cls", [UnknownTurnError, UnknownMessageError])
def test_key_errors_print_their_sentence_unquoted(cls):
    message = "no turn with id 7: use an id that add_turn returned"
    err = cls(message)
    # KeyError.__str__ would give repr(message), with quotes around it.
    assert str(err) == message
    assert err.args == (message,)


@pytest.mark.parametrize(
    ("cls", "fallback"), [(UnknownTurnError, "unknown turn"), (UnknownMessageError, "unknown message")]
)
def test_key_errors_without_arguments_still_read(cls, fallback):
    assert str(cls()) == fallback


def test_errors_are_exported_from_the_package():
    for name in errors.__all__:
        assert getattr(context_gatekeeper, name) is getattr(errors, name)
        assert name in context_gatekeeper.__all__
