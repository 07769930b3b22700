"""The web chat in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

Each test serves a fresh web chat (a real SQLite file, the scripted offline models)
on a free loopback port from a thread that it stops and joins, and waits on the
page's own state (Playwright's auto-waiting ``expect``), never on a timer.  Without
playwright or chromium the tests skip saying what to install; under ``CI=true``
they fail instead, so CI never passes without running them.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium")


def _missing() -> list[str]:
    problems = []
    for module, extra in (("playwright.sync_api", "web-test"), ("starlette", "web"), ("uvicorn", "web")):
        try:
            __import__(module)
        except ImportError:
            problems.append(f"{module.split('.')[0]} is not installed (pip install 'context-gatekeeper[{extra}]')")
    if CHROMIUM is None:
        problems.append("no chromium on PATH (apt-get install chromium; never `playwright install`)")
    return problems


if _missing():
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("the browser tests cannot run under CI=true: " + "; ".join(_missing()), pytrace=False)
    pytest.skip("browser tests need " + "; ".join(_missing()), allow_module_level=True)

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from context_gatekeeper import ModelUnavailableError, SQLiteStore, Transcript  # noqa: E402
from context_gatekeeper.chat.offline import OfflineChatModel, OfflineEditor  # noqa: E402
from context_gatekeeper.chat.web.server import BackgroundServer, create_app  # noqa: E402
from context_gatekeeper.chat.web.service import WebChat  # noqa: E402
from chat_support import AGENT_CONVERSATION  # noqa: E402

IRELAND = "What was the GDP of Ireland in 2021?"
POSTGRES = "How does Postgres streaming replication work?"
LAG = "How much replication lag does Postgres streaming replication have?"
WAIT_MS = 30_000  # how long expect() may wait for the page on a loaded machine (a bound, not a pause)
expect.set_options(timeout=WAIT_MS)


class Served:
    """A web chat served from a thread, with the store it writes."""

    def __init__(self, tmp_path: Path, chat_model: Any = None) -> None:
        self.store = SQLiteStore(tmp_path / "chat.sqlite3")
        self.chat = WebChat(self.store, chat_model or OfflineChatModel(), OfflineEditor())
        self.server = BackgroundServer(create_app(self.chat))

    def url(self, session: str = "demo") -> str:
        return f"{self.server.url}?session={session}"

    def transcript(self, session: str = "demo") -> Transcript:
        return Transcript(session, store=self.store)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for the module (starting it is most of a test's time); every test gets a
    context of its own (``page``, or ``browser.new_context()``), so no state is shared."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def serve(tmp_path: Path, chat_model: Any = None) -> Iterator[Served]:
    served = Served(tmp_path, chat_model)
    try:
        with served.server:
            yield served
    finally:
        served.chat.close()
        served.store.close()


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Served]:
    yield from serve(tmp_path)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        yield context.new_page()
    finally:
        context.close()


def idle(page: Page) -> None:
    """Wait until the page is idle: a send while it is still loading its session (marked
    busy) is ignored, as it is for a person."""
    expect(page.locator("body.busy")).to_have_count(0)


def say(page: Page, text: str) -> None:
    """Type ``text`` in the box and send it; wait until the page is idle again (the page
    marks itself busy synchronously on send, so waiting for that mark to go is exact).
    It first waits for the page to be idle (see :func:`idle`)."""
    idle(page)
    page.get_by_test_id("message-input").fill(text)
    page.get_by_test_id("send").click()
    expect(page.locator("body.busy")).to_have_count(0)
    if not text.startswith("/") and page.get_by_test_id("mode-toggle").get_attribute("aria-pressed") == "false":
        expect(page.locator(".message.pending")).to_have_count(0)
        expect(page.locator('[data-testid="message"][data-role="user"] .content').last).to_have_text(text)


def messages(page: Page) -> list[str]:
    return page.locator('[data-testid="message"] .content').all_inner_texts()


# -- chat ------------------------------------------------------------------------------------


def test_three_turns_across_two_topics_show_what_the_gate_sent(web: Served, page: Page) -> None:
    timings = []
    for _ in range(3):  # the best of three loads: one slow turn of a busy CI machine's scheduler is not the page
        page.goto(web.url())
        timings.append(page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0]; return n.domContentLoadedEventEnd - n.startTime; }"
        ))
    assert 0 < min(timings) <= 300, f"the page took {timings} ms from navigation start to DOMContentLoaded on loopback"
    expect(page.get_by_test_id("session-list")).to_contain_text("demo")
    for text in (IRELAND, POSTGRES, LAG):
        say(page, text)

    answers = page.locator('[data-testid="message"][data-role="assistant"]')
    expect(answers).to_have_count(3)
    strips = page.get_by_test_id("context-strip")
    expect(strips).to_have_count(3)
    expect(strips.nth(0)).to_contain_text("no earlier turns")
    last = strips.nth(2)
    expect(last).to_contain_text("gate: ")
    expect(last).to_contain_text("tokens saved")
    expect(last.locator('.chip[data-turn="2"]')).to_have_attribute("data-kept", "true")
    expect(last.locator('.chip[data-turn="2"]')).to_contain_text("sent")
    expect(last.locator('.chip[data-turn="1"]')).to_have_attribute("data-kept", "false")
    expect(last.locator('.chip[data-turn="1"]')).to_contain_text("left out")
    user_turns = page.locator('[data-testid="message"][data-role="user"]')
    assert [user_turns.nth(i).get_attribute("data-turn") for i in range(3)] == ["1", "2", "3"]

    # clicking a turn number scrolls to that turn
    page.evaluate("() => { document.getElementById('messages').scrollTop = 1e6; }")
    last.locator('.chip[data-turn="1"]').click()
    expect(page.locator("#turn-1")).to_be_in_viewport()
    expect(page.locator("#turn-1")).to_have_class("message user flash")

    # pinning a turn is one click, and the next call sends it; the page names the turn by the id of
    # its first message (a restarted server may number the turns anew), with its number as a fallback
    with page.expect_request("**/api/pin") as pin_request:
        page.locator('[data-testid="pin"][data-turn="1"]').click()
    first_id = page.locator('[data-testid="message"][data-role="user"]').first.get_attribute("data-id")
    assert pin_request.value.post_data_json == {"session": "demo", "key": first_id, "turn": 1, "pinned": True}
    expect(page.locator('[data-testid="pin"][data-turn="1"]')).to_have_attribute("aria-pressed", "true")
    say(page, "Is that lag measured in bytes?")
    newest = page.get_by_test_id("context-strip").nth(3)
    expect(newest.locator('.chip[data-turn="1"]')).to_have_attribute("data-kept", "true")
    expect(newest.locator('.chip[data-turn="1"]')).to_contain_text("pinned")


class GatedModel:
    """Streams "first part " then waits for the test to release the rest (no timers)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def stream_text(self, messages: Sequence[Mapping[str, Any]]) -> Iterator[str]:
        yield "first part "
        if not self.release.wait(60):
            raise TimeoutError("the test never released the answer")
        yield "and the rest."

    def complete(self, messages: Sequence[Mapping[str, Any]]) -> str:
        return "".join(self.stream_text(messages))


def test_an_answer_appears_as_it_streams(tmp_path: Path, page: Page) -> None:
    model = GatedModel()
    try:
        for web in serve(tmp_path, model):
            page.goto(web.url())
            idle(page)
            page.get_by_test_id("message-input").fill(IRELAND)
            page.get_by_test_id("send").click()
            pending = page.locator(".message.assistant.pending .content")
            expect(pending).to_have_text("first part ")  # shown before the answer is complete
            expect(page.get_by_test_id("send")).to_be_disabled()  # busy: a second send waits, never dropped
            expect(page.get_by_test_id("context-strip")).to_have_count(1)  # the strip comes with it
            assert web.transcript().head == 0, "nothing is stored before the whole answer is in"
            model.release.set()
            expect(page.locator('[data-testid="message"][data-role="assistant"]:not(.pending) .content')).to_have_text(
                "first part and the rest."
            )
            expect(page.locator(".message.pending")).to_have_count(0)
            expect(page.get_by_test_id("send")).to_be_enabled()
            assert web.transcript().head == 1
    finally:
        model.release.set()


def test_a_model_error_is_a_message_in_the_page(tmp_path: Path, page: Page) -> None:
    class Unavailable:
        def complete(self, messages: Any) -> str:
            raise ModelUnavailableError("Gemini cannot be reached: check the network, or restart with --offline")

    for web in serve(tmp_path, Unavailable()):
        page.goto(web.url())
        idle(page)
        page.get_by_test_id("message-input").fill(IRELAND)
        page.get_by_test_id("send").click()
        expect(page.get_by_test_id("error")).to_contain_text("Gemini cannot be reached")
        expect(page.get_by_test_id("error")).not_to_contain_text("Traceback")
        expect(page.get_by_test_id("message")).to_have_count(0)
        expect(page.get_by_test_id("message-input")).to_have_value(IRELAND)  # kept for another try
        assert web.transcript().head == 0


def test_a_message_with_markup_is_shown_as_text_and_runs_nothing(web: Served, page: Page) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(web.url())
    xss = "<img src=x onerror=alert(1)><script>alert(2)</script>"
    say(page, xss)
    first = page.locator('[data-testid="message"][data-role="user"] .content').first
    expect(first).to_have_text(xss)
    assert page.locator("#messages img, #messages script").count() == 0
    page.reload()  # rendered again from the stored view
    expect(page.locator('[data-testid="message"][data-role="user"] .content').first).to_have_text(xss)
    assert page.locator("#messages img, #messages script").count() == 0
    assert dialogs == []


class FixedAnswer:
    """A chat model with one answer, whatever is asked."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def complete(self, messages: Any) -> str:
        return self.answer


def shown_text(page: Page) -> str:
    """Every text the page shows: the title, the body's text and every tooltip."""
    return str(page.evaluate(
        "() => [document.title, document.body.textContent, "
        "...[...document.querySelectorAll('[title]')].map((n) => n.title)].join('\\n')"
    ))


def test_control_characters_and_bidi_overrides_are_drawn_never_obeyed(tmp_path: Path, page: Page) -> None:
    from context_gatekeeper.chat.visible import VISIBLE, visible

    answer = ("Pay to account 1234 \u202e9876 tnuocca ot ton\u202c. Ire\rland\b is \x1b[2J\x0b\x0c fine\x07 \x9b1m "
              "\u200f-5\u200e\u061c.")  # the bidi marks too: RLM, LRM, ALM
    name = "notes \u202etxt.exe\u202c"
    instruction = "it was Ice\u202eland, not Ireland"
    acted_on = {chr(code) for code in VISIBLE}

    def obeys_nothing() -> None:
        assert not acted_on & set(shown_text(page)), "every character a screen acts on is drawn as a stand-in"

    for web in serve(tmp_path, FixedAnswer(answer)):
        web.transcript(name).append(user="Hi \u2066there\u2069", assistant="hello")
        page.goto(web.url())
        idle(page)
        page.get_by_test_id("message-input").fill(IRELAND)
        page.get_by_test_id("send").click()
        reply = page.locator('[data-testid="message"][data-role="assistant"]:not(.pending) .content')
        expect(reply).to_have_count(1)
        assert reply.text_content() == visible(answer) == (
            "Pay to account 1234 \ufffd9876 tnuocca ot ton\ufffd. Ire\u240dland\u2408 is \u241b[2J\u240b\u240c fine\u2407 "
            "\ufffd1m \ufffd-5\ufffd\ufffd."
        )
        obeys_nothing()

        say(page, "/edit " + instruction)
        diff = page.get_by_test_id("preview-diff")
        expect(diff.locator("ins.added")).to_have_count(1)  # the question; the answer says "Ire\\rland"
        assert diff.locator("ins.added").first.text_content() == visible("Ice\u202eland")
        assert page.locator("#preview-title").text_content() == "Preview of: " + visible(instruction)
        obeys_nothing()
        page.get_by_test_id("commit").click()
        expect(diff).to_be_hidden()
        assert page.get_by_test_id("history-item").first.locator(".label").text_content() == visible(instruction)
        obeys_nothing()

        listed = page.locator(".session").filter(has_text="notes")
        assert listed.text_content() == visible(name)
        listed.click()  # the exact name still opens the conversation
        expect(page.locator('[data-testid="message"][data-role="user"] .content')).to_have_text("Hi \ufffdthere\ufffd")
        assert page.locator("#session-name").text_content() == f"session: {visible(name)} · revision 1"
        obeys_nothing()
        assert web.transcript().messages[1].content == answer, "stored as the model wrote it: only the page draws it"


# -- edits -----------------------------------------------------------------------------------


def test_edit_preview_commit_undo_redo_and_revert(web: Served, page: Page) -> None:
    page.goto(web.url())
    say(page, IRELAND)
    say(page, POSTGRES)
    page.get_by_test_id("mode-toggle").click()
    expect(page.get_by_test_id("mode-toggle")).to_have_attribute("aria-pressed", "true")
    page.get_by_test_id("message-input").fill("it was Iceland, not Ireland")
    page.get_by_test_id("send").click()

    diff = page.get_by_test_id("preview-diff")
    expect(diff).to_be_visible()
    expect(diff.locator("del.removed").first).to_have_text("Ireland")
    expect(diff.locator("ins.added").first).to_have_text("Iceland")
    assert "Ireland" in messages(page)[0], "a preview changes nothing"
    page.get_by_test_id("commit").click()
    expect(diff).to_be_hidden()
    expect(page.locator('[data-testid="message"] .content').first).to_have_text("What was the GDP of Iceland in 2021?")
    items = page.get_by_test_id("history-item")
    expect(items).to_have_count(3)
    expect(items.first).to_contain_text("it was Iceland, not Ireland")  # newest first, with its instruction

    page.get_by_test_id("undo").click()
    expect(page.locator('[data-testid="message"] .content').first).to_have_text(IRELAND)
    expect(items.first).to_have_attribute("data-kind", "undo")
    page.get_by_test_id("redo").click()
    expect(page.locator('[data-testid="message"] .content').first).to_have_text("What was the GDP of Iceland in 2021?")
    expect(page.get_by_test_id("redo")).to_be_disabled()

    page.locator('[data-testid="revert"][data-number="1"]').click()
    expect(page.get_by_test_id("message")).to_have_count(2)
    expect(page.locator('[data-testid="message"] .content').first).to_have_text(IRELAND)
    expect(items.first).to_have_attribute("data-kind", "revert")
    assert [r.kind for r in web.transcript().history()] == ["append", "append", "edit", "undo", "redo", "revert"]


def test_slash_edit_in_the_chat_box_previews_and_discard_changes_nothing(web: Served, page: Page) -> None:
    page.goto(web.url())
    say(page, IRELAND)
    say(page, "/edit it was Iceland, not Ireland")
    expect(page.get_by_test_id("preview-diff")).to_be_visible()
    page.get_by_test_id("discard").click()
    expect(page.get_by_test_id("preview-diff")).to_be_hidden()
    assert web.transcript().head == 1 and "Ireland" in messages(page)[0]
    say(page, "/edit make it shorter")  # the offline editor refuses: a message, nothing changed
    expect(page.get_by_test_id("error")).to_contain_text("offline")
    assert web.transcript().head == 1


def test_a_command_that_fails_keeps_its_text_in_the_box(web: Served, page: Page) -> None:
    page.goto(web.url())
    say(page, IRELAND)
    box = page.get_by_test_id("message-input")
    for command, error in (("/edit make it shorter", "offline"), ("/undo", "undo"), ("/redo", "redo")):
        say(page, command)  # the offline editor refuses; nothing to undo or redo
        expect(page.get_by_test_id("error")).to_contain_text(error)
        expect(box).to_have_value(command)  # kept for another try, as in edit mode
    say(page, "/edit it was Iceland, not Ireland")  # one that works empties the box
    expect(page.get_by_test_id("preview-diff")).to_be_visible()
    expect(box).to_have_value("")
    assert web.transcript().head == 1


# -- sessions, tabs, reloads ----------------------------------------------------------------


def test_two_tabs_on_one_session_stay_consistent(web: Served, browser: Browser) -> None:
    # two windows of their own, each in front (a tab behind another gets throttled frames, which
    # made every click there wait): to the server they are two tabs on one session all the same
    contexts = [browser.new_context(), browser.new_context()]
    try:
        first, second = (context.new_page() for context in contexts)
        first.goto(web.url())
        say(first, IRELAND)
        say(first, "/edit it was Iceland, not Ireland")
        first.get_by_test_id("commit").click()
        expect(first.get_by_test_id("history-item")).to_have_count(2)
        second.goto(web.url())
        expect(second.get_by_test_id("undo")).to_be_enabled()
        first.get_by_test_id("undo").click()  # the first tab undoes; the second still shows the edit
        expect(first.locator('[data-testid="message"] .content').first).to_have_text(IRELAND)

        second.get_by_test_id("undo").click()  # stale: refused, and the second tab now shows the first's undo
        expect(second.get_by_test_id("error")).to_contain_text("another tab")
        expect(second.locator('[data-testid="message"] .content').first).to_have_text(IRELAND)
        assert [r.kind for r in web.transcript().history()] == ["append", "edit", "undo"], "no lost update"

        say(second, POSTGRES)  # appends never conflict; the first tab sees it on its next action
        say(first, LAG)
        expect(first.get_by_test_id("message")).to_have_count(6)
        expect(first.locator('[data-testid="message"][data-role="user"] .content').nth(1)).to_have_text(POSTGRES)
    finally:
        for context in contexts:
            context.close()


def test_a_reload_restores_the_view(web: Served, page: Page) -> None:
    page.goto(web.url("trip"))
    say(page, IRELAND)
    say(page, POSTGRES)
    page.get_by_test_id("mode-toggle").click()
    say(page, "it was Iceland, not Ireland")
    expect(page.get_by_test_id("preview-diff")).to_be_visible()
    before = messages(page)
    page.reload()
    assert "session=trip" in page.url
    expect(page.get_by_test_id("message")).to_have_count(4)
    assert messages(page) == before
    expect(page.get_by_test_id("context-strip")).to_have_count(2)
    expect(page.get_by_test_id("preview-diff")).to_be_visible()  # the pending preview too
    expect(page.get_by_test_id("mode-toggle")).to_have_attribute("aria-pressed", "true")
    page.get_by_test_id("commit").click()
    expect(page.locator('[data-testid="message"] .content').first).to_have_text("What was the GDP of Iceland in 2021?")


def test_sessions_switch_new_and_delete_with_confirmation(web: Served, page: Page) -> None:
    page.goto(web.url("alpha"))
    say(page, IRELAND)
    page.get_by_test_id("new-session").click()
    expect(page.locator('#session-list [aria-current="true"]')).to_have_text("chat-1")
    expect(page.get_by_test_id("message")).to_have_count(0)
    say(page, POSTGRES)
    page.locator('#session-list [data-session="alpha"]').click()
    expect(page.locator('[data-testid="message"] .content').first).to_have_text(IRELAND)

    page.get_by_test_id("delete-session").click()
    page.get_by_test_id("cancel-delete").click()  # asked first; cancelling keeps it
    assert "alpha" in web.store.sessions()
    page.get_by_test_id("delete-session").click()
    page.get_by_test_id("confirm-delete").click()
    expect(page.get_by_test_id("session-list")).not_to_contain_text("alpha")
    expect(page.locator('#session-list [aria-current="true"]')).to_have_text("chat-1")
    assert "alpha" not in web.store.sessions()


def test_delete_erases_only_the_session_its_confirmation_names(web: Served, page: Page) -> None:
    web.transcript("doomed").append(user="Delete me", assistant="ok")
    web.transcript("precious").append(user="Precious work, keep this", assistant="ok")
    page.goto(web.url("doomed"))
    idle(page)
    page.get_by_test_id("delete-session").click()
    expect(page.locator("#confirm-delete-text")).to_contain_text("doomed")
    page.locator('#session-list [data-session="precious"]').click()  # another session while the bar is open
    expect(page.locator('#session-list [aria-current="true"]')).to_have_text("precious")
    expect(page.get_by_test_id("confirm-delete")).to_be_hidden()  # it named "doomed": it closes
    page.get_by_test_id("delete-session").click()
    expect(page.locator("#confirm-delete-text")).to_contain_text("precious")
    page.locator('#session-list [data-session="doomed"]').click()
    expect(page.locator('#session-list [aria-current="true"]')).to_have_text("doomed")
    expect(page.get_by_test_id("confirm-delete")).to_be_hidden()
    page.get_by_test_id("delete-session").click()
    page.get_by_test_id("confirm-delete").click()
    expect(page.get_by_test_id("session-list")).not_to_contain_text("doomed")
    assert web.store.sessions() == ["precious"] and web.transcript("precious").head == 1


SERVER_THAT_DIES = """
import sys, threading
from context_gatekeeper import SQLiteStore
from context_gatekeeper.chat.offline import OfflineEditor
from context_gatekeeper.chat.web.server import serve
from context_gatekeeper.chat.web.service import WebChat

class Stuck:  # streams the start of an answer, then waits until the process is killed
    def stream_text(self, messages):
        yield "first part "
        threading.Event().wait()
    def complete(self, messages):
        return "".join(self.stream_text(messages))

store = SQLiteStore(sys.argv[1])
serve(WebChat(store, Stuck(), OfflineEditor()), host="127.0.0.1", port=0, say=lambda line: print(line, flush=True))
"""


def test_a_server_that_dies_mid_answer_leaves_no_unstored_message_on_the_page(tmp_path: Path, page: Page) -> None:
    import subprocess
    import sys

    db = tmp_path / "chat.sqlite3"
    script = tmp_path / "server.py"
    script.write_text(SERVER_THAT_DIES, encoding="utf-8")
    server = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        lines: list[str] = []
        while not (lines and lines[-1].startswith("open ")):  # printed once the socket listens
            line = server.stdout.readline()
            assert line, f"the server ended before listening: {''.join(lines)}"
            lines.append(line)
        page.goto(lines[-1].split()[1] + "?session=demo")
        idle(page)
        page.get_by_test_id("message-input").fill(IRELAND)
        page.get_by_test_id("send").click()
        expect(page.locator(".message.assistant.pending .content")).to_have_text("first part ")
        server.kill()  # the server dies (kill -9) while the answer streams
        server.wait()
        expect(page.get_by_test_id("error")).to_contain_text(
            "the connection to the server broke before the answer was complete"
        )
        expect(page.get_by_test_id("error")).to_contain_text("your message was not added to the conversation, send it again")
        expect(page.locator(".message.pending")).to_have_count(0)
        expect(page.get_by_test_id("message")).to_have_count(0)
        expect(page.get_by_test_id("message-input")).to_have_value(IRELAND)  # kept for another try
        expect(page.get_by_test_id("send")).to_be_enabled()
        page.get_by_test_id("send").click()  # sending again while the server is gone says so, and keeps the text
        expect(page.get_by_test_id("error")).to_contain_text("the server cannot be reached")
        expect(page.get_by_test_id("error")).to_contain_text("your message was not added to the conversation")
        expect(page.get_by_test_id("message-input")).to_have_value(IRELAND)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.stdout is not None:
            server.stdout.close()
    store = SQLiteStore(db)
    try:
        assert store.sessions() == [], "nothing was stored"
    finally:
        store.close()


# -- pins of turns that do not start with the user, coming back to the tab ------------------


def test_a_turn_pins_from_its_first_message_whatever_its_role(web: Served, page: Page) -> None:
    """A greeting opens turn 1; turn 2 (an agent's) holds a user message inside its tool call:
    one pin button per turn, on its first message, and each pins its own turn."""
    web.transcript().set(list(AGENT_CONVERSATION))
    page.goto(web.url())
    idle(page)
    holders = page.locator('[data-testid="message"]:has([data-testid="pin"])')
    expect(holders).to_have_count(2)
    assert [holders.nth(i).get_attribute("data-id") for i in range(2)] == ["greet", "u1"]
    expect(page.locator('[id^="turn-"]')).to_have_count(2)  # one jump target per turn, never a duplicate id
    for turn in ("1", "2"):
        page.locator(f'[data-testid="pin"][data-turn="{turn}"]').click()
        expect(page.locator(f'[data-testid="pin"][data-turn="{turn}"]')).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_test_id("error")).to_be_hidden()
    assert web.chat.view("demo")["pinned"] == [1, 2]


def test_an_error_shown_stays_when_the_user_comes_back_to_the_tab(web: Served, page: Page) -> None:
    page.goto(web.url())
    say(page, IRELAND)
    say(page, "/edit make it shorter")  # the offline editor refuses: an error in the page
    error = page.get_by_test_id("error")
    expect(error).to_contain_text("offline")
    web.transcript().append(user=POSTGRES, assistant="Another tab's answer.")  # meanwhile, elsewhere
    page.evaluate("() => document.dispatchEvent(new Event('visibilitychange'))")  # back to this tab
    expect(page.get_by_test_id("message")).to_have_count(4)  # the page refreshed in the background ...
    idle(page)
    expect(error).to_be_visible()  # ... and the refusal is still there to read
    expect(error).to_contain_text("offline")
    expect(page.get_by_test_id("message-input")).to_have_value("/edit make it shorter")
