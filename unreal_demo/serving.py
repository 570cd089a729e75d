"""Serving the :class:`pipeline.Explorer` to a long-running front end (the app): :class:`Loading` loads it in the
background, :class:`Stores` holds the indexes and Qdrant stores the front end has opened (or built) of the corpora
in :data:`CORPORA`, each opened once, shared by every request. Only ``ui/`` and ``app.py`` use it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from .core.head import QueryHead
from .errors import InputError
from .pipeline import BuildProgress, Explorer, IndexBuild, head_file
from .settings import (
    DEFAULT_HEADS,
    DEFAULT_MODEL,
    OFFLINE_MODELS,
    PRECOMPUTED,
    SECOND_MODEL,
    cache_dir,
    display_path,
    open_stores,
)
from .store import index as ix
from .store.index import Index, IndexStoreError
from .store.qdrant import EDGE, SERVER, QdrantStore, Where, is_spec, open_store

_STARTING = threading.Lock()


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
        """Start loading in a background thread (once: a second call returns at once)."""
        with _STARTING:
            if self.done or getattr(self, "_started", False):
                return self
            self._started = True
        threading.Thread(target=self._run, name="load-model", daemon=True).start()
        return self

    def head_note(self) -> str:
        """Which head this model uses: its file, else why its UNREAL scores are untrained (:func:`head_note`)."""
        return head_note(self.model, self.head_path)

    def head_warning(self) -> str | None:
        """For an offline model without its head (the second backbone while its head trains): the status line's
        warning that its UNREAL scores are untrained, with the training's progress; else None (a model of one's
        own says ``with head untrained`` in its status already)."""
        if self.head_path is not None or self.model not in OFFLINE_MODELS:
            return None
        return head_note(self.model, None).removeprefix("untrained: ")

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


def training_progress(model: str) -> str | None:
    """How far the training of ``model``'s shipped head has come, when its folder (the one
    :data:`settings.DEFAULT_HEADS` names, else ``precomputed/heads/MODEL``) holds a training log but no head
    yet: ``"training: step 120 of 250, dev R@1 0.412 at step 100"``;
    None when there is no log to read (or the head is there)."""
    folder = DEFAULT_HEADS[model].parent if model in DEFAULT_HEADS else PRECOMPUTED / "heads" / model.replace("/", "_")
    log_path = folder / "train_log.jsonl"
    if (folder / "head.json").exists() or not log_path.exists():
        return None
    try:
        log = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
        steps = json.loads((folder / "train_config.json").read_text()).get("steps") \
            if (folder / "train_config.json").exists() else None
    except (OSError, ValueError):  # a log being written: read again on the next look
        return None
    if not log:
        return None
    text = f"training: step {log[-1].get('step', len(log))}" + (f" of {steps}" if steps else "")
    dev = [r for r in log if "dev_R@1" in r]
    if dev:
        text += f", dev R@1 {dev[-1]['dev_R@1']:.3f} at step {dev[-1].get('step', '?')}"
    return text


def head_note(model: str, head_path: Path | None) -> str:
    """Which head ``model`` uses, in words: its file, else why its UNREAL scores are untrained (its shipped head
    still training, with the progress :func:`training_progress` reads, or none shipped)."""
    if head_path is not None:
        return display_path(head_path)
    if (progress := training_progress(model)) is not None:
        return f"untrained: its head is still training ({progress}), so UNREAL scores are untrained"
    if model in OFFLINE_MODELS:
        return ("untrained: its head is still training (no head shipped yet), so UNREAL scores are untrained"
                if model != DEFAULT_MODEL else "untrained: no head shipped, so UNREAL scores are untrained")
    return "untrained: no head ships for this model (give --head), so UNREAL scores are untrained"


BACKBONES = {DEFAULT_MODEL: "SmolLM2-135M-Instruct (30 blocks, d = 576)",
             SECOND_MODEL: "Qwen2.5-Coder-0.5B-Instruct (24 blocks, d = 896, 2 KV heads)"}
"""The offline models' backbones, as the About tab names them."""


def _own_index(model: str, corpus: str = "all") -> Path | None:
    """``model``'s index of ``corpus``: built in the cache, else shipped (any ℓc), else None."""
    name = model.replace("/", "_")
    for root in (cache_dir() / "indexes", PRECOMPUTED / "index"):
        for folder in sorted(root.glob(f"{name}-l*-{corpus}")):
            if re.fullmatch(rf"{re.escape(name)}-l\d+-{re.escape(corpus)}", folder.name) and \
                    (folder / "manifest.json").exists():
                return folder
    return None


def index_state(folder: Path) -> str:
    """Shipped, built, or how far its build has come (a stopped build resumes where it stopped)."""
    if folder.is_relative_to(PRECOMPUTED):
        return "shipped"
    if (state := ix.build_state(folder)) is None:
        return "damaged: build it again"
    done, total = state
    return "built" if done >= total else (f"being built: {done} of {total} shards so far; *Build or load index* in "
                                          "the Wikipedia tab resumes it")


def model_rows(models: tuple[str, ...], loaded: dict[str, Loading] | None = None) -> list[dict]:
    """One row per model for the About tab: the backbone, ℓc, the head it uses (or why its UNREAL scores are
    untrained, with its training's progress) and the index the Wikipedia tab searches for it."""
    rows = []
    for model in models:
        loading = (loaded or {}).get(model)
        path = loading.head_path if loading is not None else head_file(model)
        lc = None
        if path is not None and path.exists():
            lc = json.loads(path.read_text()).get("chunk_layer")
        elif (config := PRECOMPUTED / "heads" / model.replace("/", "_") / "train_config.json").exists():
            try:
                lc = json.loads(config.read_text()).get("chunk_layer")
            except ValueError:
                lc = None
        own = _own_index(model)
        if own is not None:
            index = f"`{display_path(own)}` ({index_state(own)})"
        else:
            other = next((o for o in OFFLINE_MODELS if o != model and _own_index(o) is not None), None)
            index = ("none yet: the Wikipedia tab searches " + (f"{other}'s index with BM25 and dense only"
                                                                  if model in OFFLINE_MODELS and other else
                                                                  "nothing until one is built"))
        note = head_note(model, path)
        rows.append({"model": model, "backbone": BACKBONES.get(model, model),
                     "ℓc": "—" if lc is None else str(lc),
                     "head": f"`{note}`" if path is not None else note, "index": index})
    return rows


class Models:
    """The models a front end serves (the app's model picker): each name -> its :class:`Loading`, made and started
    on first use, at most ``keep`` in memory (the least recently used one that is not ``first`` is dropped: a session
    that picks it again loads it again), and each session's choice.

    ``offered``: the names the picker lists (``first``, app.py --model, first; it is every new session's model);
    ``reason``: why the picker is disabled (None: a session may switch to any offered model). ``make`` turns a name
    into a :class:`Loading` (default: :class:`Loading` with ``options``); ``loadings`` are ones already made (tests).
    """

    def __init__(self, first: Loading, offered: tuple[str, ...] = (), reason: str | None = None,
                 keep: int = 2, make: Callable[[str], Loading] | None = None,
                 loadings: dict[str, Loading] | None = None, **options) -> None:
        self.first = first
        self.offered = tuple(dict.fromkeys([first.model, *offered]))
        self.reason = reason if len(self.offered) > 1 else reason or "this app serves one model"
        self.keep, self._options = max(keep, 1), options
        self._make = make or (lambda name: Loading(name, **self._options))
        self._made: OrderedDict[str, Loading] = OrderedDict({first.model: first})  # least recently used first
        self._ready = dict(loadings or {})  # made beforehand (tests): used instead of make
        self._chosen: OrderedDict[str, str] = OrderedDict()  # session -> model name (the most recent sessions)
        self._lock = threading.Lock()

    @property
    def switchable(self) -> bool:
        return self.reason is None

    def loading(self, name: str) -> Loading:
        """The loading of ``name`` (one of :attr:`offered`), made and started on first use; over ``keep`` models,
        the least recently used other than ``first`` and ``name`` is dropped.

        Raises
        ------
        InputError
            A name not offered, or the picker disabled (:attr:`reason`) for a name other than ``first``'s.
        """
        if name != self.first.model and not self.switchable:
            raise InputError(self.reason)
        if name not in self.offered:
            raise InputError(f"unknown model {name!r}: this app offers {', '.join(self.offered)}")
        with self._lock:
            got = self._made.get(name)
            if got is None:
                got = self._ready.get(name) or self._make(name)
                self._made[name] = got
            self._made.move_to_end(name)
            while len(self._made) > self.keep:
                old = next(k for k in self._made if k not in (self.first.model, name))
                del self._made[old]
        return got.start()

    def in_memory(self) -> dict[str, Loading]:
        """The models made (loading or loaded), least recently used first."""
        with self._lock:
            return dict(self._made)

    def choose(self, session: str | None, name: str) -> Loading:
        """Make ``name`` the model of ``session`` (its loading starts if need be)."""
        got = self.loading(name)
        if session is not None:
            with self._lock:
                self._chosen[session] = name
                self._chosen.move_to_end(session)
                while len(self._chosen) > 10_000:  # sessions long gone (a closed tab's is forgotten at once)
                    self._chosen.popitem(last=False)
        return got

    def chosen(self, session: str | None) -> str:
        """The model name of ``session``: its choice, else ``first``'s."""
        with self._lock:
            return self._chosen.get(session, self.first.model) if session is not None else self.first.model

    def of(self, session: str | None) -> Loading:
        """The loading of ``session``'s model (made again if it was dropped)."""
        name = self.chosen(session)
        return self.first if name == self.first.model else self.loading(name)


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


BORROWED_METHODS = ("bm25", "dense")
"""The methods that search another model's index (its texts and MiniLM vectors): the others read its states."""


def borrowed_index(explorer: Explorer, corpus: str) -> Path | None:
    """For an offline model with no index of ``corpus`` of its own (none built, none shipped: the second backbone
    until its index is built), another model's shipped index of it, whose texts BM25 and dense can search
    (:data:`BORROWED_METHODS`); None otherwise (any other model: its own index or nothing)."""
    if explorer.backbone.name not in OFFLINE_MODELS:
        return None
    for folder in sorted((PRECOMPUTED / "index").glob(f"*-{corpus}")):
        try:
            model = json.loads((folder / "manifest.json").read_text()).get("model")
        except (OSError, ValueError):
            continue
        if model != explorer.backbone.name and re.fullmatch(rf".+-l\d+-{re.escape(corpus)}", folder.name):
            return folder
    return None


def borrowed_note(held: str, model: str | None) -> str | None:
    """What a status line says of a store holding the states of model ``held`` (its manifest's; "" unknown) when the
    session's ``model`` is another (:func:`borrowed_index`): only BM25 and dense can search it; else None."""
    if not held or not model or held == model:
        return None
    return (f"no UNREAL index for {model} yet; BM25/dense only (over the texts of {held}'s index; *Build or load "
            f"index* builds {model}'s own, or `python -m unreal_demo index build --model {model} --corpus all`)")


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
    model : the model whose states it holds (its manifest's), "" when it does not say.
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
    model: str = ""


def store_info(store: Index | QdrantStore) -> StoreInfo:
    """The facts of an opened store that a status line shows (its size on disk is read here: once per store)."""
    m = store.manifest
    qdrant = isinstance(store, QdrantStore)
    edge = qdrant and store.spec.startswith(EDGE)
    mib = None if qdrant and not edge else sum(p.stat().st_size for p in store.folder.rglob("*") if p.is_file()) / 2**20
    if qdrant:
        return StoreInfo("qdrant-edge" if edge else "qdrant", display_path(store.folder) if edge else store.spec,
                         m["datatype"], m["chunks"], m["passages"], m["chunk_layer"], mib,
                         only=store.where.terms() if store.where is not None else None, ef=store.ef,
                         model=m.get("model", ""))
    return StoreInfo("index", display_path(store.folder), m["dtype"], m["chunks"], m["passages"], m["chunk_layer"],
                     mib, shipped=store.folder.is_relative_to(PRECOMPUTED), model=m.get("model", ""))


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

    def open(self, corpus: str, where: str = "", only: Where | None = None, borrow: bool = True) -> Opened:
        """The store to search: ``where`` (an index folder, ``qdrant-edge:DIR`` or ``qdrant:URL``, opened by
        :func:`store.qdrant.open_store` as ``index search`` and the evaluations open it) restricted to the payload
        filter ``only``, else the index of ``corpus`` (:meth:`Explorer.index_folder`); each opened on first use.
        With ``borrow``, an offline model whose own index is not whole (none, or a build stopped half way) searches
        another model's shipped index instead (:func:`borrowed_index`, BM25 and dense only).

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
        if borrow and not explorer.index_ready(corpus) and not self.building(corpus):
            folder = borrowed_index(explorer, corpus) or folder
        try:
            return self._get(_store_key(str(folder)), lambda: Index(folder))
        except IndexStoreError:
            if self.building(corpus):
                raise IndexStoreError(f"the index of {corpus} is being built: search it once the build is "
                                      "done") from None
            raise

    def load(self, corpus: str, where: str = "", only: Where | None = None,
             progress: Callable[[BuildProgress], None] | None = None) -> Opened:
        """:meth:`open` of the corpus's own index (never borrowed); one that does not open (none yet, or a build
        stopped half-way) is built or resumed in the cache (:func:`store.index.default_folder`) with the
        settings it was started with (:meth:`Explorer.build_index`). The build holds that corpus's own lock
        only: other stores open and are searched meanwhile, and a second load of the corpus waits for it and
        gets the index it built (built once). A closed ``Stores`` (``open_any`` False) builds nothing: it
        refuses in one line that says how to build the index yourself. A folder or store named by ``where`` is
        only opened, never built.

        Raises
        ------
        UserError
            As :meth:`open`; :class:`IndexStoreError` for a build refused (``open_any`` off); as
            :meth:`Explorer.build_index`.
        """
        check_corpus(corpus)
        if (where or "").strip() or only is not None:
            return self.open(corpus, where, only)
        try:  # its own index, never another model's: a load builds what a search would borrow
            return self.open(corpus, borrow=False)
        except IndexStoreError:
            if not self.open_any:  # a public app: no visitor starts a build (up to 80 min of the server's CPU)
                raise IndexStoreError(_no_build(corpus)) from None
        explorer = self.loader.get()
        with self._alone(("build", corpus, None)):
            try:  # built by the load this one waited for (or by another process) meanwhile
                return self.open(corpus, borrow=False)
            except IndexStoreError:
                pass
            built = explorer.build_index(ix.default_folder(explorer, corpus), [corpus], as_started=True,
                                         progress=progress)
            opened = self._get(_store_key(str(built.folder)), lambda: Index(built.folder))
            return replace(opened, built=built)
