"""The evidence view: each selected chunk's text coloured by what the method matched (HTML). What was matched is
computed in :mod:`retrieval.evidence`; this module only writes it out.

UNREAL: the background of each pooled span (:func:`retrieval.evidence.scored_segments`) is shaded by
max_g ⟨q_g, k_{i,p}⟩, from the lowest to the highest span shown; hovering a span shows its group and
score. Sparse token matching: the chunk tokens some question token retrieved are boxed (hover: which
question token, and the cosine). BM25's matched query terms are underlined in every view, so where the
methods disagree shows. Dense retrieval scores one vector per chunk and marks nothing. Once an answer is
there, the words it copies from a chunk are marked (:func:`evaluation.faithfulness.answer_support`).
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Sequence

from ..pipeline import Explorer, Ranking
from ..retrieval.evidence import Segment, bm25_terms, matched_token_spans, scored_segments

LEGEND = ("<div class='unreal-legend'><span class='unreal-swatch' style='background:rgba(255,140,0,0.2)'>"
          "good</span><span class='unreal-swatch' style='background:rgba(255,140,0,0.85)'>best</span> UNREAL: "
          "the pooled spans whose max over query groups of ⟨q_g, k_p⟩ is in the top 40% of the range shown "
          "(the rest unshaded; hover any span for its group and score) · "
          "<u>underlined</u>: BM25's matched query terms · <span class='unreal-tok'>boxed</span>: tokens a "
          "question token retrieved (sparse) · <mark class='unreal-copy'>marked</mark>: words the answer copies</div>")
Mark = tuple[int, int, str]  # characters [start, end) and the hover text
Spans = dict[int, list[tuple[int, int]]]  # a chunk (or hit) -> character spans [start, end) the answer copies



def title_text(title: str) -> str:
    """A passage title as a reader writes it: percent-escapes of a URL decoded (``Marxism%E2%80%93Leninism`` →
    ``Marxism–Leninism``), underscores as spaces.

    >>> title_text("Marxism%E2%80%93Leninism"), title_text("New_York_City")
    ('Marxism–Leninism', 'New York City')
    """
    return urllib.parse.unquote(title).replace("_", " ") if "%" in title or "_" in title else title

SHADED = 0.6  # the share of the shown score range above which a span is shaded: the evidence, not the whole chunk


def _shade(score: float, low: float, high: float) -> str:
    """A span's background: none below :data:`SHADED` of the score range shown, then orange deepening to the top
    score, so that the shading points at the best-matched stretches instead of covering every span."""
    share = 1.0 if high <= low else (score - low) / (high - low)
    if share < SHADED:
        return "transparent"
    return f"rgba(255,140,0,{0.2 + 0.65 * (share - SHADED) / (1 - SHADED):.2f})"


def _marked(text: str, terms: Sequence[tuple[int, int, str]], start: int, end: int,
            tokens: Sequence[Mark] = (), copied: Sequence[tuple[int, int]] = ()) -> str:
    """``text[start:end]`` escaped, BM25's terms underlined, the sparse-matched tokens boxed and the words the
    answer copies marked (they may overlap: each run of characters with the same marks is written once)."""
    under: dict[int, str] = {}
    boxed: dict[int, str] = {}
    for marks, into in ((terms, under), (tokens, boxed)):
        for s, e, tip in marks:
            for c in range(max(s, start), min(e, end)):
                into[c] = tip
    copy = {c for s, e in copied for c in range(max(s, start), min(e, end))}
    out, at = [], start
    while at < end:
        key = (under.get(at), boxed.get(at), at in copy)
        stop = at + 1
        while stop < end and (under.get(stop), boxed.get(stop), stop in copy) == key:
            stop += 1
        piece = html.escape(text[at:stop])
        if key[0] is not None:
            piece = f"<u title='BM25 term “{html.escape(key[0])}”'>{piece}</u>"
        if key[1] is not None:
            piece = f"<span class='unreal-tok' title='{html.escape(key[1])}'>{piece}</span>"
        if key[2]:
            piece = f"<mark class='unreal-copy' title='copied by the answer'>{piece}</mark>"
        out.append(piece)
        at = stop
    return "".join(out)


def _card(header: str, text: str, segments: Sequence[Segment] | None, terms: Sequence[tuple[int, int, str]],
          low: float, high: float, tokens: Sequence[Mark] = (), copied: Sequence[tuple[int, int]] = ()) -> str:
    """One chunk's card: the header, then its text with UNREAL's shaded spans, BM25's underlined terms, the
    sparse-matched tokens and the words the answer copies."""
    body, at = [], 0
    for s in segments or []:
        if s.end <= at:
            continue  # a span repeated for a chunk shorter than L_p tokens
        tip = f"group {s.group + 1} · ⟨q_g, k_p⟩ = {s.score:.3f}"
        body.append(f"<span class='unreal-seg' style='background:{_shade(s.score, low, high)}' "
                    f"title='{tip}'>{_marked(text, terms, max(at, s.start), s.end, tokens, copied)}</span>")
        at = s.end
    body.append(_marked(text, terms, at, len(text), tokens, copied))  # past the encoded prefix (or no spans)
    matched = f" · {len(tokens)} token(s) retrieved by the question (sparse)" if tokens else ""
    return (f"<div class='unreal-card'><div class='unreal-card-head'>{header} · {len(terms)} BM25 term match(es)"
            f"{matched}"
            f"</div><div class='unreal-card-text'>{''.join(body)}</div></div>")


def sparse_marks(explorer: Explorer, ranking: Ranking, i: int) -> list[Mark]:
    """Chunk ``i``'s tokens the sparse score counts for a question token (:func:`retrieval.evidence.
    matched_token_spans`), each with its hover text."""
    q = ranking.query_tokens
    return [(s, e, f"counted for question token “{q[t].strip()}” · cos {score:.3f}")
            for s, e, score, t in matched_token_spans(explorer.backbone.tokenizer, ranking.chunks[i].text,
                                                      explorer.head.config.chunk_tokens,
                                                      ranking.matched_tokens.get(i, []))]


def _range(segments: dict) -> tuple[float, float]:
    shown = [s.score for spans in segments.values() for s in spans]
    return (min(shown), max(shown)) if shown else (0.0, 1.0)


def evidence_html(explorer: Explorer, ranking: Ranking, question: str, ranks: dict[int, int] | None = None,
                  copied: Spans | None = None) -> str:
    """One card per selected chunk (document order): its rank and score, then its text with the evidence and,
    given ``copied`` (by chunk id), the words the answer copies from it."""
    if not ranking.selected or ranking.method == "full":
        return "<p class='unreal-placeholder'>No selection: full context reads every chunk.</p>"
    c, tok = explorer.head.config, explorer.backbone.tokenizer
    segments = {i: scored_segments(tok, ranking.chunks[i].text, c.n_pool, c.chunk_tokens, sims)
                for i, sims in ranking.group_sims.items() if i in ranking.selected}
    low, high = _range(segments)
    cards = []
    for i in ranking.selected:
        score = "" if ranking.scores is None else f" · score {ranking.scores[i]:.3f}"
        rank = f" · rank {ranks[i]}" if ranks and i in ranks else ""
        text = ranking.chunks[i].text
        cards.append(_card(f"chunk {i}{rank}{score}", text, segments.get(i), bm25_terms(question, text), low, high,
                           sparse_marks(explorer, ranking, i), (copied or {}).get(i, ())))
    return LEGEND + "".join(cards)


def hits_html(explorer: Explorer, hits: Sequence[dict], query: str, n_pool: int, max_tokens: int,
              copied: Spans | None = None) -> str:
    """Cards for index hits (:func:`retrieval.hits.search`), best first; UNREAL spans where a hit has ``group_sims``.

    ``n_pool`` and ``max_tokens`` are the index's L_p and the token cut its chunks were encoded with; ``copied``
    (by position in ``hits``) the words an answer copies from each hit.
    """
    if not hits:
        return "<p class='unreal-placeholder'>No hits.</p>"
    tok = explorer.backbone.tokenizer
    segments = {h["rank"]: scored_segments(tok, h["text"], n_pool, max_tokens, h["group_sims"])
                for h in hits if "group_sims" in h}
    low, high = _range(segments)
    cards = [_card(f"{h['rank']}. {html.escape(title_text(h['title']))} · score {h['score']:.3f}", h["text"],
                   segments.get(h["rank"]), bm25_terms(query, h["text"]), low, high,
                   copied=(copied or {}).get(j, ())) for j, h in enumerate(hits)]
    return LEGEND + "".join(cards)
