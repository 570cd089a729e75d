"""Eq. 6: InfoNCE by hand, the candidate set, and a few steps lowering the loss."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from types import SimpleNamespace

import pytest
import torch

from unreal_demo.core.encoding import encode_chunks
from unreal_demo.core.maxsim import normalize_chunks
from unreal_demo.core.training import (
    TrainConfig,
    TrainError,
    candidate_set,
    fit,
    head_at_checkpoint,
    info_nce,
    lr_at,
    new_head,
)


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
    # the checkpoint gives the trained head back (what `eval heads --head RUN_FOLDER` scores)
    (tmp_path / "train_config.json").write_text(json.dumps(asdict(cfg)))
    back = head_at_checkpoint(tmp_path, tiny)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), head.state_dict().values(), strict=True))
    prov = back.config.provenance
    assert prov["question_visits"] == 30 * 4 and "step 30 of 30" in prov["checkpoint"]
    with pytest.raises(TrainError, match="no training checkpoint"):
        head_at_checkpoint(tmp_path / "elsewhere", tiny)


def test_held_out_sources_are_refused():
    from unreal_demo.core.training import TrainError, train_sources

    assert train_sources(TrainConfig(sources="squad_dev, nyt")) == ["squad_dev", "nyt"]
    for bad in ("new_wiki", "squad_dev,amazon", "summaries", ""):
        with pytest.raises(TrainError, match="cannot train on"):
            train_sources(TrainConfig(sources=bad))


def test_resume_with_other_settings_or_data_stops(tiny, tmp_path):
    import json
    from dataclasses import asdict

    from unreal_demo.core.training import TrainError, check_resume

    passages = ["Paris is the capital of France.", "Berlin is the capital of Germany."]
    data = {"questions": [SimpleNamespace(text="capital of France?"), SimpleNamespace(text="of Germany?")],
            "contexts": [[], []], "oracle": [0, 1], "negatives": [[1], [0]],
            "keys": normalize_chunks(encode_chunks(tiny, passages, 3, 7))}
    cfg = TrainConfig(chunk_layer=3, n_ret=4, n_groups=2, n_context=0, steps=4, batch=2, warmup=1, checkpoint_every=2)
    fit(new_head(cfg, tiny), tiny, data, cfg, tmp_path)
    (tmp_path / "train_config.json").write_text(json.dumps(asdict(cfg)))
    check_resume(TrainConfig(**{**asdict(cfg), "steps": 8}), tmp_path)  # more steps: allowed
    with pytest.raises(TrainError, match="n_ret: 4 → 8"):
        check_resume(TrainConfig(**{**asdict(cfg), "n_ret": 8}), tmp_path)
    other = data | {"questions": data["questions"][::-1]}
    with pytest.raises(TrainError, match="trained on other data"):
        fit(new_head(cfg, tiny), tiny, other, cfg, tmp_path)


def test_dev_recall_is_logged(tiny, tmp_path):
    from unreal_demo.core.training import dev_recall

    passages = ["Paris is the capital of France.", "Berlin is the capital of Germany.", "The fox jumps."]
    keys = normalize_chunks(encode_chunks(tiny, passages, 3, 7))
    dev = {"questions": ["capital of France?", "the fox?"], "contexts": [[], []], "gold": torch.tensor([0, 2]),
           "keys": keys, "passages": 3}
    cfg = TrainConfig(chunk_layer=3, n_ret=4, n_groups=2, n_context=0, steps=2, batch=2, warmup=1, dev_every=1)
    data = {"questions": [SimpleNamespace(text=q) for q in dev["questions"]], "contexts": [[], []],
            "oracle": [0, 2], "negatives": [[1], [0], [1]], "keys": keys}
    head = new_head(cfg, tiny)
    log = fit(head, tiny, data, cfg, None, dev)
    assert all("dev_R@1" in r and 0 <= r["dev_R@1"] <= r["dev_R@10"] <= 1 for r in log)
    assert log[-1]["visits"] == 4 and log[-1]["cpu_seconds"] >= 0
    # R@10 over 3 passages is 1; R@1 by hand from the same scores
    from unreal_demo.core.maxsim import maxsim_reference

    with torch.no_grad():
        s = maxsim_reference(head.eval()(tiny, dev["questions"], dev["contexts"]), keys)
    assert dev_recall(head, tiny, dev) == {"dev_R@1": (s.argmax(1) == dev["gold"]).float().mean().item(),
                                           "dev_R@10": 1.0}


def test_compare_heads_scores_each_head_and_picks_by_rule(tiny, tmp_path, monkeypatch):
    import json

    from unreal_demo.core.maxsim import maxsim_reference
    from unreal_demo.evaluation import ablation

    passages = ["Paris is the capital of France.", "Berlin is the capital of Germany.", "The fox jumps.",
                "Rome is in Italy."]
    questions, gold = ["capital of France?", "the fox?", "where is Rome?"], [{0}, {2}, {3}]
    loaded = []  # each head is scored on its own model (a Qwen head is never run on SmolLM2), loaded once
    monkeypatch.setattr(ablation, "load_backbone", lambda model: loaded.append(model) or tiny)
    monkeypatch.setattr(ablation, "sample_dev", lambda cfg, n, seed: (questions, gold, passages))
    paths, r1 = [], []
    keys = normalize_chunks(encode_chunks(tiny, passages, 3, 7))
    for seed in (0, 1):
        torch.manual_seed(seed)
        head = new_head(TrainConfig(chunk_layer=3, n_ret=4, n_groups=2, n_context=0, n_pool=7), tiny)
        head.save(tmp_path / f"h{seed}")
        paths.append(str(tmp_path / f"h{seed}.json"))
        with torch.no_grad():  # reference: exact MaxSim (Eq. 5) by the slow loop
            s = maxsim_reference(head.eval()(tiny, questions, [[], [], []]), keys)
        r1.append(sum(s[i].argmax().item() in g for i, g in enumerate(gold)) / len(gold))
    out = ablation.compare_heads(paths, dev_sample=3, out=str(tmp_path / "choice.json"))
    assert [r["R@1"] for r in out["rows"]] == pytest.approx(r1) and loaded == [TrainConfig().model]
    assert all(r["R@10"] == 1.0 for r in out["rows"])  # 4 passages
    assert out["chosen"] == paths[max(range(2), key=lambda i: (round(r1[i] / 0.005), 1.0))]
    assert json.loads((tmp_path / "choice.json").read_text())["chosen"] == out["chosen"]
    assert len(out["markdown"].splitlines()) == 5 and "--sweep mix-l25" in out["command"]
    # --save-fusion writes each head's dev-fitted w where hybrid-fusion reads it
    from unreal_demo.core.head import QueryHead

    assert QueryHead.load(paths[0]).config.fusion_weight is None
    saved = ablation.compare_heads(paths, dev_sample=3, save_fusion=True)
    for path, row in zip(paths, saved["rows"], strict=True):
        assert 0 <= row["fusion_weight"] <= 1 and QueryHead.load(path).config.fusion_weight == row["fusion_weight"]
