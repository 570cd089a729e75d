"""The chunk stores: base (the ChunkStore protocol), index (the sharded on-disk index), qdrant (the index in
Qdrant). They hold data; the methods in retrieval/ score it."""

__all__ = ["base", "index", "qdrant"]
