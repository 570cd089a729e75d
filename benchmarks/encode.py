"""Chunk- and query-encoding throughput against their limits, fp32 and bf16 alternated in one run.

    python benchmarks/encode.py [--passages 400] [--quick] [--threads 2] [--model ID] [--dtypes fp32,bf16]
        [--queries 32] [--rounds 2]

Records in ``benchmarks/results/``: ``bench_encode.json`` (``--passages 64 --threads 1 --dtypes fp32,bf16
--queries 16 --rounds 2``), ``bench_encode_bf16_2threads.json`` (the same at ``--threads 2``), and the two
backbones side by side at 2 threads, fp32, one round: ``bench_encode_qwen2.5-0.5b.json`` (``--model
qwen2.5-0.5b --chunk-layer 21``) and ``bench_encode_smollm2_2threads.json`` (the default model, ℓc = 25).

Timings over the same offline Wikipedia passages (lead summaries, cut to 256 tokens), per encoding dtype:

1. the full encoding path: tokenise → length-bucketed batches → blocks 1..ℓc (hook stop) → L_p pooling →
   write an fp16 safetensors part (``encoding.encode_chunks`` + ``save_file``), and the same steps timed one by
   one in the first round (tokenise, batch + pad, forward, pool + copy, write: where the path's time goes);
2. the raw forward of the truncated model (the first ℓc blocks, no hooks, no pooling, no writing) on exactly
   the batches of 1., already tokenised and padded: the limit for 1.;
3. the untruncated model (all L blocks) on the same batches, in the first round;
4. the query path: the default head's query vectors (``retrieval.unreal.query_vectors``, C0 = BM25's top |C0|
   New-Wiki paragraphs) of ``--queries`` held-out New-Wiki questions, seconds per question.

A dtype other than fp32 runs the app's own encoding path (``Backbone.encoder``: a copy of blocks 1..ℓc in that
dtype, the answering weights fp32). The dtypes alternate within each of ``--rounds`` rounds (so a busy machine
slows both alike) and the best round counts. Prints tokens/s of each, path / raw (target ≥ 0.9), and each
dtype's speed-up over the first for the encoding path and the query path; the record holds the CPU line of
:func:`unreal_demo.core.cpu.status_line` (with the dtype that encoded) and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from unreal_demo.core.backbone import load_backbone
from unreal_demo.core.cpu import cpu_info, status_line
from unreal_demo.core.encoding import (
    encode_chunks,
    padded_batch,
    pool_groups,
    run_blocks,
    token_batches,
    tokenize_chunks,
)
from unreal_demo.data.sources import load_squad, load_summaries
from unreal_demo.settings import DEFAULT_MODEL


@torch.inference_mode()
def raw_forward(backbone, batches: list[tuple[torch.Tensor, torch.Tensor]], n_blocks: int) -> float:
    """Seconds for the decoder with only its first ``n_blocks`` blocks over pre-padded batches."""
    base = backbone.base
    layers = base.layers
    base.layers = torch.nn.ModuleList(list(layers)[:n_blocks])
    try:
        t0 = time.perf_counter()
        for ids, mask in batches:
            base(input_ids=ids, attention_mask=mask, use_cache=False)
        if ids.is_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0
    finally:
        base.layers = layers


@torch.inference_mode()
def breakdown(backbone, texts: list[str], layer: int, max_tokens: int, token_budget: int, folder: str) -> dict:
    """:func:`encode_chunks` + the write, step by step with a clock on each (seconds)."""
    t = {"tokenise": 0.0, "batch_pad": 0.0, "forward": 0.0, "pool_copy": 0.0, "write": 0.0}
    t0 = time.perf_counter()
    rows = tokenize_chunks(backbone, texts, max_tokens)
    t["tokenise"] = time.perf_counter() - t0
    enc, out = backbone.encoder(layer), torch.zeros(len(rows), 7, backbone.hidden_size)
    for batch in token_batches([len(r) for r in rows], token_budget):
        t0 = time.perf_counter()
        ids, mask = padded_batch(backbone, [rows[i] for i in batch])
        t1 = time.perf_counter()
        states = run_blocks(enc, [layer], input_ids=ids, attention_mask=mask)[layer]
        t2 = time.perf_counter()
        out[torch.tensor(batch)] = pool_groups(states[:, 1:].float(), mask.sum(1) - 1, 7).cpu()
        t3 = time.perf_counter()
        t["batch_pad"] += t1 - t0
        t["forward"] += t2 - t1
        t["pool_copy"] += t3 - t2
    t0 = time.perf_counter()
    save_file({"k": out.half()}, str(Path(folder) / "part.safetensors"))
    t["write"] = time.perf_counter() - t0
    return t


def query_setup(n: int) -> tuple[list[str], list[list[str]]]:
    """``n`` held-out New-Wiki questions (seed 0) and their C0: BM25's top |C0| = 2 New-Wiki paragraphs."""
    from unreal_demo.retrieval.unreal import contexts
    from unreal_demo.store.memory import MemoryStore

    passages, questions = load_squad("new_wiki")
    texts = [q.text for q in random.Random(0).sample(questions, min(n, len(questions)))]
    store = MemoryStore([p.text for p in passages])
    _, ids = store.bm25_topk(texts, 2)
    return texts, contexts(store, ids, 2)


def query_seconds(explorer, questions: list[str], context: list[list[str]]) -> float:
    """Seconds per question of the app's query path (``query_vectors``, batches of 16)."""
    from unreal_demo.retrieval.unreal import query_vectors

    t0 = time.perf_counter()
    query_vectors(explorer, questions, context, 16)
    return (time.perf_counter() - t0) / len(questions)


def measure(backbone, texts: list[str], layer: int, max_tokens: int, token_budget: int, rounds: int,
            dtypes: list[str], explorers: dict, questions, context) -> dict:
    """Per dtype, the best of ``rounds`` alternated rounds of 1.–4. (module docstring)."""
    rows = tokenize_chunks(backbone[dtypes[0]], texts, max_tokens)
    n_tokens = sum(len(r) for r in rows)
    batches = [padded_batch(backbone[dtypes[0]], [rows[i] for i in b])
               for b in token_batches([len(r) for r in rows], token_budget)]
    runs = {d: {"path_s": [], "truncated_s": [], "full_s": [], "steps": [], "query_s_per_question": []}
            for d in dtypes}
    for d in dtypes:  # warm-up: builds the encoding view, first shapes
        encode_chunks(backbone[d], texts[:16], layer, 7, max_tokens, token_budget)
        if explorers:
            query_seconds(explorers[d], questions[:4], context[:4])
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for d in dtypes:
                b, enc = backbone[d], backbone[d].encoder(layer)
                t0 = time.perf_counter()
                keys = encode_chunks(b, texts, layer, 7, max_tokens, token_budget)
                save_file({"k": keys.half()}, str(Path(tmp) / "part.safetensors"))
                runs[d]["path_s"].append(time.perf_counter() - t0)
                runs[d]["truncated_s"].append(raw_forward(enc, batches, layer))
                if r == 0:  # the path step by step and the untruncated model once
                    runs[d]["steps"].append(breakdown(b, texts, layer, max_tokens, token_budget, tmp))
                    runs[d]["full_s"].append(raw_forward(enc, batches, b.n_layers))
                if explorers:
                    runs[d]["query_s_per_question"].append(query_seconds(explorers[d], questions, context))
                print(f"round {r + 1} {d}: path {runs[d]['path_s'][-1]:.1f} s, raw truncated "
                      f"{runs[d]['truncated_s'][-1]:.1f} s" + (f", query {runs[d]['query_s_per_question'][-1]:.3f}"
                                                               " s/question" if explorers else ""), flush=True)
    out = {}
    for d in dtypes:
        b, x = backbone[d], runs[d]
        path_s, trunc_s, full_s = min(x["path_s"]), min(x["truncated_s"]), min(x["full_s"])
        steps = min(x["steps"], key=lambda s: sum(s.values()))
        out[d] = {
            "model": b.name, "device": str(b.device), "encode_dtype": b.encoding_name,
            "answer_dtype": str(b.dtype).removeprefix("torch."), "passages": len(texts), "tokens": n_tokens,
            "token_budget": token_budget, "chunk_layer": layer, "n_layers": b.n_layers, "rounds": x,
            "path_tokens_per_s": n_tokens / path_s, "truncated_forward_tokens_per_s": n_tokens / trunc_s,
            "full_forward_tokens_per_s": n_tokens / full_s, "path_over_truncated": trunc_s / path_s,
            "truncated_speedup_over_full": full_s / trunc_s, "ideal_speedup_L_over_lc": b.n_layers / layer,
            "path_steps_s": {k: round(v, 3) for k, v in steps.items()},
        }
        if explorers:
            out[d]["query_s_per_question"] = min(x["query_s_per_question"])
            out[d]["queries"] = len(questions)
    for d in dtypes:
        out[d]["path_speedup_over_" + dtypes[0]] = out[d]["path_tokens_per_s"] / out[dtypes[0]]["path_tokens_per_s"]
        if explorers:
            out[d]["query_speedup_over_" + dtypes[0]] = (out[dtypes[0]]["query_s_per_question"]
                                                        / out[d]["query_s_per_question"])
    return out


def report(result: dict, first: str) -> None:
    d = result["encode_dtype"]
    print(f"[{d}] {result['passages']} passages, {result['tokens']:,} tokens, ℓc = {result['chunk_layer']} of "
          f"{result['n_layers']} blocks, {result['device']}, answers in {result['answer_dtype']}, batches of ≤ "
          f"{result['token_budget']:,} padded tokens")
    print(f"  encoding path      {result['path_tokens_per_s']:8.0f} tokens/s   "
          f"{result['path_speedup_over_' + first]:.2f}x {first}")
    print(f"  raw truncated fwd  {result['truncated_forward_tokens_per_s']:8.0f} tokens/s   "
          f"path / raw = {result['path_over_truncated']:.3f} (target ≥ 0.9)")
    print(f"  untruncated fwd    {result['full_forward_tokens_per_s']:8.0f} tokens/s   "
          f"truncated speed-up {result['truncated_speedup_over_full']:.2f}x (L/ℓc = "
          f"{result['ideal_speedup_L_over_lc']:.2f})")
    print("  path steps (s)     " + ", ".join(f"{k} {v:.2f}" for k, v in result["path_steps_s"].items()))
    if "query_s_per_question" in result:
        print(f"  query path         {result['query_s_per_question']:8.3f} s/question "
              f"({result['queries']} questions)   {result['query_speedup_over_' + first]:.2f}x {first}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="150 passages, 16 questions, one round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--chunk-layer", type=int, default=25)
    parser.add_argument("--token-budget", type=int, default=8192)
    parser.add_argument("--dtypes", default="fp32", help="comma-separated, the first is the baseline (fp32,bf16)")
    parser.add_argument("--queries", type=int, default=32, help="questions for the query path (0: skip it)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/bench_encode.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    count, queries, rounds = (150, min(args.queries, 16), 1) if args.quick else (args.passages, args.queries,
                                                                                    args.rounds)
    texts = [p.text for p in load_summaries()[:count]]
    dtypes = args.dtypes.split(",")
    backbone = {d: load_backbone(args.model, dtype=d) for d in dtypes}
    explorers, questions, context = {}, [], []
    if queries:
        from unreal_demo.pipeline import Explorer

        questions, context = query_setup(queries)
        explorers = {d: Explorer.load(args.model, dtype=d, require_head=True) for d in dtypes}
    runs = measure(backbone, texts, args.chunk_layer, 256, args.token_budget, rounds, dtypes, explorers,
                   questions, context)
    for d in dtypes:
        report(runs[d], dtypes[0])
    result = runs[dtypes[0]] | {"by_dtype": runs} if len(dtypes) > 1 else runs[dtypes[0]]
    result["command"] = (f"python benchmarks/encode.py --passages {count} --threads {args.threads} --dtypes "
                         f"{args.dtypes} --queries {queries} --rounds {rounds} --token-budget {args.token_budget} "
                         f"--model {args.model} --chunk-layer {args.chunk_layer} --out {args.out}")
    result |= {"threads": args.threads, "cpu": {d: status_line(backbone[d].encoding_name) for d in dtypes},
               "units": cpu_info().units, "native_bf16_units": cpu_info().bf16_units,
               "head": explorers[dtypes[0]].head_source if explorers else None,
               "load_average_1_5_15": list(os.getloadavg()),
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(status_line(backbone[dtypes[-1]].encoding_name))
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
