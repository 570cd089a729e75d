"""Every symbol the page shows, in plain words: the glossary accordion, and the hover text (``info=``) of the
controls and the About tab's tables that carry a symbol."""

from __future__ import annotations

# symbol -> what it means, in words a first visitor can follow (the paper's notation on the left)
SYMBOLS = {
    "n": "how many chunks are selected and given to the model to answer from (the rest of the text is never read "
         "by the answering model)",
    "T": "the chunk size in tokens: the text is cut into chunks of about this many tokens, at sentence ends",
    "ℓc": "the layer at which chunks are read: each chunk runs through the model's first ℓc layers only, once, "
          "and its states at that layer are kept",
    "L_p": "pooled positions per chunk: a chunk's states at ℓc are averaged into L_p vectors k_p (one per stretch "
           "of the chunk)",
    "k_p": "one of a chunk's L_p pooled vectors (the stretch p of the chunk)",
    "ρ": "the R trained retrieval tokens appended to the question; nothing else in the model is trained",
    "R": "how many retrieval tokens ρ the head appends to the question",
    "G": "query groups: the R retrieval-token states are averaged in G groups, giving the query vectors q_g",
    "q_g": "query vector of group g (g = 1..G), read from the retrieval tokens' states",
    "α": "trained weights that mix the layers the query vectors are read from (one weight per layer)",
    "MaxSim": "the chunk score (Eq. 4): for every group g, the best match max_p ⟨q_g, k_p⟩ over the chunk's "
              "pooled vectors, summed over the groups",
    "⟨q_g, k_p⟩": "how well query group g matches the pooled stretch p of a chunk (a dot product of unit vectors: "
                  "higher = closer)",
    "|C0|": "how many short context passages (BM25's top chunks, or the head's own first pass) are put before the "
            "question when the query is read",
    "C0 source": "where those |C0| passages come from: BM25 (the paper's choice) or the head's own first pass",
    "adapter": "an optional trained low-rank map q′ = q + U Vᵀ q on the query vectors (rank r; none when r = 0)",
    "x_ret": "the retrieval input: the |C0| passages, the question and the R retrieval tokens",
    "|x_ret|": "the length of x_ret in tokens (the paper's setting: 910)",
    "T_q": "the question's length in tokens",
    "T_g": "the answer's length in tokens (generated)",
    "N": "the whole context's length in tokens",
    "N*": "break-even length: beyond N* tokens of context UNREAL costs fewer FLOPs than reading it all (Eq. 10)",
    "Θ": "the model's parameters used per token (without the embeddings)",
    "L, L_a, d_a": "the model's layers, its attention layers, and the attention width",
    "κ": "Θ / (L_a·d_a): how costly a token's weights are against one attention pair; large κ pushes N* up",
    "λ": "the share of the model's layers above ℓc: the part a chunk never runs through",
    "τ": "the temperature of the training loss (how sharply it prefers the right chunk)",
    "P": "an optional trained prompt token before the question (off in the shipped head)",
    "TTFT": "time to first token: from pressing the button to the first word of the answer",
    "R@k": "recall at k: how often the right passage is among the top k",
}


def explain(*symbols: str) -> str:
    """``"ℓc: the layer … · L_p: …"``: hover text for a control or table that shows these symbols."""
    return " · ".join(f"{s}: {SYMBOLS[s]}" for s in symbols)


def glossary_markdown() -> str:
    """The glossary as a two-column Markdown table (symbol, meaning)."""
    rows = "\n".join(f"| {s} | {m} |" for s, m in SYMBOLS.items())
    return f"| symbol | what it means |\n|---|---|\n{rows}"
