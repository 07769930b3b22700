"""GatekeeperNodePostprocessor: the covering subset of retrieved nodes, in real LlamaIndex engines (offline)."""

from __future__ import annotations

import asyncio
import copy

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from context_gatekeeper.selection.coverage import CoverageCorpus
from li_scripted_llm import ScriptedLLM
from llamaindex_gatekeeper import postprocessor as postprocessor_module
from llamaindex_gatekeeper.node_vectors import VECTORS
from llamaindex_gatekeeper.postprocessor import ANCHORS, FACTS, GatekeeperNodePostprocessor, NodeExplanation, build_corpus
from gatekeeper_support import CountingCounter

TTL = "A Redis lock needs a TTL longer than the critical section, renewed by a watchdog."
FENCING = "A fencing token is a counter that grows with every lock grant; storage rejects stale tokens."
BREAD = "Sourdough bread needs a long, cold proof overnight and a very hot oven."
QUERY = "How should I set the Redis lock TTL, and what is a fencing token for?"


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(autouse=True)
def _cold_caches() -> None:
    """Each test starts with no node text analysed (the caches are shared by every
    postprocessor in the process, which is what the caching tests check)."""
    for cache in (FACTS, ANCHORS, VECTORS):
        cache.clear()


def retrieved(*texts: str) -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata={"source": f"doc{i}.md"}), score=1.0 - i / 10)
        for i, t in enumerate(texts)
    ]


def build_index() -> VectorStoreIndex:
    documents = [
        Document(text=text, metadata={"source": name})
        for name, text in [("ttl.md", TTL), ("ttl-copy.md", TTL), ("bread.md", BREAD), ("fencing.md", FENCING)]
    ]
    return VectorStoreIndex.from_documents(documents, embed_model=MockEmbedding(embed_dim=8))


def test_drops_duplicates_and_irrelevant_nodes_keeping_retrieval_order() -> None:
    nodes = retrieved(FENCING, TTL, BREAD, TTL)
    kept = GatekeeperNodePostprocessor(token_counter=words).postprocess_nodes(nodes, query_str=QUERY)
    assert [n.node.node_id for n in kept] == ["n0", "n1"]


def test_returns_the_same_objects_with_metadata_and_scores_untouched() -> None:
    nodes = retrieved(TTL, BREAD, FENCING)
    before = copy.deepcopy([(n.node.metadata, n.score, n.node.text, n.node.excluded_llm_metadata_keys) for n in nodes])
    gate = GatekeeperNodePostprocessor(token_budget=1000)
    kept = gate.postprocess_nodes(nodes, QueryBundle(QUERY))
    gate.explain(nodes, QUERY)
    assert kept[0] is nodes[0] and kept[1] is nodes[2]
    assert [(n.node.metadata, n.score, n.node.text, n.node.excluded_llm_metadata_keys) for n in nodes] == before


def test_respects_the_budget() -> None:
    nodes = retrieved(TTL, FENCING)
    gate = GatekeeperNodePostprocessor(token_budget=words(TTL) + 2, token_counter=words, metadata_mode="none")
    kept = gate.postprocess_nodes(nodes, query_str=QUERY)
    assert sum(words(n.node.text) for n in kept) <= words(TTL) + 2 and len(kept) == 1
    assert [e.reason for e in gate.explain(nodes, QUERY)].count("over budget") == 1
    assert GatekeeperNodePostprocessor(token_budget=0).postprocess_nodes(nodes, query_str=QUERY) == []


def test_explain_says_why_each_node_was_kept_or_dropped() -> None:
    nodes = retrieved(TTL, TTL, BREAD, FENCING)
    explanations = GatekeeperNodePostprocessor().explain(nodes, QUERY)
    assert all(isinstance(e, NodeExplanation) for e in explanations)
    assert [(e.node_id, e.kept, e.reason) for e in explanations] == [
        ("n0", True, "covers"),
        ("n1", False, "no new coverage"),
        ("n2", False, "irrelevant"),
        ("n3", True, "covers"),
    ]
    assert "redis" in explanations[0].coverage.covered and explanations[0].coverage.gain > 0
    assert str(explanations[2]).startswith("n2: dropped #2: irrelevant")
    assert asyncio.run(GatekeeperNodePostprocessor().aexplain(nodes, QUERY)) == explanations  # the async twin


def test_with_no_lexical_evidence_a_repeated_node_is_dropped_for_a_distinct_one() -> None:
    """The fallback (no informative query term) keeps nodes in retrieval order, but not a node
    whose text, as the LLM would read it, repeats a kept one: a fusion retriever's duplicate
    or the same paragraph in another document with the same metadata."""
    chunk = TextNode(text=TTL, id_="chunk-1")
    same_text = TextNode(text=TTL, id_="chunk-1-from-doc-2")
    other = TextNode(text=FENCING, id_="chunk-2")
    nodes = [NodeWithScore(node=chunk, score=0.9), NodeWithScore(node=chunk, score=0.9),
             NodeWithScore(node=same_text, score=0.88), NodeWithScore(node=other, score=0.5)]
    gate = GatekeeperNodePostprocessor(token_budget=words(TTL) + words(FENCING), token_counter=words)
    assert [n.node.node_id for n in gate.postprocess_nodes(nodes, query_str="Summarise it")] == ["chunk-1", "chunk-2"]
    assert [n.node.node_id for n in asyncio.run(gate.apostprocess_nodes(nodes, query_str="Summarise it"))] == [
        "chunk-1", "chunk-2"]
    explained = gate.explain(nodes, "Summarise it")
    assert [(e.kept, e.reason) for e in explained] == [
        (True, "fallback"), (False, "duplicate"), (False, "duplicate"), (True, "fallback")]
    assert str(explained[2]) == f"chunk-1-from-doc-2: dropped #2: duplicate, the same text as kept #0 ({words(TTL)} tokens)"
    # the LLM reads the metadata too: the same body from two sources is two texts
    sourced = retrieved(TTL, TTL)
    assert GatekeeperNodePostprocessor().postprocess_nodes(sourced, query_str="Summarise it") == sourced
    assert GatekeeperNodePostprocessor(metadata_mode="none").postprocess_nodes(
        sourced, query_str="Summarise it") == sourced[:1]


def test_with_no_lexical_evidence_a_node_differing_only_in_whitespace_is_a_repeat() -> None:
    """A chunk that repeats a kept one but for a trailing newline (a splitter's edge) says the
    same to the LLM: the fallback drops it for a distinct node, by every path alike."""
    nodes = [NodeWithScore(node=TextNode(text=TTL, id_="a"), score=0.9),
             NodeWithScore(node=TextNode(text=TTL + "\n", id_="b"), score=0.9),
             NodeWithScore(node=TextNode(text=FENCING, id_="c"), score=0.5)]
    gate = GatekeeperNodePostprocessor(token_budget=words(TTL) + words(FENCING), token_counter=words)
    assert [n.node.node_id for n in gate.postprocess_nodes(nodes, query_str="Summarise it")] == ["a", "c"]
    assert [n.node.node_id for n in asyncio.run(gate.apostprocess_nodes(nodes, query_str="Summarise it"))] == ["a", "c"]
    assert [(e.kept, e.reason) for e in gate.explain(nodes, "Summarise it")] == [
        (True, "fallback"), (False, "duplicate"), (True, "fallback")]


def test_no_lexical_match_keeps_nodes_by_default() -> None:
    nodes = retrieved(TTL, BREAD)
    assert GatekeeperNodePostprocessor().postprocess_nodes(nodes, query_str="tell me more") == nodes
    assert GatekeeperNodePostprocessor(fallback=False).postprocess_nodes(nodes, query_str="tell me more") == []
    assert GatekeeperNodePostprocessor().postprocess_nodes([], query_str=QUERY) == []


def test_a_corpus_built_from_the_index_weighs_terms() -> None:
    index = build_index()
    corpus = build_corpus(index)
    assert isinstance(corpus, CoverageCorpus) and corpus.n_docs == 4 and corpus.df("redis") == 2
    assert build_corpus([TTL, BREAD]).n_docs == 2
    gate = GatekeeperNodePostprocessor(corpus=corpus)
    kept = gate.postprocess_nodes(retrieved(TTL, BREAD, FENCING, TTL), query_str=QUERY)
    assert [n.node.node_id for n in kept] == ["n0", "n2"]
    assert "corpus" not in gate.to_dict() and gate.to_dict()["class_name"] == "GatekeeperNodePostprocessor"


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        GatekeeperNodePostprocessor(token_budget=-1)
    with pytest.raises(ValueError):
        GatekeeperNodePostprocessor(coverage_target=0)
    with pytest.raises(TypeError):
        GatekeeperNodePostprocessor(token_counter=42)


def test_inside_a_query_engine() -> None:
    index = build_index()
    llm = ScriptedLLM(default="Use a TTL and fencing tokens.")
    engine = index.as_query_engine(
        llm=llm, similarity_top_k=10, node_postprocessors=[GatekeeperNodePostprocessor(token_budget=500)]
    )
    response = engine.query(QUERY)
    assert str(response) == "Use a TTL and fencing tokens."
    sources = [n.node.metadata["source"] for n in response.source_nodes]
    assert sorted(sources) in (["fencing.md", "ttl.md"], ["fencing.md", "ttl-copy.md"])
    seen = llm.seen
    assert "fencing token is a counter" in seen and seen.count("Redis lock needs a TTL") == 1
    assert "Sourdough" not in seen


def test_inside_a_query_engine_async() -> None:
    index = build_index()
    llm = ScriptedLLM()
    engine = index.as_query_engine(llm=llm, similarity_top_k=10, node_postprocessors=[GatekeeperNodePostprocessor()])
    response = asyncio.run(engine.aquery(QUERY))
    assert len(response.source_nodes) == 2 and "Sourdough" not in llm.seen


def test_inside_a_context_chat_engine() -> None:
    index = build_index()
    llm = ScriptedLLM(default="Here is what I know.")
    gate = GatekeeperNodePostprocessor(token_budget=500)
    # an in-process memory: the engines' default one opens an aiosqlite connection (a
    # thread) that nothing closes
    engine = ContextChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=10), llm=llm, node_postprocessors=[gate],
        memory=ChatMemoryBuffer.from_defaults(token_limit=3000),
    )
    assert str(engine.chat(QUERY)) == "Here is what I know."
    sent = "\n".join(m.content or "" for m in llm.chats[-1])
    assert "fencing token is a counter" in sent and sent.count("Redis lock needs a TTL") == 1
    assert "Sourdough" not in sent
    via_index = index.as_chat_engine(chat_mode="context", llm=llm, node_postprocessors=[gate], similarity_top_k=10,
                                     memory=ChatMemoryBuffer.from_defaults(token_limit=3000))
    via_index.chat("Tell me about sourdough bread and a hot oven.")
    sent = "\n".join(m.content or "" for m in llm.chats[-1])
    assert "Sourdough" in sent and "fencing token is a counter" not in sent


# -- per-text caches: a node's text is analysed once, across calls, objects and threads ----


@pytest.fixture
def extracted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text whose anchors the postprocessor extracts (all of them: its anchor set)."""
    texts: list[str] = []
    real = postprocessor_module.anchor_set

    def counting(text: str, *args: object, **kwargs: object) -> object:
        texts.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(postprocessor_module, "anchor_set", counting)
    return texts


HEADERS = [f"source: doc{i}.md" for i in range(4)]
"""The metadata headers of :func:`retrieved`'s nodes, analysed apart from their bodies."""
ANALYSED = [FENCING, TTL, BREAD, *HEADERS]
"""What analysing ``retrieved(FENCING, TTL, BREAD, TTL)`` extracts anchors from."""


def test_a_node_text_is_counted_and_analysed_once_across_calls_and_postprocessors(extracted) -> None:
    count = CountingCounter()
    first = GatekeeperNodePostprocessor(token_counter=count)
    nodes = retrieved(FENCING, TTL, BREAD, TTL)
    kept = first.postprocess_nodes(nodes, query_str=QUERY)
    assert [n.node.node_id for n in kept] == ["n0", "n1"]
    # only the nodes holding a query term are counted (n1 and n3 differ by their metadata, the source)
    assert count.texts == [nodes[i].node.get_content(metadata_mode="llm") for i in (0, 1, 3)]
    # met for the first time, each node is read for this query alone (held_anchors): nothing is extracted
    assert extracted == []
    second = GatekeeperNodePostprocessor(token_counter=count, token_budget=1000)
    for query in (QUERY, "What is a fencing token?", "How hot should the oven be for sourdough?"):
        second.postprocess_nodes(retrieved(FENCING, TTL, BREAD, TTL), query_str=query)  # new node objects
        first.explain(retrieved(FENCING, TTL, BREAD, TTL), query)
    assert len(count.texts) == 4 and sorted(extracted) == sorted(ANALYSED)
    other = GatekeeperNodePostprocessor(token_counter=words)  # another counter counts anew; anchors are shared
    assert [n.node.node_id for n in other.postprocess_nodes(retrieved(FENCING, TTL), query_str=QUERY)] == ["n0", "n1"]
    assert sorted(extracted) == sorted(ANALYSED)


def test_with_tiktoken_a_node_is_counted_only_when_its_word_floor_may_make_it_the_next_pick() -> None:
    """The default counter has a cheap lower bound (``tokens.word_floor``): on the
    hand-labelled chats' messages as nodes, ``postprocess_nodes`` keeps what ``select``
    (which counts every node) keeps, in one call and again on the same nodes, and counts
    fewer nodes than hold a query term."""
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "interleaved.jsonl"
    cases = [json.loads(line) for line in data.read_text("utf-8").splitlines() if line.strip()]
    counted = holding = 0
    for case in cases[:80]:
        texts = [m for t in case["turns"] for m in (t["user"], t["assistant"])]
        for budget in (40, 120):
            FACTS.clear()
            lazy = GatekeeperNodePostprocessor(token_budget=budget)
            assert lazy._floor is not None
            count, asked = lazy._count, []
            lazy._count = lambda text: asked.append(text) or count(text)  # the same counts, seen
            kept = [n.node.node_id for n in lazy.postprocess_nodes(retrieved(*texts), query_str=case["query"])]
            again = [n.node.node_id for n in lazy.postprocess_nodes(retrieved(*texts), query_str=case["query"])]
            result = GatekeeperNodePostprocessor(token_budget=budget).select(retrieved(*texts), case["query"])
            assert kept == again == [f"n{i}" for i in result.kept], case["query"]
            if result.coverable_weight > 0:  # else the fallback keeps nodes in order, each counted
                counted += len(asked)
                holding += sum(1 for e in result.explanations if e.matched)
    assert counted < 0.85 * holding, (counted, holding)  # without the floor: every one of them


def test_the_facts_are_shared_across_threads(extracted) -> None:
    from concurrent.futures import ThreadPoolExecutor

    count = CountingCounter()
    gate = GatekeeperNodePostprocessor(token_counter=count)
    expected = [n.node.node_id for n in gate.postprocess_nodes(retrieved(FENCING, TTL, BREAD), query_str=QUERY)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda _: GatekeeperNodePostprocessor(token_counter=count).postprocess_nodes(
            retrieved(FENCING, TTL, BREAD), query_str=QUERY), range(8)))
    assert all([n.node.node_id for n in run] == expected for run in runs)
    counted = sorted(n.node.get_content(metadata_mode="llm") for n in retrieved(FENCING, TTL))  # BREAD: no query term
    # seen again, every node is analysed whole (two threads may both analyse one text: same anchors)
    assert sorted(count.texts) == counted and set(extracted) == {FENCING, TTL, BREAD, *HEADERS[:3]}


def test_a_changed_text_or_metadata_is_analysed_anew_never_served_stale() -> None:
    count = CountingCounter()
    gate = GatekeeperNodePostprocessor(token_counter=count)  # explain counts every node
    nodes = retrieved(TTL, BREAD)
    gate.explain(nodes, QUERY)
    nodes[1].node.text = FENCING  # the same node object, now another text
    nodes[0].node.metadata["source"] = "renamed.md"
    nodes[0].node.metadata["page"] = 1
    assert [e.node_id for e in gate.explain(nodes, QUERY) if e.kept] == ["n0", "n1"]
    assert count.texts[2:] == [n.node.get_content(metadata_mode="llm") for n in nodes]
    nodes[0].node.metadata["page"] = True  # equal to 1, formatted otherwise
    gate.explain(nodes, QUERY)
    assert count.texts[-1] == nodes[0].node.get_content(metadata_mode="llm") and "page: True" in count.texts[-1]
    nodes[0].node.excluded_llm_metadata_keys = ["source", "page"]
    gate.explain(nodes, QUERY)
    assert count.texts[-1] == TTL and len(count.texts) == 6
    nodes[0].node.metadata[7] = "seven"  # a key that is not a str: read through get_content
    gate.explain(nodes, QUERY)
    assert count.texts[-1] == nodes[0].node.get_content(metadata_mode="llm") and "7: seven" in count.texts[-1]


def test_other_node_types_and_unhashable_counters_are_cached_by_their_text(extracted) -> None:
    class Tokenizer:  # unhashable, with encode
        __hash__ = None  # type: ignore[assignment]

        def __init__(self) -> None:
            self.calls = 0

        def encode(self, text: str) -> list[str]:
            self.calls += 1
            return text.split()

    tokenizer = Tokenizer()
    gate = GatekeeperNodePostprocessor(token_counter=tokenizer)
    documents = [NodeWithScore(node=Document(text=t, id_=f"d{i}"), score=1.0) for i, t in enumerate((TTL, BREAD))]
    for query in (QUERY, "sourdough oven"):
        gate.postprocess_nodes(documents, query_str=query)
        gate.postprocess_nodes(retrieved(TTL, BREAD), query_str=query)
    assert tokenizer.calls == 4  # two texts as Documents, two as TextNodes with metadata
    assert sorted(extracted) == sorted([TTL, BREAD, *HEADERS[:2]])  # a TextNode's body is the Document's text


def test_a_nodes_anchors_are_its_whole_texts_though_header_and_body_are_analysed_apart() -> None:
    """The header and the body of a node with metadata are analysed apart and added: equal
    to extracting the text ``get_content`` gives, on texts built to make a match span the
    line break between them (numbers, versions, identifiers, quotes, code, CJK, combining
    marks, white space) and on templates that do not end the header with one."""
    import random

    from context_gatekeeper import extract_anchors

    pool = ['"', "`", "“", "”", "「", "」", "1", "22", "v3", ".", "_", "->", "::", "a", "Foo", "é", "\u0301",
            "锁", "索引", "加了", " ", "\t", "\u00a0", "\u3000", "\n", "ﬁ", "①", "Ａ", "x9", "-", "TTL"]
    rng = random.Random(22)

    def piece(n: int) -> str:
        return "".join(rng.choice(pool) for _ in range(rng.randrange(n)))

    nodes = []
    for i in range(400):
        node = TextNode(text=piece(12) if i % 4 else rng.choice([TTL, FENCING, BREAD]) + piece(4), id_=f"r{i}",
                        metadata={"file": piece(8) or "x", "page": rng.choice([1, 2.5, True, "v1.2", "22"])})
        if i % 5 == 0:
            node.text_template = rng.choice(["{metadata_str}{content}", "{metadata_str} {content}",
                                             "{metadata_str}.{content}", "{content}\n\n{metadata_str}"])
        if i % 7 == 0:
            node.excluded_llm_metadata_keys = ["file"]
        nodes.append(NodeWithScore(node=node, score=1.0))
    gate = GatekeeperNodePostprocessor(token_counter=words)
    for mode in ("llm", "embed", "all", "none"):
        gate.metadata_mode = mode
        gate.postprocess_nodes(nodes, query_str=QUERY)  # analyses every node, formats few
        gate.explain(nodes, QUERY)  # formats and counts the others, keeping their anchors
        analysed = {text: anchors for text, _, anchors in FACTS._data.values()}
        for item in nodes:
            text = item.node.get_content(metadata_mode=mode)
            assert analysed[text] == frozenset(extract_anchors(text).counts), text


def test_postprocess_nodes_keeps_what_explain_keeps_on_new_and_seen_nodes() -> None:
    """postprocess_nodes reads new nodes for the query alone (held_anchors: most are not
    analysed), analyses the nodes it meets again, and counts only the nodes that hold a
    query term; explain analyses and counts them all.  On the hand-labelled sets (each
    message a node), with and without a budget, both keep the same nodes, for nodes new to
    the process and for nodes seen before (then analysed)."""
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    cases = [json.loads(line) for name in ("interleaved.jsonl", "hard_cases.jsonl")
             for line in (data / name).read_text("utf-8").splitlines() if line.strip()]
    gates = [GatekeeperNodePostprocessor(), GatekeeperNodePostprocessor(token_budget=120),
             GatekeeperNodePostprocessor(token_budget=60, fallback=False, metadata_mode="none")]
    pending = 0
    for k, case in enumerate(cases):
        nodes = retrieved(*(m for t in case["turns"] for m in (t["user"], t["assistant"])))
        gate = gates[k % 3]
        queries = [case["query"] if k % 10 else "and then?",  # no informative term: the fallback
                   cases[(k * 7 + 1) % len(cases)]["query"]]  # another topic, on nodes seen before
        FACTS.clear()
        ANCHORS.clear()
        kept = [[n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=queries[0])]]
        pending += sum(isinstance(f[2], postprocessor_module._Pending) for f in FACTS._data.values())  # unanalysed
        kept.append([n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=queries[1])])  # seen: analysed
        assert not any(isinstance(f[2], postprocessor_module._Pending) for f in FACTS._data.values())
        for query, ids in zip(queries, kept):
            assert ids == [e.node_id for e in gate.explain(nodes, query) if e.kept], (k, query)
    assert pending > 500


def test_select_covering_with_given_anchors_or_without_explanations_chooses_the_same() -> None:
    from dataclasses import replace

    from context_gatekeeper import InvalidInputError, extract_anchors, select_covering

    texts = [TTL, BREAD, FENCING, TTL]
    full = select_covering(QUERY, texts, costs=[9, 9, 9, 9], token_budget=20)
    given = select_covering(QUERY, texts, costs=[9, 9, 9, 9], token_budget=20,
                            anchors=[extract_anchors(t).counts for t in texts])
    assert given == full and full.kept == [0, 2] and len(full.explanations) == 4
    lean = select_covering(QUERY, texts, costs=[9, 9, 9, 9], token_budget=20, explain=False)
    assert lean.explanations == [] and lean == replace(full, explanations=[])
    fallback = select_covering("tell me more", texts, costs=[9, 9, 9, 9], token_budget=20, explain=False)
    assert fallback.kept == [0, 1] and fallback.explanations == []
    with pytest.raises(InvalidInputError, match="anchor counts for 4 texts"):
        select_covering(QUERY, texts, costs=[9, 9, 9, 9], anchors=[extract_anchors(TTL).counts])


class OldTextNode(TextNode):
    """``TextNode`` as llama-index-core 0.14.5 to 0.14.13 define it: a field of its own, spelt
    ``metadata_seperator``, joins the metadata pairs, and the base class's ``metadata_separator``
    (which that spelling is an alias of) is not read."""

    metadata_seperator: str = Field(default="\n")

    def get_metadata_str(self, mode: MetadataMode = MetadataMode.ALL) -> str:
        if mode == MetadataMode.NONE:
            return ""
        skipped = self.excluded_llm_metadata_keys if mode == MetadataMode.LLM else \
            self.excluded_embed_metadata_keys if mode == MetadataMode.EMBED else []
        return self.metadata_seperator.join(
            self.metadata_template.format(key=key, value=str(value))
            for key, value in self.metadata.items() if key not in skipped
        )


@pytest.mark.parametrize("node_class", [TextNode, OldTextNode])
@pytest.mark.parametrize("spelling", ["metadata_separator", "metadata_seperator"])
def test_a_node_is_priced_with_the_metadata_separator_its_text_is_joined_with(
    node_class: type[TextNode], spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The price of a plain TextNode is built from its parts (:func:`_parts_key`); it must
    join the metadata with the separator ``get_metadata_str`` uses on the installed
    llama-index (simulated for 0.14.5: a ``TextNode`` class with the old field), so a budget
    one token short of the node as sent keeps nothing."""
    monkeypatch.setattr(postprocessor_module, "TextNode", node_class)  # the class read from its parts
    metadata = {f"k{i}": f"v{i}" for i in range(12)}
    node = node_class(text=TTL, metadata=metadata, **{spelling: " | "})
    sent = len(node.get_content(metadata_mode=MetadataMode.LLM))  # a character a token: every separator counts
    nodes = [NodeWithScore(node=node)]
    for budget, kept in ((sent - 1, []), (sent, nodes)):
        gate = GatekeeperNodePostprocessor(token_budget=budget, token_counter=len)
        assert gate.postprocess_nodes(nodes, query_str=QUERY) == kept
        assert gate.explain(nodes, QUERY)[0].coverage.cost == sent


def test_the_budget_follows_the_librarys_one_rule() -> None:
    nodes = retrieved(TTL, FENCING)
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(ValueError, match="int >= 0"):
            GatekeeperNodePostprocessor(token_budget=bad)
    assert GatekeeperNodePostprocessor(token_budget=None).token_budget is None  # no limit
    assert GatekeeperNodePostprocessor(token_budget=0).postprocess_nodes(nodes, query_str=QUERY) == []


def test_a_header_and_a_body_are_tested_apart_and_a_node_half_analysed_stays_pending(extracted) -> None:
    """postprocess_nodes reads a new node's body and header apart, each for the query alone
    (extracted only when held_anchors cannot tell); a node not read whole is kept as
    pending (its anchors are not all known), its text is counted as get_content formats
    it, and it keeps what explain keeps."""
    count = CountingCounter()
    gate = GatekeeperNodePostprocessor(token_counter=count)
    nodes = [NodeWithScore(node=TextNode(text=BREAD, id_="h0", metadata={"source": "fencing-token-notes.md"}), score=0.9),
             NodeWithScore(node=TextNode(text=TTL, id_="h1", metadata={"source": "kitchen.md"}), score=0.8),
             NodeWithScore(node=TextNode(text=BREAD, id_="h2", metadata={"source": "kitchen.md"}), score=0.7)]
    kept = [n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=QUERY)]
    # h0's header alone (not plain text: extracted; its body cannot match), h1's body read for
    # the query alone (plain text), nothing of h2: all three pending
    assert extracted == ["source: fencing-token-notes.md"]
    assert count.texts == [n.node.get_content(metadata_mode="llm") for n in nodes[:2]]
    assert sum(isinstance(f[2], postprocessor_module._Pending) for f in FACTS._data.values()) == 3
    assert kept == [e.node_id for e in gate.explain(nodes, QUERY) if e.kept] == ["h0", "h1"]
    assert not any(isinstance(f[2], postprocessor_module._Pending) for f in FACTS._data.values())


def test_a_body_held_anchors_cannot_tell_is_analysed_by_the_lines_it_cannot_tell(extracted) -> None:
    """A new node's body that ``held_anchors`` cannot read whole (a digit, a quote, a
    joiner, a character beyond ASCII without a stand-in) is read line by line: only the
    lines it cannot tell are analysed, the node stays pending, and postprocess_nodes keeps
    what explain keeps, on new nodes and on the same nodes met again (then analysed whole)."""
    import random

    count = CountingCounter()
    gate = GatekeeperNodePostprocessor(token_counter=count)
    body = f"{TTL}\nWe renewed it 3 times.\n{BREAD}"
    nodes = retrieved(body, f"{FENCING}\n\"quoted\" TTL", "v1.2 of Redis\nna\u00efve caf\u00e9 lock")
    kept = [n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=QUERY)]
    # node 0: the digit's line holds no query term (held_anchors tells without extracting it);
    # node 1: the quoted line holds "TTL"; node 2: both lines hold a term and neither reads plainly
    assert extracted == ["\"quoted\" TTL", "v1.2 of Redis\nna\u00efve caf\u00e9 lock"]
    assert sum(isinstance(f[2], postprocessor_module._Pending) for f in FACTS._data.values()) == 3  # headers: read
    assert kept == [e.node_id for e in gate.explain(nodes, QUERY) if e.kept]

    rng = random.Random(5)
    lines = [TTL, FENCING, BREAD, "It took 3 days.", "The v2.1 client and the \"fencing token\".", "Use asyncio.gather",
             "Caf\u00e9 \u2014 lock \U0001f4aa", "TTL \u2014 renewed", "na\u00efve TTL", "", "  ", "`ttl` 30s"]
    texts = ["\n".join(rng.choice(lines) for _ in range(rng.randrange(1, 5))) for _ in range(300)]
    queries = (QUERY, "How many days did the sourdough take?")
    for k in range(0, 300, 20):
        FACTS.clear()
        ANCHORS.clear()
        nodes = retrieved(*texts[k:k + 20])
        kept = [[n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=q)] for q in queries]  # new, again
        for query, ids in zip(queries, kept):
            assert ids == [e.node_id for e in gate.explain(nodes, query) if e.kept], (k, query)


@pytest.mark.parametrize("options", [{"token_budget": -1}, {"token_budget": True}, {"coverage_target": 2.0},
                                     {"embed_timeout": 0}, {"embed_timeout": True}, {"embed_timeout": float("inf")},
                                     {"embed_timeout": float("nan")}])
def test_bad_options_raise_the_librarys_own_errors(options) -> None:
    from context_gatekeeper import GatekeeperError

    with pytest.raises(GatekeeperError):
        GatekeeperNodePostprocessor(**options)


@pytest.mark.parametrize("bad", [True, False, 0, -1, float("inf"), float("nan"), "2"])
def test_embed_timeout_follows_the_cores_rule_when_built_or_assigned(bad) -> None:
    """The core's timeout rule, with its message, however the value arrives; a refused
    assignment changes nothing."""
    from context_gatekeeper import InvalidInputError

    with pytest.raises(InvalidInputError, match="embed_timeout must be a finite number of seconds"):
        GatekeeperNodePostprocessor(embedder=MockEmbedding(embed_dim=4), embed_timeout=bad)
    gate = GatekeeperNodePostprocessor(embedder=MockEmbedding(embed_dim=4), embed_timeout=1.0)
    vectors = gate._vectors
    with pytest.raises(InvalidInputError, match="embed_timeout must be a finite number of seconds"):
        gate.embed_timeout = bad
    with pytest.raises(InvalidInputError, match="embed_timeout must be a finite number of seconds"):
        gate.model_copy(update={"embed_timeout": bad})
    assert gate.embed_timeout == 1.0 and gate._vectors is vectors and vectors.timeout == 1.0


@pytest.mark.parametrize("bad", [None, [TextNode(text="a bare node")], NodeWithScore(node=TextNode(text="alone"))])
def test_nodes_that_are_not_a_list_of_scored_nodes_are_refused_alike_sync_and_async(bad) -> None:
    from context_gatekeeper import InvalidTypeError

    gate = GatekeeperNodePostprocessor(token_budget=100)
    for call in (lambda: gate.postprocess_nodes(bad, query_str="redis lock"),
                 lambda: asyncio.run(gate.apostprocess_nodes(bad, query_str="redis lock")),
                 lambda: gate.explain(bad, "redis lock")):
        with pytest.raises(InvalidTypeError, match="NodeWithScore"):
            call()


def test_explain_reads_a_generator_of_nodes_once() -> None:
    gate = GatekeeperNodePostprocessor(token_budget=100)
    nodes = [NodeWithScore(node=TextNode(text="renew the redis lock ttl"), score=1.0),
             NodeWithScore(node=TextNode(text="espresso grind"), score=0.5)]
    lines = gate.explain(iter(nodes), "redis lock")
    assert [(line.node_id, line.kept) for line in lines] == [(nodes[0].node.node_id, True), (nodes[1].node.node_id, False)]


def test_an_assigned_field_is_checked_and_a_refused_one_changes_nothing() -> None:
    """Assignment checks a field as the constructor does, with the library's errors, and a
    refused assignment leaves the postprocessor as it was."""
    from context_gatekeeper import BudgetError, InvalidInputError, InvalidTypeError

    gate = GatekeeperNodePostprocessor(token_budget=100, token_counter=words)
    nodes = retrieved(TTL, FENCING, BREAD)
    before = [n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=QUERY)]
    refusals = [("token_budget", -1, BudgetError), ("token_budget", True, BudgetError),
                ("metadata_mode", "bogus", InvalidInputError), ("coverage_target", 0, InvalidInputError),
                ("embed_timeout", 0, InvalidInputError), ("token_counter", 42, InvalidTypeError),
                ("embedder", 5, InvalidTypeError)]
    for name, bad, error in refusals:
        with pytest.raises(error):
            setattr(gate, name, bad)
        with pytest.raises(error):
            gate.model_copy(update={name: bad})
    assert (gate.token_budget, gate.metadata_mode, gate.coverage_target, gate.token_counter, gate.embedder) == (
        100, "llm", 1.0, words, None)
    assert [n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=QUERY)] == before
    gate.metadata_mode = "none"  # a valid value is taken, as the constructor takes it
    assert gate.metadata_mode == "none"
    with pytest.raises(InvalidTypeError, match=r"\['foo'\].*token_budget"):
        gate.model_copy(update={"foo": 1})


@pytest.mark.parametrize("how", ["assign", "model_copy"])
def test_an_assigned_token_counter_or_embedder_is_the_one_used(how: str) -> None:
    """token_counter, embedder and embed_timeout are resolved anew when assigned (or given to
    model_copy's update): the next call counts and embeds with the new ones."""

    def changed(gate: GatekeeperNodePostprocessor, **update: object) -> GatekeeperNodePostprocessor:
        if how == "model_copy":
            return gate.model_copy(update=update)
        for name, value in update.items():
            setattr(gate, name, value)
        return gate

    def embed(texts: list[str]) -> list[list[float]]:
        return [[float("redis" in t.lower()), float("bread" in t.lower()), 1.0] for t in texts]

    nodes = retrieved(TTL, FENCING, BREAD)
    gate = GatekeeperNodePostprocessor(token_budget=60, token_counter=words)
    assert [n.node.node_id for n in gate.postprocess_nodes(nodes, query_str=QUERY)] == ["n0", "n1"]
    costly = changed(gate, token_counter=lambda text: 1000)  # every node over the budget now
    assert costly.postprocess_nodes(nodes, query_str=QUERY) == []
    assert all(line.similarity is None for line in costly.explain(nodes, QUERY))
    semantic = changed(costly, token_counter=words, embedder=embed, embed_timeout=5.0)
    assert all(line.similarity is not None for line in semantic.explain(nodes, QUERY))
    assert [n.node.node_id for n in semantic.postprocess_nodes(nodes, query_str=QUERY)] == ["n0", "n1"]
    lexical = changed(semantic, embedder=None)
    assert all(line.similarity is None for line in lexical.explain(nodes, QUERY))


def test_build_corpus_refuses_an_index_whose_docstore_holds_no_nodes() -> None:
    """A vector store that keeps the text itself leaves the index's docstore empty: build_corpus
    says to pass the nodes or texts instead of returning a corpus that weighs nothing."""
    from llama_index.core import StorageContext
    from llama_index.core.vector_stores import SimpleVectorStore

    from context_gatekeeper import InvalidInputError

    class TextStoringStore(SimpleVectorStore):
        stores_text: bool = True  # as Chroma, Qdrant, pgvector, ... report

    documents = [Document(text=t) for t in (TTL, BREAD, FENCING)]
    context = StorageContext.from_defaults(vector_store=TextStoringStore())
    index = VectorStoreIndex.from_documents(documents, storage_context=context, embed_model=MockEmbedding(embed_dim=4))
    for source in (index, index.docstore):
        with pytest.raises(InvalidInputError, match=r"pass the nodes or texts.*build_corpus\(nodes\)"):
            build_corpus(source)  # type: ignore[arg-type]
    assert build_corpus([TTL, BREAD, FENCING]).n_docs == 3


@pytest.mark.parametrize("source", [5, None, "one text", b"bytes"])
def test_build_corpus_refuses_what_is_not_an_index_or_a_list_of_texts(source: object) -> None:
    from context_gatekeeper import InvalidTypeError
    from llamaindex_gatekeeper import build_corpus

    with pytest.raises(InvalidTypeError, match="build_corpus takes an index"):
        build_corpus(source)  # type: ignore[arg-type]


def _long_nodes(seed: int, n: int, chars: int) -> list[NodeWithScore]:
    """``n`` nodes of about ``chars`` characters, their words distinct, with a file name."""
    return [
        NodeWithScore(node=TextNode(text=" ".join(f"w{seed}x{k}x{i}" for i in range(chars // 9)) + " redis lock",
                                    metadata={"file_name": f"doc{seed}_{k}.txt"}), score=1.0)
        for k in range(n)
    ]


def test_the_node_caches_are_bounded_by_weight_and_key_anchors_by_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """FACTS and ANCHORS weigh what an entry holds (its texts' characters, its anchors' estimated
    bytes), so long nodes cannot hold what 10,000 short ones would not; ANCHORS keys are digests."""
    assert FACTS.max_weight == postprocessor_module.FACT_CACHE_BYTES
    assert ANCHORS.max_weight == postprocessor_module.ANCHOR_CACHE_BYTES
    facts = postprocessor_module.BoundedCache(maxsize=10_000, weigh=postprocessor_module._facts_weight, max_weight=150_000)
    anchors = postprocessor_module.BoundedCache(maxsize=10_000, weigh=postprocessor_module._anchors_weight,
                                                max_weight=150_000)
    monkeypatch.setattr(postprocessor_module, "FACTS", facts)
    monkeypatch.setattr(postprocessor_module, "ANCHORS", anchors)
    for seed in range(6):
        post = GatekeeperNodePostprocessor(token_budget=1500)
        post.postprocess_nodes(_long_nodes(seed, 3, 4000), query_str="how long should the redis lock be held?")
        post.explain(_long_nodes(seed, 3, 4000), "redis lock")  # every node analysed whole, and counted
        assert 0 < facts.weight <= 150_000 and 0 < anchors.weight <= 150_000
    assert len(facts) < 18 and len(anchors) < 36
    assert all(len(key) == 64 for key in anchors._data)
    # an entry's weight covers its text and its anchors
    text, _, held = next(reversed(facts._data.values()))
    assert isinstance(held, frozenset) and facts._weights[next(reversed(facts._data))] >= len(text) + sum(map(len, held))


def test_the_node_caches_do_not_keep_a_token_counter_alive() -> None:
    import gc
    import weakref

    class Words:
        def __call__(self, text: str) -> int:
            return len(text.split())

    counter = Words()
    GatekeeperNodePostprocessor(token_counter=counter, token_budget=100).postprocess_nodes(
        retrieved(TTL, FENCING, BREAD), query_str=QUERY)
    assert len(FACTS) == 3
    alive = weakref.ref(counter)
    del counter
    gc.collect()
    assert alive() is None and len(FACTS) == 3
