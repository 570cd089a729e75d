"""The chunk stores: base (the ChunkStore protocol), memory (chunks held in memory: a document, a corpus), index
(the sharded on-disk index), qdrant (the index in Qdrant). They hold data; the methods in retrieval/ score it."""

__all__ = ["base", "index", "memory", "qdrant"]
