"""The UNREAL pipeline end to end: chunk → encode (Eq. 1) → query (Eqs. 2–3) → MaxSim (Eq. 4)
→ select (Eq. 5) → answer (Eq. 7), with BM25 selection and full context beside it.

The one service every front end calls (the CLI and the tabs only present what it returns):

- :class:`Explorer` holds one frozen backbone and one head, shared read-only by every request; nothing
  per-request is stored on it except a small cache of chunk encodings keyed by content. It ranks
  (:meth:`~Explorer.rank`, :meth:`~Explorer.compare`), answers (:meth:`~Explorer.ask_stream`,
  :meth:`~Explorer.answer_stream`, :meth:`~Explorer.answer`: every answer goes through
  :meth:`~Explorer.stream_passages`), times full context (:meth:`~Explorer.full_context`), searches an index
  or a Qdrant store (:meth:`~Explorer.search`) and builds or resumes an index (:meth:`~Explorer.build_index`).
- its result types (:class:`Ranking`, :class:`AnswerStep`, :class:`AskStep`, :class:`FullContext`,
  :class:`BuildProgress`, :class:`IndexBuild`) and the checks of a request (:func:`check_inputs`,
  :func:`check_search`, :func:`check_n`).

Serving it to a long-running front end (loading in the background, the opened indexes and stores) is
:mod:`unreal_demo.serving`.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .core.backbone import Backbone, load_backbone
from .core.chunking import Chunk, chunk_documents, tokenizer_counters
from .core.encoding import encode_chunks
from .core.generation import ANSWER_RULE, AnswerRule, Generation, fits_window, prompt_ids, stream_answer
from .core.head import QueryHead, untrained_head
from .core.selection import select_top_n
from .data.sources import load_corpus
from .data.textio import check_text
from .errors import InputError, UserError
from .retrieval import hits
from .retrieval.evidence import group_similarities, sparse_matches
from .retrieval.registry import METHODS, all_scores, check, names, unsupported
from .settings import (
    CHUNK_TOKENS,
    DEFAULT_HEADS,
    DEFAULT_MODEL,
    MAX_CHARS,
    MAX_N,
    TOKENS_PER_S,
    display_path,
)
from .store import index as ix
from .store.memory import MemoryStore

WATCHED_BATCH = 1024  # padded tokens per encoding batch of a document (Explorer.store): a watch is called this often



@dataclass
class Ranking:
    """One method's view of a context: every chunk, its score, and the selection (document order)."""

    method: str
    chunks: list[Chunk]
    scores: list[float] | None
    selected: list[int]
    timings: dict = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    group_sims: dict[int, list[list[float]]] = field(default_factory=dict)  # chunk id -> G × L_p
    matched_tokens: dict[int, list[tuple[int, float, int]]] = field(default_factory=dict)  # sparse: chunk id ->
    # [(token position, cosine, query token)] (retrieval.sparse.retrieved_tokens)
    query_tokens: list[str] = field(default_factory=list)  # sparse: the question's tokens, as text

    @property
    def passages(self) -> list[str]:
        """The selected chunks' texts, in document order (what the answer is given)."""
        return [self.chunks[i].text for i in self.selected]


@dataclass
class AnswerStep:
    """One step of :meth:`Explorer.answer_stream`: the answer so far, the prompt's length in tokens, the answer's
    tokens so far and timings in seconds. The first step comes before the model reads the prompt (no text, no
    token: the prompt's length only); ``timings["first_token"]`` is set once, when the first answer token exists,
    and ``timings["total"]`` grows to the end; the last step (``done``) says why the answer ended (``stop``, as
    :attr:`core.generation.Generation.stop`)."""

    text: str
    prompt_tokens: int
    timings: dict
    done: bool = False
    stop: str | None = None
    tokens: int = 0


@dataclass
class AskStep(AnswerStep):
    """One step of :meth:`Explorer.ask_stream`: an :class:`AnswerStep` with the ``ranking`` it answers from. The
    first step carries the ranking alone (``prompt_tokens`` 0); the second the prompt's length, before the model
    reads it (no text); the last one (``done``) says why the answer ended."""

    ranking: Ranking = field(kw_only=True)


@dataclass(frozen=True)
class FullContext:
    """The whole context as the prompt, beside a selection (:meth:`Explorer.full_context`): its tokens, whether
    it fits the model window (``window`` tokens) with the answer rule's budget, and, when timed, its prefill and
    time to first token in seconds (chunking included); None when not timed or when it did not fit."""

    prompt_tokens: int
    fits: bool
    window: int
    prefill: float | None = None
    first_token: float | None = None


@dataclass(frozen=True)
class BuildProgress:
    """One report of :meth:`Explorer.build_index`: ``done`` of ``total`` chunks encoded by this run (``total``
    0: the corpus is read, the encoding not begun), ``seconds`` since the build began, and ``estimate``, the
    whole build's seconds at the model's :data:`settings.TOKENS_PER_S` (≈ 4.2 characters per token)."""

    done: int
    total: int
    seconds: float
    estimate: float

    @property
    def left(self) -> float:
        """Seconds left at the rate so far."""
        return self.seconds / max(self.done, 1) * (self.total - self.done)


@dataclass(frozen=True)
class IndexBuild:
    """What :meth:`Explorer.build_index` returns: the index folder, its manifest, its chunks and passages, and
    the seconds the call took."""

    folder: Path
    manifest: dict
    chunks: int
    passages: int
    seconds: float


def check_inputs(docs: Sequence[str], question: str, max_chars: int = MAX_CHARS) -> None:
    """Raise :class:`InputError` for an empty question, empty documents, too much text, or text that is binary,
    damaged or in the wrong encoding (:func:`data.textio.check_text`, the checks an uploaded file gets)."""
    if not question or not question.strip():
        raise InputError("the question is empty")
    if not docs or not any(d.strip() for d in docs):
        raise InputError("the document is empty")
    total = sum(len(d) for d in docs)
    if total > max_chars:
        raise InputError(f"the document has {total:,} characters; the limit is {max_chars:,}")
    for i, doc in enumerate(docs):
        check_text(doc, "the document" if len(docs) == 1 else f"document {i + 1}")
    check_text(question, "the question")


def check_search(query: str, k: object, high: int | None = 100, name: str = "k") -> int:
    """``k`` as an ``int`` (:func:`check_n`, from 1 to ``high``; None: no upper bound, as ``index search --k``)
    once ``query`` is a query: not empty, not binary or damaged text. ``name`` is how the message calls ``k``.

    Raises
    ------
    InputError
        One line saying what is wrong (``the query is empty``).
    """
    if not query or not query.strip():
        raise InputError("the query is empty")
    check_text(query, "the query")
    return check_n(k, name, high)


def check_n(n: object, name: str = "n", high: int | None = MAX_N) -> int:
    """``n`` as an ``int`` when it is a whole number from 1 to ``high`` (None: no upper bound): an int, a whole
    float (a slider's 5.0) or its digits as text (a command-line flag); nothing is rounded or clamped.

    Raises
    ------
    InputError
        One line saying what is wrong (``n must be a whole number from 1 to 1,000 (got 2.5)``; without ``high``,
        ``n must be a whole number of at least 1 (got 0)``).

    Examples
    --------
    >>> check_n(5.0), check_n("12")
    (5, 12)
    """
    whole = None
    if isinstance(n, str) and re.fullmatch(r"\s*[+-]?\d+\s*", n):
        whole = int(n)
    elif isinstance(n, numbers.Real) and not isinstance(n, bool) and math.isfinite(n) and float(n).is_integer():
        whole = int(n)
    if high is None and (whole is None or whole < 1):
        raise InputError(f"{name} must be a whole number of at least 1 (got {n!r})")
    if high is not None and (whole is None or not 1 <= whole <= high):
        raise InputError(f"{name} must be a whole number from 1 to {high:,} (got {n!r})")
    return whole


def head_file(model: str, head: str | None = None, require_head: bool = False) -> Path | None:
    """The head's ``.json`` to load: ``head`` if given, else the one shipped for ``model``, else None (untrained).

    Raises
    ------
    InputError
        With ``require_head``, when no head is given and none ships for ``model``.
    """
    path = Path(head) if head else DEFAULT_HEADS.get(model)
    if path is not None and (head or path.with_suffix(".json").exists()):
        return path.with_suffix(".json")
    if require_head:
        raise InputError(f"no trained head ships for model {model!r}: give --head PATH "
                         f"(train one with `python -m unreal_demo train --model {model}`)")
    return None


class Explorer:
    """A frozen backbone with a query head: rank, select and answer over pasted documents.

    Parameters
    ----------
    backbone : the frozen LLM.
    head : the query head (trained or not).
    head_path : the head's ``.json`` file, or None for an untrained head.

    Attributes
    ----------
    head_source : the head's path as shown to users (repository-relative), or ``"untrained"``.
    """

    def __init__(self, backbone: Backbone, head: QueryHead, head_path: Path | None) -> None:
        head.check_backbone(backbone)
        self.backbone, self.head, self.head_path = backbone, head.to(backbone.device).eval(), head_path
        self.head_source = display_path(head_path) if head_path else "untrained"
        self.head.requires_grad_(False)
        self._count, self._offsets = tokenizer_counters(backbone.tokenizer)
        self._cache: OrderedDict[str, MemoryStore] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, model: str = DEFAULT_MODEL, head: str | None = None, device: str | None = None,
             dtype: str | None = None, trust_remote_code: bool = False, require_head: bool = False,
             stage: Callable[[str], None] | None = None) -> Explorer:
        """Load a model and its head: ``head`` if given, else the shipped trained head, else untrained.

        ``stage`` is called with a short description of each loading stage (for a progress line).

        Raises
        ------
        UserError
            With ``require_head``, when there is no head for the model (checked before the model loads);
            :class:`HeadError` for a head that does not fit the model.
        """
        path = head_file(model, head, require_head)
        return cls.build(model, QueryHead.load(path) if path else None, path, device, dtype, trust_remote_code,
                         stage)

    @classmethod
    def build(cls, model: str, head: QueryHead | None, head_path: Path | None, device: str | None = None,
              dtype: str | None = None, trust_remote_code: bool = False,
              stage: Callable[[str], None] | None = None) -> Explorer:
        """Load the backbone and pair it with a head already read from ``head_path`` (None: untrained)."""
        backbone = load_backbone(model, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                                 stage=stage)
        if head is None:
            return cls(backbone, untrained_head(backbone), None)
        return cls(backbone, head, head_path)

    @property
    def trained(self) -> bool:
        return bool(self.head.config.trained)

    def chunk(self, docs: Sequence[str], target: int = CHUNK_TOKENS) -> list[Chunk]:
        """Sentence-aligned chunks of every document (see :mod:`unreal_demo.chunking`)."""
        return chunk_documents(docs, self._count, self._offsets, target)

    def clear_cache(self) -> None:
        """Forget cached chunk encodings (benchmarks time encoding afresh)."""
        with self._lock:
            self._cache.clear()

    def store(self, chunks: Sequence[Chunk], watch: Callable[[int, int], None] | None = None) -> MemoryStore:
        """The store of these chunks, cached by content: its pooled keys ``(M, L_p, d)`` and token states
        (one forward pass at the head's ℓc), BM25 index and dense vectors are each computed on first use,
        so a second question, or a second method, on the same document costs only the query side.

        ``watch(done, total)`` is called after each batch of the encoding (batches of :data:`WATCHED_BATCH`
        tokens, a second or two on CPU): a progress report, and a way to stop, since what it raises ends the
        encoding (nothing is kept; the next use encodes again). The latest caller's ``watch`` is the one called."""
        c = self.head.config
        key = hashlib.sha1("\x00".join([str(c.chunk_layer), str(c.n_pool)] + [ch.text for ch in chunks])
                           .encode()).hexdigest()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                self._cache[key].watch = watch
                return self._cache[key]
        texts = [ch.text for ch in chunks]

        def encode(parts: list | None) -> torch.Tensor:
            tokens: list[torch.Tensor] = []
            out = encode_chunks(self.backbone, texts, c.chunk_layer, c.n_pool, c.chunk_tokens, tokens_out=tokens,
                                token_budget=WATCHED_BATCH,
                                progress=lambda done, total: store.watch and store.watch(done, total))
            if parts is not None:
                parts.append((torch.cat(tokens), torch.tensor([len(x) for x in tokens])))  # (ΣT_i, d), (M,)
            return out  # (M, L_p, d)

        store = MemoryStore.lazy(texts, encode)
        store.watch = watch
        with self._lock:
            self._cache[key] = store
            while len(self._cache) > 8:
                self._cache.popitem(last=False)
        return store

    @torch.inference_mode()
    def rank(self, docs: Sequence[str], question: str, n: int = 5, method: str = "unreal",
             chunks: list[Chunk] | None = None, watch: Callable[[int, int], None] | None = None, *,
             checked: bool = False) -> Ranking:
        """Score every chunk with ``method`` (:func:`retrieval.retrieve`) and select the top ``n`` in document order.
        ``watch``: as :meth:`store`'s (progress of the encoding, and a way to stop it). ``checked``: the documents,
        question and ``n`` were checked at the boundary already (:func:`check_inputs`, :func:`check_n`).

        Raises
        ------
        InputError
            For empty, binary, damaged or too much text, an ``n`` that is not a whole number from 1 to
            :data:`settings.MAX_N`, or an unknown method.
        """
        if not checked:
            check_inputs(docs, question)
            n = check_n(n)
        (method,) = check([method], "document")
        t0 = time.perf_counter()
        chunks = chunks if chunks is not None else self.chunk(docs)
        return self._rank(chunks, None if watch is None else self.store(chunks, watch), question, n, method,
                          {"chunk": time.perf_counter() - t0})

    @torch.inference_mode()
    def compare(self, docs: Sequence[str], question: str, n: int = 5, methods: Sequence[str] | None = None,
                progress: Callable[[int, str], None] | None = None,
                watch: Callable[[int, int], None] | None = None) -> tuple[list[Ranking], list[str]]:
        """:meth:`rank` with each of ``methods`` (default: every method that ranks a document on its own) over the
        same chunks: the document is checked, chunked and looked up in the cache once, and encoded at most once
        (the store computes its keys and token states on first use and every method shares them).

        ``progress(j, method)`` is called before the j-th method; ``watch`` as :meth:`store`'s. Returns the
        rankings, in the order of ``methods``, and one note per method that could not run (``"dense: <why>"``,
        e.g. the dense model cannot be fetched); the others still compare.

        Raises
        ------
        InputError
            As :meth:`rank`, for every method at once (nothing is ranked).
        """
        check_inputs(docs, question)
        n = check_n(n)
        methods = check(methods if methods is not None else names("document", single=True), "document")
        t0 = time.perf_counter()
        chunks = self.chunk(docs)
        timings = {"chunk": time.perf_counter() - t0}
        store = self.store(chunks, watch)
        rankings, notes = [], []
        for j, method in enumerate(methods):
            if progress is not None:
                progress(j, method)
            try:
                rankings.append(self._rank(chunks, store, question, n, method, dict(timings)))
            except InputError:
                raise
            except UserError as exc:
                notes.append(f"{method}: {exc}")
        return rankings, notes

    def _rank(self, chunks: list[Chunk], store: MemoryStore | None, question: str, n: int, method: str,
              timings: dict) -> Ranking:
        """:meth:`rank` of checked inputs over ``chunks`` (their ``store``, or the cached one when None)."""
        notices = []
        if n > len(chunks) and METHODS[method].ranks:
            notices.append(f"n = {n}, but the text has only {len(chunks)} chunk{'s' * (len(chunks) != 1)}: "
                           "all of them are selected")
            n = len(chunks)
        if not METHODS[method].ranks:  # full context: every chunk
            return Ranking(method, chunks, None, list(range(len(chunks))), timings, notices)
        store = store if store is not None else self.store(chunks)
        if METHODS[method].model:
            t1 = time.perf_counter()
            store.keys  # noqa: B018  (encodes on first use; cached afterwards)
            timings["encode"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        found, every = all_scores(store, self, [question], method)
        timings["retrieval"] = time.perf_counter() - t2
        scores = every[0]  # (M,) in chunk order
        sims = {}
        if found.query_vectors is not None:
            top = torch.topk(scores, min(len(chunks), max(n, 3))).indices.tolist()
            keys = store.scoring_keys(self.head.config.normalize)[top]  # (top, L_p, d)
            sims = dict(zip(top, group_similarities(found.query_vectors[0], keys).tolist(), strict=True))  # G × L_p
            if not self.trained:
                notices.append("this head is UNTRAINED (random ρ): UNREAL scores are not meaningful yet")
        ranking = Ranking(method, chunks, scores.tolist(), select_top_n(scores, n), timings, notices, sims)
        if found.token_states is not None:  # sparse: the stored tokens each question token retrieved
            ranking.matched_tokens, ranking.query_tokens = sparse_matches(
                self.backbone.tokenizer, question, found.token_states[0], store.token_parts, store.token_mean())
        return ranking

    def stream(self, ranking: Ranking, question: str, rule: AnswerRule = ANSWER_RULE) -> Iterator[Generation]:
        """Stream the answer from the selected chunks under ``rule`` (default: the one the evaluations use);
        raise :class:`InputError` if the prompt does not fit."""
        yield from self.stream_passages(ranking.passages, question, rule, ranking.method)

    def stream_passages(self, passages: Sequence[str], question: str, rule: AnswerRule = ANSWER_RULE,
                        source: str = "the passages", ids: list[int] | None = None) -> Iterator[Generation]:
        """Stream the answer from ``passages`` (in the order given: a selection, or an index's top hits) under
        ``rule``; the one answering path of every tab. ``ids``: the prompt's token ids
        (:func:`core.generation.prompt_ids` of these passages and question) when the caller tokenized it already,
        to count it first (:meth:`answer_stream`, :meth:`full_context`); the question, checked by that caller, is
        then neither checked nor tokenized again.

        Raises
        ------
        InputError
            For a question that :func:`check_inputs` refuses, or a prompt over the model window (``source``
            names what was selected in the message).
        """
        if ids is None:
            check_inputs(passages, question)
            ids = prompt_ids(self.backbone, passages, question)
        if not fits_window(self.backbone, len(ids), rule.budget):
            raise InputError(f"{source}: the prompt has {len(ids):,} tokens, more than the model window "
                             f"of {self.backbone.max_positions:,} minus {rule.budget} for the answer")
        yield from stream_answer(self.backbone, ids, rule.budget, rule.first_sentence)

    def answer_stream(self, passages: Sequence[str], question: str, rule: AnswerRule = ANSWER_RULE,
                      source: str = "the passages", timings: dict | None = None,
                      start: float | None = None, *, checked: bool = False) -> Iterator[AnswerStep]:
        """The answer from ``passages`` (:meth:`stream_passages`) step by step, with its timings: first the
        prompt's length (before the model reads it, and before the window is checked), then the answer so far
        after every token; ``timings["first_token"]`` is set once, at the first answer token, and
        ``timings["total"]`` grows to the end (the last step has ``done``). Times count from ``start`` (a
        ``time.perf_counter()``; default now) and extend ``timings`` (earlier stages: chunking, retrieval). The
        prompt is tokenized once: the ids counted here are the ones answered from.
        ``checked``: the question was checked at the boundary already (:func:`check_inputs`).

        Raises
        ------
        InputError
            For a question that :func:`check_inputs` refuses, at once; for a prompt over the model window, after
            the first step.
        """
        t0 = time.perf_counter() if start is None else start
        timings = dict(timings or {})
        if not checked:
            check_inputs(passages, question)
        ids = prompt_ids(self.backbone, passages, question)
        yield AnswerStep("", len(ids), dict(timings))
        gen = Generation()
        for gen in self.stream_passages(passages, question, rule, source, ids):
            if gen.tokens >= 1 and "first_token" not in timings:
                timings |= {"prefill": gen.timings["prefill"], "first_token": time.perf_counter() - t0}
            yield AnswerStep(gen.text, gen.prompt_tokens, timings | {"total": time.perf_counter() - t0},
                             tokens=gen.tokens)
        timings.setdefault("prefill", gen.timings.get("prefill", 0.0))
        timings.setdefault("first_token", time.perf_counter() - t0)  # an empty answer: its end
        yield AnswerStep(gen.text, gen.prompt_tokens, timings | {"total": time.perf_counter() - t0}, True,
                         gen.stop, gen.tokens)

    def answer(self, ranking: Ranking, question: str, rule: AnswerRule = ANSWER_RULE) -> AnswerStep:
        """The answer from a ranking's selection (:meth:`answer_stream` to its end, timed from this call)."""
        *_, step = self.answer_stream(ranking.passages, question, rule, ranking.method)
        return step

    def full_context(self, ranking: Ranking, question: str, timed: bool = False) -> FullContext:
        """The whole context of ``ranking`` (every chunk) as the prompt: its tokens and whether it fits the window
        with :data:`ANSWER_RULE`'s budget; with ``timed``, its prefill and time to first token (one token through
        :meth:`stream_passages`, plus the ranking's chunking time), left None when the prompt does not fit. ``question``
        is the ranking's own, checked when it was ranked."""
        texts = [c.text for c in ranking.chunks]
        ids = prompt_ids(self.backbone, texts, question)  # tokenized once: counted, then answered from
        n = len(ids)
        out = FullContext(n, fits_window(self.backbone, n, ANSWER_RULE.budget), self.backbone.max_positions)
        if not timed:
            return out
        t0 = time.perf_counter()
        try:
            for gen in self.stream_passages(texts, question, AnswerRule(1, first_sentence=False), "full", ids):
                return FullContext(out.prompt_tokens, out.fits, out.window, gen.timings["prefill"],
                                   ranking.timings.get("chunk", 0.0) + time.perf_counter() - t0)
        except InputError:
            pass
        return out

    def ask_stream(self, docs: Sequence[str], question: str, n: int = 5, method: str = "unreal",
                   rule: AnswerRule = ANSWER_RULE, watch: Callable[[int, int], None] | None = None, *,
                   checked: bool = False) -> Iterator[AskStep]:
        """Ask (``ask`` and the Long document tab): chunk → encode → retrieve → select, then the
        streamed answer (:meth:`answer_stream`, timed from this call). The first step carries the ranking and
        no prompt (``prompt_tokens`` 0); the second the prompt's length; every later step the answer so
        far; ``timings["first_token"]`` is set once, when the first answer token exists, and
        ``timings["total"]`` grows to the end (the last step has ``done``). ``watch``: as :meth:`store`'s. The
        inputs are checked once, here (by :meth:`rank`), unless ``checked`` says the boundary did."""
        t0 = time.perf_counter()
        ranking = self.rank(docs, question, n, method, watch=watch, checked=checked)
        yield AskStep("", 0, dict(ranking.timings), ranking=ranking)
        for s in self.answer_stream(ranking.passages, question, rule, ranking.method, ranking.timings, t0,
                                    checked=True):
            yield AskStep(s.text, s.prompt_tokens, s.timings, s.done, s.stop, s.tokens, ranking=ranking)

    def search(self, store, query: str, k: int = 10, method: str = "unreal", bm25_k: int = 0) -> dict:
        """Top-``k`` chunks of an index or a Qdrant store for one query, each hit with its evidence, and timings
        (:func:`retrieval.hits.search`, the record ``index search --json`` prints); with ``bm25_k``, BM25's own
        top-``bm25_k`` beside it, scored once per search.

        Raises
        ------
        InputError
            A method the store cannot serve (:func:`retrieval.registry.unsupported`: ``sparse cannot search this
            store: it needs --token-states``), before any work; :class:`UserError` as the search raises it.
        """
        if why := unsupported(store, [method]).get(method):
            raise InputError(f"{method} cannot search this store: it needs {why}")
        return hits.search(store, self, query, k, method, bm25_k)

    def index_folder(self, corpus: str = "all") -> Path:
        """The index of a built-in corpus to open for this model and ℓc: built in the cache, else shipped, else the
        cache folder where a build goes (:func:`store.index.default_index`)."""
        return ix.default_index(self, corpus)

    def index_ready(self, corpus: str) -> bool:
        """Whether a corpus has a whole index for this model and ℓc (built in the cache or shipped); a build still
        under way (stopped half way, say) is not ready."""
        state = ix.build_state(self.index_folder(corpus))
        return state is not None and state[0] >= state[1]

    def build_index(self, out: str | Path, corpus: Sequence[str], codec: str = "fp16", shard_size: int = 1024,
                    chunk_layer: int | None = None, n_pool: int | None = None, token_states: bool = False,
                    dense: bool = True, centroids: int = 4096, dense_codec: str = "int8", as_started: bool = False,
                    progress: Callable[[BuildProgress], None] | None = None, state=None) -> IndexBuild:
        """Build a corpus index in ``out``, or resume the build a killed run left there (``index build`` and the
        Wikipedia tab's *Build or load index*): read the corpus (:func:`data.sources.load_corpus`), chunk,
        encode to ℓc and write the sharded index (:func:`store.index.build_index`). ℓc and L_p default to the
        head's. A lossy ``codec`` (:data:`core.codec.LOSSY`) is built in fp16 beside ``out``
        (``OUT.fp16-build``), then compressed into ``out`` (:func:`store.index.compress_index`, ``centroids``,
        ``dense_codec``) and the fp16 build removed.

        With ``as_started``, a build already begun in ``out`` resumes with the settings it was started with (its
        manifest's encoding, shard size, dense vectors and token states replace the ones given); otherwise a
        folder begun with other settings is an error. ``as_started`` is refused with a lossy ``codec``: such a
        build runs in ``OUT.fp16-build``, whose manifest does not record the codec it is compressed to, so it
        resumes only with the settings given again (without ``as_started``). ``progress`` receives a
        :class:`BuildProgress` once the corpus is read, then as chunks are encoded. ``state`` is the process layout
        under ``accelerate launch`` (only its main process compresses).

        Raises
        ------
        UserError
            An unknown corpus; :class:`InputError` for ``as_started`` with a lossy codec (before any work);
            :class:`store.index.IndexStoreError` for a folder holding another index.
        """
        t0 = time.perf_counter()
        out = Path(out)
        if as_started and codec in ix.LOSSY:
            raise InputError(f"as_started resumes an fp16 or int8 build; a {codec} build is encoded in "
                             f"{out.name}.fp16-build, then compressed: resume it with the settings it was started "
                             "with (codec, shard size, dense, token states) instead")
        started = out / "manifest.json"
        m = json.loads(started.read_text()) if as_started and started.exists() else {}
        if m:  # resume a build with the settings it was started with
            codec, shard_size = m.get("dtype", codec), m.get("shard_size", shard_size)
            dense, token_states = m.get("dense", dense), m.get("token_states", token_states)
        passages = load_corpus(list(corpus))
        tokens = sum(len(p.text) for p in passages) / 4.2  # ≈ characters per token of English text
        estimate = tokens / TOKENS_PER_S.get(self.backbone.name, TOKENS_PER_S[DEFAULT_MODEL])

        def report(done: int, total: int) -> None:
            if progress is not None:
                progress(BuildProgress(done, total, time.perf_counter() - t0, estimate))

        report(0, 0)
        c = self.head.config
        lossy = codec in ix.LOSSY and not m  # a begun build resumes as it is encoded (fp16 or int8)
        folder = Path(str(out) + ".fp16-build") if lossy else out
        manifest = ix.build_index(folder, self.backbone, passages, chunk_layer or c.chunk_layer, n_pool or c.n_pool,
                                  "fp16" if lossy else codec, shard_size, progress=report,
                                  token_states=token_states, dense=dense, state=state)
        if lossy and (state is None or state.is_main_process):
            manifest = ix.compress_index(folder, out, codec, centroids, dense_codec=dense_codec)
            shutil.rmtree(folder)
        return IndexBuild(out, manifest, manifest["chunks"], manifest["passages"], time.perf_counter() - t0)

    def ask(self, docs: Sequence[str], question: str, n: int = 5, method: str = "unreal",
            rule: AnswerRule = ANSWER_RULE, *, checked: bool = False) -> dict:
        """Rank, select and answer (:meth:`ask_stream` to the end); the JSON-ready record of ``ask --json``.
        ``checked``: as :meth:`ask_stream`'s (``ask`` checks before the model loads)."""
        *_, step = self.ask_stream(docs, question, n, method, rule, checked=checked)
        ranking = step.ranking
        scores = ranking.scores or [None] * len(ranking.chunks)
        return {
            "method": ranking.method,
            "chunks": [ch.to_dict() | {"score": s} for ch, s in zip(ranking.chunks, scores, strict=True)],
            "selected": ranking.selected,
            "answer": step.text,
            "answer_stop": step.stop,
            "prompt_tokens": step.prompt_tokens,
            "timings": {k: round(v, 4) for k, v in step.timings.items()},
            "model": self.backbone.name,
            "head": self.head_source,
            "notices": ranking.notices,
        }
