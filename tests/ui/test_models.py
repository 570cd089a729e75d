"""The app's model picker (serving.Models through ui.app): each session's model answers its tabs, a model without a
head says so, at most two models stay in memory, a public app offers the picker only where $UNREAL_MODELS allows."""

from __future__ import annotations

import dataclasses
import json

import pytest

gradio_client = pytest.importorskip("gradio_client")

from unreal_demo import serving, settings  # noqa: E402
from unreal_demo.core.head import untrained_head  # noqa: E402
from unreal_demo.errors import UserError  # noqa: E402
from unreal_demo.pipeline import Explorer  # noqa: E402
from unreal_demo.serving import Loading, Models  # noqa: E402
from unreal_demo.ui.app import build_demo  # noqa: E402

DOC = "Cats sleep a lot. Dogs bark at night. " * 30 + "The zebra code is 4417. " + "Birds sing in spring. " * 30


@pytest.fixture(scope="module")
def pair(tiny, tmp_path_factory):
    """Two explorers under two names: ``tiny-llama`` with a head file (as a shipped head), ``tiny-b`` without."""
    head = untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3)
    path = tmp_path_factory.mktemp("head") / "head"
    head.save(path)
    a = Explorer(tiny, head, path.with_suffix(".json"))
    b_backbone = dataclasses.replace(tiny, name="tiny-b")
    b = Explorer(b_backbone, untrained_head(b_backbone, n_ret=8, n_groups=4, chunk_layer=3), None)
    return a, b


def served(models: Models, open_stores: bool = True):
    demo = build_demo(models, open_stores=open_stores)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    return demo


def writer(check_html: str) -> str:
    return check_html.split("Written by <code>", 1)[1].split("</code>", 1)[0]


def test_switching_a_sessions_model_changes_which_explorer_answers(pair, monkeypatch):
    a, b = pair
    monkeypatch.setattr(serving, "OFFLINE_MODELS", ("tiny-llama", "tiny-b"))  # tiny-b stands for the second backbone
    models = Models(Loading.of(a), ("tiny-llama", "tiny-b"), loadings={"tiny-b": Loading.of(b)})
    demo = served(models)
    try:
        one, two = (gradio_client.Client(demo.local_url, verbose=False) for _ in range(2))
        ask = ("What is the zebra code?", 1, "bm25", False)
        assert writer(one.predict(DOC, *ask, api_name="/ask")[1]) == "tiny-llama"
        status, *_ = one.predict("tiny-b", api_name="/choose_model")  # (the session's gr.State is not returned)
        assert status.startswith("✓ tiny-b")
        assert "with head untrained" in status  # a model without a head says so on the status line, and why
        assert "⚠ its head is still training (no head shipped yet), so UNREAL scores are untrained" in status
        assert writer(one.predict(DOC, *ask, api_name="/ask")[1]) == "tiny-b"
        assert writer(two.predict(DOC, *ask, api_name="/ask")[1]) == "tiny-llama"  # the other session keeps its own
        one.predict("tiny-llama", api_name="/choose_model")
        assert writer(one.predict(DOC, *ask, api_name="/ask")[1]) == "tiny-llama"
        with pytest.raises(Exception, match="gpt-9 is not in the list of choices"):
            one.predict("gpt-9", api_name="/choose_model")
    finally:
        demo.close()


def test_a_public_app_shows_the_picker_disabled_with_its_reason(pair, monkeypatch):
    a, b = pair
    monkeypatch.delenv(settings.MODELS_ENV, raising=False)
    offered, reason = settings.picker_models("tiny-llama", is_public=True)
    assert offered == ("tiny-llama",) and settings.MODELS_ENV in reason
    assert settings.picker_models("tiny-llama", is_public=False) == (("tiny-llama", *settings.OFFLINE_MODELS), None)
    monkeypatch.setenv(settings.MODELS_ENV, "tiny-llama, tiny-b")
    assert settings.picker_models("tiny-llama", is_public=True) == (("tiny-llama", "tiny-b"), None)
    monkeypatch.setenv(settings.SPACE_ENV, "someone/unreal")
    assert settings.public()

    models = Models(Loading.of(a), offered, reason, loadings={"tiny-b": Loading.of(b)})
    assert not models.switchable
    with pytest.raises(UserError, match="UNREAL_MODELS"):
        models.loading("tiny-b")
    demo = served(models, open_stores=False)
    try:
        picker = next(c for c in demo.config["components"] if c.get("props", {}).get("elem_id") == "unreal-model")
        assert picker["props"]["interactive"] is False
        header = next(c for c in demo.config["components"] if "UNREAL Explorer" in str(c.get("props", {}).get("value")))
        assert "the model picker is off: this public app serves tiny-llama only" in header["props"]["value"]
        assert "UNREAL_MODELS" in header["props"]["value"]
        client = gradio_client.Client(demo.local_url, verbose=False)
        with pytest.raises(Exception, match="tiny-b is not in the list of choices"):  # the API refuses it too
            client.predict("tiny-b", api_name="/choose_model")
    finally:
        demo.close()


def test_at_most_two_models_stay_in_memory(pair):
    a, b = pair
    made = []

    def make(name: str) -> Loading:
        made.append(name)
        return Loading.of(Explorer(dataclasses.replace(b.backbone, name=name), b.head, None))

    models = Models(Loading.of(a), ("tiny-b", "tiny-c"), make=make)
    models.choose("s1", "tiny-b")
    models.choose("s2", "tiny-c")
    assert list(models.in_memory()) == ["tiny-llama", "tiny-c"]  # the first model stays; tiny-b was dropped
    assert models.chosen("s1") == "tiny-b" and models.chosen("s3") == "tiny-llama"
    models.of("s1")  # s1 uses tiny-b again: loaded again, tiny-c dropped
    assert made == ["tiny-b", "tiny-c", "tiny-b"] and list(models.in_memory()) == ["tiny-llama", "tiny-b"]


def test_a_head_still_training_is_named_with_its_progress(tmp_path, monkeypatch):
    folder = tmp_path / "heads" / "qwen2.5-0.5b"
    folder.mkdir(parents=True)
    monkeypatch.setitem(serving.DEFAULT_HEADS, settings.SECOND_MODEL, folder / "head")
    assert serving.training_progress(settings.SECOND_MODEL) is None  # no log yet
    assert "still training (no head shipped yet)" in serving.head_note(settings.SECOND_MODEL, None)
    (folder / "train_config.json").write_text(json.dumps({"steps": 250, "chunk_layer": 21}))
    (folder / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0, "dev_R@1": 0.4123}, {"step": 3, "loss": 3.9}]))
    assert serving.training_progress(settings.SECOND_MODEL) == "training: step 3 of 250, dev R@1 0.412 at step 2"
    note = serving.head_note(settings.SECOND_MODEL, None)
    assert note.startswith("untrained: its head is still training (training: step 3 of 250") and "untrained" in note
    (folder / "head.json").write_text("{}")  # training ended: the head is there, no progress to show
    assert serving.training_progress(settings.SECOND_MODEL) is None


def test_about_rows_name_each_offline_models_head_and_index(monkeypatch, tmp_path):
    monkeypatch.setenv(settings.CACHE_ENV, str(tmp_path / "cache"))
    rows = {r["model"]: r for r in serving.model_rows(settings.OFFLINE_MODELS)}
    smol, qwen = rows[settings.DEFAULT_MODEL], rows[settings.SECOND_MODEL]
    assert smol["ℓc"] == "25" and "smollm2-135m-mix-joint-seed1" in smol["head"] and "(shipped)" in smol["index"]
    if not (settings.PRECOMPUTED / "heads" / settings.SECOND_MODEL / "head.json").exists():
        assert qwen["head"].startswith("untrained: its head is still training")
    if serving._own_index(settings.SECOND_MODEL) is None:
        assert qwen["index"] == f"none yet: the Wikipedia tab searches {settings.DEFAULT_MODEL}'s index with BM25 " \
                                "and dense only"


def _two_offline_models(a, tmp_path, monkeypatch) -> list:
    """``tiny-llama`` and ``tiny-b`` as the offline models, the cache and ``precomputed/`` in ``tmp_path``, and
    ``tiny-llama``'s shipped New-Wiki index of 12 passages (returned)."""
    from unreal_demo.data.sources import Passage
    from unreal_demo.store import index as ix

    monkeypatch.setenv(settings.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(serving, "PRECOMPUTED", tmp_path / "precomputed")
    monkeypatch.setattr(serving, "OFFLINE_MODELS", ("tiny-llama", "tiny-b"))
    passages = [Passage(f"p{i}", f"Title {i}", f"Passage {i}: the widget{i:02d} weighs {i * 3} kilograms.",
                        "new_wiki") for i in range(12)]
    ix.build_index(tmp_path / "precomputed" / "index" / "tiny-llama-l3-new_wiki", a.backbone, passages, layer=3,
                   n_pool=a.head.config.n_pool, shard_size=8)
    return passages


def test_a_model_without_its_own_index_searches_another_with_bm25_only(pair, tmp_path, monkeypatch):
    """An offline model with no index of its own (the second backbone before its index is built) searches another
    model's shipped index with BM25 and dense, and refuses UNREAL with the reason, instead of failing."""
    a, b = pair
    _two_offline_models(a, tmp_path, monkeypatch)
    assert serving.borrowed_index(b, "new_wiki") == tmp_path / "precomputed" / "index" / "tiny-llama-l3-new_wiki"
    assert serving.borrowed_index(a, "new_wiki") is None  # its own model's index is no borrowing
    started = b.index_folder("new_wiki")  # tiny-b's own build stopped after its first shard: not ready, so borrowed
    started.mkdir(parents=True)
    (started / "manifest.json").write_text(json.dumps({"chunks": 12, "shard_size": 8, "shards": []}))
    (started / "shard_00000.json").write_text("{}")
    assert not b.index_ready("new_wiki")
    models = Models(Loading.of(a), ("tiny-llama", "tiny-b"), loadings={"tiny-b": Loading.of(b)})
    demo = served(models)
    try:
        client = gradio_client.Client(demo.local_url, verbose=False)
        client.predict("tiny-b", api_name="/choose_model")
        _chart, table, _bm25, status, *_ = client.predict("How much does widget07 weigh?", 5, "bm25", "new_wiki",
                                                          api_name="/search")
        assert table["data"][0][-1].startswith("Passage 7:")
        assert "no UNREAL index for tiny-b yet; BM25/dense only" in status
        # the session's method choices hold BM25 (and dense, where the index keeps its vectors: not this one) only
        with pytest.raises(Exception, match=r"'unreal' .* is not in the list of choices: \['bm25'\]"):
            client.predict("How much does widget07 weigh?", 5, "unreal", "new_wiki", api_name="/search")
        other = gradio_client.Client(demo.local_url, verbose=False)  # a session on tiny-llama: every method offered
        with pytest.raises(Exception, match="no index for new_wiki yet"):  # (its index is not where it looks)
            other.predict("How much does widget07 weigh?", 5, "unreal", "new_wiki", api_name="/search")
    finally:
        demo.close()


def test_about_row_of_an_index_still_being_built_says_how_far_it_has_come(monkeypatch, tmp_path):
    """A build stopped half way (the session ended, Stop was pressed) is not called built: its row counts the
    shards done and says the Wikipedia tab resumes it."""
    monkeypatch.setenv(settings.CACHE_ENV, str(tmp_path))
    folder = tmp_path / "indexes" / f"{settings.SECOND_MODEL}-l21-all"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"chunks": 20, "shard_size": 8, "shards": []}))
    (folder / "shard_00000.json").write_text("{}")
    row = {r["model"]: r for r in serving.model_rows(settings.OFFLINE_MODELS)}[settings.SECOND_MODEL]
    assert "being built: 1 of 3 shards so far" in row["index"] and "(built)" not in row["index"]
    for n in (1, 2):  # every shard recorded, but the manifest never merged them (killed before): not whole yet
        (folder / f"shard_0000{n}.json").write_text("{}")
    assert "being built: 2 of 3 shards" in serving.index_state(folder)
    (folder / "manifest.json").write_text(json.dumps({"chunks": 20, "shard_size": 8, "shards": [{}, {}, {}]}))
    row = {r["model"]: r for r in serving.model_rows(settings.OFFLINE_MODELS)}[settings.SECOND_MODEL]
    assert row["index"].endswith("(built)")


def test_build_resumes_a_model_s_own_half_built_index_while_searches_borrow(pair, tmp_path, monkeypatch):
    """A model whose own index build stopped half way searches another model's shipped index meanwhile (BM25 and
    dense), and *Build or load index* (Stores.load) resumes its own build instead of loading the borrowed one."""
    from unreal_demo import pipeline
    from unreal_demo.store import index as ix

    a, b = pair
    passages = _two_offline_models(a, tmp_path, monkeypatch)
    monkeypatch.setattr(pipeline, "load_corpus", lambda names: passages)
    own = b.index_folder("new_wiki")
    ix.build_index(own, b.backbone, passages, layer=3, n_pool=b.head.config.n_pool, shard_size=8)
    manifest = json.loads((own / "manifest.json").read_text())
    (own / "manifest.json").write_text(json.dumps(manifest | {"shards": []}))  # stopped after its first shard
    (own / "shard_00001.json").unlink()
    assert not b.index_ready("new_wiki") and "being built: 1 of 2 shards so far" in serving.index_state(own)
    stores = serving.Stores(Loading.of(b), open_any=True)
    assert stores.open("new_wiki").info.model == "tiny-llama"  # a search borrows meanwhile
    got = stores.load("new_wiki")
    assert got.built is not None and got.info.model == "tiny-b" and len(got.store) == 12
    assert b.index_ready("new_wiki") and stores.open("new_wiki").info.model == "tiny-b"
