"""``python -m unreal_demo data``: list or fetch the offline sources (data sets and models)."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``data`` command and its flags."""
    da = sub.add_parser("data", help="list or fetch the offline sources (data sets and models)")
    da.add_argument("action", choices=["list", "fetch"])
    da.add_argument("names", nargs="*", help="fetch: sources to fetch (see `data list`)")
    da.add_argument("--all", action="store_true", help="fetch: every source")
    da.add_argument("--json", action="store_true", help="list: as JSON")
    da.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """List the offline sources or fetch some."""
    import time

    from tqdm import tqdm

    from ..data.sources import SOURCES, fetch_sources, source_status

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
        source = SOURCES[group[0]]
        had = all(a.exists() for a in source.archives) or all(SOURCES[n].path.exists() for n in group)
        with tqdm(desc=filename[:40], unit="B", unit_scale=True, unit_divisor=1024, leave=False) as bar:
            def progress(done: int, total: int, seconds: float, bar: tqdm = bar) -> None:
                if done < bar.n:  # the next part of a source cut over several packages
                    bar.reset()
                bar.total = total or None
                bar.update(done - bar.n)

            start = time.time()
            fetch_sources(group, progress)
        got = sum(a.stat().st_size for a in source.archives if a.exists())
        how = "cached" if had else f"fetched {got / 2**20:.1f} MiB"
        for name in group:
            st = source_status(name)
            print(f"{name:<10} ok  {st['bytes on disk'] / 2**20:8.1f} MiB on disk  ({how} from {source.origin}, "
                  f"{time.time() - start:.1f} s, SHA-256 checked)")
