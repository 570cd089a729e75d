"""The retrieval methods: base (the Retriever interface), one file per method, registry (METHODS and the one
retrieve() every entry point calls), hits (index search with evidence), evidence (what a hit matched), sparse
(also the question's token states)."""

__all__ = ["base", "evidence", "hits", "registry", "sparse"]
