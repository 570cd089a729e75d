"""The product's evaluations, each writing a result with its provenance (results): retrieval (recall@k, MRR@10),
qa (Table 1), longcontext (Section 4), intrinsic (App. A.2.1), flops (App. C), faithfulness (is an answer in its
evidence); ablation reads the ablation sweeps' results for the About tab. answers (cached greedy answers) and
metrics (SQuAD EM/F1) serve them."""

__all__ = ["ablation", "faithfulness", "flops", "intrinsic", "longcontext", "qa", "results", "retrieval"]
