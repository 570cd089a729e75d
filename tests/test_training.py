"""Eq. 6: InfoNCE by hand, the candidate set, and a few steps lowering the loss."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from unreal_demo.encoding import encode_chunks
from unreal_demo.maxsim import normalize_chunks
from unreal_demo.training import TrainConfig, candidate_set, fit, info_nce, lr_at, new_head


def test_info_nce_by_hand():
    s = torch.tensor([[1.0, 2.0, 0.5, 0.0], [0.3, 0.1, 0.2, 0.9]])
    pos = torch.tensor([[True, True, False, False], [False, False, False, True]])
    tau = 0.5
    z0 = sum(math.exp(v / tau) for v in [1.0, 2.0, 0.5, 0.0])
    z1 = sum(math.exp(v / tau) for v in [0.3, 0.1, 0.2, 0.9])
    l0 = -0.5 * (math.log(math.exp(1.0 / tau) / z0) + math.log(math.exp(2.0 / tau) / z0))
    l1 = -math.log(math.exp(0.9 / tau) / z1)
    assert abs(info_nce(s, pos, tau).item() - (l0 + l1) / 2) < 1e-5


def test_oracle_is_never_a_negative():
    # query 0's oracle (7) is query 1's hard negative; query 1's oracle (3) is query 0's negative
    cand, pos = candidate_set([[7], [3]], [[3, 5], [7, 9]])
    assert cand == [3, 5, 7, 9]  # deduplicated union
    assert pos.tolist() == [[False, False, True, False], [True, False, False, False]]


def test_lr_schedule():
    cfg = TrainConfig(steps=100, warmup=10, lr=1.0)
    assert lr_at(0, cfg) == 0.1 and lr_at(9, cfg) == 1.0
    assert abs(lr_at(55, cfg) - 0.5) < 1e-9 and lr_at(100, cfg) == 0.0


def test_a_few_steps_lower_the_loss(tiny, tmp_path):
    passages = ["Paris is the capital of France.", "Berlin is the capital of Germany.",
                "The quick brown fox jumps.", "The answer is forty two.", "Rome is in Italy."]
    questions = [SimpleNamespace(text=t) for t in ["capital of France?", "capital of Germany?",
                                                   "what does the fox do?", "what is the answer?"]]
    cfg = TrainConfig(chunk_layer=3, n_ret=4, n_groups=2, n_context=0, steps=30, batch=4, lr=5e-2,
                      warmup=2, temperature=0.1, checkpoint_every=10)
    data = {"questions": questions, "contexts": [[] for _ in questions], "oracle": [0, 1, 2, 3],
            "negatives": [[1, 4], [0, 4], [3], [2], []],
            "keys": normalize_chunks(encode_chunks(tiny, passages, 3, 7))}
    head = new_head(cfg, tiny)
    log = fit(head, tiny, data, cfg, tmp_path)
    assert sum(r["loss"] for r in log[-5:]) < sum(r["loss"] for r in log[:5])
    assert (tmp_path / "checkpoint.pt").exists() and len((tmp_path / "train_log.jsonl").read_text().splitlines()) == 30
    # resuming at the end does nothing more and keeps the log
    again = fit(new_head(cfg, tiny), tiny, data, cfg, tmp_path)
    assert again == log


def test_ablation_table_escapes_pipes_and_keeps_columns(tmp_path):
    from unreal_demo.ablation import VARIANTS, _slug, _write

    row = {"R@1": 0.1, "R@5": 0.2, "R@10": 0.3, "MRR@10": 0.15, "final_loss": 2.0, "params": 1234}
    name = "|C0| = 2 (64 tokens each)"
    assert name in VARIANTS and _slug(name) == "c0----2"
    out = _write(tmp_path / "a.json", {name: row | {"variant": name}}, row, 60, 300, 422)
    lines = out["markdown"].splitlines()
    assert all(line.count("|") - line.count("\\|") == lines[0].count("|") for line in lines)
    assert "\\|C0\\| = 2" in lines[-1] and (tmp_path / "a.json").exists()
