"""Screenshots of the web chat for the README, taken from the running page.

    python docs/screenshots.py            # writes docs/img/web-chat.png and docs/img/web-edit.png

It serves ``gatekeeper-chat --web --offline``'s chat (the scripted models, a
throwaway SQLite file) from a thread, drives Debian's ``chromium`` with Playwright
(the ``web-test`` extra; ``apt-get install chromium``, never ``playwright install``)
through the README's story, and photographs the two modes:

* ``web-chat.png``: three turns over two topics; under the last answer the context
  strip shows the replication turn sent and the GDP turn left out, and the tokens saved;
* ``web-edit.png``: edit mode with the preview of "it was Iceland, not Ireland",
  removed and added text marked side by side, before Commit.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from context_gatekeeper import SQLiteStore
from context_gatekeeper.chat.offline import OfflineChatModel, OfflineEditor
from context_gatekeeper.chat.web.server import BackgroundServer, create_app
from context_gatekeeper.chat.web.service import WebChat

OUT = Path(__file__).resolve().parent / "img"
QUESTIONS = (
    "What was the GDP of Ireland in 2021?",
    "How does Postgres streaming replication work?",
    "How much replication lag does Postgres streaming replication have?",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the PNG files (default: {OUT})")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium")
    if chromium is None:
        print("no chromium on PATH: apt-get install chromium", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "chat.sqlite3")
        chat = WebChat(store, OfflineChatModel(), OfflineEditor())
        try:
            with BackgroundServer(create_app(chat)) as server, sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                try:
                    page = browser.new_page(viewport={"width": 1360, "height": 860}, device_scale_factor=1)
                    page.goto(server.url + "?session=trip-notes")
                    for question in QUESTIONS:
                        page.get_by_test_id("message-input").fill(question)
                        page.get_by_test_id("send").click()
                        expect(page.locator("body.busy")).to_have_count(0)
                    expect(page.get_by_test_id("context-strip")).to_have_count(3)
                    page.get_by_test_id("message-input").fill("")
                    page.screenshot(path=str(args.out / "web-chat.png"))

                    page.get_by_test_id("mode-toggle").click()
                    page.get_by_test_id("message-input").fill("it was Iceland, not Ireland")
                    page.get_by_test_id("send").click()
                    expect(page.get_by_test_id("preview-diff")).to_be_visible()
                    page.get_by_test_id("message-input").fill("it was Iceland, not Ireland")
                    page.screenshot(path=str(args.out / "web-edit.png"))
                finally:
                    browser.close()
        finally:
            chat.close()
            store.close()
    for name in ("web-chat.png", "web-edit.png"):
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
