"""The UNREAL pipeline end to end: chunk → encode (Eq. 1) → query (Eqs. 2–3) → MaxSim (Eq. 4)
→ select (Eq. 5) → answer (Eq. 7), with BM25 selection and full context beside it.

The one service every front end calls (the CLI and the tabs only present what it returns):

- :class:`Explorer` holds one frozen backbone and one head, shared read-only by every request; nothing
  per-request is stored on it except a small cache of chunk encodings keyed by content. It ranks
  (:meth:`~Explorer.rank`, :meth:`~Explorer.compare`), answers (:meth:`~Explorer.ask_stream`,
  :meth:`~Explorer.answer_stream`, :meth:`~Explorer.answer`: every answer goes through
  :meth:`~Explorer.stream_passages`), times full context (:meth:`~Explorer.full_context`), searches an index
  or a Qdrant store (:meth:`~Explorer.search`) and builds or resumes an index (:meth:`~Explorer.build_index`).
- :class:`Loading` loads an explorer in the background; :class:`Stores` holds the indexes and Qdrant stores a
  long-running front end has opened (or built) of the corpora in :data:`CORPORA`, each opened once.

The names a front end presents (method names and help, result types, the errors it catches) are imported from
here.
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
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .core.backbone import Backbone, load_backbone
from .core.chunking import Chunk, chunk_documents, tokenizer_counters
from .core.encoding import encode_chunks
from .core.generation import ANSWER_RULE, AnswerRule, Generation, fits_window, prompt_ids, stream_answer
from .core.head import QueryHead, untrained_head
from .core.selection import select_top_n
from .data.sources import load_corpus
from .data.textio import check_text, read_document
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
    PRECOMPUTED,
    TOKENS_PER_S,
    display_path,
    open_stores,
)
from .store import index as ix
from .store.index import Index, IndexStoreError
from .store.memory import MemoryStore
from .store.qdrant import EDGE, SERVER, QdrantStore, Where, is_spec, open_store

WATCHED_BATCH = 1024  # padded tokens per encoding batch of a document (Explorer.store): a watch is called this often

# what the front ends present, from this one place (beside the types and functions defined below)
__all__ = ["ANSWER_RULE", "CLOSED", "CORPORA", "AnswerRule", "AnswerStep", "AskStep", "BuildProgress", "Explorer",
           "FullContext", "IndexBuild", "IndexStoreError", "InputError", "Loading", "Opened", "Ranking", "StoreInfo",
           "Stores", "UserError", "check_corpus", "check_inputs", "check_n", "check_search", "head_file", "names",
           "open_any_default", "read_document", "store_filter", "store_info", "unsupported"]


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
    whole build's seconds at :data:`settings.TOKENS_PER_S` (≈ 4.2 characters per token)."""

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
        self._prompts: OrderedDict[tuple, list[int]] = OrderedDict()  # (passages, question) -> ids, kept for the
        # next answer from them (:meth:`_prompt_ids`)
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
             chunks: list[Chunk] | None = None, watch: Callable[[int, int], None] | None = None) -> Ranking:
        """Score every chunk with ``method`` (:func:`retrieval.retrieve`) and select the top ``n`` in document order.
        ``watch``: as :meth:`store`'s (progress of the encoding, and a way to stop it).

        Raises
        ------
        InputError
            For empty, binary, damaged or too much text, an ``n`` that is not a whole number from 1 to
            :data:`settings.MAX_N`, or an unknown method.
        """
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
                self.backbone.tokenizer, question, found.token_states[0], store.token_parts)
        return ranking

    def stream(self, ranking: Ranking, question: str, rule: AnswerRule = ANSWER_RULE) -> Iterator[Generation]:
        """Stream the answer from the selected chunks under ``rule`` (default: the one the evaluations use);
        raise :class:`InputError` if the prompt does not fit."""
        yield from self.stream_passages(ranking.passages, question, rule, ranking.method)

    def stream_passages(self, passages: Sequence[str], question: str, rule: AnswerRule = ANSWER_RULE,
                        source: str = "the passages") -> Iterator[Generation]:
        """Stream the answer from ``passages`` (in the order given: a selection, or an index's top hits) under
        ``rule``; the one answering path of every tab.

        Raises
        ------
        InputError
            For a question that :func:`check_inputs` refuses, or a prompt over the model window (``source``
            names what was selected in the message).
        """
        check_inputs(passages, question)
        ids = self._prompt_ids(passages, question)
        if not fits_window(self.backbone, len(ids), rule.budget):
            raise InputError(f"{source}: the prompt has {len(ids):,} tokens, more than the model window "
                             f"of {self.backbone.max_positions:,} minus {rule.budget} for the answer")
        yield from stream_answer(self.backbone, ids, rule.budget, rule.first_sentence)

    def _prompt_ids(self, passages: Sequence[str], question: str, keep: bool = False) -> list[int]:
        """The answering prompt's token ids (:func:`core.generation.prompt_ids`), tokenized once per answer: with
        ``keep`` they are kept for the next call on the same passages and question, which takes them (so
        :meth:`answer_stream` reports the prompt's length and :meth:`stream_passages` answers from the same ids).
        At most 8 prompts wait at once (the oldest is dropped: it is tokenized again if asked for)."""
        key = (tuple(passages), question)
        with self._lock:
            ids = self._prompts.pop(key, None)
        if ids is None:
            ids = prompt_ids(self.backbone, passages, question)
        if keep:
            with self._lock:
                self._prompts[key] = ids
                while len(self._prompts) > 8:
                    self._prompts.popitem(last=False)
        return ids

    def answer_stream(self, passages: Sequence[str], question: str, rule: AnswerRule = ANSWER_RULE,
                      source: str = "the passages", timings: dict | None = None,
                      start: float | None = None) -> Iterator[AnswerStep]:
        """The answer from ``passages`` (:meth:`stream_passages`) step by step, with its timings: first the
        prompt's length (before the model reads it, and before the window is checked), then the answer so far
        after every token; ``timings["first_token"]`` is set once, at the first answer token, and
        ``timings["total"]`` grows to the end (the last step has ``done``). Times count from ``start`` (a
        ``time.perf_counter()``; default now) and extend ``timings`` (earlier stages: chunking, retrieval). The
        prompt is tokenized once (:meth:`_prompt_ids`): the ids counted here are the ones answered from.

        Raises
        ------
        InputError
            As :meth:`stream_passages`, after the first step.
        """
        t0 = time.perf_counter() if start is None else start
        timings = dict(timings or {})
        yield AnswerStep("", len(self._prompt_ids(passages, question, keep=True)), dict(timings))
        gen = Generation()
        for gen in self.stream_passages(passages, question, rule, source):
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
        :meth:`stream_passages`, plus the ranking's chunking time), left None when the prompt does not fit."""
        texts = [c.text for c in ranking.chunks]
        n = len(self._prompt_ids(texts, question, keep=timed))  # timed: stream_passages answers from these ids
        out = FullContext(n, fits_window(self.backbone, n, ANSWER_RULE.budget), self.backbone.max_positions)
        if not timed:
            return out
        t0 = time.perf_counter()
        try:
            for gen in self.stream_passages(texts, question, AnswerRule(1, first_sentence=False), "full"):
                return FullContext(out.prompt_tokens, out.fits, out.window, gen.timings["prefill"],
                                   ranking.timings.get("chunk", 0.0) + time.perf_counter() - t0)
        except InputError:
            pass
        return out

    def ask_stream(self, docs: Sequence[str], question: str, n: int = 5, method: str = "unreal",
                   rule: AnswerRule = ANSWER_RULE, watch: Callable[[int, int], None] | None = None,
                   ) -> Iterator[AskStep]:
        """Ask (``ask`` and the Long document tab): chunk → encode → retrieve → select, then the
        streamed answer (:meth:`answer_stream`, timed from this call). The first step carries the ranking and
        no prompt (``prompt_tokens`` 0); the second the prompt's length; every later step the answer so
        far; ``timings["first_token"]`` is set once, when the first answer token exists, and
        ``timings["total"]`` grows to the end (the last step has ``done``). ``watch``: as :meth:`store`'s."""
        t0 = time.perf_counter()
        ranking = self.rank(docs, question, n, method, watch=watch)
        yield AskStep("", 0, dict(ranking.timings), ranking=ranking)
        for s in self.answer_stream(ranking.passages, question, rule, ranking.method, ranking.timings, t0):
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
        """Whether a corpus has an index for this model and ℓc (built in the cache or shipped)."""
        return (self.index_folder(corpus) / "manifest.json").exists()

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
        estimate = tokens / TOKENS_PER_S

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
            rule: AnswerRule = ANSWER_RULE) -> dict:
        """Rank, select and answer (:meth:`ask_stream` to the end); the JSON-ready record of ``ask --json``."""
        *_, step = self.ask_stream(docs, question, n, method, rule)
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


class Loading:
    """:meth:`Explorer.load` in a background thread, so that a front end serves before the model is ready.

    What is known at once (the model id, the head file and the head itself, a few KB) is an attribute;
    :meth:`get` waits for the explorer; :meth:`status` is a one-line progress report.

    Raises
    ------
    HeadError
        At once, for a head file that is missing or damaged (nothing waits for the model to find that).
    """

    def __init__(self, model: str = DEFAULT_MODEL, head: str | None = None, device: str | None = None,
                 dtype: str | None = None, trust_remote_code: bool = False, explorer: Explorer | None = None) -> None:
        self._explorer, self._error, self._done = explorer, None, threading.Event()
        if explorer is not None:  # already in memory (tests, notebooks): a finished loading
            self.model, self.head_path, self.head = explorer.backbone.name, explorer.head_path, explorer.head
            self.stage, self.started, self.seconds = "ready", time.perf_counter(), 0.0
            self._done.set()
        else:
            self.model, self.head_path = model, head_file(model, head)
            self.head = QueryHead.load(self.head_path) if self.head_path else None  # None: untrained, made at load
            self.stage, self.started, self.seconds = "starting", time.perf_counter(), None
        self.head_source = display_path(self.head_path) if self.head_path else "untrained"
        self._args = {"model": model, "device": device, "dtype": dtype, "trust_remote_code": trust_remote_code}

    def start(self) -> Loading:
        if not self.done:
            threading.Thread(target=self._run, name="load-model", daemon=True).start()
        return self

    @classmethod
    def of(cls, explorer: Explorer) -> Loading:
        """A finished loading of an explorer already in memory (tests, notebooks)."""
        return cls(explorer=explorer)

    def _set(self, stage: str) -> None:
        self.stage = stage

    def _run(self) -> None:
        try:
            self._explorer = Explorer.build(head=self.head, head_path=self.head_path, **self._args, stage=self._set)
        except BaseException as exc:  # kept and raised again by get(): a UserError is shown as is
            self._error = exc
        self.seconds = time.perf_counter() - self.started
        self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def get(self, timeout: float | None = None) -> Explorer:
        """The loaded explorer, waiting for it; the loading's own error if it failed.

        Raises
        ------
        UserError
            When the model could not be loaded (its message), or ``timeout`` passed first.
        """
        if not self._done.wait(timeout):
            raise InputError(f"the model is still loading ({self.status()}); try again in a few seconds")
        if self._error is not None:
            raise self._error
        return self._explorer

    def status(self) -> str:
        """``"loading smollm2-135m-instruct: loading the weights … 4 s"``, ``"ready …"`` or the error."""
        if not self.done:
            return f"loading {self.model}: {self.stage} … {time.perf_counter() - self.started:.0f} s"
        if self._error is not None:
            return f"could not load {self.model}: {self._error}"
        from .core.cpu import status_line

        b = self._explorer.backbone
        cpu = f" · {status_line(b.encoding_name)}" if b.device.type == "cpu" else ""
        return f"{b.name} on {b.device} ({str(b.dtype).removeprefix('torch.')}) with head {self.head_source}, " \
               f"ready in {self.seconds:.1f} s{cpu}"


CLOSED = ("this server searches its own indexes only: opening an index folder or Qdrant store is off "
          "(UNREAL_OPEN_STORES=1 turns it on)")
FILTER_VIEWS = 8  # filtered views of Qdrant stores kept open at once (the least recently used is dropped)
OPEN_STORES = 16  # indexes, Qdrant stores and views kept open at once (the least recently used is dropped, closed)
CORPORA = {"new_wiki": "SQuAD-Shifts New-Wiki paragraphs (1,581)", "squad_dev": "SQuAD v1.1 dev paragraphs (2,067)",
           "summaries": "Wikipedia lead summaries (10,033)", "enwiki": "full enwiki articles (106)",
           "all": "all of the above (13,787 passages, 20,354 chunks)"}
"""The built-in corpora a front end opens or builds an index of (:data:`data.sources.BUILT_IN` and ``all``), each
with what it holds. :class:`Stores` refuses any other name: a corpus name becomes part of a folder's name, and
:func:`data.sources.load_corpus` would read a path given in its place."""


def check_corpus(name: object) -> str:
    """``name`` when it is one of :data:`CORPORA`.

    Raises
    ------
    InputError
        One line: ``unknown corpus '../x': the indexes are of new_wiki, squad_dev, summaries, enwiki, all``.
    """
    if not isinstance(name, str) or name not in CORPORA:
        raise InputError(f"unknown corpus {name!r}: the indexes are of {', '.join(CORPORA)}")
    return name


def open_any_default() -> bool:
    """Whether a front end lets visitors open any index folder or Qdrant store and build indexes:
    :func:`settings.open_stores <unreal_demo.settings.open_stores>` (on unless the app is public).

    Raises
    ------
    InputError
        One line: ``$UNREAL_OPEN_STORES`` is set to something other than 0 or 1.
    """
    try:
        return open_stores()
    except ValueError as exc:  # settings imports nothing from the package: its error becomes a UserError here
        raise InputError(str(exc)) from None


def _no_build(corpus: str) -> str:
    """The refusal of a build by a closed :class:`Stores` (a public app): how to build the index yourself."""
    return (f"no index of {corpus} on this server, and it builds none for visitors: build it on your own machine "
            f"with `python -m unreal_demo index build --corpus {corpus} --out DIR`, then search it with `index "
            "search --index DIR` or in the app run there (docs/CLI.md)")


def _store_key(where: str, only: Where | None = None) -> tuple[str, str, Where | None]:
    """What an opened store is kept under in :class:`Stores`: an index folder or a Qdrant Edge folder by its
    resolved path (two spellings of one folder open it once), a Qdrant server by its store string; with the payload
    filter of a view (None: the store itself)."""
    if where.startswith(EDGE):
        return EDGE, str(Path(where[len(EDGE):]).resolve()), only
    if where.startswith(SERVER):
        return SERVER, where, only
    return "index", str(Path(where).resolve()), None


def store_filter(source: str = "", title: str = "") -> Where | None:
    """The payload filter of chunks of one source and/or titles starting with a prefix (``--where source=NAME
    --where title^=PREFIX`` of ``index search``); None when both are empty."""
    source, title = (source or "").strip(), (title or "").strip()
    return Where(source=source or None, title_prefix=title or None) if source or title else None


@dataclass(frozen=True)
class StoreInfo:
    """What a front end says about an opened index or Qdrant store (:func:`store_info`).

    Attributes
    ----------
    kind : ``"index"`` (a folder), ``"qdrant-edge"`` or ``"qdrant"`` (a server).
    where : the folder, repository-relative, or a server's store string.
    encoding : an index's codec, or a Qdrant store's datatype.
    mib : size on disk (an index or a Qdrant Edge folder); None for a server.
    shipped : an index shipped with the app (under ``precomputed/``).
    only : a Qdrant store's payload filter, as ``(field, kind, value)`` terms (:meth:`store.qdrant.Where.terms`).
    ef : a Qdrant store's HNSW ef (approximate search); None for exact MaxSim.
    """

    kind: str
    where: str
    encoding: str
    chunks: int
    passages: int
    chunk_layer: int
    mib: float | None
    shipped: bool = False
    only: list[tuple[str, str, str]] | None = None
    ef: int | None = None


def store_info(store: Index | QdrantStore) -> StoreInfo:
    """The facts of an opened store that a status line shows (its size on disk is read here: once per store)."""
    m = store.manifest
    qdrant = isinstance(store, QdrantStore)
    edge = qdrant and store.spec.startswith(EDGE)
    mib = None if qdrant and not edge else sum(p.stat().st_size for p in store.folder.rglob("*") if p.is_file()) / 2**20
    if qdrant:
        return StoreInfo("qdrant-edge" if edge else "qdrant", display_path(store.folder) if edge else store.spec,
                         m["datatype"], m["chunks"], m["passages"], m["chunk_layer"], mib,
                         only=store.where.terms() if store.where is not None else None, ef=store.ef)
    return StoreInfo("index", display_path(store.folder), m["dtype"], m["chunks"], m["passages"], m["chunk_layer"],
                     mib, shipped=store.folder.is_relative_to(PRECOMPUTED))


@dataclass(frozen=True)
class Opened:
    """An opened store (:meth:`Stores.open`, :meth:`Stores.load`): the store, its key among the opened ones (kind,
    resolved folder or store string, payload filter), its :class:`StoreInfo`, and the :class:`IndexBuild` when
    :meth:`Stores.load` built or resumed it."""

    store: Index | QdrantStore
    key: tuple
    info: StoreInfo
    built: IndexBuild | None = None


class Stores:
    """The indexes and Qdrant stores a long-running front end (the Wikipedia tab) has opened, shared by every
    request: a corpus of :data:`CORPORA` -> its index (built in the cache, else shipped); a folder or store string,
    with a payload filter -> an index, a Qdrant store or a view of one.

    Each is kept under its resolved folder (two spellings of one folder open it once) or its server's store string.
    At most ``size`` are kept, of which at most ``views`` filtered views of Qdrant stores (each holds its chunks'
    texts and its own BM25): the least recently used is dropped, and a Qdrant store dropped is closed, with its
    views (an index holds nothing to close).

    No request waits on another store: a lookup or an insertion holds the shared lock for a moment; a store opens,
    and a corpus's index builds, holding only its own lock, so a build of minutes holds up no other search, and a
    second request for the same store waits for the first and gets what it opened (or built).

    ``open_any`` False (a public app) refuses any folder, store string or filter (:data:`CLOSED`) and any build
    (:meth:`load`): only the corpora's indexes already built or shipped open. None (the default) reads
    :func:`settings.open_stores <unreal_demo.settings.open_stores>` (on unless the app is public).

    Raises
    ------
    InputError
        ``open_any`` None and ``$UNREAL_OPEN_STORES`` set to something other than 0 or 1.
    """

    def __init__(self, loader: Loading, open_any: bool | None = None, views: int = FILTER_VIEWS,
                 size: int = OPEN_STORES) -> None:
        open_any = open_any_default() if open_any is None else open_any
        self.loader, self.open_any, self.views, self.size = loader, open_any, views, max(size, 2)
        self._open: OrderedDict[tuple, Opened] = OrderedDict()  # least recently used first
        self._busy: dict[tuple, list] = {}  # key -> [its own lock, requests holding or waiting for it]
        self._lock = threading.Lock()  # held only to look up, keep or drop a store: never while one opens or builds

    @contextmanager
    def _alone(self, key: tuple) -> Iterator[None]:
        """Hold ``key``'s own lock (made on first use, forgotten once no request holds or waits for it)."""
        with self._lock:
            entry = self._busy.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._busy[key]

    def building(self, corpus: str) -> bool:
        """Whether a build of ``corpus``'s index is under way (:meth:`load`)."""
        with self._lock:
            return ("build", corpus, None) in self._busy

    def _used(self, key: tuple) -> None:
        """Mark ``key`` used now, and a view's store with it (a store stays while its views are used); ``_lock``
        held."""
        store = (*key[:2], None)
        if key[2] is not None and store in self._open:
            self._open.move_to_end(store)
        self._open.move_to_end(key)

    def _cached(self, key: tuple) -> Opened | None:
        with self._lock:
            got = self._open.get(key)
            if got is not None:
                self._used(key)
            return got

    def _get(self, key: tuple, make: Callable[[], Index | QdrantStore]) -> Opened:
        """The store kept under ``key``, else ``make()``'s, opened outside the shared lock (one request per key at a
        time: one that waited gets the store the first opened) and kept."""
        if (got := self._cached(key)) is not None:
            return got
        with self._alone(key):
            if (got := self._cached(key)) is not None:  # opened while this request waited
                return got
            store = make()
            return self._keep(Opened(store, key, store_info(store)))

    def _keep(self, opened: Opened) -> Opened:
        """Keep ``opened`` as the most recently used; drop the least recently used views over ``views``, then the
        least recently used stores over ``size`` (a Qdrant store with its views, and closed)."""
        dropped = []
        with self._lock:
            self._open[opened.key] = opened
            self._used(opened.key)
            views = [k for k in self._open if k[2] is not None]
            for k in views[:-self.views]:
                del self._open[k]
            while len(self._open) > self.size:
                key, old = self._open.popitem(last=False)
                if key[2] is None:  # a store: its views share its shard or connection
                    for k in [k for k in self._open if k[:2] == key[:2]]:
                        del self._open[k]
                    dropped.append(old.store)
        for store in dropped:
            if isinstance(store, QdrantStore):
                store.close()
        return opened

    def open(self, corpus: str, where: str = "", only: Where | None = None) -> Opened:
        """The store to search: ``where`` (an index folder, ``qdrant-edge:DIR`` or ``qdrant:URL``, opened by
        :func:`store.qdrant.open_store` as ``index search`` and the evaluations open it) restricted to the payload
        filter ``only``, else the index of ``corpus`` (:meth:`Explorer.index_folder`); each opened on first use.

        Raises
        ------
        InputError
            A corpus not in :data:`CORPORA` (whatever ``where`` says).
        IndexStoreError
            :data:`CLOSED` (``open_any`` off), nothing to open there (or the corpus's index still being built), a
            store string not understood, a server not reached, or a filter asked of an index folder.
        """
        check_corpus(corpus)
        where = (where or "").strip()
        if not self.open_any and (where or only is not None):  # a public app: no visitor's path or URL is opened
            raise IndexStoreError(CLOSED)
        if only is not None and not is_spec(where):
            raise IndexStoreError("the source and title filters apply to a Qdrant store (qdrant-edge:DIR or "
                                  "qdrant:URL), not to an index folder: clear them or open a store")
        explorer = self.loader.get()
        if where:
            whole = _store_key(where)
            if only is None:
                return self._get(whole, lambda: open_store(where))
            # an Edge shard opens once per process: every filter is a view of it
            return self._get(_store_key(where, only),
                             lambda: self._get(whole, lambda: open_store(where)).store.filtered(only))
        folder = explorer.index_folder(corpus)
        try:
            return self._get(_store_key(str(folder)), lambda: Index(folder))
        except IndexStoreError:
            if self.building(corpus):
                raise IndexStoreError(f"the index of {corpus} is being built: search it once the build is "
                                      "done") from None
            raise

    def load(self, corpus: str, where: str = "", only: Where | None = None,
             progress: Callable[[BuildProgress], None] | None = None) -> Opened:
        """:meth:`open`; a corpus's own index that does not open (none yet, or a build stopped half-way) is built
        or resumed in the cache (:func:`store.index.default_folder`) with the settings it was started with
        (:meth:`Explorer.build_index`). The build holds that corpus's own lock only: other stores open and are
        searched meanwhile, and a second load of the corpus waits for it and gets the index it built (built once).
        A closed ``Stores`` (``open_any`` False) builds nothing: it refuses in one line that says how to build the
        index yourself. A folder or store named by ``where`` is only opened, never built.

        Raises
        ------
        UserError
            As :meth:`open`; :class:`IndexStoreError` for a build refused (``open_any`` off); as
            :meth:`Explorer.build_index`.
        """
        check_corpus(corpus)
        if (where or "").strip() or only is not None:
            return self.open(corpus, where, only)
        try:
            return self.open(corpus)
        except IndexStoreError:
            if not self.open_any:  # a public app: no visitor starts a build (up to 80 min of the server's CPU)
                raise IndexStoreError(_no_build(corpus)) from None
        explorer = self.loader.get()
        with self._alone(("build", corpus, None)):
            try:  # built by the load this one waited for (or by another process) meanwhile
                return self.open(corpus)
            except IndexStoreError:
                pass
            built = explorer.build_index(ix.default_folder(explorer, corpus), [corpus], as_started=True,
                                         progress=progress)
            opened = self._get(_store_key(str(built.folder)), lambda: Index(built.folder))
            return replace(opened, built=built)
