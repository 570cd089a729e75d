"""Every built-in example (``assets/examples/examples.json``) delivers the answer it states, with the real default
model and the default head, through the Long document tab's path (slow: ~2 minutes on 2 CPU cores)."""

from __future__ import annotations

import pytest

from unreal_demo.ui.examples import load_examples

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def explorer():
    from unreal_demo.pipeline import Explorer

    return Explorer.load()


def test_every_example_states_its_answer():
    for e in load_examples():
        assert e["answer"] and e["answer"].lower() in (e["label"] + " " + e["note"]).lower()


@pytest.mark.parametrize("example", load_examples(), ids=lambda e: e["label"])
def test_every_example_gets_its_answer(explorer, example):
    *_, step = explorer.ask_stream([example["text"]], example["question"], example["n"], example["method"])
    assert example["answer"].lower() in step.text.lower(), (example["label"], step.text)
