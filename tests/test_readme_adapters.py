"""The README's adapter snippets run as written (fakes in place of the real models)."""

from __future__ import annotations

import re

from langchain_core.messages import AIMessage

from context_gatekeeper.testing import ScriptedModel
from langchain_gatekeeper import thread_history

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

