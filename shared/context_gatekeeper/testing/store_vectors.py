"""The optional vector capability's contract as tests (:class:`~context_gatekeeper.stores.VectorStore`).

Part of the store conformance suite; use it through
:class:`context_gatekeeper.testing.stores.StoreConformance`.  A store without the
capability declares ``Capabilities(vectors=False)`` and these tests are skipped, saying so.
"""

from __future__ import annotations

from array import array
from typing import Any

from ..errors import InvalidInputError
from ..stores import Store, VectorRow, supports_vectors
from ._requires import pytest
from .store_builders import delete, edit, fill
from .store_modes import Capabilities, lacking, run_async, together, unwrapped

__all__ = ["VectorContract"]


class VectorContract:
    """Saving, loading and erasing embedding vectors next to the revision log."""

    capabilities: Capabilities

    @pytest.fixture
    def vectors(self, store: Store) -> Store:
        """The store, when it declares the ``vectors`` capability (else the test is skipped,
        naming it); a store declaring it that is not a VectorStore fails, never skips."""
        if not self.capabilities.vectors:
            pytest.skip(lacking(type(self).__name__, "vectors"))
        if not supports_vectors(store):
            pytest.fail(
                f"{type(unwrapped(store)).__name__} is not a VectorStore, but {type(self).__name__} declares the "
                "'vectors' capability (the default); declare Capabilities(vectors=False) for a store without it"
            )
        return store

    def test_vectors_round_trip_as_float32_and_survive_reopening(self, vectors: Any, open_store: Any) -> None:
        fill(vectors, "s", 1)
        rows = [
            VectorRow("m1", "h1", "e5", (0.1, -0.25, 3.0e-8)),
            VectorRow("nul\x00 surrogate \udc80 ünï 🚀", "h2", "e5", (1.0, 2.0, -3.5)),
            VectorRow("", "content-only", "e5", (0.0, 0.5, 1e30)),
        ]
        assert vectors.save_vectors("s", rows) == 3
        expected = [r._replace(vector=tuple(array("f", r.vector))) for r in rows]
        assert sorted(vectors.load_vectors("s", "e5")) == sorted(expected)
        assert sorted(open_store().load_vectors("s", "e5")) == sorted(expected)
        assert vectors.load_vectors("other", "e5") == []
        assert vectors.sessions() == ["s"]

    def test_a_session_without_revisions_takes_no_vectors(self, vectors: Any, open_store: Any) -> None:
        """A save for a session never written, or purged meanwhile (an embedding in flight
        during ``purge``), is dropped: vectors never come back after a purge."""
        assert vectors.save_vectors("never", [("m1", "h", "e", [1.0])]) == 0
        fill(vectors, "gone", 1)
        assert vectors.save_vectors("gone", [("u1", "h", "e", [1.0])]) == 1
        vectors.purge("gone")
        assert vectors.save_vectors("gone", [("u1", "h", "e", [1.0]), ("", "h2", "e", [2.0])]) == 0
        for handle in (vectors, open_store()):
            assert handle.load_vectors("never", "e") == handle.load_vectors("gone", "e") == []
            assert handle.sessions() == []
        fill(vectors, "gone", 1)  # a session written again takes vectors again
        assert vectors.save_vectors("gone", [("u1", "h", "e", [1.0])]) == 1

    def test_a_new_text_of_a_message_replaces_its_old_vectors(self, vectors: Any) -> None:
        """An edit leaves no vector of the old text: saving a message's vector erases that
        message's vectors of other texts (every embedder), not its other rows."""
        (first,) = fill(vectors, "s", 1)
        user = first.added[0]
        vectors.save_vectors("s", [
            (user.id, "old", "e", [1.0]), (user.id, "old", "f", [1.0, 0.0]), (user.id, "same", "f", [2.0, 0.0]),
            ("a1", "old", "e", [3.0]), ("", "old", "e", [4.0]),
        ])
        vectors.commit("s", edit(user, "the secret is gone"), expected_head=None)
        assert vectors.save_vectors("s", [(user.id, "same", "e", [5.0])]) == 1
        assert sorted(vectors.load_vectors("s", "e")) == sorted([
            VectorRow("a1", "old", "e", (3.0,)), VectorRow("", "old", "e", (4.0,)), VectorRow(user.id, "same", "e", (5.0,)),
        ])
        assert vectors.load_vectors("s", "f") == [VectorRow(user.id, "same", "f", (2.0, 0.0))]

    def test_vectors_of_removed_messages_go_at_the_next_save(self, vectors: Any, open_store: Any) -> None:
        first, _ = fill(vectors, "s", 2)
        user, answer = first.added
        vectors.save_vectors("s", [(user.id, "h1", "e", [1.0]), (answer.id, "h2", "e", [2.0]), ("u2", "h3", "e", [3.0])])
        vectors.commit("s", delete(user, None), expected_head=None)
        vectors.save_vectors("s", [("a2", "h4", "e", [4.0])])
        for handle in (vectors, open_store()):
            assert sorted(r.message_id for r in handle.load_vectors("s", "e")) == ["a1", "a2", "u2"]

    def test_vectors_of_other_embedders_and_dimensions_are_kept_apart(self, vectors: Any) -> None:
        fill(vectors, "s", 1)
        vectors.save_vectors("s", [("m1", "h", "small", [1.0, 0.0]), ("m1", "h", "small", [1.0, 0.0, 0.0])])
        vectors.save_vectors("s", [("m1", "h", "large", [0.0, 1.0, 0.0, 0.0])])
        assert {r.dimension for r in vectors.load_vectors("s", "small")} == {2, 3}
        assert vectors.load_vectors("s", "small", dimension=2) == [VectorRow("m1", "h", "small", (1.0, 0.0))]
        assert vectors.load_vectors("s", "large") == [VectorRow("m1", "h", "large", (0.0, 1.0, 0.0, 0.0))]
        assert vectors.load_vectors("s", "large", dimension=2) == []
        assert vectors.load_vectors("s", "none") == []

    def test_saving_a_vector_again_replaces_it(self, vectors: Any) -> None:
        fill(vectors, "s", 1)
        vectors.save_vectors("s", [("m1", "h", "e", [1.0, 0.0])])
        vectors.save_vectors("s", [("m1", "h", "e", [0.0, 1.0]), ("m2", "h", "e", [0.5, 0.5])])
        assert sorted(vectors.load_vectors("s", "e")) == [
            VectorRow("m1", "h", "e", (0.0, 1.0)),
            VectorRow("m2", "h", "e", (0.5, 0.5)),
        ]

    def test_purge_erases_the_sessions_vectors_only(self, vectors: Any, open_store: Any) -> None:
        fill(vectors, "drop", 1)
        fill(vectors, "keep", 1)
        for session in ("drop", "keep"):
            vectors.save_vectors(session, [("u1", "h", "e", [1.0]), ("", "h2", "f", [2.0])])
        vectors.purge("drop")
        for handle in (vectors, open_store()):
            assert handle.load_vectors("drop", "e") == handle.load_vectors("drop", "f") == []
            assert handle.load_vectors("keep", "e") == [VectorRow("u1", "h", "e", (1.0,))]

    def test_delete_vectors_of_one_embedder_or_all(self, vectors: Any) -> None:
        fill(vectors, "s", 1)
        fill(vectors, "t", 1)
        vectors.save_vectors("s", [("a", "h", "e", [1.0]), ("b", "h", "e", [1.0]), ("a", "h", "f", [1.0])])
        vectors.save_vectors("t", [("a", "h", "e", [1.0])])
        assert vectors.delete_vectors("s", "e") == 2
        assert vectors.load_vectors("s", "e") == [] and len(vectors.load_vectors("s", "f")) == 1
        assert vectors.delete_vectors("s") == 1
        assert vectors.delete_vectors("s") == 0
        assert len(vectors.load_vectors("t", "e")) == 1

    @pytest.mark.parametrize(
        "bad",
        [
            ("m", "h", "e", []),
            ("m", "h", "e", [float("nan")]),
            ("m", "h", "e", [1e39]),
            ("m", "h", "e", ["x"]),
            ("m", "h", "e", "abc"),
            ("m", "", "e", [1.0]),
            ("m", "h", "", [1.0]),
            ("m", "h", "e\x00", [1.0]),
            (None, "h", "e", [1.0]),
            ("m", "h", "e"),
        ],
    )
    def test_an_invalid_vector_row_writes_nothing(self, vectors: Any, bad: Any) -> None:
        fill(vectors, "s", 1)
        with pytest.raises(InvalidInputError):
            vectors.save_vectors("s", [("good", "h", "e", [1.0]), bad])
        assert vectors.load_vectors("s", "e") == []

    def test_vector_async_twins_match(self, vectors: Any) -> None:
        fill(vectors, "s", 1)

        async def main() -> None:
            await together(self, *(vectors.asave_vectors("s", [(f"m{i}", f"h{i}", "e", [float(i)])]) for i in range(5)))
            loaded = await vectors.aload_vectors("s", "e", dimension=1)
            assert sorted(loaded) == sorted(vectors.load_vectors("s", "e"))
            assert len(loaded) == 5
            assert await vectors.adelete_vectors("s", "e") == 5

        run_async(main())
