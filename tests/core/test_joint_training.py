"""The joint fine-tune of ρ, α and the adapter through the frozen LLM (Eq. 6), on the tiny test model."""

from __future__ import annotations

import pytest
import torch

from unreal_demo.core.head import HeadError, untrained_head
from unreal_demo.core.joint_training import JointConfig, PrefixCache, TextSet, dev_sample, draw, fit_joint
from unreal_demo.core.maxsim import normalize_chunks
from unreal_demo.core.state_training import with_adapter


def _data(n: int = 12, p: int = 40) -> tuple[list[TextSet], list[TextSet], torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    keys = normalize_chunks(torch.randn(p, 3, 32, generator=gen))  # (P, L_p, d)
    texts = [f"what is thing {i}?" for i in range(n)]
    train = TextSet("toy", texts, [[f"thing {i} is here."] for i in range(n)], [[i] for i in range(n)])
    dev = TextSet("dev", texts[:4], [[] for _ in range(4)], [[i] for i in range(4)])
    return [train], [dev], keys


def _head(tiny):
    return with_adapter(untrained_head(tiny, n_ret=4, n_groups=2), 4)


def test_trains_rho_alpha_and_adapter_and_keeps_the_backbone_frozen(tiny, tmp_path):
    train, dev, keys = _data()
    head = _head(tiny)
    cfg = JointConfig(steps=3, batch=4, lr_rho=1e-2, lr=1e-2, dev_every=3, sampled=8, dev_per_set=4, patience=9)
    before = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    model, log, _ = fit_joint(head, tiny, train, dev, keys, cfg, tmp_path)
    trained, _, _ = fit_joint(head, tiny, train, dev, keys, cfg, tmp_path)  # resumed: nothing left to run
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["model"]
    for name in ("rho", "alpha", "adapter_u"):
        assert not torch.equal(state[name], head.state_dict()[name]), name
    assert all(torch.equal(p, before[n]) for n, p in tiny.model.named_parameters())
    assert [r["step"] for r in log] == [0, 3] and torch.isfinite(torch.tensor(log[-1]["loss"]))
    assert torch.equal(trained.rho, model.rho)
    better = (log[-1]["mean R@1"], log[-1]["mean R@10"]) > (log[0]["mean R@1"], log[0]["mean R@10"])
    assert (tmp_path / "best.safetensors").exists() == better


def test_a_killed_run_resumes_where_it_stopped(tiny, tmp_path):
    train, dev, keys = _data()
    cfg = JointConfig(steps=4, batch=4, lr_rho=1e-2, lr=1e-2, dev_every=2, sampled=8, dev_per_set=4, patience=9)
    fit_joint(_head(tiny), tiny, train, dev, keys, cfg, tmp_path / "whole")
    fit_joint(_head(tiny), tiny, train, dev, keys, JointConfig(**{**cfg.__dict__, "steps": 2}), tmp_path / "split")
    fit_joint(_head(tiny), tiny, train, dev, keys, cfg, tmp_path / "split")  # resumes at step 3
    whole, split = (torch.load(tmp_path / f / "checkpoint.pt", weights_only=False) for f in ("whole", "split"))
    assert [r["step"] for r in split["history"]] == [0, 2, 4]
    for name, value in whole["model"].items():
        assert torch.allclose(value, split["model"][name], atol=1e-6), name


def test_other_settings_in_the_same_folder_are_refused(tiny, tmp_path):
    train, dev, keys = _data()
    cfg = JointConfig(steps=2, batch=4, dev_every=2, sampled=8, dev_per_set=4)
    fit_joint(_head(tiny), tiny, train, dev, keys, cfg, tmp_path)
    with pytest.raises(ValueError, match="other settings"):
        fit_joint(_head(tiny), tiny, train, dev, keys, JointConfig(**{**cfg.__dict__, "lr": 0.1}), tmp_path)


def test_dev_sample_is_fixed_and_capped():
    d = TextSet("d", [f"q{i}" for i in range(10)], [[] for _ in range(10)], [[i] for i in range(10)])
    (a,), (b,) = dev_sample([d], 4, 0), dev_sample([d], 4, 0)
    assert a == b and len(a.texts) == 4 and all(int(t[1:]) == p[0] for t, p in zip(a.texts, a.positives, strict=True))


def test_a_cached_prefix_gives_the_states_of_the_text(tiny):
    head = _head(tiny)
    qs = ["where is it?", "a much longer question about the thing that is here?", "why?"]
    ctx = [["it is in the box."], [], ["because of the rain, which fell all night long."]]
    kv = head.prefix_cache(tiny, qs, ctx, torch.float32)
    assert [t.shape[0] for t in kv] == [max(head.config.readout_layers)] * 3 and len({t.shape[3] for t in kv}) == 3
    direct = head.retrieval_states(tiny, qs, ctx)
    cached = head.retrieval_states(tiny, qs, ctx, kv)
    for layer in head.config.readout_layers:
        assert torch.allclose(direct[layer], cached[layer], atol=1e-5), layer
    assert torch.allclose(head(tiny, qs, ctx), head(tiny, qs, ctx, head.prefix_cache(tiny, qs, ctx)), atol=5e-3)
    with pytest.raises(HeadError, match="soft prompt"):  # P is trained: its prefix is never fixed
        untrained_head(tiny, n_ret=4, n_groups=2, use_prompt=True).prefix_cache(tiny, qs, ctx)


def test_training_on_cached_prefixes_equals_training_on_the_text(tiny, tmp_path):
    train, dev, keys = _data()
    cfg = dict(steps=2, batch=4, lr_rho=1e-2, lr=1e-2, dev_every=2, sampled=8, dev_per_set=4)
    for name, dtype in (("text", ""), ("cached", "float32")):
        fit_joint(_head(tiny), tiny, train, dev, keys, JointConfig(**cfg, prefix_cache=dtype), tmp_path / name)
    text, cached = (torch.load(tmp_path / f / "checkpoint.pt", weights_only=False) for f in ("text", "cached"))
    for name, value in text["model"].items():
        assert torch.allclose(value, cached["model"][name], atol=1e-5), name
    recalls = [[{k: v for k, v in r.items() if "R@" in k} for r in run["history"]] for run in (text, cached)]
    assert recalls[0] == recalls[1] and len(recalls[0]) == 2


def test_keep_last_returns_the_last_step_and_best_the_best_check(tiny, tmp_path):
    train, dev, keys = _data()
    cfg = JointConfig(steps=4, batch=4, lr_rho=1e-2, lr=1e-2, dev_every=2, sampled=8, dev_per_set=4, patience=9)
    last, _, _ = fit_joint(_head(tiny), tiny, train, dev, keys, cfg, tmp_path, keep="last")
    best, log, _ = fit_joint(_head(tiny), tiny, train, dev, keys, cfg, tmp_path)  # resumed: nothing left to run
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert torch.equal(last.rho, state["model"]["rho"])  # the step-4 state
    assert torch.equal(best.rho, state["best_state"]["rho"]) and [r["step"] for r in log] == [0, 2, 4]


def test_r10_within_keeps_the_best_recall_at_10_above_the_r1_floor(tiny, tmp_path):
    train, dev, keys = _data()
    cfg = JointConfig(steps=4, batch=4, lr_rho=5e-2, lr=5e-2, dev_every=1, sampled=8, dev_per_set=4, patience=9,
                      r10_within=1.0)  # every check is above the floor: the best mean R@10 wins, then R@1
    fit_joint(_head(tiny), tiny, train, dev, keys, cfg, tmp_path)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    rows = state["history"]
    first_best = max(rows, key=lambda r: (r["mean R@10"], r["mean R@1"]))
    assert state["best"] == first_best and len(rows) == 5


def test_a_prefix_cache_past_its_budget_keeps_nothing_more_and_returns_the_same_prefixes(tiny):
    head, (train,) = _head(tiny), _data(n=4)[0]
    picks = [(0, 0), (0, 1), (0, 1), (0, 3)]
    unbounded, bounded = PrefixCache(tiny, torch.float16), PrefixCache(tiny, torch.float16, budget=1)
    for a, b in zip(unbounded(head, [train], picks), bounded(head, [train], picks), strict=True):
        assert a.dtype == b.dtype == torch.float16 and torch.equal(a, b)
    assert len(unbounded.kv) == 3 and unbounded.kept_bytes > 0 and bounded.kv == {} and bounded.kept_bytes == 0


def test_draw_without_weights_repeats_the_runs_before_weights_existed():
    import random

    gen, old = random.Random(7), random.Random(7)
    sizes = [4, 0, 9, 2]
    sets = [0, 2, 3]
    before = [(i := old.choice(sets), old.randrange(sizes[i])) for _ in range(32)]  # the loop fit_joint had
    assert draw(gen, sizes, 32) == before


def test_weights_must_name_every_train_set(tiny, tmp_path):
    train, dev, keys = _data()
    with pytest.raises(ValueError, match="2 weights for 1 train sets"):
        fit_joint(_head(tiny), tiny, train, dev, keys, JointConfig(steps=1), tmp_path, weights=[3.0, 1.0])


def test_distillation_holds_the_held_questions_near_the_starting_head(tiny, tmp_path):
    from unreal_demo.core.joint_training import distillation, query_vectors
    from unreal_demo.core.maxsim import maxsim_reference

    train, dev, keys = _data()
    head = _head(tiny)
    start = query_vectors(head, tiny, train[0].texts, train[0].contexts)  # (N, G, d)
    cfg = {"steps": 4, "batch": 4, "lr_rho": 5e-2, "lr": 5e-2, "dev_every": 4, "sampled": 8, "dev_per_set": 4,
           "patience": 9}
    free, _, _ = fit_joint(head, tiny, train, dev, keys, JointConfig(**cfg), tmp_path / "free", keep="last")
    held, _, _ = fit_joint(head, tiny, train, dev, keys, JointConfig(**cfg, distil=50.0), tmp_path / "held",
                           keep="last", held=[start])

    def drift(model) -> float:
        now = query_vectors(model, tiny, train[0].texts, train[0].contexts)
        return float(distillation(maxsim_reference(now, keys), maxsim_reference(start, keys), 0.05))

    assert drift(held) < drift(free)
    assert "distil" not in torch.load(tmp_path / "free" / "checkpoint.pt", weights_only=False)["settings"]


def test_a_fusion_teacher_pulls_toward_the_lexical_ranking(tiny, tmp_path):
    from unreal_demo.core.joint_training import distillation, fused_teacher, lexical_scale, query_vectors
    from unreal_demo.core.maxsim import maxsim_reference
    from unreal_demo.core.selection import score_fusion

    train, dev, keys = _data()
    head = _head(tiny)
    start = query_vectors(head, tiny, train[0].texts, train[0].contexts)  # (N, G, d)
    s0 = maxsim_reference(start, keys)  # (N, P)
    bm25 = torch.zeros_like(s0)
    bm25[torch.arange(len(s0)), torch.arange(len(s0))] = 5.0  # BM25 puts each question's own chunk first
    lexical = lexical_scale(bm25, s0)
    # the teacher ranks every candidate exactly as score fusion at the same weight does
    fused = fused_teacher(s0, lexical, 0.3)
    assert torch.equal(fused.argsort(-1, descending=True),
                       score_fusion(s0, bm25, 0.3).argsort(-1, descending=True))
    cfg = {"steps": 6, "batch": 4, "lr_rho": 5e-2, "lr": 5e-2, "dev_every": 6, "sampled": 8, "dev_per_set": 4,
           "patience": 9, "distil": 50.0}
    plain, _, _ = fit_joint(head, tiny, train, dev, keys, JointConfig(**cfg), tmp_path / "plain", keep="last",
                            held=[start])
    fusion, _, _ = fit_joint(head, tiny, train, dev, keys, JointConfig(**cfg, teacher_fusion=0.3),
                             tmp_path / "fusion", keep="last", held=[start], lexical=[lexical])

    def gap(model) -> float:  # how far the model's ranking is from the fusion teacher's
        now = query_vectors(model, tiny, train[0].texts, train[0].contexts)
        return float(distillation(maxsim_reference(now, keys), fused, 0.05))

    assert gap(fusion) < gap(plain)
    settings = torch.load(tmp_path / "fusion" / "checkpoint.pt", weights_only=False)["settings"]
    assert settings["teacher_fusion"] == 0.3
    with pytest.raises(ValueError, match="teacher_fusion needs distil"):
        fit_joint(head, tiny, train, dev, keys, JointConfig(steps=1, teacher_fusion=0.3), tmp_path / "x")
