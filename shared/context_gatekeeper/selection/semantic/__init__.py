"""The optional semantic channel of selection: an ``embedder=`` adds meaning to words.

:mod:`.embedding` (the :class:`~context_gatekeeper.Embedder` protocol, adapters,
vector caches), :mod:`.runner` (background lanes that keep a slow or failing
embedder off the select path), :mod:`.turn_vectors` (one vector per turn),
:mod:`.fusion` (the pure formulas that mix lexical and semantic scores),
:mod:`.channel` and :mod:`.methods` (the gatekeeper's semantic half) and
:mod:`.coverage` (meaning for the passage cover).  numpy is imported only when an
embedder is used.  See ``docs/architecture.md``.
"""
