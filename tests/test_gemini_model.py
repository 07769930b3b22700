"""The core's Gemini model (context_gatekeeper.editing.gemini), without the network.

A fake client shows what is sent; a local HTTP server on 127.0.0.1 (google-genai
pointed at it with GOOGLE_GEMINI_BASE_URL) shows the real client is built with a
timeout and that failures become ModelUnavailableError.
"""

from __future__ import annotations

import asyncio
import json
import socket
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from net_support import no_network

from context_gatekeeper import EditError, MissingExtraError, ModelUnavailableError, Transcript
from context_gatekeeper.errors import InvalidInputError, InvalidTypeError
from context_gatekeeper.editing.finish_reasons import FilteredReplyError
from context_gatekeeper.editing.gemini import DEFAULT_GEMINI_MODEL, GeminiModel, gemini_api_key
from context_gatekeeper.errors import TruncatedReplyError
from context_gatekeeper.editing.models import as_edit_model

MESSAGES = [
    {"role": "system", "content": "You edit transcripts."},
    {"role": "user", "content": "It was Iceland."},
    {"role": "assistant", "content": "Noted: Iceland."},
    {"role": "user", "content": "Return JSON."},
]
SCHEMA = {"type": "object", "properties": {"operations": {"type": "array"}}, "required": ["operations"]}


class FakeModels:
    def __init__(self, replies: list[Any]) -> None:
        self.calls: list[dict[str, Any]] = []
        self.replies = replies

    def _answer(self, kwargs: dict[str, Any]) -> Any:
        self.calls.append(kwargs)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return SimpleNamespace(text=reply, candidates=[], prompt_feedback=None)

    def generate_content(self, **kwargs: Any) -> Any:
        return self._answer(kwargs)


class FakeAsyncModels(FakeModels):
    async def generate_content(self, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._answer(kwargs)


class FakeClient:
    def __init__(self, *replies: Any) -> None:
        self.models = FakeModels(list(replies))
        self.aio = SimpleNamespace(models=FakeAsyncModels(list(replies)))


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)


def test_missing_key_fails_fast_naming_the_fixes(no_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with no_network(monkeypatch), pytest.raises(ModelUnavailableError, match="GOOGLE_API_KEY") as info:
        GeminiModel()  # refused before any connection is tried
    assert "model=" in str(info.value)
    assert gemini_api_key() is None


def test_key_comes_from_either_variable(no_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini")
    assert gemini_api_key() == "from-gemini"
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google")
    assert gemini_api_key() == "from-google"
    assert gemini_api_key("explicit") == "explicit"


def test_missing_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)  # import fails as if not installed
    with pytest.raises(ModelUnavailableError, match=re.escape(MissingExtraError.install_command("gemini"))):
        GeminiModel(api_key="fake")


def test_construction_with_a_fake_key_does_not_touch_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.genai")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("network touched at construction")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    model = GeminiModel(api_key="fake-key", timeout=5, max_retries=2)
    assert model.name == DEFAULT_GEMINI_MODEL and model.supports_json_schema
    assert "fake-key" not in repr(model)
    options = model.client._api_client._http_options
    assert options.timeout == 5000 and options.retry_options.attempts == 1  # retries are the model's own


@pytest.mark.parametrize(("kwargs", "error", "said"), [
    ({"timeout": None}, InvalidTypeError, "timeout must be a number of seconds"),
    ({"timeout": "30"}, InvalidTypeError, "timeout must be a number of seconds"),
    ({"timeout": True}, InvalidTypeError, "timeout must be a number of seconds"),
    ({"timeout": float("inf")}, InvalidInputError, "timeout > 0 (finite, at most 86400 seconds)"),
    ({"timeout": float("nan")}, InvalidInputError, "timeout > 0 (finite, at most 86400 seconds)"),
    ({"timeout": 0}, InvalidInputError, "timeout > 0 (finite, at most 86400 seconds)"),
    ({"timeout": 1e300}, InvalidInputError, "timeout > 0 (finite, at most 86400 seconds)"),
    ({"timeout": 10**400}, InvalidInputError, "timeout > 0 (finite, at most 86400 seconds)"),  # no float holds it
    ({"max_retries": None}, InvalidTypeError, "max_retries must be an int"),
    ({"max_retries": 1.5}, InvalidTypeError, "max_retries must be an int"),
    ({"max_retries": -1}, InvalidInputError, "max_retries >= 0"),
])
def test_bad_timeout_or_retry_count_is_refused_with_the_accepted_range(kwargs, error, said) -> None:
    with pytest.raises(error, match=re.escape(said)):
        GeminiModel(api_key="fake", client=object(), **kwargs)


def test_defaults_send_one_request() -> None:
    model = GeminiModel(client=object())
    assert model.timeout == 30 and model.max_retries == 0


def test_messages_are_converted_and_structured_output_is_requested() -> None:
    client = FakeClient('{"operations": []}')
    model = GeminiModel("gemini-test", client=client)
    assert model.complete(MESSAGES, json_schema=SCHEMA) == '{"operations": []}'
    (call,) = client.models.calls
    assert call["model"] == "gemini-test"
    assert call["contents"] == [
        {"role": "user", "parts": [{"text": "It was Iceland."}]},
        {"role": "model", "parts": [{"text": "Noted: Iceland."}]},
        {"role": "user", "parts": [{"text": "Return JSON."}]},
    ]
    assert call["config"] == {
        "system_instruction": "You edit transcripts.",
        "response_mime_type": "application/json",
        "response_json_schema": SCHEMA,
    }


def test_plain_text_request_and_merged_roles() -> None:
    client = FakeClient("ok")
    model = GeminiModel(client=client)
    model.complete([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    (call,) = client.models.calls
    assert call["contents"] == [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}]
    assert call["config"] is None
    only_system = model.request([{"role": "system", "content": "do it"}])
    assert only_system["contents"] == [{"role": "user", "parts": [{"text": "do it"}]}]


def test_requests_validate_against_google_genai_types() -> None:
    types = pytest.importorskip("google.genai.types")
    request = GeminiModel(client=object()).request(MESSAGES, SCHEMA)
    config = types.GenerateContentConfig.model_validate(request["config"])
    assert config.response_json_schema == SCHEMA and config.response_mime_type == "application/json"
    assert [types.Content.model_validate(c).role for c in request["contents"]] == ["user", "model", "user"]


def test_async_uses_the_async_client() -> None:
    client = FakeClient("async reply")
    model = GeminiModel(client=client)
    assert asyncio.run(model.acomplete(MESSAGES)) == "async reply"
    assert client.aio.models.calls and not client.models.calls


def test_network_failures_become_model_unavailable() -> None:
    model = GeminiModel(client=FakeClient(TimeoutError("read timed out"), ConnectionError("refused")))
    with pytest.raises(ModelUnavailableError, match="GOOGLE_API_KEY"):
        model.complete(MESSAGES)
    with pytest.raises(ModelUnavailableError):
        model.complete(MESSAGES)


def test_api_errors_by_status() -> None:
    errors = pytest.importorskip("google.genai.errors")
    bad_key = errors.ClientError(400, {"error": {"message": "API key not valid.", "status": "INVALID_ARGUMENT"}})
    overloaded = errors.ServerError(503, {"error": {"message": "overloaded", "status": "UNAVAILABLE"}})
    bad_request = errors.ClientError(400, {"error": {"message": "bad schema", "status": "INVALID_ARGUMENT"}})
    model = GeminiModel(client=FakeClient(bad_key, overloaded, bad_request))
    with pytest.raises(ModelUnavailableError):
        model.complete(MESSAGES)
    with pytest.raises(ModelUnavailableError):
        model.complete(MESSAGES)
    with pytest.raises(errors.ClientError):  # not about reachability: the core reports it as an EditError
        model.complete(MESSAGES)


def test_retries_are_the_same_sync_and_async_and_never_after_a_rejected_key() -> None:
    errors = pytest.importorskip("google.genai.errors")
    overloaded = errors.ServerError(503, {"error": {"message": "overloaded", "status": "UNAVAILABLE"}})
    bad_key = errors.ClientError(400, {"error": {"message": "API key not valid.", "status": "INVALID_ARGUMENT"}})
    client = FakeClient(TimeoutError(), overloaded, "ok", bad_key)
    model = GeminiModel(client=client, max_retries=2)
    model.RETRY_DELAY = 0  # type: ignore[misc]
    assert model.complete(MESSAGES) == "ok" and len(client.models.calls) == 3
    assert asyncio.run(model.acomplete(MESSAGES)) == "ok" and len(client.aio.models.calls) == 3
    with pytest.raises(ModelUnavailableError, match="API key"):
        model.complete(MESSAGES)
    with pytest.raises(ModelUnavailableError, match="API key"):
        asyncio.run(model.acomplete(MESSAGES))
    assert len(client.models.calls) == len(client.aio.models.calls) == 4  # a rejected key is not asked again


def test_a_silent_timeout_says_how_long_it_waited() -> None:
    model = GeminiModel(client=FakeClient(asyncio.TimeoutError()), timeout=7)
    with pytest.raises(ModelUnavailableError, match=r"\(TimeoutError: no answer within 7 s\)"):
        asyncio.run(model.acomplete(MESSAGES))


def test_an_empty_reply_is_an_edit_error() -> None:
    with pytest.raises(EditError, match="no text"):
        GeminiModel(client=FakeClient(None)).complete(MESSAGES)


def _finished(text: str | None, reason: str) -> GeminiModel:
    """A GeminiModel whose every reply is ``text`` with google-genai's finish reason ``reason``."""
    finish = pytest.importorskip("google.genai.types").FinishReason[reason]
    response = SimpleNamespace(text=text, candidates=[SimpleNamespace(finish_reason=finish)], prompt_feedback=None)
    calls: list[dict[str, Any]] = []
    client = SimpleNamespace(models=SimpleNamespace(generate_content=lambda **kw: calls.append(kw) or response))
    model = GeminiModel(client=client)
    model.calls = calls  # type: ignore[attr-defined]
    return model


def test_max_tokens_with_no_text_is_a_truncation_and_the_edit_asks_again() -> None:
    # gemini-2.5 may spend the whole output budget on thinking and return no text at all
    t = Transcript("thinking")
    t.append(user="Trip to Ireland?", assistant="Dublin first.")
    model = _finished(None, "MAX_TOKENS")
    with pytest.raises(TruncatedReplyError, match="output limit") as info:
        t.edit("Iceland, not Ireland", model=model)
    assert info.value.finish_reason == "MAX_TOKENS" and len(model.calls) == 2  # type: ignore[attr-defined]
    assert t.head == 1


def test_a_reply_without_text_names_its_finish_reason() -> None:
    with pytest.raises(EditError, match=r"finish reason: OTHER\)") as info:
        _finished(None, "OTHER").complete(MESSAGES)
    assert "namespace" not in str(info.value) and "FinishReason" not in str(info.value)


@pytest.mark.parametrize("reason", ["SAFETY", "RECITATION", "PROHIBITED_CONTENT"])
@pytest.mark.parametrize("text", ['{"operations": []}', None])
def test_a_reply_stopped_for_safety_ends_the_edit_after_one_request(reason: str, text: str | None) -> None:
    t = Transcript("safety")
    t.append(user="Trip to Ireland?", assistant="Dublin first.")
    model = _finished(text, reason)
    with pytest.raises(FilteredReplyError, match="safety or content policy") as info:
        t.edit("Iceland, not Ireland", model=model)
    assert info.value.finish_reason == reason and len(model.calls) == 1  # type: ignore[attr-defined]
    assert t.head == 1


def test_edits_go_through_the_core_protocol() -> None:
    transcript = Transcript("gemini")
    transcript.append(user="We went to Ireland in 2021.", assistant="Ireland in 2021, noted.")
    client = FakeClient('{"operations": []}')
    model = GeminiModel(client=client)
    assert as_edit_model(model).supports_json_schema
    transcript.edit("nothing to change", model=model)
    (call,) = client.models.calls
    assert call["config"]["response_mime_type"] == "application/json"
    assert "system_instruction" in call["config"]


# -- the real client against a local server ---------------------------------------------------


EMPTY_TEXT = {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "Unable to submit request because "
              "it has an empty text parameter. Add a value to the parameter and try again."}}
"""What the Gemini API answers a request holding an empty text part."""


class _Handler(BaseHTTPRequestHandler):
    """Answers like the Gemini API; with ``hold`` set, answers only once ``release`` is set.

    ``answers`` (popped in order) are replies to give before the default one; a request
    holding an empty text part is refused with 400, as the real API does.
    """

    bodies: list[dict[str, Any]] = []
    hold = False
    release = threading.Event()
    status = 200
    answers: list[dict[str, Any]] = []

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if any(p.get("text") == "" for c in body.get("contents", []) for p in c.get("parts", [])):
            return 400, EMPTY_TEXT
        if type(self).answers:
            return 200, type(self).answers.pop(0)
        if type(self).status != 200:
            return type(self).status, {"error": {"code": type(self).status, "message": "down", "status": "UNAVAILABLE"}}
        return 200, {"candidates": [{"content": {"role": "model", "parts": [{"text": '{"operations": []}'}]}}]}

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        type(self).bodies.append({"path": self.path, "body": body})
        if type(self).hold:
            type(self).release.wait()  # the fixture's teardown sets it: no reply before the client gave up
        status, reply = self._answer(body)
        data = json.dumps(reply).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout test)
            pass

    def log_message(self, *args: Any) -> None:
        pass


class _JoinedServer(ThreadingHTTPServer):
    """A threading server whose request threads ``server_close`` joins (none outlives a test)."""

    daemon_threads = False
    block_on_close = True


@pytest.fixture
def local_gemini(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("google.genai")
    fresh = {"bodies": [], "hold": False, "release": threading.Event(), "status": 200, "answers": []}
    handler = type("Handler", (_Handler,), fresh)
    server = _JoinedServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()  # joins the request threads
        thread.join()


def test_real_client_sends_system_roles_and_schema(local_gemini) -> None:
    model = GeminiModel(api_key="fake", timeout=5, max_retries=0)
    assert model.complete(MESSAGES, json_schema=SCHEMA) == '{"operations": []}'
    assert asyncio.run(model.acomplete(MESSAGES)) == '{"operations": []}'
    first = local_gemini.bodies[0]
    assert first["path"].endswith(f"/models/{DEFAULT_GEMINI_MODEL}:generateContent")
    body = first["body"]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["systemInstruction"]["parts"][0]["text"] == "You edit transcripts."
    assert body["generationConfig"]["responseJsonSchema"] == SCHEMA
    assert body["generationConfig"]["responseMimeType"] == "application/json"


def test_real_client_times_out_quickly(local_gemini) -> None:
    local_gemini.hold = True  # no answer until the test is over
    model = GeminiModel(api_key="fake", timeout=0.5, max_retries=0)
    with pytest.raises(ModelUnavailableError, match="could not be used") as info:
        model.complete(MESSAGES)
    assert "ReadTimeout" in str(info.value)  # the client's own timeout ended the call, not the slow server


def test_real_client_server_error_is_unavailable(local_gemini) -> None:
    local_gemini.status = 503
    with pytest.raises(ModelUnavailableError, match="could not be used"):
        GeminiModel(api_key="fake", timeout=5, max_retries=0).complete(MESSAGES)


def test_real_client_sends_one_request_sync_and_async_by_default(local_gemini) -> None:
    local_gemini.hold = True  # no answer until the test is over
    model = GeminiModel(api_key="fake", timeout=0.5)
    with pytest.raises(ModelUnavailableError, match="could not be used"):
        model.complete(MESSAGES)
    assert len(local_gemini.bodies) == 1
    with pytest.raises(ModelUnavailableError, match="could not be used") as info:
        asyncio.run(model.acomplete(MESSAGES))
    assert len(local_gemini.bodies) == 2 and "Error: )" not in str(info.value)  # the timeout is described


def test_real_client_server_error_is_sent_once_by_default(local_gemini) -> None:
    local_gemini.status = 500
    model = GeminiModel(api_key="fake", timeout=5)
    with pytest.raises(ModelUnavailableError):
        model.complete(MESSAGES)
    with pytest.raises(ModelUnavailableError):
        asyncio.run(model.acomplete(MESSAGES))
    assert len(local_gemini.bodies) == 2


def _gdp_transcript() -> Transcript:
    transcript = Transcript("gemini-server")
    transcript.append(user="Ireland GDP?", assistant="500 bn USD.")
    return transcript


def test_a_thinking_only_reply_is_asked_again_without_an_empty_assistant_message(local_gemini) -> None:
    good = '{"operations": [{"op": "replace", "id": "1", "content": "Iceland GDP?"}]}'
    local_gemini.answers = [
        {"candidates": [{"finishReason": "MAX_TOKENS", "index": 0}]},  # thought away the whole budget
        {"candidates": [{"content": {"role": "model", "parts": [{"text": good}]}, "finishReason": "STOP"}]},
    ]
    transcript = _gdp_transcript()
    transcript.edit("Iceland, not Ireland", model=GeminiModel(api_key="fake", timeout=5))
    assert [m.content for m in transcript.messages] == ["Iceland GDP?", "500 bn USD."]
    assert len(local_gemini.bodies) == 2  # the retry was accepted (no empty text part in it)


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_blocked_prompt_is_a_filtered_reply_after_one_request(local_gemini, run: str) -> None:
    local_gemini.status = 200
    local_gemini.answers = [{"promptFeedback": {"blockReason": "SAFETY"}}] * 2
    transcript = _gdp_transcript()
    model = GeminiModel(api_key="fake", timeout=5)
    with pytest.raises(FilteredReplyError, match="blocked the prompt") as info:
        if run == "sync":
            transcript.edit("Iceland, not Ireland", model=model)
        else:
            asyncio.run(transcript.aedit("Iceland, not Ireland", model=model))
    assert info.value.finish_reason == "SAFETY" and len(local_gemini.bodies) == 1
    assert transcript.head == 1
