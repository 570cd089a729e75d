"""Judged verdicts carried from one index's chunks to another's (the same passages cut elsewhere), ranks of the first
positive and unread alias chunks, against hand-worked answers."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from experiments.judged_backbones import collapsed, first_ranks, mapped_positives, unread_in_top10
from unreal_demo.data.natural import NaturalQuestion

P1 = ["Ada Lovelace wrote the first program. ", "She worked with Babbage. ", "Babbage built engines."]


def _index(cuts: list[tuple[str, list[str]]]) -> SimpleNamespace:
    return SimpleNamespace(chunks=[{"passage": p, "text": t} for p, texts in cuts for t in texts])


SOURCE = _index([("p1", P1), ("p2", ["Lovelace died in 1852."])])  # chunk ids 0, 1, 2 | 3
TARGET = _index([("p2", ["Lovelace died in 1852."]),  # the same passages, another order and other cuts: 0 | 1, 2
                 ("p1", ["Ada Lovelace wrote the first program. She worked", "with Babbage. Babbage built engines."])])
JUDGED = {"questions": [{"id": "q:0", "yes": [0], "partial": [], "no": [2]},
                        {"id": "q:1", "yes": [3], "partial": [1], "no": []}]}
QS = [NaturalQuestion("q:0", "who wrote the first program?", ("Ada Lovelace",)),
      NaturalQuestion("q:1", "when did Lovelace die?", ("1852",))]


def test_spans_share_one_coordinate_system_across_cuts():
    text_a, a = collapsed(P1)
    text_b, b = collapsed(["Ada Lovelace wrote the first program. She worked", "with Babbage. Babbage built engines."])
    assert text_a == text_b == " ".join(" ".join(P1).split())
    assert a[-1][1] == b[-1][1] == len(text_a)
    assert a[0] == (0, 37) and b[0] == (0, 48)
    assert [text_a[i:j] for i, j in a] == [" ".join(t.split()) for t in P1]  # each span is its chunk, collapsed


def test_verdicts_are_kept_on_their_own_index_and_carried_to_another():
    assert mapped_positives(JUDGED, QS, SOURCE, SOURCE) == ({"q:0": {"yes": [0], "read": [0, 2]},
                                                            "q:1": {"yes": [3], "read": [3, 1]}}, 0)
    # q:0's yes chunk (0) shares "Ada Lovelace …" with target chunk 1; its no chunk (2) holds no alias, so the
    # target's chunk 2 is not read; q:1's yes chunk is target chunk 0, its partial chunk holds no "1852"
    assert mapped_positives(JUDGED, QS, SOURCE, TARGET) == ({"q:0": {"yes": [1], "read": [1]},
                                                            "q:1": {"yes": [0], "read": [0]}}, 0)
    # a cut inside a word ("Love|lace") collapses p2 to another text: nothing is carried there, and it is counted
    split = _index([("p2", ["Love", "lace died in 1852."]), ("p1", P1)])
    assert mapped_positives(JUDGED, QS, SOURCE, split) == ({"q:0": {"yes": [2], "read": [2]},
                                                           "q:1": {"yes": [], "read": []}}, 1)


def test_first_ranks_and_unread_alias_chunks():
    m = torch.tensor([[0.1, 0.9, 0.5], [0.8, 0.1, 0.3]])
    assert first_ranks(m, [[0], [2]]) == [3, 2]
    texts = ["x"] * 10
    texts[3], texts[5] = "Ada Lovelace again", "in 1852"
    index = _index([("p", texts)])
    scores = torch.arange(10, 0, -1).float().repeat(2, 1)  # (2, 10): every chunk in both top 10s
    # q:0: chunk 3 holds its alias and nobody read it; q:1: chunk 5 holds "1852" but was read
    assert unread_in_top10(scores, QS, [[], [5]], list(range(10)), index) == 1
