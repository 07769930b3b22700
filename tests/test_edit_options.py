"""One edit path: EditOptions checked once, one resolve_model (core and both adapters), hints said once."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from types import SimpleNamespace
from typing import Any

import pytest

from context_gatekeeper import (
    EditError,
    EditModel,
    EditOptions,
    InvalidInputError,
    Message,
    ModelUnavailableError,
    Replace,
    Transcript,
    resolve_model,
)
from context_gatekeeper.editing.format import ideal_patch_reply, ideal_rewrite_reply
from context_gatekeeper.editing.compute import compute_edit
from context_gatekeeper.editing.models import as_edit_model
from context_gatekeeper.testing import ScriptedModel
from context_gatekeeper.transcripts.versioned import VersionedTranscriptMixin

STATE = [Message("q", "user", "What was Ireland's GDP in 2021?"), Message("a", "assistant", "About 504 billion USD.")]
ICELAND = [Replace("q", "What was Iceland's GDP in 2021?")]


# -- EditOptions --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        {"strategy": "x"},
        {"strategy": "PATCH"},
        {"max_deletion_share": 1.5},
        {"max_deletion_share": -0.1},
        {"max_deletion_share": True},
        {"max_deletion_share": "0.5"},
        {"allow_large_deletion": "yes"},
        {"token_counter": "no-such-encoding"},
    ],
)
def test_bad_values_are_the_same_invalid_input_error_wherever_they_are_built(bad: dict[str, Any]) -> None:
    t = Transcript("t")
    t.append(user="What was Ireland's GDP in 2021?", assistant="About 504 billion USD.")
    builds = [
        lambda: EditOptions(**bad),
        lambda: EditOptions().with_(**bad),
        lambda: compute_edit(STATE, "Iceland", ScriptedModel([]), **bad),
        lambda: compute_edit(STATE, "Iceland", ScriptedModel([]), options=EditOptions(), **bad),
    ]
    if "allow_large_deletion" in bad:  # an edit's own setting
        builds.append(lambda: t.edit("Iceland", model=ScriptedModel([]), **bad))
    else:  # the transcript's defaults
        builds.append(lambda: Transcript("t", **bad))
    if "strategy" in bad:
        builds.append(lambda: t.edit("Iceland", model=ScriptedModel([]), **bad))
    messages = set()
    for build in builds:
        with pytest.raises(InvalidInputError) as info:
            build()
        messages.add(str(info.value))
    assert len(messages) == 1, messages
    assert t.head == 1  # a refused edit changes nothing


def test_a_token_counter_that_cannot_count_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="token_counter"):
        EditOptions(token_counter=42)


def test_options_are_frozen_and_with_checks_like_a_new_record() -> None:
    options = EditOptions(strategy="rewrite", max_deletion_share=0.3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.strategy = "patch"  # type: ignore[misc]
    assert options.with_(strategy=None) is options and options.with_(strategy="patch").max_deletion_share == 0.3
    with pytest.raises(InvalidInputError):
        options.with_(max_deletion_share=2)
    with pytest.raises(TypeError, match="no field 'stratgy'"):
        options.with_(stratgy="patch")
    assert EditOptions(max_deletion_share=1) == EditOptions(max_deletion_share=1.0)


def test_keywords_override_the_fields_of_options() -> None:
    rewrite = ideal_rewrite_reply(STATE, ICELAND)
    model = ScriptedModel([rewrite])
    result = compute_edit(STATE, "Iceland", model, options=EditOptions(strategy="patch"), strategy="rewrite")
    assert result.strategy == "rewrite" and "JSON array" in model.calls[0].text
    wipe = '{"operations": [{"op": "replace", "id": "2", "content": "No."}]}'
    strict = EditOptions(max_deletion_share=0.05)
    with pytest.raises(EditError, match="limit 5%"):
        compute_edit(STATE, "shorter", ScriptedModel([wipe]), options=strict)
    allowed = compute_edit(STATE, "shorter", ScriptedModel([wipe]), options=strict, allow_large_deletion=True)
    assert allowed.changed


def test_options_travel_from_the_transcript_to_the_deletion_guard() -> None:
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text.split())

    t = Transcript("opts", options=EditOptions(strategy="rewrite", token_counter=count))
    assert (t.strategy, t.max_deletion_share, t.token_counter) == ("rewrite", 0.6, count)
    t.append(user="What was Ireland's GDP in 2021?", assistant="About 504 billion USD.")
    q = t.messages[0]
    model = ScriptedModel([ideal_rewrite_reply(t.messages, [Replace(q.id, "What was Iceland's GDP in 2021?")])])
    t.edit("Iceland", model=model)
    assert counted and t.history()[-1].kind == "edit" and "JSON array" in model.calls[0].text
    patch = ScriptedModel([ideal_patch_reply(t.messages, [Replace(q.id, "Iceland's GDP?")])])
    proposal = t.edit("shorter", model=patch, options=EditOptions(strategy="patch"), preview=True)  # its own options
    assert proposal.strategy == "patch"


def test_per_call_options_tighten_but_never_loosen_the_transcripts_deletion_guard() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_gatekeeper import GatekeeperChatMessageHistory

    counted: list[str] = []
    history = GatekeeperChatMessageHistory(
        "guard", max_deletion_share=0.1, token_counter=lambda text: counted.append(text) or len(text.split())
    )
    history.add_messages([HumanMessage("one two three four five"), AIMessage("six seven eight nine ten"),
                          HumanMessage("eleven twelve thirteen"), AIMessage("fourteen fifteen sixteen")])
    first, second = history.message_ids()[:2]
    drop = json.dumps({"operations": [{"op": "delete", "id": "1"}, {"op": "delete", "id": "2"}]})
    before, head = list(history.messages), history.transcript.head
    counted.clear()
    with pytest.raises(EditError, match="limit 10%"):
        history.edit("drop the first turn", ScriptedModel([drop]), options=EditOptions(strategy="patch"))
    assert history.messages == before and history.transcript.head == head and counted  # the history's counter
    with pytest.raises(EditError, match="limit 5%"):
        history.edit("drop it", ScriptedModel([drop]), options=EditOptions(max_deletion_share=0.05))
    revision = history.edit("drop it", ScriptedModel([drop]), options=EditOptions(), allow_large_deletion=True)
    assert {m.id for m in revision.removed} == {first, second}


def test_the_versioned_mixin_passes_options_through() -> None:
    class Host(VersionedTranscriptMixin):
        def __init__(self) -> None:
            self._versioned_transcript = Transcript("host")

        def _edit_model(self, model: Any, llm: Any) -> Any:
            return resolve_model(model, llm)

        def _export_messages(self, messages: Any) -> list[Any]:
            return list(messages)

    host = Host()
    host._versioned_transcript.append(user="What was Ireland's GDP in 2021?", assistant="About 504 billion USD.")
    q = host._versioned_transcript.messages[0]
    model = ScriptedModel([ideal_rewrite_reply(host._versioned_transcript.messages, [Replace(q.id, "Iceland?")])])
    proposal = host.edit("Iceland", llm=model, options=EditOptions(strategy="rewrite"), preview=True)
    assert proposal.strategy == "rewrite" and "JSON array" in model.calls[0].text


@pytest.mark.parametrize("instruction", ["   ", None, 7])
@pytest.mark.parametrize("adapter", ["langchain", "llamaindex"])
def test_adapters_refuse_a_bad_instruction_before_looking_for_a_model(
    instruction: Any, adapter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)  # the default model would be "no API key"
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    if adapter == "langchain":
        from langchain_gatekeeper import GatekeeperChatMessageHistory

        host: Any = GatekeeperChatMessageHistory("blank")
    else:
        from llamaindex_gatekeeper import GatekeeperMemory

        host = GatekeeperMemory.from_defaults(session_id="blank")
    expected = InvalidInputError if isinstance(instruction, str) else TypeError
    for call in (lambda: host.edit(instruction), lambda: asyncio.run(host.aedit(instruction))):
        with pytest.raises(expected, match="the edit instruction") as info:
            call()
        assert "say what to change" in str(info.value) and "API key" not in str(info.value)


# -- resolve_model ------------------------------------------------------------------------
def test_each_kind_of_model_is_wrapped_exactly_once() -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from llama_index.core.llms import MockLLM

    from langchain_gatekeeper import LangChainEditModel, resolve_edit_model as lc_resolve
    from llamaindex_gatekeeper import LlamaIndexEditModel, resolve_edit_model as li_resolve

    def layers(model: Any) -> int:
        depth = 0
        while isinstance(model, EditModel):
            depth, model = depth + 1, model.wrapped
        return depth

    chat, llm = GenericFakeChatModel(messages=iter([])), MockLLM()
    plain = lambda messages: "{}"  # noqa: E731
    for resolve in (resolve_model, lc_resolve, li_resolve):
        assert type(resolve(chat)) is LangChainEditModel and resolve(chat).wrapped is chat
        assert type(resolve(llm=llm)) is LlamaIndexEditModel and resolve(llm=llm).wrapped is llm
        assert type(resolve(plain)) is EditModel and resolve(plain).wrapped is plain
        for model in (chat, llm, plain, ScriptedModel([])):
            resolved = resolve(model)
            assert layers(resolved) == 1 and as_edit_model(resolved) is resolved
    ready = resolve_model(plain)
    assert resolve_model(ready) is ready


def test_adapters_resolve_a_given_model_once_at_construction_and_the_default_only_at_an_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from langchain_gatekeeper import GatekeeperChatMessageHistory, GatekeeperMiddleware, LangChainEditModel
    from llamaindex_gatekeeper import GatekeeperMemory

    for key in ("GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    chat = GenericFakeChatModel(messages=iter([]))
    middleware = GatekeeperMiddleware(model=chat)
    assert type(middleware.edit_model) is LangChainEditModel and middleware.edit_model.wrapped is chat
    assert GatekeeperMiddleware().edit_model is None  # no key needed until an edit runs
    assert GatekeeperChatMessageHistory("s").transcript.model is None
    for build in (
        lambda: GatekeeperMiddleware(model=GenericFakeChatModel),
        lambda: GatekeeperChatMessageHistory("s", llm=GenericFakeChatModel),
        lambda: GatekeeperMemory.from_defaults(model=GenericFakeChatModel),
    ):
        with pytest.raises(TypeError, match="not the class GenericFakeChatModel"):
            build()  # a bad model fails when it is passed, not at the first edit


def test_model_and_llm_both_given_and_different_is_a_clear_error() -> None:
    a, b = ScriptedModel([], name="a"), ScriptedModel([], name="b")
    with pytest.raises(TypeError, match=r"not both: got model='a' and llm='b'"):
        resolve_model(model=a, llm=b)
    assert resolve_model(model=a, llm=a).wrapped is a


def test_the_default_is_a_factory_called_only_when_needed() -> None:
    calls: list[int] = []

    def default() -> Any:
        calls.append(1)
        return ScriptedModel([], name="default")

    assert resolve_model(ScriptedModel([], name="given"), default=default).name == "given" and not calls
    assert resolve_model(default=default).name == "default" and calls == [1]
    with pytest.raises(ModelUnavailableError, match="pass model="):
        resolve_model()


def test_a_framework_default_is_resolved_like_a_given_model() -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from langchain_gatekeeper import LangChainEditModel

    chat = GenericFakeChatModel(messages=iter([]))
    assert type(resolve_model(default=lambda: chat)) is LangChainEditModel


# -- ModelUnavailableError says each hint once ---------------------------------------------
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)


@pytest.mark.parametrize("adapter", ["langchain_gatekeeper", "llamaindex_gatekeeper"])
def test_missing_key_messages_say_each_hint_once(monkeypatch: pytest.MonkeyPatch, adapter: str) -> None:
    _no_key(monkeypatch)
    resolve = __import__(adapter).resolve_edit_model
    with pytest.raises(ModelUnavailableError) as info:
        resolve()
    text = str(info.value)
    assert text.count("GOOGLE_API_KEY") == 1 and text.count("model=") == 1 and text.count("no editing model") == 1


def test_the_chat_names_its_own_options_not_model_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.genai")
    from context_gatekeeper.chat.app import _models, build_parser

    _no_key(monkeypatch)
    with pytest.raises(ModelUnavailableError) as info:
        _models(build_parser().parse_args([]))
    assert "--offline" in str(info.value) and "model=" not in str(info.value)

    monkeypatch.setenv("GOOGLE_API_KEY", "dummy-key-not-used")
    chat_model, _editor, _label = _models(build_parser().parse_args([]))

    def unreachable(**kwargs: Any) -> Any:
        raise ConnectionError("network is unreachable")

    chat_model.client = SimpleNamespace(models=SimpleNamespace(generate_content=unreachable))
    with pytest.raises(ModelUnavailableError) as info:
        chat_model.complete([{"role": "user", "content": "hi"}])
    text = str(info.value)
    assert "--offline" in text and "/retry" in text and "model=" not in text


def test_options_pickle_and_copy_without_their_resolved_counter() -> None:
    import copy
    import pickle

    options = EditOptions(strategy="rewrite", token_counter="cl100k_base")
    assert options.count("hello world") > 0  # resolved (a closure, which pickle cannot hold)
    assert pickle.loads(pickle.dumps(options)) == options == copy.deepcopy(options)
    t = Transcript("p", options=options)
    assert copy.deepcopy(t.edit_options).strategy == "rewrite"


# -- a per-call record keeps the transcript's strategy unless it names one -----------
@pytest.mark.parametrize("asynchronous", [False, True], ids=["edit", "aedit"])
def test_per_call_options_keep_the_transcripts_strategy_unless_they_name_one(asynchronous: bool, tmp_path) -> None:
    """``options=EditOptions(token_counter=len)`` silently reset a rewrite transcript to patch: the
    model was asked for operations, not the revised conversation."""
    from context_gatekeeper import SQLiteStore

    with Transcript("s", store=SQLiteStore(tmp_path / "t.db"), strategy="rewrite", max_deletion_share=0.9) as t:
        t.append(user="What was Ireland's GDP in 2021?", assistant="About 504 billion USD.")
        q = t.messages[0]

        def edit(model: ScriptedModel, options: EditOptions) -> Any:
            if asynchronous:
                return asyncio.run(t.aedit("Iceland", model=model, options=options, preview=True))
            return t.edit("Iceland", model=model, options=options, preview=True)

        rewrite = ScriptedModel([ideal_rewrite_reply(t.messages, [Replace(q.id, "What was Iceland's GDP in 2021?")])])
        proposal = edit(rewrite, EditOptions(token_counter=len, max_deletion_share=0.5))
        assert proposal.strategy == "rewrite" and "JSON array" in rewrite.calls[0].text
        patch = ScriptedModel([ideal_patch_reply(t.messages, [Replace(q.id, "What was Iceland's GDP in 2021?")])])
        assert edit(patch, EditOptions(strategy="patch")).strategy == "patch"  # named: it holds
        assert t._edit_settings(EditOptions(), None, None).strategy == "rewrite"
        assert t._edit_settings(EditOptions(), "patch", None).strategy == "patch"  # the keyword wins
        assert t._edit_settings(EditOptions(max_deletion_share=0.5), None, None).max_deletion_share == 0.5


def test_strategy_given_tells_a_named_strategy_from_the_default_and_survives_copies() -> None:
    import copy
    import pickle

    default, named = EditOptions(), EditOptions(strategy="patch")
    assert (default.strategy_given, named.strategy_given) == (False, True)
    assert default == named and default.strategy == "patch" and repr(default) == repr(named)
    assert not default.with_(max_deletion_share=0.3).strategy_given and default.with_(strategy="patch").strategy_given
    assert EditOptions.of(None, strategy="rewrite").strategy_given
    for copied in (copy.copy(default), copy.deepcopy(default), pickle.loads(pickle.dumps(default))):
        assert not copied.strategy_given and copied == default
    assert pickle.loads(pickle.dumps(named)).strategy_given
    assert json.dumps({"strategy": default.strategy}) == '{"strategy": "patch"}'
