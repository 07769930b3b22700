"""The documentation a user runs: every docstring example, the README's chat demo, and the behaviours the
selection guide's "How it works" promises (the docs checks that read text only are in ``lint/docs.py``)."""

from __future__ import annotations

import doctest
import inspect
import importlib
import pkgutil
from pathlib import Path

import pytest

import context_gatekeeper

# every module of every room (the terminal chat's ``__main__`` would start the app)
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(context_gatekeeper.__path__, "context_gatekeeper.")
    if not m.name.endswith("__main__")
)
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_every_public_name_is_exported_and_documented() -> None:
    for name in context_gatekeeper.__all__:
        obj = getattr(context_gatekeeper, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_the_readme_chat_demo_is_the_real_output() -> None:
    from test_chat_cli import README_DEMO_INPUT, README_DEMO_OUTPUT

    text = README.read_text(encoding="utf-8")
    piped = README_DEMO_INPUT.replace("\n", "\\n")
    assert f"$ printf '{piped}' | gatekeeper-chat --offline --db chat-demo.sqlite3 --plain" in text
    assert README_DEMO_OUTPUT.rstrip("\n") in text


def test_the_selection_guide_promises_hold() -> None:
    """The behaviours docs/guide/selection.md's "How it works" promises, on its own examples."""
    from context_gatekeeper import ContextGatekeeper

    gk = ContextGatekeeper(token_budget=2000)
    for user, assistant in [
        ("How long should a Redis lock TTL be?", "A few times the p99, renewed by a watchdog."),
        ("How much coffee goes into a moka pot?", "About 15 g, level, never tamped."),
        ("What if the Redis lock watchdog dies?", "The lock expires after its TTL."),
        ("Should the moka pot bottom chamber get hot water?", "Yes, hot water keeps it from burning."),
    ]:
        gk.add_turn(user, assistant)
    assert len(gk.segments()) == 4 and len(gk.topics()) == 2  # "four segments but two topics"
    assert gk.explain("By the way, is it thread-safe?").decision == "continue"
    assert gk.explain("By the way, how do I repot a cactus?").turn_ids == ()
    why = gk.explain("Why?").turn_ids  # the active (moka pot) topic's latest turn, no Redis turn
    assert 4 in why and set(why) <= {2, 4}
    assert gk.explain("回到刚才的话题").decision == "return"
