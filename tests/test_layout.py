"""Each subpackage states its public names: ``__all__`` lists modules that exist and import, each named in the
package's docstring."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import unreal_demo

PACKAGES = sorted(m.name for m in pkgutil.walk_packages(unreal_demo.__path__, "unreal_demo.") if m.ispkg)


def test_every_subpackage_is_checked():
    assert {"unreal_demo.core", "unreal_demo.evaluation.longcontext", "unreal_demo.ui.tabs"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_modules_that_import(name):
    package = importlib.import_module(name)
    assert package.__all__ == sorted(package.__all__)
    for public in package.__all__:
        assert public in package.__doc__
        importlib.import_module(f"{name}.{public}")
