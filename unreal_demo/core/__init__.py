"""The paper's equations on a frozen LLM: backbone, chunking, encoding (Eq. 1), head (Eqs. 2–3), maxsim (Eq. 4),
selection (Eq. 5), training and state_training (Eq. 6), generation (Eq. 7); codec and shipped_keys (compressed
keys), minilm (the MiniLM embedder), cpu (the CPU's fast paths). maxsim_triton and negatives are reached through
maxsim and training."""

__all__ = ["backbone", "chunking", "codec", "cpu", "encoding", "generation", "head", "maxsim", "minilm", "selection",
           "shipped_keys", "state_training", "training"]
