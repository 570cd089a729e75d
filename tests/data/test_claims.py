"""VitaminC claims as training questions (:func:`data.sources.load_claims`): labels, revisions, the cap."""

from __future__ import annotations

import json

import pytest

from unreal_demo.core.training import TrainConfig, TrainError, train_sources
from unreal_demo.data import sources as data


def _example(title: str, evidence: str, claim: str, label: str) -> dict:
    return {"input": f"{title}: {evidence}\nClaim: {claim}",
            "target_scores": {k: int(k == label) for k in ("True", "False", "Neither")}}


@pytest.fixture
def task(tmp_path, monkeypatch):
    examples = [
        _example("Westlife", "Sales reached 23 million.", "Westlife sold under 23.5 million.", "True"),
        _example("Westlife", "Sales reached 24 million.", "Westlife sold under 23.5 million.", "False"),  # revision
        _example("Westlife", "Sales reached 24 million.", "Westlife sold 1 million videos.", "Neither"),
        _example("Berlin", "Berlin has 3.7 million people.", "Berlin has over 3 million people.", "True"),
        _example("Berlin", "Berlin is on the Spree.", "Berlin lies on the Rhine.", "False"),
        _example("Berlin", "Berlin is on the Spree.", "Berlin lies on the Rhine.", "False"),  # exact repeat
    ]
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"examples": examples}), encoding="utf-8")
    monkeypatch.setattr(data, "source_path", lambda name: path)


def test_claims_decide_their_evidence(task):
    passages, questions = data.load_claims()
    text = {p.id: p.text for p in passages}
    pairs = sorted((q.text, text[q.passage_id], q.answers) for q in questions)
    assert pairs == [
        ("Berlin has over 3 million people.", "Berlin: Berlin has 3.7 million people.", ("True",)),
        ("Berlin lies on the Rhine.", "Berlin: Berlin is on the Spree.", ("False",)),
        ("Westlife sold under 23.5 million.", "Westlife: Sales reached 23 million.", ("True",)),
    ]  # "Neither" dropped; the claim's second revision and the repeat dropped with it
    assert {p.title for p in passages} == {"Westlife", "Berlin"} and len(passages) == 3
    assert all(q.title == next(p.title for p in passages if p.id == q.passage_id) for q in questions)


def test_caps(task):
    passages, _ = data.load_claims(per_title=1)
    assert sorted(p.title for p in passages) == ["Berlin", "Westlife"]
    passages, _ = data.load_claims(max_passages=1)
    assert len({p.title for p in passages}) == 1  # whole articles until the cap


def test_split_by_article_and_trainable(task):
    (train_p, train_q), (dev_p, dev_q) = data.article_split("vitaminc", dev_fraction=0.5)
    assert {p.title for p in train_p}.isdisjoint(p.title for p in dev_p) and train_q and dev_q
    assert train_sources(TrainConfig(sources="squad_dev,vitaminc")) == ["squad_dev", "vitaminc"]
    with pytest.raises(TrainError, match="held out"):
        train_sources(TrainConfig(sources="vitaminc,new_wiki"))


def test_unknown_question_source():
    with pytest.raises(data.DataError, match="has no questions"):
        data.load_questions("summaries")
