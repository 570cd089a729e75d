"""The UNREAL pipeline end to end: chunk → encode (Eq. 1) → query (Eqs. 2–3) → MaxSim (Eq. 4)
→ select (Eq. 5) → answer (Eq. 7), with BM25 selection and full context beside it.

:class:`Explorer` holds one frozen backbone and one head, shared read-only by every
request; nothing per-request is stored on it except a small cache of chunk
encodings keyed by content.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import re
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
from .data.textio import check_text
from .errors import InputError, UserError
from .retrieval.evidence import group_similarities, sparse_matches
from .retrieval.registry import METHODS, all_scores, check, names
from .settings import CHUNK_TOKENS, DEFAULT_HEADS, DEFAULT_MODEL, MAX_CHARS, MAX_N, display_path
from .store.memory import MemoryStore


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


@dataclass
class AskStep:
    """One step of :meth:`Explorer.ask_stream`: the ranking, the answer so far, timings in seconds; the last
    one (``done``) says why the answer ended (``stop``, as :attr:`core.generation.Generation.stop`)."""

    ranking: Ranking
    text: str
    prompt_tokens: int
    timings: dict
    done: bool = False
    stop: str | None = None


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


def check_n(n: object, name: str = "n", high: int = MAX_N) -> int:
    """``n`` as an ``int`` when it is a whole number from 1 to ``high``: an int, a whole float (a slider's 5.0) or
    its digits as text (a command-line flag); nothing is rounded or clamped.

    Raises
    ------
    InputError
        One line saying what is wrong (``n must be a whole number from 1 to 1,000 (got 2.5)``).

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
    if whole is None or not 1 <= whole <= high:
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

    def store(self, chunks: Sequence[Chunk]) -> MemoryStore:
        """The store of these chunks, cached by content: its pooled keys ``(M, L_p, d)`` and token states
        (one forward pass at the head's ℓc), BM25 index and dense vectors are each computed on first use,
        so a second question, or a second method, on the same document costs only the query side."""
        c = self.head.config
        key = hashlib.sha1("\x00".join([str(c.chunk_layer), str(c.n_pool)] + [ch.text for ch in chunks])
                           .encode()).hexdigest()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        texts = [ch.text for ch in chunks]

        def encode(parts: list | None) -> torch.Tensor:
            tokens: list[torch.Tensor] = []
            out = encode_chunks(self.backbone, texts, c.chunk_layer, c.n_pool, c.chunk_tokens, tokens_out=tokens)
            if parts is not None:
                parts.append((torch.cat(tokens), torch.tensor([len(x) for x in tokens])))  # (ΣT_i, d), (M,)
            return out  # (M, L_p, d)

        store = MemoryStore.lazy(texts, encode)
        with self._lock:
            self._cache[key] = store
            while len(self._cache) > 8:
                self._cache.popitem(last=False)
        return store

    @torch.inference_mode()
    def rank(self, docs: Sequence[str], question: str, n: int = 5, method: str = "unreal",
             chunks: list[Chunk] | None = None) -> Ranking:
        """Score every chunk with ``method`` (:func:`retrieval.retrieve`) and select the top ``n`` in document order.

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
        return self._rank(chunks, None, question, n, method, {"chunk": time.perf_counter() - t0})

    @torch.inference_mode()
    def compare(self, docs: Sequence[str], question: str, n: int = 5, methods: Sequence[str] | None = None,
                progress: Callable[[int, str], None] | None = None) -> tuple[list[Ranking], list[str]]:
        """:meth:`rank` with each of ``methods`` (default: every method that ranks a document on its own) over the
        same chunks: the document is checked, chunked and looked up in the cache once, and encoded at most once
        (the store computes its keys and token states on first use and every method shares them).

        ``progress(j, method)`` is called before the j-th method. Returns the rankings, in the order of ``methods``,
        and one note per method that could not run (``"dense: <why>"``, e.g. the dense model cannot be fetched);
        the others still compare.

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
        store = self.store(chunks)
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
        yield from self.stream_passages([ranking.chunks[i].text for i in ranking.selected], question, rule,
                                        ranking.method)

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
        ids = prompt_ids(self.backbone, passages, question)
        if not fits_window(self.backbone, len(ids), rule.budget):
            raise InputError(f"{source}: the prompt has {len(ids):,} tokens, more than the model window "
                             f"of {self.backbone.max_positions:,} minus {rule.budget} for the answer")
        yield from stream_answer(self.backbone, ids, rule.budget, rule.first_sentence)

    def ask_stream(self, docs: Sequence[str], question: str, n: int = 5, method: str = "unreal",
                   rule: AnswerRule = ANSWER_RULE) -> Iterator[AskStep]:
        """The one orchestrator of the CLI and the UI: chunk → encode → retrieve → select, then the
        streamed answer. The first step carries the ranking and no text; every later step the answer so
        far; ``timings["first_token"]`` is set once, when the first answer token exists, and
        ``timings["total"]`` grows to the end (the last step has ``done``)."""
        t0 = time.perf_counter()
        ranking = self.rank(docs, question, n, method)
        timings = dict(ranking.timings)
        yield AskStep(ranking, "", 0, dict(timings))
        gen = Generation()
        for gen in self.stream(ranking, question, rule):
            if gen.tokens >= 1 and "first_token" not in timings:
                timings |= {"prefill": gen.timings["prefill"], "first_token": time.perf_counter() - t0}
            yield AskStep(ranking, gen.text, gen.prompt_tokens, timings | {"total": time.perf_counter() - t0})
        timings.setdefault("prefill", gen.timings.get("prefill", 0.0))
        timings.setdefault("first_token", time.perf_counter() - t0)  # an empty answer: its end
        yield AskStep(ranking, gen.text, gen.prompt_tokens, timings | {"total": time.perf_counter() - t0}, True,
                      gen.stop)

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
        cpu = f" · {status_line()}" if b.device.type == "cpu" else ""
        return f"{b.name} on {b.device} ({str(b.dtype).removeprefix('torch.')}) with head {self.head_source}, " \
               f"ready in {self.seconds:.1f} s{cpu}"
