"""The experiments, each writing a result with its provenance (results): retrieval (recall@k, MRR@10), qa
(Table 1), longcontext (Section 4), intrinsic (App. A.2.1), flops (App. C), ablation, prompts (the answering
prompt), adapter_run (the query adapter), faithfulness (is an answer in its evidence). answers (cached greedy
answers) and metrics (SQuAD EM/F1) serve them."""

__all__ = ["ablation", "adapter_run", "faithfulness", "flops", "intrinsic", "longcontext", "prompts", "qa", "results",
           "retrieval"]
