"""The public API is pinned: `dir()` of every public package against a list.

Each package's public names (its re-exports and public submodules, see
`grappler_bridge.package_api`) must equal its golden list in
tests/api_symbols/<package>.txt, so that adding, renaming or removing a
public name is a deliberate change. After such a change, rewrite the lists
with `python tests/test_api_symbols.py --update` and review the diff.
"""

import importlib
import sys

import pytest

from api_surface import GOLDEN
from api_surface import PACKAGES
from api_surface import golden
from api_surface import public_names


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_match_the_golden_list(package):
  have, want = public_names(package), golden(package)
  assert have == want, (
      f"{package}: added {sorted(set(have) - set(want))}, removed "
      f"{sorted(set(want) - set(have))}; if deliberate, run "
      "`python tests/test_api_symbols.py --update` and record it in "
      "CHANGELOG.md")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_there(package):
  module = importlib.import_module(package)
  for name in public_names(package):
    assert getattr(module, name) is not None, f"{package}.{name}"
  assert set(getattr(module, "__all__", ())) <= set(public_names(package))


def test_internal_modules_are_not_listed():
  import tf_gdp  # pylint: disable=g-import-not-at-top
  from tf_gdp import placing  # pylint: disable=g-import-not-at-top,unused-import
  from tf_gdp.cost import schedule_kernel  # pylint: disable=g-import-not-at-top,unused-import
  assert "placing" not in dir(tf_gdp) and "api" not in dir(tf_gdp)
  assert "schedule_kernel" not in dir(tf_gdp.cost)


def test_a_changed_surface_is_caught(monkeypatch):
  import tf_gdp.graph  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tf_gdp.graph, "__dir__",
                      lambda: golden("tf_gdp.graph") + ["brand_new"])
  with pytest.raises(AssertionError, match="added \\['brand_new'\\]"):
    test_public_names_match_the_golden_list("tf_gdp.graph")


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
  GOLDEN.mkdir(exist_ok=True)
  for name in PACKAGES:
    (GOLDEN / f"{name}.txt").write_text("\n".join(public_names(name)) + "\n")
    print(f"wrote {GOLDEN / (name + '.txt')}")
