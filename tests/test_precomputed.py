"""``precomputed/`` holds what the app and the product commands read, and nothing else; every experiment record
(``experiments/records/EXP/``) is named by the experiment that writes it, every benchmark result by its script."""

from __future__ import annotations

import ast
import fnmatch
import importlib
import json
import subprocess
from pathlib import Path

import pytest

from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL, PRECOMPUTED, REPO

PRODUCT = sorted((REPO / "unreal_demo").rglob("*.py")) + [REPO / "app.py"]


def _constants(path: Path) -> list[str]:
    """The string constants of a module that are not docstrings (names a reader uses, not prose)."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


CONSTANTS = [c for path in PRODUCT for c in _constants(path)]
STRINGS = set(CONSTANTS)
PATTERNS = {s for s in STRINGS if "*" in s}  # glob patterns a reader scans (the About tab's eval_retrieval*.json)
FOLDERS = {"heads", "index", "answers", "judged"}


def _read_by_product(name: str) -> bool:
    return name in STRINGS or any(fnmatch.fnmatch(name, p) for p in PATTERNS)


@pytest.mark.parametrize("path", sorted(p for p in PRECOMPUTED.iterdir() if p.is_file()), ids=lambda p: p.name)
def test_every_result_in_precomputed_is_read_by_the_product(path):
    assert _read_by_product(path.name), (f"precomputed/{path.name} is read by no product code (unreal_demo/, app.py):"
                                         " an experiment's record belongs in experiments/records/EXP/")


def test_each_result_is_named_once_in_the_code_that_reads_it():
    named = {p.name: sum(p.name in c for c in CONSTANTS) for p in PRECOMPUTED.iterdir() if p.is_file()}
    assert {name: n for name, n in named.items() if n > 1} == {}


def test_precomputed_holds_no_other_folder_and_one_naming_scheme():
    assert {p.name for p in PRECOMPUTED.iterdir() if p.is_dir()} <= FOLDERS
    assert not [p for p in PRECOMPUTED.rglob("*") if "newwiki" in p.name]  # sets are named new_wiki everywhere


def test_every_shipped_head_is_the_default_or_the_head_of_a_shown_result():
    shown = " ".join(p.read_text() for p in PRECOMPUTED.glob("*.json") if _read_by_product(p.name))
    defaults = {path.parent for path in DEFAULT_HEADS.values()}  # each offline model's head (or its training run)
    for head in (PRECOMPUTED / "heads").iterdir():
        assert head in defaults or f"heads/{head.name}/" in shown, head.name


def test_the_other_folders_are_read_by_their_readers():
    assert {p.name.removesuffix(".jsonl.gz") for p in (PRECOMPUTED / "answers").iterdir()} <= STRINGS  # answer_cache
    assert {p.name.removesuffix(".json.gz") for p in (PRECOMPUTED / "judged").iterdir()} <= {"dev", "train", "more"}
    assert all(p.name.startswith(DEFAULT_MODEL) for p in (PRECOMPUTED / "index").iterdir())  # the shipped index


def test_precomputed_stays_under_50_mb():
    files = subprocess.run(["git", "ls-files", "precomputed"], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert sum((REPO / f).stat().st_size for f in files if (REPO / f).exists()) < 50 * 2**20


RECORDS = REPO / "experiments" / "records"


@pytest.mark.parametrize("folder", sorted(p for p in RECORDS.iterdir() if p.is_dir() and any(p.iterdir())),
                         ids=lambda p: p.name)
def test_every_record_is_named_by_the_experiment_that_writes_it(folder):
    """``RECORDS``: the names of the files the experiment writes, or (one file per model, say) the folder itself."""
    module = importlib.import_module(f"experiments.{folder.name}")
    on_disk = {p.name for p in folder.iterdir()}
    if isinstance(module.RECORDS, Path):
        assert module.RECORDS == folder
    else:
        assert on_disk == set(module.RECORDS), f"experiments/{folder.name}.py RECORDS against {folder}"
    assert all(json.loads((folder / name).read_text()) for name in on_disk if name.endswith(".json"))


def test_every_benchmark_result_is_named_by_a_benchmark_script():
    scripts = " ".join(p.read_text() for p in (REPO / "benchmarks").glob("*.py"))
    assert [p.name for p in (REPO / "benchmarks" / "results").iterdir() if p.name not in scripts] == []
