"""The README's adapter snippets run as written (fakes in place of the real models)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

import langchain_gatekeeper
from context_gatekeeper.testing import ScriptedModel
from langchain_gatekeeper import GatekeeperChatMessageHistory, thread_history

from readme_support import readme_block
from test_lc_middleware import IRELAND_ANSWER, scripted, swap_editor


def test_the_agent_snippet_runs_and_its_history_comment_is_true() -> None:
    block = readme_block("from langchain.agents import create_agent")
    model = scripted([AIMessage(IRELAND_ANSWER)])
    editor_model = ScriptedModel([swap_editor("Ireland", "Iceland"), swap_editor("2021", "2022")])
    namespace = {"model": model, "tools": [], "editor_model": editor_model}
    exec(compile(block, "README agent snippet", "exec"), namespace)  # noqa: S102 - our own README
    config = namespace["config"]
    kinds = [r.kind for r in thread_history(namespace["agent"], config)]
    claimed = re.search(r"thread_history\(agent, config\)\]\s+# (\[.*?\])", block)
    assert claimed is not None and str(kinds) == claimed.group(1)
    assert [r.number for r in thread_history(namespace["agent"], config)] == [1, 2, 3, 4]
    texts = [m.text for m in namespace["agent"].get_state(config).values["messages"]]
    assert any("Iceland" in t and "2022" in t for t in texts)  # the redo put the second edit back
    assert len(editor_model.calls) == 2



@pytest.mark.parametrize("page", [None, "guide/langchain.md"])
def test_the_classic_chain_snippet_builds_one_history_per_session(
    page: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[GatekeeperChatMessageHistory] = []

    class Counted(GatekeeperChatMessageHistory):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(langchain_gatekeeper, "GatekeeperChatMessageHistory", Counted)  # what the snippet imports
    monkeypatch.chdir(tmp_path)  # its store="chats.db"
    block = readme_block("from langchain_gatekeeper import GatekeeperChatMessageHistory, GatedRunnableWithMessageHistory",
                         page=page)
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    namespace = {"prompt": prompt, "model": scripted([AIMessage("10 seconds, renewed by a watchdog.")]),
                 "editor_model": ScriptedModel([swap_editor("10", "30")])}
    try:
        exec(compile(block, f"{page or 'README'} classic chain snippet", "exec"), namespace)  # noqa: S102
        get_history = namespace["get_history"]
        assert all(get_history("s1") is built[0] for _ in range(5))
        assert len(built) == 1  # one history, one connection on chats.db, however often the chain asks
        assert "30 seconds" in built[0].messages[-1].text  # the edit reached the history the chain uses
    finally:
        for history in built:
            history.close()
