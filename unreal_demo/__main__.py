"""Command line: ``python -m unreal_demo ask|train|eval|rank ...``.

Every error exits non-zero with one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from .core.codec import CODECS, DENSE_CODECS
from .core.generation import ANSWER_RULE, AnswerRule, complete
from .errors import InputError, UserError
from .retrieval import registry as retrieval
from .settings import CHUNK_TOKENS, DEFAULT_HEADS, DEFAULT_MODEL, display_path
from .store.qdrant import DATATYPES, STORE_HELP


def _ask(args: argparse.Namespace) -> None:
    from .data.textio import read_document
    from .pipeline import Explorer, check_inputs, check_n

    docs = [read_document(p) for p in args.doc]
    check_inputs(docs, args.question)  # before the model loads
    n = check_n(args.n, "--n")
    explorer = Explorer.load(args.model, head=args.head, device=args.device, dtype=args.dtype,
                             trust_remote_code=args.trust_remote_code)
    rule = AnswerRule(args.max_new_tokens, first_sentence=not args.whole_answer)
    result = explorer.ask(docs, args.question, n, args.method, rule)
    if args.json:
        print(json.dumps(result))
        return
    for notice in result["notices"]:
        print(f"note: {notice}", file=sys.stderr)
    print(f"selected chunks (document order): {result['selected']}")
    print(f"answer ({result['model']}; {rule.limit}): {result['answer']}")
    if result["answer_stop"] == "budget" and not complete(result["answer"]):
        print(f"note: the answer reached the {rule.budget}-token limit before its sentence ended", file=sys.stderr)
    print("timings (s): " + ", ".join(f"{k} {v:.3f}" for k, v in result["timings"].items()))


def _train(args: argparse.Namespace) -> None:
    from .core.training import TrainConfig, train

    overrides = {k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__ and v is not None}
    head = train(TrainConfig(**overrides), force=args.force)
    print(f"trained head written to {display_path(head.config.provenance['settings']['out'])}: "
          f"{head.n_params():,} parameters, final loss {head.config.provenance['final_loss']}")


def _servable(ix, explorer, methods: list[str], explicit: bool) -> list[str]:
    """``methods`` the index (and the head) can serve, checked before any work: a method asked for by name
    that cannot be served is an error; one from the default list is left out with a note."""
    from .evaluation.retrieval import fusion_weight

    try:
        fusion_weight(explorer, methods)
    except UserError as why:
        if explicit:
            raise InputError(str(why)) from None
        print(f"note: {why}; hybrid-fusion left out", file=sys.stderr)
        methods = [m for m in methods if m != "hybrid-fusion"]
    missing = retrieval.unsupported(ix, methods)
    if not missing:
        return methods
    flags = " ".join(sorted(set(missing.values())))
    if explicit:
        raise InputError(f"{display_path(ix.folder)} cannot serve {', '.join(missing)}: rebuild it with "
                         f"`index build {flags}` or leave it out")
    print(f"note: {display_path(ix.folder)} has no data for {', '.join(missing)} (built without {flags}); "
          "left out", file=sys.stderr)
    return [m for m in methods if m not in missing]


def _ints(text: str, flag: str) -> list[int]:
    """A comma list of whole numbers ≥ 1 (``--k 1,3,5,10``), or a clear message."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"{flag} takes whole numbers separated by commas, e.g. 1,3,5,10 (got {text!r})") from None
    if min(values) < 1:
        raise InputError(f"{flag} must be at least 1 (got {text})")
    return values


def _eval(args: argparse.Namespace) -> None:
    ks = _ints(args.k, "--k")
    if args.sample < 1 or args.steps < 1:
        raise InputError("--sample and --steps must be at least 1")
    if args.what == "ablations":
        from .evaluation.ablation import run_ablations

        result = run_ablations(args.steps, args.sample, args.out or "precomputed/ablations.json",
                               args.only.split(",") if args.only else None, args.seed, args.sweep or "squad-l20")
        print(json.dumps(result) if args.json else result["markdown"])
        return
    if args.what == "heads":
        from .evaluation.ablation import compare_heads

        result = compare_heads(args.head.split(",") if args.head else [], args.sample,
                               args.sweep or "mix-l25", args.seed, args.out, args.save_fusion)
        print(json.dumps(result) if args.json else result["markdown"] + f"\nchosen: {result['chosen']}")
        return
    if args.what == "prompt":
        from tqdm import tqdm

        from .evaluation.prompts import check_prompts, run_prompt_choice
        from .pipeline import Explorer

        prompts = check_prompts(args.methods.split(",") if args.methods else None)  # before the model loads
        budgets = _ints(args.budgets, "--budgets") if args.budgets else [ANSWER_RULE.budget]
        explorer = Explorer.load(args.model, head=args.head, dtype=args.dtype)
        bar = tqdm(unit="question")
        result = run_prompt_choice(explorer, args.sample, prompts,
                                   args.seed, args.out, progress=lambda m, d, t: (
                                       bar.set_description(f"prompt {m}"), setattr(bar, "total", t),
                                       bar.update(d - bar.n)), budgets=budgets)
        bar.close()
        print(json.dumps(result) if args.json else result["markdown"] +
              f"\nchosen: {result['chosen']}, {AnswerRule(**result['chosen_rule']).name}")
        return
    if args.what == "intrinsic":
        from .evaluation.intrinsic import run_intrinsic_eval
        from .pipeline import Explorer

        explorer = Explorer.load(args.model, head=args.head, dtype=args.dtype)
        result = run_intrinsic_eval(explorer, args.sample, args.seed, args.out)
        print(json.dumps(result) if args.json else json.dumps(result["references"]))
        return
    if args.what == "qa":
        from tqdm import tqdm

        from .evaluation.qa import BOUNDS, run_qa_eval
        from .pipeline import Explorer
        from .store import index
        from .store.qdrant import open_store

        methods = retrieval.check(args.methods.split(",") if args.methods else [*BOUNDS, *retrieval.names("index")],
                                  "index", BOUNDS)
        explorer = Explorer.load(args.model, head=args.head, require_head=True, dtype=args.dtype)
        ix = open_store(args.index or index.default_index(explorer))
        methods = _servable(ix, explorer, methods, bool(args.methods))
        bar = tqdm(unit="question")
        result = run_qa_eval(explorer, ix, args.sample, methods, ks, args.seed,
                             args.out, progress=lambda m, d, t: (bar.set_description(f"qa {m}"),
                                                                 setattr(bar, "total", t), bar.update(d - bar.n)))
        bar.close()
        print(json.dumps(result) if args.json else result["markdown"])
        return
    if args.corpus == "index":
        from .evaluation.retrieval import run_index_retrieval_eval
        from .pipeline import Explorer
        from .store import index
        from .store.qdrant import open_store

        methods = retrieval.check(args.methods.split(",") if args.methods else retrieval.names("index"), "index")
        explorer = Explorer.load(args.model, head=args.head, require_head=True, dtype=args.dtype)
        ix = open_store(args.index or index.default_index(explorer))
        methods = _servable(ix, explorer, methods, bool(args.methods))
        result = run_index_retrieval_eval(explorer, ix, args.sample, methods, args.seed, args.out)
        print(json.dumps(result) if args.json else result["markdown"])
        return
    from .evaluation.retrieval import run_retrieval_eval

    methods = retrieval.check(args.methods.split(",") if args.methods else retrieval.names("corpus"), "corpus")
    result = run_retrieval_eval(args.sample, methods, head=args.head, model=args.model,
                                out=args.out, seed=args.seed, corpus_name=args.corpus)
    if args.json:
        print(json.dumps(result))
    else:
        print(result["markdown"])


def _bench(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from .evaluation.longcontext.contexts import parse_lengths
    from .evaluation.longcontext.run import parse_shard, refuse_answering, run_benchmark
    from .evaluation.qa import BOUNDS
    from .pipeline import Explorer

    try:
        lengths, ns = parse_lengths(args.lengths), [int(x) for x in args.n.split(",")]
    except ValueError as exc:
        raise InputError(f"--lengths/--n: {exc}") from None
    chosen = args.methods or ("unreal,bm25" if args.evidence_only else "unreal,bm25,full")
    methods = retrieval.check(chosen.split(","), "document", BOUNDS)
    refuse_answering(methods, not args.evidence_only)
    if bad := [n for n in ns if n < 1]:
        raise InputError(f"--n must be at least 1: {bad}")
    if args.sample < 1:
        raise InputError("--sample must be at least 1")
    shard = parse_shard(args.shard, args.out)
    explorer = Explorer.load(args.model, head=args.head, dtype=args.dtype)
    with tqdm(total=1000, bar_format="{desc}{percentage:3.0f}% |{bar}| [{elapsed}<{remaining}]") as bar:
        result = run_benchmark(explorer, args.sample, lengths, ns, methods, args.seed, args.out, args.distractors,
                               progress=lambda f, text: (bar.set_description(text),
                                                         bar.update(round(1000 * f) - bar.n)), shard=shard,
                               answer=not args.evidence_only)
    print(json.dumps(result) if args.json else result["markdown"])


def _adapter(args: argparse.Namespace) -> None:
    from .evaluation.adapter_run import GRID, run

    head = args.head or str(DEFAULT_HEADS[DEFAULT_MODEL].with_suffix(".json"))
    if args.n_context is not None and not 0 <= args.n_context <= 16:
        raise UserError(f"--n-context is |C0|, from 0 to 16 passages, not {args.n_context}")
    if not args.joint and (args.positives != "cleaner" or args.distil or args.teacher_fusion is not None
                           or args.seed or args.groups is not None or args.adapter_rank is not None):
        raise UserError("--positives, --distil, --teacher-fusion, --seed, --groups and --adapter-rank belong to "
                        "--joint runs")
    if args.judged and (args.joint or args.centring_check or args.dev != "dpr"):
        raise UserError("--judged runs alone: not with --joint, --centring-check or --dev")
    if args.groups_check is not None:
        try:
            groups = [int(g) for g in args.groups_check.split(",")]
        except ValueError:
            raise UserError(f"--groups-check takes comma-separated whole numbers, not {args.groups_check!r}") from None
        if (args.joint or args.judged or args.centring_check or args.average or args.save or args.n_context is not None
                or args.dev != "dpr" or args.side != "dev" or not all(g >= 1 for g in groups)):
            raise UserError("--groups-check takes numbers of query vectors of at least 1 and runs alone on the judged "
                            "dev sets (not with --joint, --judged, --centring-check, --average, --save, --n-context, "
                            "--dev or --side)")
        from .evaluation.groups_check import run as groups_check

        print(groups_check(head, groups, args.out)["markdown"])  # a bad head or G: refused before the model loads
        return
    if args.average:
        from .evaluation.joint_run import run_average

        paths = [p.strip() for p in args.average.split(",") if p.strip()]
        if len(paths) < 2 or args.joint or args.judged or args.centring_check or args.head:
            raise UserError("--average takes two or more comma-separated heads and runs alone (not with --head, "
                            "--joint, --judged or --centring-check)")
        print(run_average(paths, args.out, args.save, args.dev)["markdown"])
        return
    if args.joint:
        from .core.joint_training import JointConfig
        from .evaluation.joint_run import run_joint

        if args.steps < 1 or args.batch < 1 or (args.patience is not None and args.patience < 1):
            raise UserError("--steps, --batch and --patience must be at least 1")
        if not math.isfinite(args.distil) or args.distil < 0:
            raise UserError(f"--distil is a loss weight, a finite number of at least 0, not {args.distil}")
        if args.teacher_fusion is not None and not (0 <= args.teacher_fusion <= 1 and args.distil):
            raise UserError("--teacher-fusion is a score-fusion weight from 0 to 1 and needs --distil")
        if args.r10_within is not None and not 0 <= args.r10_within <= 1:
            raise UserError("--r10-within is a recall difference from 0 to 1")
        cfg = JointConfig(steps=args.steps, batch=args.batch, lr_rho=args.lr_rho, lr=args.lr,
                          r10_within=args.r10_within, distil=args.distil, teacher_fusion=args.teacher_fusion,
                          seed=args.seed,
                          **({} if args.patience is None else {"patience": args.patience}))
        if (args.groups is not None and args.groups < 1) or (args.adapter_rank is not None and args.adapter_rank < 1):
            raise UserError("--groups and --adapter-rank must be at least 1")
        widen = {k: v for k, v in (("n_groups", args.groups), ("adapter_rank", args.adapter_rank)) if v is not None}
        result = run_joint(head, cfg, args.out, args.save, train_c0=args.train_c0, keep=args.keep,
                           n_context=args.n_context, positives=args.positives, dev=args.dev, widen=widen)
        print(result["markdown"])
        return
    if args.judged:
        _judged_dev(args)
        return
    if args.centring_check:
        from .evaluation.centring_check import run as centring_check

        result = centring_check(head, args.out)
        for row in result["rows"] + result["reference"]:
            print(f"{row['variant']} ({row.get('keys', '')}): "
                  + ", ".join(f"{k} {v}" for k, v in row.items() if "R@" in k))
        return
    labels = [x.strip() for x in args.variants.split(";")] if args.variants else None
    unknown = [x for x in labels or [] if x not in GRID]
    if unknown:
        raise UserError(f"unknown variant {unknown[0]!r}; known: {'; '.join(GRID)}")
    result = run(head, args.n_context, labels, args.steps, args.out, args.save, args.save_variant, args.dev)
    for row in result["rows"] + result["reference"]:
        print(f"{row['variant']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if "R@" in k))


def _judged_dev(args: argparse.Namespace) -> None:
    from pathlib import Path

    from .evaluation import judged_dev

    if args.judged == "candidates":
        print(f"candidates to read: {judged_dev.write_candidates(args.side)}")
    elif args.judged == "collect":
        if not args.verdicts or not args.judged_by:
            raise UserError("collect needs --verdicts FILE… (the read verdicts) and --judged-by (who read them)")
        missing = [f for f in args.verdicts if not Path(f).is_file()]
        if missing:
            raise InputError(f"no verdict file {missing[0]}")
        if not judged_dev.candidates_path(args.side).is_file():
            raise InputError(f"no candidates to collect verdicts for: run `adapter --judged candidates --side "
                             f"{args.side}` first")
        try:
            judged = judged_dev.collect(judged_dev.candidates_path(args.side), args.verdicts, args.judged_by,
                                        judged_dev.judged_path(args.side))
        except ValueError as e:
            raise InputError(str(e)) from e
        print(f"{len(judged['questions'])} questions judged → {display_path(judged_dev.judged_path(args.side))}")
    elif args.side == "train":
        raise UserError("score: the judged set is scored on its dev side or on the more side (held out from every "
                        "head but a judged-more run), not on the train side the heads learnt from")
    else:
        result = judged_dev.run(args.out, args.side)
        for row in result["reference"] + result["rows"]:
            print(f"{row['variant']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "variant"))


def _rank(args: argparse.Namespace) -> None:
    from .evaluation.retrieval import rank_jsonl

    if args.k < 1:
        raise InputError("--k must be at least 1")
    print(json.dumps(rank_jsonl(args.passages, args.queries, args.method, args.k, args.model, args.head)))


def _flops(args: argparse.Namespace) -> None:
    from .evaluation.flops import Setting, report, resolve_backbone

    head = None
    if args.backbone in DEFAULT_HEADS:  # the default model: start from its shipped head's R, |C0|, ℓc
        head = json.loads(DEFAULT_HEADS[args.backbone].with_suffix(".json").read_text())
    paper = {"n_context": 5, "n_ret": 64}  # Table 6's setting for the paper's backbones
    n_context, n_ret = (args.n_context if args.n_context is not None else (head or paper)["n_context"],
                        args.n_ret if args.n_ret is not None else (head or paper)["n_ret"])
    spec = resolve_backbone(args.config or args.backbone, args.chunk_layer or (head or {}).get("chunk_layer"))
    setting = Setting(n=args.n, T=args.T, n_context=n_context, n_ret=n_ret, x_ret=args.x_ret)
    out = report(spec, setting)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{spec.name}: N* (Eq. 10) = {out['n_star']:,.0f} tokens; root of Eq. 8 = {out['n_star_numeric']:,.0f}")
        print("inputs: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in out["inputs"].items()))


def _index(args: argparse.Namespace) -> None:
    from .pipeline import BuildProgress, Explorer, check_search
    from .store import index

    if args.action == "search":  # the tab's check of a query and k; --k has no upper bound
        args.k = check_search(args.query or "", args.k, high=None, name="--k")
    elif args.k < 1:
        raise InputError("--k must be at least 1")
    if args.action in ("export", "add", "delete") or args.store or args.where or args.ef is not None:
        _qdrant(args)
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
    _print_hits(explorer.search(index.Index(args.index or explorer.index_folder()), args.query, args.k, args.method),
                args.json)


def _qdrant(args: argparse.Namespace) -> None:
    """``index export|add|delete``, and ``index search --store``: the index in Qdrant (:mod:`store.qdrant`)."""
    from tqdm import tqdm

    from .pipeline import Explorer
    from .store import index, qdrant

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
            from .data.sources import load_corpus

            passages = load_corpus(args.passages)
            explorer = Explorer.load(args.model, head=args.head)
            with tqdm(desc="index add", unit="chunk") as bar:
                added = qdrant.add_passages(store, explorer.backbone, passages, lambda d, t: (
                    setattr(bar, "total", t), bar.update(d - bar.n)))
            print(json.dumps({"added_chunks": len(added), "passages": len(passages), "chunks": len(store)}))
            return
        _print_hits(Explorer.load(args.model, head=args.head).search(store, args.query, args.k, args.method),
                    args.json)


def _print_hits(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    for h in result["hits"]:
        print(f"{h['rank']:>3}  {h['score']:8.4f}  {h['title'][:40]:<40}  {' '.join(h['text'].split()[:14])}")
    print("timings (s): " + ", ".join(f"{k} {v:.4f}" for k, v in result["timings"].items()))


def _data(args: argparse.Namespace) -> None:
    import time

    from tqdm import tqdm

    from .data.sources import SOURCES, fetch_sources, source_status

    if args.action == "list":
        rows = [source_status(name) for name in SOURCES]
        if args.json:
            print(json.dumps(rows, indent=2))
            return
        for r in rows:
            state = f"cached, {r['bytes on disk'] / 2**20:7.1f} MiB" if r["cached"] else "not cached"
            print(f"{r['source']:<10} {r['used for']:<36} {state:<22} {r['licence']}\n{'':<11}{r['what']}")
        return
    names = list(SOURCES) if args.all else args.names
    if not names:
        raise InputError("name the sources to fetch (see `data list`) or give --all")
    unknown = [n for n in names if n not in SOURCES]
    if unknown:
        raise InputError(f"unknown source(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    by_archive: dict[str, list[str]] = {}
    for name in names:
        by_archive.setdefault(SOURCES[name].filename, []).append(name)
    for filename, group in by_archive.items():
        archive = SOURCES[group[0]].archive
        had = archive.exists() or all(SOURCES[n].path.exists() for n in group)
        with tqdm(desc=filename[:40], unit="B", unit_scale=True, unit_divisor=1024, leave=False) as bar:
            def progress(done: int, total: int, seconds: float, bar: tqdm = bar) -> None:
                bar.total = total or None
                bar.update(done - bar.n)

            start = time.time()
            fetch_sources(group, progress)
        got = archive.stat().st_size if archive.exists() else 0
        how = "cached" if had else f"fetched {got / 2**20:.1f} MiB"
        for name in group:
            st = source_status(name)
            print(f"{name:<10} ok  {st['bytes on disk'] / 2**20:8.1f} MiB on disk  ({how} from {filename}, "
                  f"{time.time() - start:.1f} s, SHA-256 checked)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m unreal_demo", description="UNREAL Explorer")
    sub = parser.add_subparsers(dest="command", required=True)

    def model_flags(p: argparse.ArgumentParser, dtype: bool = False) -> None:
        p.add_argument("--model", default=DEFAULT_MODEL, help="offline default, a Hugging Face id, or a folder")
        p.add_argument("--head", default=None, help="head path (NAME.json/.safetensors); default: shipped head")
        if dtype:
            p.add_argument("--dtype", default=None, help="fp32 | bf16 | fp16 (default: $UNREAL_DTYPE, else bf16 on "
                           "CUDA, else the CPU's choice: fp32 unless it has AMX/AVX-512-BF16 and bf16 passed "
                           "benchmarks/encode_fidelity.py); cached encodings and answers are kept per dtype")

    ask = sub.add_parser("ask", help="select evidence from documents and answer a question")
    ask.add_argument("--doc", action="append", required=True, help="a .txt/.md document (repeatable)")
    ask.add_argument("--question", required=True)
    ask.add_argument("--n", default="5", help="chunks to select (a whole number from 1)")  # checked by check_n
    ask.add_argument("--method", choices=retrieval.names("document"), default="unreal",
                     help=retrieval.help_text("document"))
    ask.add_argument("--max-new-tokens", type=int, default=ANSWER_RULE.budget, help="answer budget in tokens")
    ask.add_argument("--whole-answer", action="store_true", help="decode to the budget instead of stopping at "
                     "the end of the first sentence (the evaluated rule)")
    ask.add_argument("--device", default=None)
    ask.add_argument("--dtype", default=None, help="fp32 | bf16 | fp16")
    ask.add_argument("--trust-remote-code", action="store_true")
    ask.add_argument("--json", action="store_true")
    model_flags(ask)
    ask.set_defaults(func=_ask)

    tr = sub.add_parser("train", help="train a query head (Eq. 6) on SQuAD v1.1 dev")
    for name in ("out", "model"):
        tr.add_argument(f"--{name}")
    tr.add_argument("--sources", help="comma list of training sources (default squad_dev; also nyt, reddit, vitaminc); "
                    "new_wiki and amazon are held out")
    tr.add_argument("--readout", help='blocks α reads: "all" (default), "chunk" (ℓc only) or e.g. "16,20,24"')
    for name in ("chunk_layer", "n_pool", "n_ret", "n_groups", "n_context", "context_tokens", "negatives",
                 "mined", "mine_every", "steps", "batch", "warmup", "seed", "checkpoint_every", "dev_every",
                 "dev_sample"):
        tr.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int)
    for name in ("lr", "temperature", "weight_decay"):
        tr.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float)
    tr.add_argument("--force", action="store_true", help="train over a shipped head in --out")
    tr.add_argument("--use-prompt", dest="use_prompt", action="store_true", default=None,
                    help="learn the soft prompt P (full backprop through the prefix, ~3x slower)")
    tr.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="held-out evaluation on SQuAD-Shifts New-Wiki")
    ev.add_argument("what", choices=["retrieval", "intrinsic", "ablations", "heads", "qa", "prompt"],
                    help="prompt: the answering prompts on SQuAD dev questions with their gold paragraph "
                         "(--methods names the prompts); heads: the heads of --head (a comma list of head files, "
                         "or run folders for their last checkpoint) on a sweep's dev split, to choose the one that "
                         "ships")
    ev.add_argument("--sample", type=int, default=500, help="number of held-out questions")
    ev.add_argument("--methods", default=None, help=f"retrieval: {','.join(retrieval.names('corpus'))} "
                    f"(--corpus index: {','.join(retrieval.names('index'))}); qa: none,oracle,"
                    f"{','.join(retrieval.names('index'))} (default all)")
    ev.add_argument("--k", default="5", help="qa: chunks retrieved per question, a comma list (1,3,5,10)")
    ev.add_argument("--budgets", default=None, help="prompt: answer budgets in new tokens, a comma list "
                    "(16,24,32,48); each is a greedy prefix of the longest (default: the evaluations' budget)")
    ev.add_argument("--index", default=None, help="qa, retrieval --corpus index: index folder (default: the "
                    "full offline index)")
    ev.add_argument("--out", default=None, help="write the JSON result here")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--corpus", choices=["full", "new_wiki", "amazon", "index"], default="full",
                    help="retrieval: New-Wiki + 10,033 summaries (full), the New-Wiki paragraphs alone, Amazon's "
                         "questions over its 2,050 reviews (out of domain), or the chunks of a built index "
                         "(--index, default the full offline index)")
    ev.add_argument("--steps", type=int, default=60, help="ablations: training steps per variant")
    ev.add_argument("--only", default=None, help="ablations: comma list of name fragments to run")
    ev.add_argument("--sweep", default=None, help="ablations: squad-l20 (the first sweep, SQuAD dev; default) or "
                    "mix-l25 (around the long run: |C0|, P, head-mined negatives, τ, lr, ℓc 26-28); heads: whose "
                    "dev split scores the heads (default mix-l25)")
    ev.add_argument("--save-fusion", action="store_true", help="heads: write each head's dev-fitted score-fusion "
                    "weight into its JSON (what hybrid-fusion uses)")
    ev.add_argument("--json", action="store_true")
    model_flags(ev, dtype=True)
    ev.set_defaults(func=_eval)

    fl = sub.add_parser("flops", help="break-even context length of UNREAL vs full context (Eqs. 8-10)")
    group = fl.add_mutually_exclusive_group(required=True)
    group.add_argument("--backbone", help="muse | nemotron | qwen | a model id or folder")
    group.add_argument("--config", help="a transformers config.json")
    fl.add_argument("--n", type=int, default=5)
    fl.add_argument("--T", type=int, default=CHUNK_TOKENS)
    fl.add_argument("--n-context", type=int, default=None, help="|C0| (default: the default model's shipped head, "
                    "else the paper's 5)")
    fl.add_argument("--n-ret", type=int, default=None, help="R (default: the shipped head's, else the paper's 64)")
    fl.add_argument("--x-ret", type=int, default=None, help="|x_ret| (default |C0|*T + T_q + R)")
    fl.add_argument("--chunk-layer", type=int, default=None)
    fl.add_argument("--json", action="store_true")
    fl.set_defaults(func=_flops)

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
    ix.set_defaults(func=_index)

    bn = sub.add_parser("bench", help="long-context benchmark: UNREAL vs BM25 selection vs full context")
    bn.add_argument("what", choices=["longcontext"])
    bn.add_argument("--sample", type=int, default=20, help="number of New-Wiki questions")
    bn.add_argument("--lengths", default="2K,4K,8K,16K,32K,128K,1M", help="context lengths in tokens (2K = 2,000)")
    bn.add_argument("--n", default="1,2,3,5,8,10,15,20,30", help="numbers of selected chunks")
    bn.add_argument("--methods", default=None,
                    help=retrieval.help_text("document") + "; none, oracle: the question alone, the gold paragraph "
                    "alone (bounds); default unreal,bm25,full (unreal,bm25 with --evidence-only)")
    bn.add_argument("--distractors", choices=["pool", "same-topic"], default="pool",
                    help="pool: distractors from the shared pool; same-topic: the gold's own article's other "
                         "paragraphs and BM25's nearest pool passages next to it, then the pool")
    bn.add_argument("--seed", type=int, default=0)
    bn.add_argument("--shard", default=None, metavar="K/N",
                    help="run only the K-th of every N questions: N processes (one per core) share the answer "
                         "cache; one run without --shard then writes the whole result from it")
    bn.add_argument("--evidence-only", action="store_true",
                    help="measure selection alone (evidence recall@n of each method), nothing answered: minutes "
                         "instead of hours; full, none and oracle, which only answer, are refused")
    bn.add_argument("--out", default=None, help="write the JSON result here")
    bn.add_argument("--json", action="store_true")
    model_flags(bn, dtype=True)
    bn.set_defaults(func=_bench)

    da = sub.add_parser("data", help="list or fetch the offline sources (data sets and models)")
    da.add_argument("action", choices=["list", "fetch"])
    da.add_argument("names", nargs="*", help="fetch: sources to fetch (see `data list`)")
    da.add_argument("--all", action="store_true", help="fetch: every source")
    da.add_argument("--json", action="store_true", help="list: as JSON")
    da.set_defaults(func=_data)

    ad = sub.add_parser("adapter", help="train α and a query adapter on cached query states (NQ-open, TriviaQA "
                        "and SQuAD questions over the shipped index's chunks); the dev grid, or chosen variants")
    ad.add_argument("--head", default=None, help="starting head (default: the shipped head)")
    ad.add_argument("--n-context", dest="n_context", type=int, default=None, help="|C0| (default: the head's)")
    ad.add_argument("--variants", default=None, help="';'-separated grid labels (default: the whole grid)")
    ad.add_argument("--steps", type=int, default=600)
    ad.add_argument("--out", default=None, help="write the result JSON here")
    ad.add_argument("--save", default=None, help="write the best variant on dev (or --save-variant) as a head here")
    ad.add_argument("--save-variant", dest="save_variant", default=None)
    ad.add_argument("--joint", action="store_true", help="instead of the grid: fine-tune ρ, α and the head's adapter "
                    "jointly through the LLM (resumable; the cleaner positives), from --head")
    ad.add_argument("--average", default=None, help="instead of the grid: average these comma-separated heads (fine-"
                    "tunes of one head, e.g. two seeds of a --joint recipe), score the mean next to each on --dev, "
                    "and --save it")
    ad.add_argument("--groups-check", dest="groups_check", default=None, metavar="G,G,…",
                    help="instead of the grid: score --head with its retrieval tokens cut into each of these numbers "
                    "of query vectors G (divisors of R), untrained, on the judged dev sets and the New-Wiki test")
    ad.add_argument("--centring-check", dest="centring_check", action="store_true",
                    help="instead of the grid: score the shipped head and the finished grid variants on raw and on "
                    "centred keys over a fresh dev set (TriviaQA and SQuAD questions no grid run saw)")
    ad.add_argument("--judged", choices=("candidates", "collect", "score"), default=None,
                    help="instead of the grid: natural questions judged by reading — write the candidate chunks to "
                    "read, collect the read verdicts into precomputed/judged/SIDE.json.gz, or score every head on "
                    "the judged dev set (--side more: on the judged train questions the grid's sample left out, held "
                    "out from every head but a judged-more run)")
    ad.add_argument("--side", choices=("dev", "train", "more"), default="dev",
                    help="--judged: which questions (more: the train questions the grid's sample left out)")
    ad.add_argument("--positives", choices=("cleaner", "judged", "judged-more"), default="cleaner",
                    help="--joint: the natural training questions' positives: the dpr rule's at BM25 rank ≤ 3, "
                    "the chunks judged by reading to answer them (precomputed/judged/train.json.gz), or those and "
                    "the judged questions the grid's sample left out (precomputed/judged/more.json.gz)")
    ad.add_argument("--dev", choices=("dpr", "judged"), default="dpr",
                    help="the grid's natural dev sets: labelled by the dpr rule, or their questions with a chunk "
                    "judged by reading to answer them (precomputed/judged/dev.json.gz)")
    ad.add_argument("--verdicts", nargs="*", default=None, help="--judged collect: the verdict files (JSON lines)")
    ad.add_argument("--judged-by", dest="judged_by", default=None, help="--judged collect: who read them")
    ad.add_argument("--train-c0", dest="train_c0", choices=("bm25", "without-positive", "half", "quarter"),
                    default="bm25", help="--joint: each training question's C0: BM25's top chunks (as a search has "
                    "them), those that are not its positive, or each question once with each (half: drawn alike; "
                    "quarter: one visit in four without the positive)")
    ad.add_argument("--patience", type=int, default=None,
                    help="--joint: dev checks without a better one before stopping (default 4)")
    ad.add_argument("--r10-within", dest="r10_within", type=float, default=None,
                    help="--joint: keep the dev check with the best mean R@10 among those whose mean R@1 is at most "
                    "this far below step 0's (default: the best mean R@1)")
    ad.add_argument("--keep", choices=("best", "last"), default="best",
                    help="--joint: score and save the best dev check's state or the last step's")
    ad.add_argument("--batch", type=int, default=16, help="--joint: questions per step")
    ad.add_argument("--distil", type=float, default=0.0,
                    help="--joint: weight of a KL term keeping each SQuAD-style training question's candidate scores "
                    "near the starting head's (0: none)")
    ad.add_argument("--teacher-fusion", dest="teacher_fusion", type=float, default=None,
                    help="--joint with --distil: distil every training question toward the starting head's score "
                    "fusion with BM25 at this weight w (w·z(UNREAL) + (1−w)·z(BM25)) instead of toward the starting "
                    "head alone on the SQuAD-style questions")
    ad.add_argument("--seed", type=int, default=0,
                    help="--joint: seed of the batches and sampled negatives (the dev sample stays the same)")
    ad.add_argument("--groups", type=int, default=None, metavar="G",
                    help="--joint: start from --head with its R retrieval tokens cut into G query vectors (a divisor "
                    "of R; more vectors cost G / 4 times today's scan)")
    ad.add_argument("--adapter-rank", dest="adapter_rank", type=int, default=None, metavar="R",
                    help="--joint: start from --head with a new query adapter of rank R (the identity at first; "
                    "the model's hidden size d for a full d × d map) and train it with ρ and α")
    ad.add_argument("--lr-rho", dest="lr_rho", type=float, default=5e-4, help="--joint: learning rate of ρ")
    ad.add_argument("--lr", type=float, default=5e-4, help="--joint: learning rate of α and the adapter")
    ad.set_defaults(func=_adapter)

    rk = sub.add_parser("rank", help="rank a JSONL corpus for JSONL queries")
    rk.add_argument("--passages", required=True)
    rk.add_argument("--queries", required=True)
    rk.add_argument("--method", choices=retrieval.names("corpus") + list(retrieval.ALIASES), default="unreal",
                    help=retrieval.help_text("corpus"))
    rk.add_argument("--k", type=int, default=10)
    rk.add_argument("--json", action="store_true", help="(output is always JSON)")
    model_flags(rk)
    rk.set_defaults(func=_rank)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
