"""The public packages and their names, for the golden-list and example tests."""

import importlib
import pathlib

PACKAGES = ("tf_gdp", "tf_gdp.baselines", "tf_gdp.cli", "tf_gdp.cost",
            "tf_gdp.graph", "tf_gdp.policy", "tf_gdp.rl", "tf_gdp.runtime",
            "tf_gdp.viz", "tf_gdp.zoo", "tf_gdp.corpus", "grappler_bridge")
GOLDEN = pathlib.Path(__file__).resolve().parent / "api_symbols"


def public_names(package: str) -> list:
  """`dir(package)` without the underscore names."""
  return sorted(n for n in dir(importlib.import_module(package))
                if not n.startswith("_"))


def golden(package: str) -> list:
  return (GOLDEN / f"{package}.txt").read_text().split()
