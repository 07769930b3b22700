"""The web chat's server (context_gatekeeper.chat.web), driven through Starlette's TestClient.

Routes, streaming, edits with preview / commit / discard, undo / redo / revert, two
pages on one session, the same-origin checks, the asset list (no path escapes it)
and errors as JSON messages.  A real SQLite file per test; scripted models only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI", "").lower() != "true":  # CI installs the web extra: there it must run
    pytest.importorskip("starlette", reason="the web chat needs the 'web' extra: pip install 'context-gatekeeper[web]'")
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")

from starlette.testclient import TestClient

from context_gatekeeper import Delete, HistoryError, Message, ModelUnavailableError, SQLiteStore, Transcript
from context_gatekeeper.chat.session import pin_record_id
from context_gatekeeper.chat.offline import OfflineChatModel, OfflineEditor
from context_gatekeeper.chat.web.server import ASSETS, STATIC, allowed_hosts_for, create_app
from context_gatekeeper.chat.web.service import WebChat
from context_gatekeeper.chat.web.views import CONTEXT_KEY, word_diff
from context_gatekeeper.integration import ideal_patch_reply
from chat_support import AGENT_CONVERSATION

TOKEN = "test-token"
BASE = "http://127.0.0.1:8765"
HEADERS = {"x-gatekeeper-token": TOKEN}


class StreamingModel:
    """A chat model that streams its answer in three chunks (and records what it was sent)."""

    def __init__(self) -> None:
        self.sent: list[list[dict[str, str]]] = []

    def stream_text(self, messages: Sequence[Mapping[str, str]]) -> Iterator[str]:
        self.sent.append([dict(m) for m in messages])
        question = str(messages[-1]["content"])
        yield "About "
        yield question.rstrip("?")
        yield ": here is the answer."

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        return "".join(self.stream_text(messages))


class FailingModel:
    """A chat model whose every call fails."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        raise self.exc


class DeleteAllButFirstTurn:
    """An editor that deletes every turn but the first (a large deletion)."""

    def complete(self, messages: Sequence[Mapping[str, Any]]) -> str:
        prompt = str(messages[-1]["content"])
        found = re.search(r"<conversation>\n?(.*?)\n?</conversation>", prompt, re.S)
        assert found is not None
        from context_gatekeeper import Message

        state = [Message(str(m["id"]), m["role"], m["content"]) for m in json.loads(found.group(1))]
        return ideal_patch_reply(state, [Delete(m.id) for m in state[2:]])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "chat.sqlite3")
    try:
        yield s
    finally:
        s.close()


def make_client(store: SQLiteStore, chat_model: Any = None, editor: Any = None, **options: Any) -> tuple[WebChat, TestClient]:
    chat = WebChat(store, chat_model or StreamingModel(), editor or OfflineEditor(), **options)
    return chat, TestClient(create_app(chat, token=TOKEN), base_url=BASE)


@pytest.fixture
def client(store: SQLiteStore) -> Iterator[TestClient]:
    _, c = make_client(store)
    with c:
        yield c


def post(client: TestClient, path: str, body: dict[str, Any], **headers: str) -> Any:
    return client.post(path, content=json.dumps(body), headers={**HEADERS, "content-type": "application/json", **headers})


def send(client: TestClient, text: str, session: str = "s") -> list[dict[str, Any]]:
    response = post(client, "/api/chat", {"session": session, "text": text})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def view(client: TestClient, session: str = "s") -> dict[str, Any]:
    response = client.get("/api/view", params={"session": session}, headers=HEADERS)
    assert response.status_code == 200, response.text
    return response.json()


def sessions(client: TestClient) -> list[str]:
    response = client.get("/api/sessions", headers=HEADERS)
    assert response.status_code == 200, response.text
    return list(response.json()["sessions"])


# -- the page and its assets ---------------------------------------------------------------


def test_the_page_carries_its_token_and_a_strict_content_security_policy(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert f'content="{TOKEN}"' in page.text and "{{TOKEN}}" not in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    for src in re.findall(r'(?:src|href)="([^"]+)"', page.text):
        assert src.startswith("/static/"), f"every asset is served by the package, not {src}"
        assert client.get(src).status_code == 200
    for name, kind in ASSETS.items():
        response = client.get(f"/static/{name}")
        assert response.headers["content-type"] == kind
        assert response.content == (STATIC / name).read_bytes()


def test_the_page_never_builds_html_from_text() -> None:
    script = (STATIC / "app.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, f"app.js uses {sink}: render text with textContent"
    assert "http://" not in script and "https://" not in script, "no CDN, no remote request"


@pytest.mark.parametrize(
    "path",
    [
        "/static/../server.py",
        "/static/%2e%2e/server.py",
        "/static/..%2fserver.py",
        "/static/%2e%2e%2f%2e%2e%2fsession.py",
        "/static/server.py",
        "/static/index.html/../../server.py",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/static/app.js%00.py",
        "/static/",
        "/../../../../etc/passwd",
        "/server.py",
    ],
)
def test_nothing_outside_the_assets_is_served(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert "error" in response.json()
    assert "import" not in response.text and "root:" not in response.text


# -- same-origin checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"x-gatekeeper-token": ""}, 403),
        ({"x-gatekeeper-token": "wrong"}, 403),
        ({"origin": "http://evil.example"}, 403),
        ({"origin": "http://127.0.0.1:9999"}, 403),
        ({"sec-fetch-site": "cross-site"}, 403),
        ({"sec-fetch-site": "same-site"}, 403),
        ({"content-type": "text/plain"}, 415),
        ({"host": "evil.example:8765"}, 421),
    ],
)
def test_a_state_changing_request_from_elsewhere_is_refused_and_changes_nothing(
    client: TestClient, headers: dict[str, str], status: int
) -> None:
    send(client, "What was the GDP of Ireland in 2021?")
    before = view(client)
    for path, body in [
        ("/api/chat", {"session": "s", "text": "hello"}),
        ("/api/undo", {"session": "s"}),
        ("/api/sessions/delete", {"session": "s", "confirm": "s"}),
        ("/api/pin", {"session": "s", "turn": 1}),
    ]:
        response = post(client, path, body, **headers)
        assert response.status_code == status, (path, response.text)
        assert response.json()["error"]
    assert view(client) == before


def test_the_same_origin_page_with_its_token_is_accepted(client: TestClient) -> None:
    headers = {"origin": BASE, "sec-fetch-site": "same-origin"}
    assert post(client, "/api/sessions/new", {"name": "work"}, **headers).status_code == 200


def test_reading_needs_a_host_name_this_server_answers(client: TestClient) -> None:
    assert client.get("/", headers={"host": "rebound.example"}).status_code == 421
    assert client.get("/api/view?session=s", headers={**HEADERS, "host": "localhost:8765"}).status_code == 200


def test_only_get_and_post_are_allowed(client: TestClient) -> None:
    for method in ("PUT", "DELETE", "PATCH"):
        response = client.request(method, "/api/undo", headers=HEADERS)
        assert response.status_code == 405 and "POST" in response.json()["error"]
    assert client.get("/api/undo", headers=HEADERS).status_code == 405  # a GET never changes anything


def test_allowed_hosts_follow_the_bound_address() -> None:
    assert allowed_hosts_for("127.0.0.1") == ("127.0.0.1", "localhost", "::1")
    assert "192.168.1.5" in allowed_hosts_for("192.168.1.5")
    wildcard = allowed_hosts_for("0.0.0.0", ["Chat.Example"])
    assert "*" not in wildcard and "chat.example" in wildcard and socket.gethostname().lower() in wildcard


@pytest.mark.parametrize("bound", ["0.0.0.0", "::"])
def test_a_wildcard_server_answers_its_own_names_and_addresses_never_a_rebound_domain(store: SQLiteStore, bound: str) -> None:
    chat = WebChat(store, StreamingModel(), OfflineEditor())
    app = create_app(chat, host=bound, token=TOKEN, allowed_hosts=["chat.example"])
    for base in ("http://evil.example:8765", "http://localhost.evil.example:8765"):  # a DNS-rebinding page
        with TestClient(app, base_url=base) as rebound:
            assert rebound.get("/").status_code == 421 and TOKEN not in rebound.get("/").text
            refused = post(rebound, "/api/sessions/new", {"name": "x"}, origin=base)
            assert refused.status_code == 421 and "--allowed-host" in refused.json()["error"]
    for n, base in enumerate(("http://192.168.1.5:8765", "http://[fe80::1]:8765", "http://localhost:8765",
                              "http://CHAT.example:8765", f"http://{socket.gethostname()}:8765")):
        with TestClient(app, base_url=base) as own:
            assert own.get("/").status_code == 200, base
            assert post(own, "/api/sessions/new", {"name": f"x{n}"}, origin=base).status_code == 200, base
    assert store.sessions() == [], "refused requests stored nothing"


def test_the_api_answers_only_the_page_even_to_read(client: TestClient, store: SQLiteStore) -> None:
    send(client, "What was the GDP of Ireland in 2021?", session="work")
    cross_site = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image"}
    for path in ("/api/view?session=VISIT%20evil.example", "/api/sessions"):
        for headers in ({}, {"x-gatekeeper-token": "wrong"}, {**HEADERS, **cross_site}, {**HEADERS, "sec-fetch-site": "same-site"}):
            response = client.get(path, headers=headers)
            assert response.status_code == 403 and response.json()["error"], (path, headers)
    assert client.get("/", headers={"sec-fetch-site": "cross-site"}).status_code == 200  # a link to the page still works
    view(client, "VISIT evil.example")  # the page itself may look at any name: that registers nothing
    assert sessions(client) == ["work"] and store.sessions() == ["work"]
    assert post(client, "/api/sessions/new", {"name": "later"}).status_code == 200
    assert sessions(client) == ["later", "work"], "a conversation made with New is listed while still empty"
    assert view(client, "other")["sessions"] == ["later", "other", "work"], "the one shown is listed in its own view"


# -- chat ------------------------------------------------------------------------------------


def test_an_answer_streams_in_chunks_and_is_stored_whole_with_its_context(client: TestClient, store: SQLiteStore) -> None:
    events = send(client, "What was the GDP of Ireland in 2021?")
    assert [e["type"] for e in events] == ["start", "chunk", "chunk", "chunk", "done"]
    assert "".join(e["text"] for e in events if e["type"] == "chunk") == "About What was the GDP of Ireland in 2021: here is the answer."
    done = events[-1]["view"]
    assert [m["role"] for m in done["messages"]] == ["user", "assistant"]
    assert done["messages"][1]["content"] == "About What was the GDP of Ireland in 2021: here is the answer."
    assert done["head"] == 1 and done["history"][0]["kind"] == "append"
    stored = Transcript("s", store=store).messages
    assert CONTEXT_KEY in stored[1].metadata  # the strip survives a restart


def test_the_context_strip_shows_what_was_sent_left_out_and_saved(client: TestClient) -> None:
    send(client, "What was the GDP of Ireland in 2021?")
    send(client, "How does Postgres streaming replication work?")
    events = send(client, "How much replication lag does Postgres streaming replication have?")
    start = events[0]
    assert start["type"] == "start" and start["context"] is not None, "the strip arrives with the answer"
    strip = events[-1]["view"]["messages"][-1]["context"]
    assert strip == start["context"]
    by_turn = {e["turn"]: e for e in strip["earlier"]}
    assert set(by_turn) == {1, 2}
    assert by_turn[2]["kept"] and by_turn[2]["why"], "a kept turn says why"
    assert not by_turn[1]["kept"] and by_turn[1]["reason"]
    assert strip["decision"] in ("continue", "switch", "return")
    assert strip["tokens_saved"] == strip["tokens_total"] - strip["tokens_kept"] > 0


def test_a_pinned_turn_is_sent_and_the_strip_says_so(store: SQLiteStore) -> None:
    model = StreamingModel()
    _, client = make_client(store, model)
    with client:
        send(client, "What was the GDP of Ireland in 2021?")
        send(client, "How does Postgres streaming replication work?")
        pinned = post(client, "/api/pin", {"session": "s", "turn": 1, "pinned": True}).json()
        assert pinned["pinned"] == [1] and pinned["messages"][0]["pinned"]
        events = send(client, "How much replication lag does Postgres have?")
        assert any("Ireland" in m["content"] for m in model.sent[-1])
        first = next(e for e in events[-1]["view"]["messages"][-1]["context"]["earlier"] if e["turn"] == 1)
        assert first["kept"] and "pinned" in (first["reason"] + first["why"])
        assert post(client, "/api/pin", {"session": "s", "turn": 1, "pinned": False}).json()["pinned"] == []


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (ModelUnavailableError("no network: set GOOGLE_API_KEY or pass --offline"), "no network"),
        (RuntimeError("boom"), "RuntimeError: boom"),
    ],
)
def test_a_failing_model_shows_a_message_and_stores_nothing(store: SQLiteStore, exc: BaseException, words: str) -> None:
    _, client = make_client(store, FailingModel(exc))
    with client:
        events = send(client, "hello there")
    assert [e["type"] for e in events] == ["start", "error"]
    assert words in events[-1]["message"] and "not added" in events[-1]["message"]
    assert "Traceback" not in json.dumps(events)
    assert events[-1]["view"]["messages"] == [] and Transcript("s", store=store).head == 0


def test_bad_chat_input_is_a_json_error(client: TestClient) -> None:
    for body in ({"session": "s", "text": "   "}, {"session": "s", "text": 5}, {"session": "", "text": "hi"}):
        response = post(client, "/api/chat", body)
        assert response.status_code == 400 and response.json()["error"]
    response = client.post("/api/chat", content="{not json", headers={**HEADERS, "content-type": "application/json"})
    assert response.status_code == 400 and "JSON" in response.json()["error"]


def test_a_message_is_data_never_markup(client: TestClient) -> None:
    xss = "<img src=x onerror=alert(1)>"
    send(client, xss)
    assert view(client)["messages"][0]["content"] == xss


# -- edits and versions ----------------------------------------------------------------------


def test_preview_commit_undo_redo_and_revert(client: TestClient) -> None:
    send(client, "What was the GDP of Ireland in 2021?")
    send(client, "How does Postgres streaming replication work?")
    previewed = post(client, "/api/edit/preview", {"session": "s", "instruction": "it was Iceland, not Ireland", "head": 2}).json()
    preview = previewed["preview"]
    assert previewed["head"] == 2 and "Ireland" in previewed["messages"][0]["content"], "a preview changes nothing"
    row = preview["rows"][0]
    assert row["status"] == "changed" and ["del", "Ireland"] in row["before"] and ["add", "Iceland"] in row["after"]
    assert not preview["needs_confirmation"]
    assert view(client)["preview"] == preview, "a reload shows the pending preview"

    committed = post(client, "/api/edit/commit", {"session": "s", "token": preview["token"]}).json()
    assert committed["head"] == 3 and committed["preview"] is None
    assert "Iceland" in committed["messages"][0]["content"] and committed["messages"][0]["origin"] == "edited"
    assert committed["history"][-1]["kind"] == "edit" and committed["history"][-1]["instruction"] == "it was Iceland, not Ireland"
    assert committed["can_undo"] and not committed["can_redo"]

    undone = post(client, "/api/undo", {"session": "s", "head": 3}).json()
    assert "Ireland" in undone["messages"][0]["content"] and undone["can_redo"]
    redone = post(client, "/api/redo", {"session": "s", "head": 4}).json()
    assert "Iceland" in redone["messages"][0]["content"] and [r["kind"] for r in redone["history"]][-2:] == ["undo", "redo"]
    reverted = post(client, "/api/revert", {"session": "s", "revision": 1, "head": 5}).json()
    assert [m["content"] for m in reverted["messages"]][0] == "What was the GDP of Ireland in 2021?"
    assert len(reverted["messages"]) == 2 and reverted["history"][-1]["kind"] == "revert"
    restored = post(client, "/api/undo", {"session": "s", "head": 6}).json()["messages"]
    assert [(m["id"], m["content"]) for m in restored] == [(m["id"], m["content"]) for m in committed["messages"]]


def test_discard_drops_the_preview_and_changes_nothing(client: TestClient) -> None:
    send(client, "What was the GDP of Ireland in 2021?")
    preview = post(client, "/api/edit/preview", {"session": "s", "instruction": "it was Iceland, not Ireland"}).json()["preview"]
    after = post(client, "/api/edit/discard", {"session": "s", "token": preview["token"]}).json()
    assert after["preview"] is None and after["head"] == 1 and "Ireland" in after["messages"][0]["content"]
    again = post(client, "/api/edit/commit", {"session": "s", "token": preview["token"]})
    assert again.status_code == 409 and "no longer pending" in again.json()["error"]


def test_an_edit_the_editor_refuses_is_a_message_and_changes_nothing(client: TestClient) -> None:
    send(client, "What was the GDP of Ireland in 2021?")
    response = post(client, "/api/edit/preview", {"session": "s", "instruction": "make it shorter"})
    assert response.status_code == 422 and "offline" in response.json()["error"]
    assert view(client)["head"] == 1
    response = post(client, "/api/edit/preview", {"session": "s", "instruction": "it was Peru, not Chile"})
    assert response.status_code == 422 and "does not appear" in response.json()["error"]
    response = post(client, "/api/undo", {"session": "s", "head": 1})
    assert response.status_code == 409 and "nothing to undo" in response.json()["error"]


def test_the_deletion_guard_needs_a_confirmation(store: SQLiteStore) -> None:
    _, client = make_client(store, editor=DeleteAllButFirstTurn())
    with client:
        for question in ("Hi", "What was the GDP of Ireland in 2021?", "And what was its population in 2021?"):
            send(client, question)
        preview = post(client, "/api/edit/preview", {"session": "s", "instruction": "drop the detour"}).json()["preview"]
        assert preview["needs_confirmation"] and preview["deleted_share"] > 0.6
        refused = post(client, "/api/edit/commit", {"session": "s", "token": preview["token"]})
        assert refused.status_code == 400 and "confirm" in refused.json()["error"]
        assert view(client)["head"] == 3 and len(view(client)["messages"]) == 6
        done = post(client, "/api/edit/commit", {"session": "s", "token": preview["token"], "confirm_large": True}).json()
        assert len(done["messages"]) == 2 and done["head"] == 4


def test_two_pages_on_one_session_never_lose_an_update(store: SQLiteStore) -> None:
    _, first = make_client(store)
    _, second = make_client(store)  # another server process on the same database behaves alike
    with first, second:
        send(first, "What was the GDP of Ireland in 2021?")
        seen = view(second)
        preview = post(first, "/api/edit/preview", {"session": "s", "instruction": "it was Iceland, not Ireland", "head": 1})
        assert post(first, "/api/edit/commit", {"session": "s", "token": preview.json()["preview"]["token"]}).status_code == 200
        stale = post(second, "/api/undo", {"session": "s", "head": seen["head"]})
        assert stale.status_code == 409 and "another tab" in stale.json()["error"]
        assert stale.json()["view"]["head"] == 2 and "Iceland" in stale.json()["view"]["messages"][0]["content"]
        assert view(first)["head"] == 2, "the stale undo changed nothing"
        # a preview made before another page's undo cannot be committed over it
        preview = post(first, "/api/edit/preview", {"session": "s", "instruction": "it was Greenland, not Iceland", "head": 2})
        assert post(second, "/api/undo", {"session": "s", "head": 2}).status_code == 200
        refused = post(first, "/api/edit/commit", {"session": "s", "token": preview.json()["preview"]["token"]})
        assert refused.status_code == 409 and refused.json()["view"]["head"] == 3
        assert "Greenland" not in json.dumps(view(first)["messages"])
        # appends never conflict: a chat message on the stale page lands after the other's change
        events = send(second, "And its population?")
        assert events[-1]["view"]["head"] == 4 and len(events[-1]["view"]["messages"]) == 4


# -- sessions --------------------------------------------------------------------------------


def test_sessions_new_switch_and_delete_with_confirmation(client: TestClient, store: SQLiteStore) -> None:
    send(client, "What was the GDP of Ireland in 2021?", session="s")
    created = post(client, "/api/sessions/new", {}).json()
    assert created["session"] == "chat-1" and created["messages"] == []
    assert sessions(client) == ["chat-1", "s"]
    named = post(client, "/api/sessions/new", {"name": "work"})
    assert named.status_code == 200 and post(client, "/api/sessions/new", {"name": "work"}).status_code == 400
    refused = post(client, "/api/sessions/delete", {"session": "s", "confirm": "yes"})
    assert refused.status_code == 400 and "confirm" in refused.json()["error"]
    assert Transcript("s", store=store).head == 1
    left = post(client, "/api/sessions/delete", {"session": "s", "confirm": "s"}).json()["sessions"]
    assert "s" not in left and "s" not in store.sessions()
    for bad in ("", "   ", "x" * 81, "a\nb"):
        assert post(client, "/api/sessions/new", {"name": bad}).status_code == 400


def test_an_unexpected_failure_is_a_json_message_without_a_traceback(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    chat, client = make_client(store)

    def broken(name: str) -> dict[str, Any]:
        raise RuntimeError("the view broke")

    monkeypatch.setattr(chat, "view", broken)
    with client:
        response = client.get("/api/view", params={"session": "s"}, headers=HEADERS)
    assert response.status_code == 500
    assert response.json() == {"error": "RuntimeError: the view broke (nothing was changed)"}


def test_unknown_routes_and_turns_are_json_errors(client: TestClient) -> None:
    assert client.get("/nope").json()["error"]
    response = post(client, "/api/pin", {"session": "s", "turn": 7})
    assert response.status_code == 404 and "no turn 7" in response.json()["error"]
    assert post(client, "/api/pin", {"session": "s", "turn": "1"}).status_code == 400
    response = post(client, "/api/revert", {"session": "s", "revision": 99})
    assert response.status_code == 409 and "no revision 99" in response.json()["error"]


def test_the_offline_model_streams_in_chunks(store: SQLiteStore) -> None:
    _, client = make_client(store, OfflineChatModel())
    with client:
        events = send(client, "What was the GDP of Ireland in 2021?")
    chunks = [e["text"] for e in events if e["type"] == "chunk"]
    assert len(chunks) > 1, "--offline exercises the streaming path"
    assert "".join(chunks) == events[-1]["view"]["messages"][1]["content"]


ICELAND = "What is the capital of Iceland?"


def langchain_fakes() -> list[Any]:
    fakes = pytest.importorskip("langchain_core.language_models.fake_chat_models")
    from langchain_core.messages import AIMessage

    return [
        fakes.FakeListChatModel(responses=["Reykjavik is the capital."]),
        fakes.GenericFakeChatModel(messages=iter([AIMessage("Reykjavik is the capital.")])),
    ]


def test_a_langchain_chat_model_streams_its_text_and_the_text_is_stored(store: SQLiteStore) -> None:
    for n, chat_model in enumerate(langchain_fakes()):
        _, client = make_client(store, chat_model)
        with client:
            events = send(client, ICELAND, session=f"lc-{n}")
        chunks = [e["text"] for e in events if e["type"] == "chunk"]
        assert events[-1]["type"] == "done" and len(chunks) > 1, events[-1]
        assert "".join(chunks) == "Reykjavik is the capital.", "text, never a chunk object's repr"
        assert [m.content for m in Transcript(f"lc-{n}", store=store).messages] == [ICELAND, "Reykjavik is the capital."]


def test_a_langchain_model_with_retry_answers_after_a_transient_failure(store: SQLiteStore) -> None:
    """LangChain's .with_retry() retries invoke, not stream: streamed, one transient error
    failed the answer.  Such a model answers in one piece, through its retries."""
    pytest.importorskip("langchain_core.language_models.fake_chat_models")
    from langchain_core.messages import AIMessage

    from lc_support import FailsOnce

    base = FailsOnce(messages=iter([AIMessage("Reykjavik is the capital.")] * 2))
    _, client = make_client(store, base.with_retry(stop_after_attempt=2, wait_exponential_jitter=False))
    with client:
        events = send(client, ICELAND)
    assert [e["type"] for e in events] == ["start", "chunk", "done"], events[-1]
    assert base.calls == 2
    assert [m.content for m in Transcript("s", store=store).messages] == [ICELAND, "Reykjavik is the capital."]


def test_a_llamaindex_llm_streams_its_chat_deltas_and_the_text_is_stored(store: SQLiteStore) -> None:
    llms = pytest.importorskip("llama_index.core.llms")
    _, client = make_client(store, llms.MockLLM(max_tokens=3))
    with client:
        events = send(client, ICELAND)
    assert [e["type"] for e in events] == ["start", "chunk", "chunk", "chunk", "done"], events[-1]
    assert [m.content for m in Transcript("s", store=store).messages] == [ICELAND, "text text text"]


class StoppedStream:
    """Streams ``pieces`` (the last one a ModelReply carrying ``reason``), or fails mid-answer."""

    def __init__(self, *pieces: Any) -> None:
        self.pieces = pieces

    def stream_text(self, messages: Sequence[Mapping[str, str]]) -> Iterator[Any]:
        for piece in self.pieces:
            if isinstance(piece, Exception):
                raise piece
            yield piece

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        raise AssertionError("a streaming model is streamed")


def test_a_streamed_answer_goes_through_the_chat_replys_checks_and_error_wrapping(store: SQLiteStore) -> None:
    from context_gatekeeper.editing.models import ModelReply

    cut_off = StoppedStream("Reykjavik is ", ModelReply("the", finish_reason="length"))
    nothing = StoppedStream(ModelReply("", finish_reason="SAFETY"))
    broken = StoppedStream("Reykjavik ", ConnectionError("network is unreachable"))
    for session, model in (("cut", cut_off), ("blocked", nothing), ("broken", broken)):
        _, client = make_client(store, model)
        with client:
            events = send(client, ICELAND, session=session)
        if session == "cut":  # a cut-off answer with text is the answer the user saw, as in the terminal
            assert events[-1]["type"] == "done"
            assert [m.content for m in Transcript(session, store=store).messages] == [ICELAND, "Reykjavik is the"]
            continue
        assert events[-1]["type"] == "error" and Transcript(session, store=store).head == 0
        message = events[-1]["message"]
        if session == "blocked":
            assert "safety or content policy" in message
        else:  # the model protocol's wrapping: a network failure is ModelUnavailableError's message
            assert "could not be used (ConnectionError: network is unreachable)" in message, message


def test_word_diff_marks_only_what_changed() -> None:
    left, right = word_diff("The budget is 500 EUR.", "The budget is 700 EUR.")
    assert left == [["same", "The budget is "], ["del", "500"], ["same", " EUR."]]
    assert right == [["same", "The budget is "], ["add", "700"], ["same", " EUR."]]
    assert word_diff("same", "same") == ([["same", "same"]], [["same", "same"]])
    assert word_diff("", "new text") == ([], [["add", "new text"]])


def test_pins_outlive_the_server_and_stay_out_of_the_session_list(store: SQLiteStore) -> None:
    _, client = make_client(store)
    with client:
        send(client, "What was the GDP of Ireland in 2021?")
        send(client, "How does Postgres streaming replication work?")
        post(client, "/api/pin", {"session": "s", "turn": 1})
    _, restarted = make_client(store)  # a new server on the same database
    with restarted:
        assert view(restarted)["pinned"] == [1]
        assert sessions(restarted) == ["s"]
        refused = post(restarted, "/api/sessions/new", {"name": "gatekeeper-chat-pins:s"})
        assert refused.status_code == 400 and "reserved" in refused.json()["error"]
        post(restarted, "/api/sessions/delete", {"session": "s", "confirm": "s"})
    assert store.sessions() == [], "deleting a conversation deletes its pins too"


# -- the command line ------------------------------------------------------------------------


def test_gatekeeper_chat_web_serves_the_page_on_loopback_and_stops_on_sigterm(tmp_path: Path) -> None:
    import subprocess
    import sys
    import urllib.request

    db = tmp_path / "web.sqlite3"
    command = [sys.executable, "-m", "context_gatekeeper.chat", "--web", "--offline", "--db", str(db), "--port", "0",
               "--session", "demo"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert process.stdout is not None
        lines = []
        while not (lines and lines[-1].startswith("open ")):  # printed once the socket listens
            line = process.stdout.readline()
            assert line, f"the server ended before listening: {''.join(lines)}"
            lines.append(line)
        assert "OFFLINE" in "".join(lines) and "loopback only" in lines[-1]
        url = lines[-1].split()[1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/?session=demo")
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        token = re.search(r'name="gatekeeper-token" content="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        request = urllib.request.Request(
            url.split("?")[0] + "api/chat", data=json.dumps({"session": "demo", "text": "What was the GDP of Ireland?"}).encode(),
            headers={"content-type": "application/json", "x-gatekeeper-token": token}, method="POST",
        )
        events = [json.loads(line) for line in urllib.request.urlopen(request, timeout=30).read().decode().splitlines()]
        assert events[-1]["type"] == "done" and sum(e["type"] == "chunk" for e in events) > 1
    finally:
        process.terminate()
        process.wait(timeout=60)
        if process.stdout is not None:
            process.stdout.close()
    assert process.returncode == 0, "SIGTERM stops it as Ctrl-C does, clean-up included"
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy(db, backup / db.name)  # the database file alone: checkpointed, nothing left only in -wal
    copied = SQLiteStore(backup / db.name)
    try:
        assert Transcript("demo", store=copied).head == 1
    finally:
        copied.close()


def test_gatekeeper_chat_web_says_why_it_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import socket

    from context_gatekeeper.chat.app import main

    out = io.StringIO()
    assert main(["--web", "--offline", "--db", str(tmp_path / "a.db"), "--port", "70000"], stdout=out) == 2
    assert "--port must be 0..65535" in out.getvalue()
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    out = io.StringIO()
    assert main(["--web", "--db", str(tmp_path / "a.db")], stdout=out) == 2
    assert "--offline" in out.getvalue()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        out = io.StringIO()
        status = main(["--web", "--offline", "--db", str(tmp_path / "a.db"), "--port", str(taken.getsockname()[1])], stdout=out)
    assert status == 1 and "cannot listen" in out.getvalue() and "--port" in out.getvalue()
    assert "Traceback" not in out.getvalue()


def test_a_database_that_cannot_be_written_is_a_message_and_nothing_is_stored(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from context_gatekeeper import StoreUnavailableError

    _, client = make_client(store)
    with client:
        send(client, "What was the GDP of Ireland in 2021?")

        def locked(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailableError("the database is locked: close the other program and try again")

        monkeypatch.setattr(store, "commit", locked)
        events = send(client, "And its population?")
        assert events[-1]["type"] == "error" and "locked" in events[-1]["message"]
        response = post(client, "/api/pin", {"session": "s", "turn": 1})
        assert response.status_code == 503 and "locked" in response.json()["error"]
        monkeypatch.undo()
        assert view(client)["head"] == 1 and view(client)["pinned"] == []


# -- concurrent changes: deletions, other processes, other tabs ---------------------------


class HeldModel:
    """A chat model (``stream_text``) or editor (``complete``) that holds its answer until the test
    releases it; ``started`` is set once it was called (no timers: the test waits on events)."""

    def __init__(self, editor: Any = None) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.editor = editor

    def _hold(self) -> None:
        self.started.set()
        if not self.release.wait(60):
            raise TimeoutError("the test never released the model")

    def stream_text(self, messages: Sequence[Mapping[str, str]]) -> Iterator[str]:
        try:
            yield "first part "
            self._hold()
            yield "and the rest."
        finally:
            self.finished.set()

    def complete(self, messages: Sequence[Mapping[str, Any]]) -> str:
        try:
            self._hold()
            return str(self.editor.complete(messages)) if self.editor else "the answer"
        finally:
            self.finished.set()


def test_a_conversation_deleted_while_an_answer_streams_stays_deleted(store: SQLiteStore) -> None:
    model = HeldModel()
    chat = WebChat(store, model, OfflineEditor())
    Transcript("secret", store=store).append(user="What was the GDP of Ireland in 2021?", assistant="About 500 bn.")
    Transcript(pin_record_id("secret"), store=store).set([Message("pins", "system", '{"pinned": []}')])
    try:
        events = iter(chat.start_chat("secret", "Who wrote Hamlet?"))
        assert next(events)["type"] == "start" and next(events) == {"type": "chunk", "text": "first part "}
        assert chat.delete("secret", "secret") == []
        model.release.set()
        rest = list(events)
    finally:
        model.release.set()
        chat.close()
    assert model.finished.wait(60)
    assert [e["type"] for e in rest] == ["chunk", "error"] and "was deleted" in rest[-1]["message"]
    assert rest[-1]["view"]["messages"] == [] and rest[-1]["view"]["head"] == 0
    assert store.sessions() == [], "neither the answer nor the pins came back"


def test_a_preview_computed_while_its_conversation_is_deleted_is_refused(store: SQLiteStore) -> None:
    editor = HeldModel(OfflineEditor())
    chat = WebChat(store, StreamingModel(), editor)
    Transcript("s", store=store).append(user="What was the GDP of Ireland in 2021?", assistant="About 500 bn.")
    outcome: list[BaseException | dict[str, Any]] = []

    def preview() -> None:
        try:
            outcome.append(chat.preview("s", "it was Iceland, not Ireland"))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=preview)
    worker.start()
    try:
        assert editor.started.wait(60)
        chat.delete("s", "s")
    finally:
        editor.release.set()
        worker.join()
        chat.close()
    assert isinstance(outcome[0], HistoryError) and "was deleted" in str(outcome[0])
    assert store.sessions() == [] and chat.view("s")["preview"] is None


def test_pins_another_process_changed_are_shown_and_kept(store: SQLiteStore) -> None:
    from context_gatekeeper.chat.session import ChatSession

    _, client = make_client(store)
    with client:
        send(client, "What was the GDP of Ireland in 2021?")
        send(client, "How tall is Mount Everest?")
        assert view(client)["pinned"] == []
        other = SQLiteStore(store.path)  # the terminal chat, another connection to the same file
        try:
            ChatSession(Transcript("s", store=other), StreamingModel(), OfflineEditor()).pin(1)
        finally:
            other.close()
        assert view(client)["pinned"] == [1], "the page shows the other process's pin"
        assert post(client, "/api/pin", {"session": "s", "turn": 2}).json()["pinned"] == [1, 2]
    _, restarted = make_client(store)
    with restarted:
        assert view(restarted)["pinned"] == [1, 2], "pinning in the page kept the other pin"


def test_a_preview_another_tab_discarded_is_refused_with_the_current_view(store: SQLiteStore) -> None:
    _, first = make_client(store)
    with first:
        send(first, "What was the GDP of Ireland in 2021?")
        token = post(first, "/api/edit/preview", {"session": "s", "instruction": "it was Iceland, not Ireland"}).json()["preview"]["token"]
        second_view = view(first)  # the other tab shows the same pending preview, and discards it
        assert post(first, "/api/edit/discard", {"session": "s", "token": second_view["preview"]["token"]}).status_code == 200
        for path in ("/api/edit/commit", "/api/edit/discard"):
            refused = post(first, path, {"session": "s", "token": token})
            assert refused.status_code == 409 and "no longer pending" in refused.json()["error"]
            assert refused.json()["view"]["preview"] is None, "the page refreshes to what is pending now"
        assert view(first)["head"] == 1


def test_a_pin_problem_is_a_notice_once(store: SQLiteStore) -> None:
    Transcript(pin_record_id("s"), store=store).set([Message("pins", "system", "not json")])
    _, client = make_client(store)
    with client:
        first = send(client, "What was the GDP of Ireland in 2021?")[-1]["view"]["notice"]
        assert first and "cannot be read" in first
        assert send(client, "How tall is Mount Everest?")[-1]["view"]["notice"] is None
        assert view(client)["notice"] is None


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ('{"session": "s", "head": ' + "[" * 100_000 + "]" * 100_000 + "}", 400),
        ('{"session": "s", "text": "' + "x" * (5 * 1024 * 1024) + '"}', 413),
    ],
    ids=["nested too deeply", "too large"],
)
def test_an_unreadable_body_is_a_json_error(client: TestClient, body: str, status: int) -> None:
    send(client, "What was the GDP of Ireland in 2021?")
    for path in ("/api/undo", "/api/chat"):
        response = client.post(path, content=body, headers={**HEADERS, "content-type": "application/json"})
        assert response.status_code == status and response.json()["error"], response.text
    assert view(client)["head"] == 1


# -- names the terminal chat or the library wrote --------------------------------------------

LONG_NAME = "tenant-acme/user-42/conversation-" + "0123456789abcdef" * 4


@pytest.mark.parametrize("name", ["Project X ", LONG_NAME, " lead"])
def test_a_stored_conversation_opens_and_deletes_by_its_exact_name(client: TestClient, store: SQLiteStore, name: str) -> None:
    Transcript(name, store=store).append(user="important notes", assistant="ok")
    if len(name) <= 80:  # the same name stripped is another conversation, left alone
        Transcript(name.strip(), store=store).append(user="another conversation", assistant="ok")
    assert name in sessions(client)
    shown = view(client, name)
    assert shown["session"] == name and shown["messages"][0]["content"] == "important notes"
    assert send(client, "and more", session=name)[-1]["view"]["head"] == 2
    assert name not in post(client, "/api/sessions/delete", {"session": name, "confirm": name}).json()["sessions"]
    assert name not in store.sessions() and (len(name) > 80 or name.strip() in store.sessions())


def test_a_new_conversation_still_needs_a_usable_name(client: TestClient) -> None:
    for bad in (LONG_NAME, "a\u202eb"):
        assert post(client, "/api/sessions/new", {"name": bad}).status_code == 400
        assert client.get("/api/view", params={"session": bad}, headers=HEADERS).status_code == 400


# -- stopping --------------------------------------------------------------------------------


def test_stopping_the_server_does_not_wait_for_a_model_that_never_answers(store: SQLiteStore) -> None:
    import urllib.request

    from context_gatekeeper.chat.web.server import BackgroundServer

    model = HeldModel()
    chat = WebChat(store, model, OfflineEditor())
    replies: list[str] = []
    try:
        with BackgroundServer(create_app(chat, token=TOKEN)) as server:
            request = urllib.request.Request(
                server.url + "api/chat", data=json.dumps({"session": "s", "text": "Who wrote Hamlet?"}).encode(),
                headers={**HEADERS, "content-type": "application/json"}, method="POST",
            )
            client = threading.Thread(target=lambda: replies.append(urllib.request.urlopen(request, timeout=60).read().decode()))
            client.start()
            assert model.started.wait(60)
        # __exit__ returned while the model still holds its answer (it waits for release up to 60 s)
        assert not model.release.is_set() and not model.finished.is_set()
        client.join()
    finally:
        model.release.set()
        chat.close()
    assert model.finished.wait(60)
    events = [json.loads(line) for line in replies[0].splitlines()]
    assert events[-1]["type"] == "error" and "stopping" in events[-1]["message"] and "not added" in events[-1]["message"]
    assert store.sessions() == [], "an answer abandoned on stopping is not stored"


def test_gatekeeper_chat_web_opens_a_stored_conversation_by_its_exact_long_name(tmp_path: Path) -> None:
    import io

    from context_gatekeeper.chat.app import main

    db = tmp_path / "a.db"
    stored = SQLiteStore(db)
    try:
        Transcript(LONG_NAME, store=stored).append(user="hello", assistant="hi")
    finally:
        stored.close()
    with socket.socket() as taken:  # it stops after opening the session: the port is taken
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        out = io.StringIO()
        status = main(["--web", "--offline", "--db", str(db), "--session", LONG_NAME, "--port", str(taken.getsockname()[1])],
                      stdout=out)
    assert status == 1 and "resuming at revision 1" in out.getvalue() and "cannot listen" in out.getvalue()


def test_a_refused_new_name_registers_nothing_and_every_view_still_answers(store: SQLiteStore) -> None:
    _, client = make_client(store)
    with client:
        send(client, "hello there")
        for bad in ("\ud800bad", "x" * 81, "tab\there"):
            refused = post(client, "/api/sessions/new", {"name": bad})
            assert refused.status_code == 400 and "pick another" in refused.json()["error"]
        assert sessions(client) == ["s"], "a refused name is not listed"
        assert view(client)["sessions"] == ["s"]
        assert send(client, "hi again")[-1]["type"] == "done"


def test_an_answer_json_cannot_write_as_utf_8_is_still_json(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    chat, client = make_client(store)
    monkeypatch.setattr(chat, "sessions", lambda: ["s", "\udcff written by another program"])
    with client:
        response = client.get("/api/sessions", headers=HEADERS)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert response.json()["sessions"] == ["s", "\udcff written by another program"]


class DeleteFirstTurn:
    """An editor that deletes the first turn."""

    def complete(self, messages: Sequence[Mapping[str, Any]]) -> str:
        found = re.search(r"<conversation>\n?(.*?)\n?</conversation>", str(messages[-1]["content"]), re.S)
        assert found is not None
        state = [Message(str(m["id"]), m["role"], m["content"]) for m in json.loads(found.group(1))]
        return ideal_patch_reply(state, [Delete(m.id) for m in state[:2]])


def _numbered_questions(shown: dict[str, Any]) -> list[tuple[int, str]]:
    """``(number the page shows, question)`` for each turn of the view, in page order."""
    return [(m["turn"], m["content"]) for m in shown["messages"] if m["role"] == "user"]


def _pinned_questions(shown: dict[str, Any]) -> list[str]:
    return [m["content"] for m in shown["messages"] if m["pinned"] and m["role"] == "user"]


IRELAND, REDIS, ESPRESSO = "What was the GDP of Ireland in 2021?", "How do Redis locks expire?", "Best espresso grind size?"


def test_a_pin_names_the_turn_the_page_shows_across_a_server_restart(store: SQLiteStore) -> None:
    _, client = make_client(store, editor=DeleteFirstTurn())
    with client:
        for question in (IRELAND, REDIS, ESPRESSO):
            send(client, question)
        token = post(client, "/api/edit/preview", {"session": "s", "instruction": "drop the first turn", "head": 3}).json()
        shown = post(client, "/api/edit/commit", {"session": "s", "token": token["preview"]["token"], "confirm_large": True}).json()
    assert _numbered_questions(shown) == [(1, REDIS), (2, ESPRESSO)], "turns are numbered 1 to N by position"
    redis = next(m for m in shown["messages"] if m["content"] == REDIS)
    _, restarted = make_client(store)  # the server restarts; the open page still shows those numbers
    with restarted:
        assert _numbered_questions(view(restarted)) == [(1, REDIS), (2, ESPRESSO)], "a restart keeps the numbers"
        pinned = post(restarted, "/api/pin", {"session": "s", "turn": redis["turn"], "pinned": True})
        assert pinned.status_code == 200, pinned.text
        assert _pinned_questions(pinned.json()) == [REDIS] and pinned.json()["pinned"] == [1], "pin N pins the turn shown as N"
        undone = post(restarted, "/api/undo", {"session": "s", "head": 4}).json()
        assert _numbered_questions(undone) == [(1, IRELAND), (2, REDIS), (3, ESPRESSO)]
        assert _pinned_questions(undone) == [REDIS] and undone["pinned"] == [2], "the pin follows its turn to its new number"
        unpinned = post(restarted, "/api/pin", {"session": "s", "turn": 2, "pinned": False}).json()
        assert unpinned["pinned"] == []
        by_key = post(restarted, "/api/pin", {"session": "s", "key": redis["id"], "turn": 99, "pinned": True}).json()
        assert _pinned_questions(by_key) == [REDIS], "a key names the turn whatever number the page sent"
        gone = post(restarted, "/api/pin", {"session": "s", "key": "no-such-message", "turn": 1})
        assert gone.status_code == 404 and "no turn starts with message" in gone.json()["error"]
        assert gone.json()["view"]["pinned"] == [2], "a refused pin changes nothing and refreshes the page"


def test_after_undo_and_redo_the_page_numbers_the_turns_1_to_n_and_pin_n_pins_turn_n(store: SQLiteStore) -> None:
    _, client = make_client(store, editor=DeleteFirstTurn())
    with client:
        for question in (IRELAND, REDIS, ESPRESSO):
            send(client, question)
        token = post(client, "/api/edit/preview", {"session": "s", "instruction": "drop the first turn", "head": 3}).json()
        post(client, "/api/edit/commit", {"session": "s", "token": token["preview"]["token"], "confirm_large": True})
        post(client, "/api/undo", {"session": "s", "head": 4})
        redone = post(client, "/api/redo", {"session": "s", "head": 5}).json()
        assert _numbered_questions(redone) == [(1, REDIS), (2, ESPRESSO)]
        undone = post(client, "/api/undo", {"session": "s", "head": 6}).json()
        assert _numbered_questions(undone) == [(1, IRELAND), (2, REDIS), (3, ESPRESSO)]
        for number, question in _numbered_questions(undone):
            pinned = post(client, "/api/pin", {"session": "s", "turn": number, "pinned": True}).json()
            assert question in _pinned_questions(pinned), f"pin {number} pins the turn the page shows as {number}"
        answered = send(client, "And Redis lock renewal?")
        strip = answered[-1]["view"]["messages"][-1]["context"]
        assert [e["turn"] for e in strip["earlier"]] == [1, 2, 3], "the strip names the turns as the page does"
        assert all(e["kept"] and e["reason"] == "pinned" for e in strip["earlier"])


def test_the_context_record_is_of_the_turns_the_call_was_prepared_over(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer between the call's read and its record must not make the record disagree with what was sent."""
    from context_gatekeeper.chat.session import ChatSession

    chat, client = make_client(store)
    with client:
        for question in (IRELAND, REDIS, ESPRESSO):
            send(client, question)
    prepared = [(m.id, m.content) for m in Transcript("s", store=store).messages if m.role == "user"]
    prepare = ChatSession.prepare

    def prepare_then_another_writer(session: ChatSession, text: str) -> Any:
        call = prepare(session, text)
        other = Transcript("s", store=store)  # another process drops the first turn right after the call's read
        other.set(list(other.messages[2:]))
        return call

    monkeypatch.setattr(ChatSession, "prepare", prepare_then_another_writer)
    stream = chat.start_chat("s", "How long should a Redis lock TTL be?")
    sent = {m["content"] for m in stream.call.sent}
    assert [e["key"] for e in stream.record["earlier"]] == [key for key, _ in prepared], "the turns the call was prepared over"
    assert [e["kept"] for e in stream.record["earlier"]] == [question in sent for _, question in prepared], "what was sent"
    assert REDIS in sent


def test_undo_in_the_page_of_a_load_made_in_the_terminal_puts_the_pins_back(store: SQLiteStore) -> None:
    from context_gatekeeper.chat.session import ChatSession

    _, client = make_client(store)
    with client:
        send(client, "What was the GDP of Ireland in 2021?")
        post(client, "/api/pin", {"session": "s", "turn": 1})
        terminal = ChatSession(Transcript("s", store=store), OfflineChatModel(), OfflineEditor())
        terminal.load([Message("n1", "user", "hi"), Message("n2", "assistant", "hello")])
        assert view(client)["pinned"] == []
        undone = post(client, "/api/undo", {"session": "s", "head": 2}).json()
        assert [m["content"] for m in undone["messages"] if m["pinned"] and m["role"] == "user"] == ["What was the GDP of Ireland in 2021?"]
        redone = post(client, "/api/redo", {"session": "s", "head": 3}).json()
        assert redone["pinned"] == [] and terminal.pinned == frozenset()


@pytest.mark.parametrize("name", ["x" * 81, "tab\there"])
def test_gatekeeper_chat_web_refuses_a_new_name_as_the_terminal_does_with_status_2(tmp_path: Path, name: str) -> None:
    import io

    from context_gatekeeper.chat.app import main

    for front_end in (["--web"], ["--plain"]):
        out = io.StringIO()
        status = main([*front_end, "--offline", "--db", str(tmp_path / "a.db"), "--session", name, "--port", "0"],
                      stdout=out, stdin=["/quit"])
        assert status == 2, out.getvalue()
        assert "--session: session names are at most 80 characters" in out.getvalue() and "Traceback" not in out.getvalue()


# -- the command line: what it creates and says at start ---------------------------------------


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The usual umask, 022: a file created without care is readable by every local user."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _start_on_a_taken_port(*options: str) -> tuple[int, str]:
    """``gatekeeper-chat --web`` with ``options`` on a port already taken: it opens the database
    and the session, says what it says at start, then that it cannot listen; (status, output)."""
    import io

    from context_gatekeeper.chat.app import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        out = io.StringIO()
        status = main(["--web", *options, "--port", str(taken.getsockname()[1])], stdout=out)
    return status, out.getvalue()


def test_gatekeeper_chat_web_names_a_new_session_as_the_name_rules_give_it(tmp_path: Path) -> None:
    status, out = _start_on_a_taken_port("--offline", "--db", str(tmp_path / "a.db"), "--session", " work ")
    assert status == 1 and "cannot listen" in out
    assert "session 'work' (new conversation)" in out and "' work '" not in out


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.usefixtures("usual_umask")
def test_gatekeeper_chat_web_creates_its_default_database_private_to_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stat

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    status, out = _start_on_a_taken_port("--offline")
    assert status == 1 and "cannot listen" in out
    folder = tmp_path / "data" / "context-gatekeeper"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "chat.sqlite3").stat().st_mode) == 0o600


def test_gatekeeper_chat_web_says_at_start_that_token_counts_are_estimates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings

    from context_gatekeeper import tokens

    tokens.load_encoding.cache_clear()
    monkeypatch.setattr(tokens, "_tiktoken_cache_dirs", lambda: [])
    monkeypatch.setattr(tokens, "_llama_index_cache_dir", lambda: None)
    monkeypatch.setattr(tokens, "_warned_estimate", False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status, out = _start_on_a_taken_port("--offline", "--db", str(tmp_path / "a.db"))
            tokens.resolve_token_counter(None)("counted later, in the chat")
    finally:
        tokens.load_encoding.cache_clear()
    assert status == 1 and [str(w.message) for w in caught] == []
    lines = out.splitlines()
    assert lines[1].startswith("OFFLINE") and lines[2].startswith("ESTIMATED TOKENS: ")
    assert "cl100k_base.tiktoken" in lines[2] and "TIKTOKEN_CACHE_DIR" in lines[2]


def test_gatekeeper_chat_web_without_the_gemini_extra_says_how_to_start_not_to_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from context_gatekeeper.chat.app import main

    monkeypatch.setenv("GOOGLE_API_KEY", "test-key-not-used")
    monkeypatch.setitem(sys.modules, "google.genai", None)  # as if only the web extra were installed
    out = io.StringIO()
    assert main(["--web", "--db", str(tmp_path / "a.db"), "--port", "0"], stdout=out) == 2
    message = out.getvalue()
    assert "GeminiModel needs google-genai: pip install" in message and "pass --offline" in message
    assert "/retry" not in message and not (tmp_path / "a.db").exists()


def test_gatekeeper_chat_web_with_gemini_says_to_try_again_from_the_page_never_to_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model ``gatekeeper-chat --web`` builds ends its unavailability messages with what the page
    offers (the terminal's /retry is not there), for a chat message and an edit preview alike."""
    import io
    from types import SimpleNamespace

    from context_gatekeeper.chat.app import main
    from context_gatekeeper.chat.web import server

    pytest.importorskip("google.genai")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key-not-used")  # building the client makes no request
    shown: list[str] = []

    def down(**kwargs: Any) -> Any:
        raise ConnectionError("network is unreachable")

    def serve_once(chat: WebChat, **kwargs: Any) -> int:  # instead of serving: what the page would show
        chat.chat_model.client = SimpleNamespace(models=SimpleNamespace(generate_content=down))  # no network
        shown.append(list(chat.start_chat(kwargs["session"], "What was the GDP of Ireland in 2021?"))[-1]["message"])
        with pytest.raises(ModelUnavailableError) as raised:
            chat.preview(kwargs["session"], "it was Iceland, not Ireland")
        shown.append(str(raised.value))
        return 0

    monkeypatch.setattr(server, "serve", serve_once)
    out = io.StringIO()
    assert main(["--web", "--db", str(tmp_path / "chat.db"), "--port", "0"], stdout=out) == 0, out.getvalue()
    assert len(shown) == 2
    for message in shown:
        assert "could not be used (ConnectionError: network is unreachable)" in message, message
        assert "/retry" not in message and "try again (the text stays in the box)" in message, message
        assert "gatekeeper-chat --web with --offline" in message, message


def test_new_conversations_made_at_the_same_moment_get_different_names(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second New arriving while the first is still being shown (no threads: it runs inside the
    first's view) gets a name of its own; each is listed once."""
    chat = WebChat(store, OfflineChatModel(), OfflineEditor())
    shown = chat.view
    inner: list[str] = []

    def view_with_a_second_new(name: object) -> dict[str, Any]:
        if not inner:  # the first view makes the second New (whose own view makes none)
            inner.append("pending")
            inner[0] = chat.create()["session"]
        return shown(name)

    monkeypatch.setattr(chat, "view", view_with_a_second_new)
    first = chat.create()["session"]
    assert (first, inner[0]) == ("chat-1", "chat-2")
    monkeypatch.setattr(chat, "view", shown)
    assert chat.create()["session"] == "chat-3" and chat.sessions() == ["chat-1", "chat-2", "chat-3"]


def test_a_new_conversation_that_cannot_be_shown_leaves_no_trace(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    chat = WebChat(store, OfflineChatModel(), OfflineEditor())

    def broken(name: object) -> dict[str, Any]:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(chat, "_view", lambda entry: broken(entry))
    with pytest.raises(sqlite3.OperationalError):
        chat.create()
    monkeypatch.undo()
    assert chat.sessions() == [] and chat.create()["session"] == "chat-1", "the name was given up again"


def test_revert_in_the_page_to_before_a_load_made_in_the_terminal_takes_its_pins_back(store: SQLiteStore) -> None:
    from context_gatekeeper.chat.session import ChatSession

    _, client = make_client(store)
    with client:
        send(client, "What was the GDP of Ireland in 2021?")
        send(client, "How long should a Redis lock TTL be?")
        post(client, "/api/pin", {"session": "s", "turn": 1})
        terminal = ChatSession(Transcript("s", store=store), OfflineChatModel(), OfflineEditor())
        terminal.load([Message("x1", "user", "Tell me about Kafka partitions"), Message("x2", "assistant", "Kafka"),
                       Message("y1", "user", "And Postgres replication lag?"), Message("y2", "assistant", "Postgres")],
                      pinned=["y1"])

        def pinned_questions(shown: dict[str, Any]) -> list[str]:
            return [m["content"] for m in shown["messages"] if m["pinned"] and m["role"] == "user"]

        assert pinned_questions(view(client)) == ["And Postgres replication lag?"]
        reverted = post(client, "/api/revert", {"session": "s", "revision": 2, "head": 3}).json()
        assert pinned_questions(reverted) == ["What was the GDP of Ireland in 2021?"], "the load's pins went with it"
        undone = post(client, "/api/undo", {"session": "s", "head": 4}).json()
        assert pinned_questions(undone) == ["And Postgres replication lag?"], "undoing the revert brings them back"


def agent_conversation(store: SQLiteStore, session: str = "agent") -> None:
    """:data:`chat_support.AGENT_CONVERSATION` stored as ``session``."""
    Transcript(session, store=store).set(list(AGENT_CONVERSATION))


def test_every_message_carries_its_turns_key_whatever_role_starts_the_turn(store: SQLiteStore) -> None:
    agent_conversation(store)
    _, client = make_client(store)
    with client:
        rows = view(client, "agent")["messages"]
        assert [(m["id"], m["turn"], m["turn_key"]) for m in rows] == [
            ("greet", 1, "greet"), ("u1", 2, "u1"), ("a1", 2, "u1"), ("u2", 2, "u1"), ("t1", 2, "u1"), ("a2", 2, "u1")]
        for m in rows:  # what the page sends for each message's turn: every key names it
            pinned = post(client, "/api/pin", {"session": "agent", "key": m["turn_key"], "turn": m["turn"], "pinned": True})
            assert pinned.status_code == 200 and m["turn"] in pinned.json()["pinned"], pinned.text
        assert view(client, "agent")["pinned"] == [1, 2]


def test_the_guide_says_which_models_stream_and_how_a_new_conversation_gets_a_name() -> None:
    """docs/guide/chat.md describes the page as it is: Gemini (what the command builds with a key)
    does not stream, the offline model and the framework wrappers do; New has no name field."""
    from context_gatekeeper import GeminiModel
    from context_gatekeeper.integration import as_edit_model

    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "guide" / "chat.md").read_text(encoding="utf-8").split())
    assert not as_edit_model(GeminiModel(api_key="k", client=object())).streams
    assert as_edit_model(OfflineChatModel()).streams
    assert "Gemini's answer appears whole" in guide and "answers stream in." not in guide
    assert "<input" not in (STATIC / "index.html").read_text(encoding="utf-8"), "New asks for no name"
    assert "`--session NAME` or open the page at `?session=NAME`" in guide
