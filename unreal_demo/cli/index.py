"""``python -m unreal_demo index``: build, search or compress a sharded corpus index; export it to Qdrant, add or
delete passages there."""

from __future__ import annotations

import argparse
import json

from ..core.codec import CODECS, DENSE_CODECS
from ..errors import InputError
from ..retrieval import registry as retrieval
from ..store.qdrant import DATATYPES, STORE_HELP
from . import qdrant
from .common import model_flags, print_hits


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``index`` command and its flags."""
    ix = sub.add_parser("index", help="build, search or compress a sharded corpus index; export it to Qdrant, "
                        "add or delete passages there")
    ix.add_argument("action", choices=["build", "search", "compress", "export", "add", "delete"])
    ix.add_argument("--out", help="index folder to build or to compress into")
    ix.add_argument("--from", dest="source", help="compress: the built index to compress (nothing is re-encoded)")
    ix.add_argument("--codec", choices=list(CODECS), default="fp16",
                    help="key codec: fp16 | int8 | sq4 (4-bit per dimension) | pq2 (product quantisation, "
                         "2 bits per dimension) | rpq2 / rpq3 (k-means centroid + residual product-quantised at "
                         "2 / 2.7 bits per dimension) | res3 / res2 / res1 (k-means centroid + 3 / 2 / 1-bit residual "
                         "per dimension)")
    ix.add_argument("--centroids", type=int, default=4096, help="rpq*/res*: k-means centroids")
    ix.add_argument("--dense-codec", choices=list(DENSE_CODECS), default="int8",
                    help="a compressed index's MiniLM vectors: int8 (386 B) or pq2 (product quantised, 96 B)")
    ix.add_argument("--corpus", nargs="+", default=["all"],
                    help="new_wiki | squad_dev | summaries | enwiki | all | a JSONL of {id, title, text}")
    ix.add_argument("--shard-size", type=int, default=1024, help="chunks per shard (the unit of resume)")
    ix.add_argument("--chunk-layer", type=int, default=None, help="ℓc (default: the head's)")
    ix.add_argument("--n-pool", type=int, default=None, help="L_p (default: the head's)")
    ix.add_argument("--token-states", action="store_true", help="also store token states (method sparse)")
    ix.add_argument("--dense", action=argparse.BooleanOptionalAction, default=True,
                    help="also store MiniLM embeddings (method dense)")
    ix.add_argument("--cpu", action="store_true", help="keep every process on the CPU under accelerate launch")
    ix.add_argument("--index", help="index folder to search or export (default: the built or shipped index of "
                    "corpus all)")
    ix.add_argument("--to", help=f"export: the Qdrant store to write, {STORE_HELP}; a killed export resumes")
    ix.add_argument("--store", help=f"search, add, delete: a Qdrant store instead of an index folder, {STORE_HELP}")
    ix.add_argument("--where", action="append", help="search a Qdrant store: only chunks with source=NAME, "
                    "title=TITLE or title^=PREFIX (a payload filter; repeat it for all of them)")
    ix.add_argument("--ef", type=int, default=None, help="search a Qdrant store with its HNSW index at this ef "
                    "(approximate) instead of exactly")
    ix.add_argument("--datatype", choices=list(DATATYPES), default="float32",
                    help="export: how Qdrant stores the keys and MiniLM vectors")
    ix.add_argument("--hnsw", action="store_true", help="export: build Qdrant Edge's HNSW graphs after the points "
                    "are in (for --ef; a server builds its own)")
    ix.add_argument("--passages", nargs="+", help="add: JSONL files of {id, title, text} passages")
    ix.add_argument("--ids", help="delete: passage ids, comma-separated")
    ix.add_argument("--query")
    ix.add_argument("--k", type=int, default=10)
    ix.add_argument("--method", choices=retrieval.names("index") + list(retrieval.ALIASES)[:1], default="unreal",
                    help=retrieval.help_text("index"))
    ix.add_argument("--json", action="store_true")
    model_flags(ix)
    ix.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """Build, compress or search an index folder; the Qdrant actions go to :func:`qdrant.run`."""
    from ..pipeline import BuildProgress, Explorer, check_search
    from ..store import index

    if args.action == "search":  # the tab's check of a query and k; --k has no upper bound
        args.k = check_search(args.query or "", args.k, high=None, name="--k")
    elif args.k < 1:
        raise InputError("--k must be at least 1")
    if args.action in ("export", "add", "delete") or args.store or args.where or args.ef is not None:
        qdrant.run(args)
        return
    if args.action in ("build", "compress") and not args.out:
        raise InputError(f"index {args.action} needs --out DIR")
    if args.action == "compress":
        if not args.source:
            raise InputError("index compress needs --from DIR")
        manifest = index.compress_index(args.source, args.out, args.codec, args.centroids,
                                        dense_codec=args.dense_codec)
        print(json.dumps({k: v for k, v in manifest.items() if k != "shards"} | {"shards": len(manifest["shards"])}))
        return
    if args.action == "build":
        from accelerate import PartialState
        from tqdm import tqdm

        state = PartialState(cpu=args.cpu)  # under accelerate launch: this process's rank and device
        explorer = Explorer.load(args.model, head=args.head, device=str(state.device))
        bars = []  # one bar, opened once the corpus is read

        def shown(p: BuildProgress) -> None:
            if not bars:
                bars.append(tqdm(desc=f"index build (process {state.process_index + 1}/{state.num_processes})",
                                 unit="chunk", disable=not state.is_main_process, smoothing=0.05))
            if p.total:
                bars[0].total = p.total
                bars[0].update(p.done - bars[0].n)

        built = explorer.build_index(args.out, args.corpus, args.codec, args.shard_size, args.chunk_layer,
                                     args.n_pool, args.token_states, args.dense, args.centroids, args.dense_codec,
                                     progress=shown, state=state)
        for bar in bars:
            bar.close()
        if state.is_main_process:
            summary = {k: v for k, v in built.manifest.items() if k != "shards"}
            print(json.dumps(summary | {"shards": len(built.manifest["shards"])}))
        return
    explorer = Explorer.load(args.model, head=args.head)
    print_hits(explorer.search(index.Index(args.index or explorer.index_folder()), args.query, args.k, args.method),
                args.json)
