"""Docs that drift from the code are bugs: run the docstring examples and check the README's claims."""

from __future__ import annotations

import doctest
import inspect
import importlib
import pkgutil
from pathlib import Path

import pytest

import context_gatekeeper
from test_gatekeeper_scenario import build

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


def test_readme_before_and_after_example_matches_the_library() -> None:
    text = README.read_text(encoding="utf-8")
    gk = build(6)
    follow_up = gk.explain("它的并发性能怎么样？")
    assert (follow_up.decision, follow_up.turn_ids) == ("continue", (5, 6))
    assert "('continue', (5, 6))" in text
    back = gk.explain("回到 Redis，fencing token 存在哪里？")
    assert f'fencing token 存在哪里？").turn_ids\n{back.turn_ids}' in text and back.decision == "return"


def test_every_public_name_is_exported_and_documented() -> None:
    for name in context_gatekeeper.__all__:
        obj = getattr(context_gatekeeper, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_every_subpackage_is_listed_for_the_wheel() -> None:
    """A subpackage missing from pyproject's list is missing from the wheel."""
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    for sub in pkgutil.walk_packages(context_gatekeeper.__path__, "context_gatekeeper."):
        if sub.ispkg:
            assert f'"{sub.name}"' in pyproject, f"{sub.name} is not in [tool.setuptools] packages"


def test_the_readme_chat_demo_is_the_real_output() -> None:
    from test_chat_cli import README_DEMO_INPUT, README_DEMO_OUTPUT

    text = README.read_text(encoding="utf-8")
    piped = README_DEMO_INPUT.replace("\n", "\\n")
    assert f"$ printf '{piped}' | gatekeeper-chat --offline --db chat-demo.sqlite3 --plain" in text
    assert README_DEMO_OUTPUT.rstrip("\n") in text


def test_readme_how_it_works_quotes_the_default_parameters() -> None:
    """The numbers the README's "How it works" gives are the defaults the code uses."""
    from context_gatekeeper import SelectionParams

    text = README.read_text(encoding="utf-8")
    section = text[text.index("## How it works") : text.index("## Results")]
    p = SelectionParams()
    assert f"{p.coverage_target:.0%} of the" in section
    assert f"at least {p.off_topic_share:.0%} of the query's weight" in section
    assert f"in the last {p.topic_lookback} when it recurs" in section
    assert f"cost^{p.cost_exponent}" in section
    assert p.fill_ratio == 1.0 and "leftover budget stays unused" in section
    recall = SelectionParams.preset("recall")
    assert recall.fill_ratio < 1.0 and recall.off_topic_share == 0.0


def test_readme_precision_claims_hold() -> None:
    """The behaviours "How it works" promises, on the README's own examples."""
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
