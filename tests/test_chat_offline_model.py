"""The scripted chat model of ``gatekeeper-chat --offline``: its answers, and the gate's view of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import context_gatekeeper
from context_gatekeeper import InMemoryStore, Transcript, TranscriptGate, extract_anchors
from context_gatekeeper.chat import offline
from context_gatekeeper.chat.offline import OfflineChatModel, subject_phrase

IRELAND = "What was the GDP of Ireland in 2021?"
REPLICATION = "How does Postgres streaming replication work?"
LAG = "what about its lag?"

QUESTIONS = [
    IRELAND,
    REPLICATION,
    LAG,
    "hello",
    "How long should a Redis lock TTL be?",
    "By the way, what grind size for espresso?",
    "Which espresso beans are best?",
    "And its largest sectors?",
    "Is asyncio.gather faster than a TaskGroup in Python 3.11?",
    "Redis 锁续租为什么会脑裂？",
    *(f"What is the boiling point of compound{n} at altitude{n}?" for n in range(12)),
    *(f"Tell me about moon{n}." for n in range(8)),
    "ok", "thanks!", "hi there", "yes please", "why?",
]


def answer(question: str) -> str:
    return OfflineChatModel().complete([{"role": "system", "content": "be brief"}, {"role": "user", "content": question}])


def words(text: str) -> set[str]:
    """The anchors the gate matches turns on (exact anchors such as a quoted phrase left out)."""
    return {a for a in extract_anchors(text).counts if a[0] not in '#`"'}


def test_the_templates_hold_no_word_the_gate_matches_on() -> None:
    """Two answers on different subjects must share no topic word: the templates are stopwords."""
    templates = offline._NO_SUBJECT + offline._ONE_WORD + offline._SEVERAL_WORDS
    for template in templates:
        filler = template.format(q="", Q="", a="", z="")
        assert not extract_anchors(filler).counts, template


@pytest.mark.parametrize("question", QUESTIONS)
def test_an_answer_talks_about_the_question_and_nothing_else(question: str) -> None:
    reply = answer(question)
    assert words(reply) <= words(question), reply  # no word of its own but the question's
    assert "earlier message" not in reply and "[offline]" not in reply
    phrase, content = subject_phrase(question)
    if content:
        assert f'"{phrase}"' in reply.replace(f'"{phrase[:1].upper()}{phrase[1:]}"', f'"{phrase}"')
        assert all(word.casefold() in reply.casefold() for word in content[:1] + content[-1:])


def test_answers_are_deterministic_and_varied() -> None:
    assert answer(IRELAND) == answer(IRELAND) == OfflineChatModel()([{"role": "user", "content": IRELAND}])
    shapes = set()
    for question in QUESTIONS:
        phrase, content = subject_phrase(question)
        shape = answer(question)
        for text in sorted({phrase, phrase[:1].upper() + phrase[1:], *content} - {""}, key=len, reverse=True):
            shape = shape.replace(text, "_")
        shapes.add(shape)
    assert len(shapes) == len(offline._NO_SUBJECT + offline._ONE_WORD + offline._SEVERAL_WORDS)


def test_an_answer_brings_an_anchor_of_its_own_as_a_real_answer_does() -> None:
    """The gate reads a turn whose answer adds nothing to the question as a weak switch
    of the topic before; the quoted subject is an anchor the question does not hold."""
    for question in (IRELAND, REPLICATION, LAG):
        own = set(extract_anchors(answer(question)).counts) - set(extract_anchors(question, query=True).counts)
        assert own, question


def test_the_gate_keeps_only_the_replication_turn_for_its_follow_up() -> None:
    transcript = Transcript("demo", store=InMemoryStore())
    for question in (IRELAND, REPLICATION):
        transcript.append(user=question, assistant=answer(question))
    selection = TranscriptGate(transcript, token_budget=4000).explain(LAG)
    assert selection.turn_ids == (2,)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (IRELAND, ("GDP of Ireland in 2021", ["GDP", "Ireland", "2021"])),
        ("How long should a Redis lock TTL be?", ("Redis lock TTL", ["Redis", "lock", "TTL"])),
        (LAG, ("lag", ["lag"])),
        ("ok, thanks!", ("", [])),
        ("the of in and", ("", [])),
    ],
)
def test_subject_phrase(question: str, expected: tuple[str, list[str]]) -> None:
    assert subject_phrase(question) == expected


def _python_path() -> str:
    package_root = Path(context_gatekeeper.__file__).resolve().parents[1]
    return os.pathsep.join([str(package_root), os.environ.get("PYTHONPATH", "")])


def test_the_offline_demo_does_not_send_an_unrelated_turn(tmp_path: Path) -> None:
    """printf 'Ireland\\nreplication\\nwhat about its lag?\\n/context\\n/quit\\n' | gatekeeper-chat --offline"""
    pytest.importorskip("rich")
    script = f"{IRELAND}\n{REPLICATION}\n{LAG}\n/context\n/quit\n"
    env = {**os.environ, "PYTHONPATH": _python_path()}
    env.pop("GOOGLE_API_KEY", None)
    env.pop("GEMINI_API_KEY", None)
    result = subprocess.run(
        [sys.executable, "-m", "context_gatekeeper.chat", "--offline", "--db", str(tmp_path / "lag.sqlite3"), "--plain"],
        input=script, capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "(the model was sent 1 of 2 earlier turns; /context shows why)" in out
    report = out.split("[chat] > /context", 1)[1]
    assert "kept turns: 2 of 2" in report
    sent = report.split("sent to the model", 1)[1]
    assert "Ireland" not in sent and f"user: {REPLICATION}" in sent
    transcript = Transcript("default", store=str(tmp_path / "lag.sqlite3"))
    try:
        stored = [m.content for m in transcript.messages if m.role == "assistant"]
    finally:
        transcript.close()
    assert stored == [answer(q) for q in (IRELAND, REPLICATION, LAG)]  # what was shown about context is not stored


# -- the offline editor reads the edit prompt whatever the messages say --------------------------
TAGGED = [("user", "Explain the </conversation> and <instruction> tags in Ireland"),
          ("assistant", "In Ireland they mark <conversation>data</conversation>; see </instruction>.")]


def test_an_offline_edit_of_messages_holding_the_prompts_tags_applies(tmp_path: Path) -> None:
    transcript = Transcript("tags", store=str(tmp_path / "tags.sqlite3"))
    try:
        transcript.append(user=TAGGED[0][1], assistant=TAGGED[1][1])
        transcript.edit("it was Iceland, not Ireland", model=offline.OfflineEditor())
        assert [(m.role, m.content) for m in transcript.messages] == [
            (role, text.replace("Ireland", "Iceland")) for role, text in TAGGED]
    finally:
        transcript.close()


def test_the_offline_editor_reads_the_conversation_as_json_not_up_to_a_closing_tag() -> None:
    from context_gatekeeper.editing.format import EditView, build_prompt
    from context_gatekeeper.records.messages import Message

    view = EditView.of([Message(f"m{i}", role, text) for i, (role, text) in enumerate(TAGGED)])
    new = "Iceland </instruction> <conversation>"  # the instruction holds the tags too
    prompt = build_prompt("patch", view, f"replace Ireland with {new}")
    raw = [prompt[0], {**prompt[1], "content": prompt[1]["content"].replace("\\u003c", "<")}]  # messages unescaped
    for messages in (prompt, raw):
        operations = json.loads(offline.OfflineEditor().complete(messages))["operations"]
        assert [(op["id"], op["content"]) for op in operations] == [
            (str(i), text.replace("Ireland", new)) for i, (_, text) in enumerate(TAGGED, 1)]
