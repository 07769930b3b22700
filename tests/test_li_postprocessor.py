"""GatekeeperNodePostprocessor: the covering subset of retrieved nodes, in real LlamaIndex engines (offline)."""

from __future__ import annotations

import asyncio
import copy

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from context_gatekeeper.selection.coverage import CoverageCorpus
from li_scripted_llm import ScriptedLLM
from llamaindex_gatekeeper.postprocessor import GatekeeperNodePostprocessor, NodeExplanation, build_corpus

TTL = "A Redis lock needs a TTL longer than the critical section, renewed by a watchdog."
FENCING = "A fencing token is a counter that grows with every lock grant; storage rejects stale tokens."
BREAD = "Sourdough bread needs a long, cold proof overnight and a very hot oven."
QUERY = "How should I set the Redis lock TTL, and what is a fencing token for?"


def words(text: str) -> int:
    return len(text.split())


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
    engine = ContextChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=10), llm=llm, node_postprocessors=[gate]
    )
    assert str(engine.chat(QUERY)) == "Here is what I know."
    sent = "\n".join(m.content or "" for m in llm.chats[-1])
    assert "fencing token is a counter" in sent and sent.count("Redis lock needs a TTL") == 1
    assert "Sourdough" not in sent
    via_index = index.as_chat_engine(chat_mode="context", llm=llm, node_postprocessors=[gate], similarity_top_k=10)
    via_index.chat("Tell me about sourdough bread and a hot oven.")
    sent = "\n".join(m.content or "" for m in llm.chats[-1])
    assert "Sourdough" in sent and "fencing token is a counter" not in sent
