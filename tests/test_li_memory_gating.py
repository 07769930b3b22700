"""How GatekeeperMemory chooses what ``get`` returns (its selection, in llamaindex_gatekeeper.memory):
a message's tokens are counted once per text, not on every ``get``."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.base.llms.types import ChatMessage

from llamaindex_gatekeeper import GatekeeperMemory
from llamaindex_gatekeeper.memory import COUNTS
from gatekeeper_support import CountingCounter

PAIRS = [
    ("How do I renew a Redis lock?", "Extend its TTL from a watchdog before it expires."),
    ("What is a fencing token?", "A counter that grows with every grant; storage rejects stale ones."),
    ("Which espresso grind should I use?", "Fine, like table salt; adjust by the shot time."),
]


@pytest.fixture(autouse=True)
def _cold_counts() -> None:
    COUNTS.clear()


def memory_with(count: CountingCounter) -> GatekeeperMemory:
    memory = GatekeeperMemory.from_defaults(token_limit=60, token_counter=count)
    for question, answer in PAIRS:
        memory.put(ChatMessage(role="user", content=question))
        memory.put(ChatMessage(role="assistant", content=answer))
    return memory


@pytest.mark.parametrize("input_text", [None, "How do I renew the Redis lock TTL?"])
def test_repeated_gets_count_no_message_again(input_text: str | None) -> None:
    count = CountingCounter()
    memory = memory_with(count)
    first = memory.get(input_text)
    counted = len(count.texts)
    assert memory.get(input_text) == first and asyncio.run(memory.aget(input_text)) == first
    assert len(count.texts) == counted  # every text was counted before, by this counter
    memory.put(ChatMessage(role="user", content="And how long should the TTL be?"))
    memory.get(input_text)
    assert "And how long should the TTL be?" in count.texts[counted:]
    assert len(count.texts[counted:]) == len(set(count.texts[counted:]))  # the new text, once per place


def test_counts_are_kept_per_counter() -> None:
    first, second = CountingCounter(), CountingCounter()
    memory_with(first).get()
    memory_with(second).get()  # the same texts, another counter: counted by it, not served the first's counts
    assert set(second.texts) >= set(first.texts) >= {PAIRS[-1][0], PAIRS[-1][1]}


def test_counts_hold_neither_the_texts_nor_the_counter() -> None:
    """COUNTS keys are the counter's identity key and a digest of the text: a long pasted text is
    not kept by them, and a per-memory tokenizer_fn is collected with its memory."""
    import gc
    import weakref

    from context_gatekeeper.integration import text_key

    pasted = "Why does this job retry? " + " ".join(f"w{i}" for i in range(20_000))
    tokens = lambda text: text.split()  # noqa: E731 -- a tokenizer built per memory
    memory = GatekeeperMemory.from_defaults(token_limit=96_000, tokenizer_fn=tokens)
    memory.put(ChatMessage(role="user", content=pasted))
    memory.put(ChatMessage(role="assistant", content="It hits the timeout."))
    memory.get("and how do I fix the retry?")
    assert len(COUNTS) >= 2
    keys = list(COUNTS._data)
    assert (keys[0][0], text_key(pasted)) in COUNTS and all(len(key[1]) == 64 for key in keys)
    assert not any(isinstance(part, str) and len(part) > 64 for key in keys for part in key)
    alive = weakref.ref(tokens)
    memory.close()
    del memory, tokens
    gc.collect()
    assert alive() is None and len(COUNTS) >= 2  # the entries stay (to age out); the tokenizer does not
