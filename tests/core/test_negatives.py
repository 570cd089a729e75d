"""Hard negatives for Eq. 6: BM25's per passage and the head's own per question (pool, oracle, near-duplicates)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from unreal_demo.core.encoding import encode_chunks
from unreal_demo.core.maxsim import maxsim_reference, normalize_chunks
from unreal_demo.core.negatives import hard_negatives, mine_negatives, near_duplicate, words
from unreal_demo.core.selection import BM25
from unreal_demo.core.training import TrainConfig, fit, new_head

TEXTS = ["Paris is the capital of France.", "Paris is the capital of France .",  # 1: a near-duplicate of 0
         "Berlin is the capital of Germany.", "The quick brown fox jumps over the dog.",
         "Rome is the capital of Italy.", "Madrid is the capital of Spain."]
POOLS = [0, 0, 0, 0, 1, 1]


def _data(tiny):
    questions = [SimpleNamespace(text=t) for t in ["capital of France?", "what does the fox do?",
                                                   "capital of Italy?", "capital of Germany?"]]
    return {"questions": questions, "contexts": [[] for _ in questions], "oracle": [0, 3, 4, 2],
            "negatives": [[2], [2], [0], [0], [5], [4]], "texts": TEXTS, "pools": POOLS,
            "keys": normalize_chunks(encode_chunks(tiny, TEXTS, 3, 7))}


def test_near_duplicates_by_jaccard():
    assert near_duplicate(words(TEXTS[0]), words(TEXTS[1]), 0.6)
    assert not near_duplicate(words(TEXTS[0]), words(TEXTS[3]), 0.6)


def test_bm25_negatives_drop_self_and_near_duplicates():
    negs = hard_negatives(TEXTS, BM25(TEXTS), count=2, near_dup=0.6)
    assert len(negs) == len(TEXTS) and all(len(row) == 2 for row in negs)
    assert 0 not in negs[0] and 1 not in negs[0] and 1 not in negs[1] and 0 not in negs[1]


def test_mined_negatives_match_a_brute_force_ranking(tiny):
    cfg = TrainConfig(chunk_layer=3, n_ret=4, n_groups=2, n_context=0)
    head, data = new_head(cfg, tiny), _data(tiny)
    mined = mine_negatives(head, tiny, data, [0, 1, 2, 3], count=2, near_dup=0.6, batch=3)
    assert head.training  # put back in training mode
    with torch.no_grad():
        scores = maxsim_reference(head.eval()(tiny, [q.text for q in data["questions"]], data["contexts"]),
                                  data["keys"])  # (4, 6)
    for i, row in mined.items():
        oracle = data["oracle"][i]
        allowed = [j for j in range(len(TEXTS)) if POOLS[j] == POOLS[oracle] and j != oracle
                   and not near_duplicate(words(TEXTS[oracle]), words(TEXTS[j]), 0.6)]
        want = sorted(allowed, key=lambda j: -scores[i, j].item())[:2]
        assert row == want
    assert 1 not in mined[0]  # the reworded oracle is never a negative
    assert mined[2] == [5]  # pool 1 holds only Rome (the oracle) and Madrid


def test_training_with_mined_negatives_resumes_exactly(tiny, tmp_path, monkeypatch):
    cfg = TrainConfig(chunk_layer=3, n_ret=4, n_groups=2, n_context=0, steps=8, batch=2, lr=5e-2, warmup=1,
                      checkpoint_every=2, mined=2, mine_every=2)
    data = _data(tiny)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    straight = fit(new_head(cfg, tiny), tiny, data, cfg, tmp_path / "a")
    clip, calls = torch.nn.utils.clip_grad_norm_, []

    def stop_in_step_6(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return clip(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", stop_in_step_6)
    try:
        fit(new_head(cfg, tiny), tiny, data, cfg, tmp_path / "b")
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["step"] == 4
    resumed = fit(new_head(cfg, tiny), tiny, data, cfg, tmp_path / "b")  # from the step-4 checkpoint
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]
    ckpt = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    assert ckpt["mined_at"] == 6 and set(ckpt["mined"]) <= set(range(4)) and ckpt["mined"]
