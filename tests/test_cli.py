"""CLI errors: one line on stderr and a non-zero exit, before any model is loaded."""

from __future__ import annotations

import pytest

from unreal_demo.__main__ import main


@pytest.mark.parametrize("setup,args,match", [
    (None, ["--doc", "MISSING.txt", "--question", "q?"], "no such file"),
    ("bin", ["--doc", "DOC", "--question", "q?"], "binary"),
    ("txt", ["--doc", "DOC", "--question", "  "], "question is empty"),
    ("empty", ["--doc", "DOC", "--question", "q?"], "document is empty"),
    ("pdf", ["--doc", "DOC", "--question", "q?"], "unsupported file type"),
    ("txt", ["--doc", "DOC", "--question", "what is \x01\x02\x03?"], "the question: looks binary"),
    ("latin1", ["--doc", "DOC", "--question", "q?"], "a.txt: looks binary or damaged (control character U+0093"),
    ("txt", ["--doc", "DOC", "--question", "q?", "--n", "2.5"], "--n must be a whole number from 1 to 1,000 (got '2.5"),
    ("txt", ["--doc", "DOC", "--question", "q?", "--n", "0"], "--n must be a whole number"),
    ("txt", ["--doc", "DOC", "--question", "q?", "--n", "-3"], "--n must be a whole number"),
    ("txt", ["--doc", "DOC", "--question", "q?", "--n", "100000"], "--n must be a whole number"),
])
def test_ask_errors(tmp_path, capsys, setup, args, match):
    files = {"bin": ("a.txt", b"\x00\x01binary"), "txt": ("a.txt", b"Some text."), "empty": ("a.txt", b""),
             "pdf": ("a.pdf", b"%PDF-1.4"),
             "latin1": ("a.txt", "“quoted”".encode("cp1252").decode("latin-1").encode())}  # mis-decoded, saved
    if setup:
        name, raw = files[setup]
        (tmp_path / name).write_bytes(raw)
        args = [str(tmp_path / name) if a == "DOC" else a for a in args]
    assert main(["ask", *args, "--model", "no/such-model-anywhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_unknown_model(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("Some text.")
    assert main(["ask", "--doc", str(tmp_path / "a.txt"), "--question", "q?", "--model", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot load model" in err


def test_folder_without_weights(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("Some text.")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert main(["ask", "--doc", str(tmp_path / "a.txt"), "--question", "q?", "--model", str(tmp_path / "model")]) == 2
    assert "no *.safetensors weights" in capsys.readouterr().err


def test_train_refuses_a_shipped_head_and_held_out_data(capsys):
    assert main(["train", "--out", "precomputed/heads/smollm2-135m", "--steps", "1"]) == 2
    assert "holds a shipped head" in capsys.readouterr().err
    assert main(["train", "--sources", "new_wiki", "--out", "/tmp/nowhere-unreal", "--steps", "1"]) == 2
    assert "held out" in capsys.readouterr().err


@pytest.mark.slow
def test_flops_starts_from_the_shipped_head(capsys):
    import json

    from unreal_demo.settings import DEFAULT_HEADS

    head = json.loads(DEFAULT_HEADS["smollm2-135m-instruct"].with_suffix(".json").read_text())
    assert main(["flops", "--backbone", "smollm2-135m-instruct", "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert (inputs["n_context"], inputs["n_ret"], inputs["chunk_layer"]) == (head["n_context"], head["n_ret"],
                                                                            head["chunk_layer"])
    assert main(["flops", "--backbone", "qwen", "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert (inputs["n_context"], inputs["n_ret"]) == (5, 64)  # the paper's setting for its backbones


@pytest.mark.parametrize("args,match", [
    (["eval", "retrieval", "--methods", "colbert"], "unknown method colbert"),
    (["eval", "retrieval", "--model", "some/other-model"], "no trained head ships for model"),
    (["rank", "--passages", "P", "--queries", "Q", "--model", "some/other-model"], "passages file not found"),
    (["eval", "qa", "--methods", "oracle,magic"], "unknown method magic"),
    (["bench", "longcontext", "--methods", "unreal,magic"], "unknown method magic"),
    (["bench", "longcontext", "--lengths", "2Q"], "cannot read length"),
    (["bench", "longcontext", "--shard", "3/2"], "give K/N"),
    (["bench", "longcontext", "--shard", "1/2", "--out", "precomputed/longcontext.json"], "partial"),
    (["eval", "qa", "--k", "0"], "must be at least 1"),
    (["index", "search", "--query", "q", "--k", "0"], "--k must be a whole number of at least 1 (got 0)"),
    (["index", "search", "--query", " "], "the query is empty"),
    (["rank", "--passages", "P", "--queries", "Q", "--k", "0"], "--k must be at least 1"),
])
def test_bad_flags_are_one_line_before_any_model(capsys, args, match):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


# --- what the commands print, on a tiny model saved as a folder (the real loading path) ---

FACT = "The zebra code is 4417."
TOWNS = ["Avalon", "Brindle", "Corvax", "Dunmore", "Elsworth", "Farrow", "Glenhaven", "Harrowgate", "Ivesby",
         "Jarlton", "Kestrel", "Lunford"]
FILLER = [f"This paragraph talks about the weather in {t}, which was mild and grey all week." for t in TOWNS]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from conftest import make_backbone

    bb, out = make_backbone(), tmp_path_factory.mktemp("cli") / "tiny"
    bb.model.save_pretrained(out)
    bb.tokenizer.save_pretrained(out)
    return out


def _json_out(capsys, argv: list[str]):
    import json

    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("method", ["bm25", "unreal"])
def test_ask_json_record(tmp_path, capsys, folder, method):
    doc = tmp_path / "doc.txt"
    doc.write_text(" ".join(FILLER[:6] + [FACT] + FILLER[6:]))
    out = _json_out(capsys, ["ask", "--doc", str(doc), "--question", "What is the zebra code?", "--n", "2",
                             "--method", method, "--max-new-tokens", "3", "--model", str(folder), "--json"])
    assert out["method"] == method and out["head"] == "untrained" and len(out["selected"]) == 2
    assert out["selected"] == sorted(out["selected"])  # document order (Eq. 5)
    chunks, text = out["chunks"], doc.read_text()
    assert chunks[0]["start"] == 0 and chunks[-1]["end"] == len(text)  # an exact cover, in order
    assert all(a["end"] == b["start"] for a, b in zip(chunks, chunks[1:], strict=False))
    rest = [c["score"] for i, c in enumerate(chunks) if i not in out["selected"]]
    assert min(chunks[i]["score"] for i in out["selected"]) >= max(rest)  # the selection is the best scores
    if method == "bm25":
        assert any(FACT in text[chunks[i]["start"]:chunks[i]["end"]] for i in out["selected"])
    else:
        assert any("UNTRAINED" in n for n in out["notices"])
    assert out["timings"]["total"] >= out["timings"]["first_token"] > 0 and out["prompt_tokens"] > 0
    check = out["check"]  # the answer check of the app (evaluation.faithfulness.answer_support)
    assert check["verdict"] in ("supported", "not found in the evidence") and isinstance(check["supported"], bool)
    assert all(s["evidence"] for s in check["sentences"] if s["verdict"] == "supported")


def test_rank_prints_top_k_per_query(tmp_path, capsys, folder):
    import json

    passages = [{"id": f"p{i}", "text": t} for i, t in enumerate(FILLER + [FACT])]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages))
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "q1", "text": "zebra code"}) + "\n"
                                      + json.dumps({"id": "q2", "text": "weather in Dunmore"}) + "\n")
    out = _json_out(capsys, ["rank", "--passages", str(tmp_path / "p.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                             "--method", "bm25", "--k", "3", "--model", str(folder)])
    (q1, q2) = out["results"]
    assert (q1["query"], q2["query"]) == ("q1", "q2") and [len(q1["hits"]), len(q2["hits"])] == [3, 3]
    assert q1["hits"][0]["id"] == "p12" and q2["hits"][0]["id"] == "p3"
    scores = [h["score"] for h in q1["hits"]]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0


def test_rank_hybrid_fusion_uses_the_heads_shipped_weight(tmp_path, capsys, folder):
    import json

    from unreal_demo.core.head import untrained_head
    from unreal_demo.pipeline import Explorer

    bb = Explorer.load(str(folder), require_head=False).backbone
    untrained_head(bb, fusion_weight=0.7, trained=True).save(tmp_path / "head.json")
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n"
                                              for i, t in enumerate(FILLER + [FACT])))
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "q1", "text": "zebra code"}) + "\n")
    out = _json_out(capsys, ["rank", "--passages", str(tmp_path / "p.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                             "--method", "hybrid-fusion", "--k", "3", "--model", str(folder),
                             "--head", str(tmp_path / "head.json")])
    assert out["fusion_weight"]["w"] == 0.7 and "fitted on the dev split" in out["fusion_weight"]["source"]
    assert len(out["results"][0]["hits"]) == 3
    untrained_head(bb, trained=True).save(tmp_path / "none.json")  # a head without a weight: one line
    assert main(["rank", "--passages", str(tmp_path / "p.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--method", "hybrid-fusion", "--model", str(folder), "--head", str(tmp_path / "none.json")]) == 2
    assert "has no score-fusion weight" in capsys.readouterr().err


def test_flops_json_matches_the_library(capsys):
    from unreal_demo.evaluation.flops import Setting, report, resolve_backbone

    out = _json_out(capsys, ["flops", "--backbone", "qwen", "--n", "5", "--T", "32", "--json"])
    ref = report(resolve_backbone("qwen", None), Setting(n=5, T=32, n_context=5, n_ret=64))
    assert out["n_star"] == pytest.approx(ref["n_star"]) and out["n_star"] > 0
    assert out["n_star_numeric"] == pytest.approx(ref["n_star_numeric"], rel=1e-6)


def test_data_list_json_says_what_is_cached(capsys):
    from unreal_demo.data.sources import SOURCES

    rows = _json_out(capsys, ["data", "list", "--json"])
    assert [r["source"] for r in rows] == list(SOURCES)
    for r in rows:
        assert r["cached"] == SOURCES[r["source"]].path.exists()
        assert r["bytes on disk"] >= 0 and r["licence"]


@pytest.mark.parametrize("args,match", [
    (["index", "search", "--store", "qdrant:ftp://host", "--query", "q"], "store 'qdrant:ftp://host' not understood"),
    (["index", "search", "--store", "/a/folder", "--query", "q"], "not understood: use qdrant-edge:PATH"),
    (["index", "export", "--to", "/a/folder"], "index export needs --to qdrant-edge:PATH"),
    (["index", "search", "--query", "q", "--where", "source=x"], "search a Qdrant store: needs --store qdrant-edge:"),
    (["index", "add", "--passages", "p.jsonl"], "index add needs --store qdrant-edge:PATH"),
    (["index", "search", "--store", "qdrant::memory:", "--query", "q", "--where", "colour=red"], "use source=NAME"),
    (["index", "search", "--store", "qdrant::memory:/none", "--query", "q"], "no Qdrant store at :memory:/none"),
    (["index", "search", "--store", "qdrant:http://127.0.0.1:9", "--query", "q"], "connecting failed"),
    (["index", "delete", "--store", "qdrant::memory:"], "index delete needs --ids"),
    (["index", "add", "--store", "qdrant::memory:"], "index add needs --passages"),
    (["index", "delete", "--store", "qdrant::memory:", "--ids", "p1", "--where", "source=x"], "restrict a search"),
], ids=lambda v: "qdrant" if isinstance(v, list) else None)
def test_qdrant_flags_are_one_line_before_any_model(capsys, args, match):
    assert main([*args, "--model", "no/such-model-anywhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_qdrant_export_search_add_delete(tmp_path, capsys, folder):
    import json

    corpus, extra = tmp_path / "p.jsonl", tmp_path / "new.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": t, "text": f}) + "\n"
                              for i, (t, f) in enumerate(zip(TOWNS, FILLER, strict=True))))
    extra.write_text(json.dumps({"id": "z", "title": "Zebra", "text": FACT}) + "\n")
    model, store = ["--model", str(folder)], "qdrant::memory:/cli"
    _json_out(capsys, ["index", "build", "--out", str(tmp_path / "ix"), "--corpus", str(corpus), "--no-dense", *model])
    for method, needs in (("dense", "--dense"), ("sparse", "--token-states")):  # as the Wikipedia tab says it
        assert main(["index", "search", "--index", str(tmp_path / "ix"), "--query", "zebra", "--method", method,
                     *model]) == 2
        assert capsys.readouterr().err == f"error: {method} cannot search this store: it needs {needs}\n"
    out = _json_out(capsys, ["index", "export", "--index", str(tmp_path / "ix"), "--to", store, *model])
    assert out["chunks"] == len(TOWNS) and out["store"] == store

    def titles(*flags: str) -> list[str]:
        found = _json_out(capsys, ["index", "search", "--store", store, "--query", "zebra code weather Dunmore",
                                   "--k", "3", "--json", *flags, *model])
        return [h["title"] for h in found["hits"]]

    assert titles("--method", "bm25")[0] == "Dunmore"
    assert titles("--where", "title^=Av") == ["Avalon"]  # a payload filter, with UNREAL
    assert _json_out(capsys, ["index", "add", "--store", store, "--passages", str(extra), *model])["added_chunks"] == 1
    assert titles("--method", "bm25")[0] == "Zebra"
    assert _json_out(capsys, ["index", "delete", "--store", store, "--ids", "z", *model])["deleted_chunks"] == 1
    assert "Zebra" not in titles("--method", "bm25")


def test_eval_retrieval_passes_dtype_on(monkeypatch, capsys):
    """``eval retrieval --dtype`` reaches the model loading (it was once dropped on the corpus path)."""
    import unreal_demo.evaluation.retrieval as ev

    got = {}

    def fake(sample, methods, **kw):
        got.update(kw)
        return {"markdown": "ok"}

    monkeypatch.setattr(ev, "run_retrieval_eval", fake)
    assert main(["eval", "retrieval", "--corpus", "amazon", "--sample", "3", "--methods", "bm25",
                 "--dtype", "fp32"]) == 0
    assert got["dtype"] == "fp32" and got["corpus_name"] == "amazon"
