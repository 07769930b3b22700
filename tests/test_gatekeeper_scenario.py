"""The Context Gatekeeper report's scenario, with its exact texts."""

from __future__ import annotations

import pytest

from context_gatekeeper import ContextGatekeeper

TURNS = [
    (
        "Redis 锁续租为什么会脑裂？",
        "续租线程卡住或网络分区时，锁的 TTL 到期被自动释放，另一个客户端拿到同一把锁，两个客户端都以为自己持有锁，这就是脑裂。",
    ),
    ("如何避免脑裂？", "给每次加锁发一个单调递增的 fencing token，存储层拒绝旧 token 的写入；同时监控时钟漂移。"),
    (
        "Redlock 算法靠谱吗？",
        "Redlock 在时钟跳变和长时间 GC 停顿下仍可能失效，强一致场景更推荐 etcd 或 ZooKeeper 的锁。",
    ),
    ("锁的 TTL 怎么设？", "TTL 要大于业务最长执行时间，再配合看门狗每 TTL/3 续租一次。"),
    (
        "换个话题，Python 的 asyncio 事件循环是怎么调度协程的？",
        "事件循环维护就绪队列，协程遇到 await 时挂起并交还控制权，I/O 就绪后再被唤醒。",
    ),
    (
        "asyncio.gather 和 TaskGroup 有什么区别？",
        "gather 收集结果，某个任务出错时默认不取消其他任务；TaskGroup（3.11+）在任一任务失败时取消其余任务并抛出 ExceptionGroup。",
    ),
]


def build(n_turns: int, budget: int = 2000) -> ContextGatekeeper:
    gk = ContextGatekeeper(token_budget=budget)
    for user, assistant in TURNS[:n_turns]:
        gk.add_turn(user, assistant)
    return gk


@pytest.mark.parametrize("budget", [2000, 60])
def test_ttl_query_returns_to_the_redis_turns_and_keeps_turn_one_not_three(budget: int) -> None:
    # The Redlock exchange (turn 3) shares no word with turns 1-2 but a lone "锁" and
    # "时钟": it opens a topic of its own, so the TTL question goes back to turns 1-2.
    gk = build(3, budget)
    selection = gk.explain("锁的 TTL 怎么设？")
    assert selection.decision == "return"
    assert 3 not in selection.turn_ids
    assert selection.tokens_kept <= budget
    if budget == 2000:
        assert 1 in selection.turn_ids


@pytest.mark.parametrize("budget", [2000, 60])
def test_asyncio_question_keeps_turn_five_only_from_the_new_topic(budget: int) -> None:
    # Mostly new content (gather, TaskGroup), but the words it shares with turn 5
    # ("asyncio") hold it in that topic, the active one: it continues there.
    gk = build(5, budget)
    selection = gk.explain("asyncio.gather 和 TaskGroup 有什么区别？")
    assert selection.decision == "continue" and selection.topic == 4
    assert not {1, 2, 3, 4} & set(selection.turn_ids)
    assert selection.tokens_kept <= budget
    if budget == 2000:
        assert 5 in selection.turn_ids


@pytest.mark.parametrize("budget", [2000, 60])
def test_pronoun_follow_up_keeps_exactly_the_asyncio_turns(budget: int) -> None:
    gk = build(6, budget)
    selection = gk.explain("它的并发性能怎么样？")
    assert selection.decision == "continue"
    assert selection.tokens_kept <= budget
    if budget == 2000:
        assert selection.turn_ids == (5, 6)
    assert set(selection.turn_ids) <= {5, 6}


@pytest.mark.parametrize("budget", [2000, 60])
def test_explicit_return_to_redis_keeps_turn_two_not_asyncio(budget: int) -> None:
    gk = build(6, budget)
    selection = gk.explain("回到 Redis，fencing token 存在哪里？")
    assert selection.decision == "return"
    assert not {5, 6} & set(selection.turn_ids)
    assert selection.tokens_kept <= budget
    if budget == 2000:
        assert 2 in selection.turn_ids
        assert selection.matched_segment == (1, 2, 4)


def test_segments_and_topics_follow_the_conversation() -> None:
    gk = build(6)
    # "锁的 TTL 怎么设？" (turn 4) goes back to the Redis topic after the Redlock digression.
    assert gk.segments() == [(1, 2), (3,), (4,), (5, 6)]
    assert gk.topics() == {0: (1, 2, 4), 2: (3,), 4: (5, 6)}


def test_select_and_build_prompt_use_the_report_shapes() -> None:
    gk = build(6)
    selected = gk.select("回到 Redis，fencing token 存在哪里？")
    assert [item["turn_id"] for item in selected] == [1, 2, 4]
    assert selected[1] == {"user": TURNS[1][0], "assistant": TURNS[1][1], "turn_id": 2}
    prompt = gk.build_prompt("回到 Redis，fencing token 存在哪里？")
    assert prompt.endswith("User: 回到 Redis，fencing token 存在哪里？")
    assert TURNS[1][1] in prompt and TURNS[4][1] not in prompt


def test_a_return_after_a_digression_starts_its_own_segment() -> None:
    gk = ContextGatekeeper(token_budget=1000)
    gk.add_turn("Our nightly export job runs for 30 seconds. How long should its Redis lock TTL be?", "90 seconds.")
    gk.add_turn("By the way, what grind should I use for the moka pot?", "Medium-fine.")
    gk.add_turn("How should the watchdog renew the export job's Redis lock?", "Every 30 seconds.")
    assert gk.segments() == [(1,), (2,), (3,)]  # the Redis question is not filed under coffee


@pytest.mark.parametrize("thing", ["这玩意儿", "这东西"])
def test_this_thing_in_chinese_continues_the_last_topic(thing: str) -> None:
    gk = ContextGatekeeper(token_budget=1000)
    gk.add_turn("猫咪疫苗要打几针？", "一般打三针猫三联，每针间隔三到四周，之后每年加强一次。")
    gk.add_turn("健身房教练推荐我吃肌酸，有用吗？", "肌酸对力量训练有帮助，每天三到五克就够，注意多喝水。")
    follow_up = gk.explain(f"{thing}要一直吃吗，停了会不会掉？")  # no word of the creatine turn but the pronoun
    assert (follow_up.decision, follow_up.turn_ids) == ("continue", (2,))


def test_scratch_that_sets_the_topic_aside_unless_the_words_stay_on_it() -> None:
    gk = ContextGatekeeper(token_budget=1000)
    gk.add_turn("Leather or fabric sofa with two small kids and a cat?",
                "Fabric with a washable cover is easier with kids; leather scratches under cat claws.")
    gk.add_turn("What about microfibre?", "Microfibre resists stains and cat claws, and it wipes clean.")
    aside = gk.explain("Actually scratch that, we'll decide in the store. Can you explain what a Docker volume is?")
    assert (aside.decision, aside.turn_ids) == ("switch", ())  # "that" inside the closing points nowhere
    same = gk.explain("Scratch that: a microfibre sofa, is it fine with the cat's claws?")
    assert (same.decision, same.turn_ids) == ("continue", (1, 2))  # a correction on the same topic holds it
