"""``index export|add|delete`` and ``index search --store``: the index in Qdrant (:mod:`store.qdrant`)."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..settings import display_path
from .common import print_hits


def run(args: argparse.Namespace) -> None:
    """``index export|add|delete``, and ``index search --store``: the index in Qdrant (:mod:`store.qdrant`)."""
    from tqdm import tqdm

    from ..pipeline import Explorer
    from ..store import index, qdrant

    where = qdrant.Where.parse(args.where or [])  # every flag is checked before a model or a store opens
    if args.action == "export":
        if not args.to or not qdrant.is_spec(args.to):
            raise InputError(f"index export needs --to {qdrant.STORE_HELP}")
        source = index.Index(args.index or index.default_index(Explorer.load(args.model, head=args.head)))
        with tqdm(desc="index export", unit="chunk", smoothing=0.05) as bar:
            manifest = qdrant.export_index(source, args.to, args.datatype, lambda d, t: (
                setattr(bar, "total", t), bar.update(d - bar.n)), hnsw=args.hnsw)
        print(json.dumps({"store": args.to, "from": display_path(source.folder)} | manifest))
        return
    if not args.store:
        what = f"index {args.action}" if args.action in ("add", "delete") else "--where and --ef search a Qdrant store:"
        raise InputError(f"{what} needs --store {qdrant.STORE_HELP}")
    if args.action == "build" or args.action == "compress":
        raise InputError(f"index {args.action} writes an index folder; --store is for search, add and delete")
    if args.action != "search" and (where is not None or args.ef is not None):
        raise InputError("--where and --ef restrict a search, not index add or delete")
    if args.action == "delete" and not (args.ids or "").strip():
        raise InputError("index delete needs --ids PASSAGE_ID[,PASSAGE_ID...]")
    if args.action == "add" and not args.passages:
        raise InputError("index add needs --passages FILE.jsonl (lines of {id, title, text})")
    with qdrant.QdrantStore(args.store, args.ef, where) as store:
        if args.action == "delete":
            ids = [x.strip() for x in args.ids.split(",") if x.strip()]
            if not (deleted := store.delete_passages(ids)):
                raise InputError(f"no chunk of passage(s) {', '.join(ids)} in {args.store}")
            print(json.dumps({"deleted_chunks": deleted, "chunks": len(store)}))
            return
        if args.action == "add":
            from ..data.sources import load_corpus

            passages = load_corpus(args.passages)
            explorer = Explorer.load(args.model, head=args.head)
            with tqdm(desc="index add", unit="chunk") as bar:
                added = qdrant.add_passages(store, explorer.backbone, passages, lambda d, t: (
                    setattr(bar, "total", t), bar.update(d - bar.n)))
            print(json.dumps({"added_chunks": len(added), "passages": len(passages), "chunks": len(store)}))
            return
        print_hits(Explorer.load(args.model, head=args.head).search(store, args.query, args.k, args.method),
                    args.json)
