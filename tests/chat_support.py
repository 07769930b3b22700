"""Conversations the chat tests share (the web page's and the web server's)."""

from __future__ import annotations

from context_gatekeeper import Message

AGENT_CONVERSATION = (
    Message("greet", "assistant", "Hi! I am the weather bot."),
    Message("u1", "user", "What is the weather in Oslo?"),
    Message("a1", "assistant", "", metadata={"tool_calls": [{"id": "c1", "name": "weather", "args": {"city": "Oslo"}}]}),
    Message("u2", "user", "[image the tool hands over]"),
    Message("t1", "tool", "12C, rain", metadata={"tool_call_id": "c1"}),
    Message("a2", "assistant", "It is 12C and raining in Oslo."),
)
"""A stored agent conversation: a greeting opens turn 1; turn 2 holds a tool call and a user
message before the tool's result (as agents may write)."""
