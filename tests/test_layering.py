"""Imports run one way: from a higher layer of the package to a lower one.

Every `import` in the library counts, including the ones inside functions
that keep TensorFlow out of TF-free modules: a lazy import is still a
dependency. grappler_bridge is the bottom and never imports tf_gdp.
"""

import ast
import pathlib

import pytest

_ROOT = pathlib.Path(__file__).resolve().parent.parent
# Highest first; units on one line are one layer and do not import each other.
# The package itself (`import tf_gdp as gdp`, the public API) sits below the
# CLI and the benchmarks, which use it, and above what it re-exports.
_LAYERS = (
    ("tf_gdp.__main__",),
    ("tf_gdp.cli",),
    ("tf_gdp.bench",),
    ("tf_gdp",),
    ("tf_gdp.api", "tf_gdp.evaluation", "tf_gdp.place_batch"),
    ("tf_gdp.confirm_placement",),
    ("tf_gdp.placing",),
    ("tf_gdp.auto_method",),
    ("tf_gdp.gdp_method",),
    ("tf_gdp.rl",),
    # The policy's partition push reads a METIS cut (`baselines.metis`).
    ("tf_gdp.policy",),
    ("tf_gdp.baselines", "tf_gdp.viz", "tf_gdp.runtime"),
    ("tf_gdp.graph_specs", "tf_gdp.placement_file", "tf_gdp.target_devices"),
    ("tf_gdp.corpus",),
    ("tf_gdp.zoo",),
    ("tf_gdp.cost",),
    ("tf_gdp.graph",),
    ("tf_gdp.errors", "tf_gdp.fileio", "tf_gdp.float32_keras",
     "tf_gdp.version"),
    ("grappler_bridge",),
)
_RANK = {unit: rank for rank, units in enumerate(_LAYERS) for unit in units}


def _unit(module: str) -> str:
  """The layer unit of a dotted module name (its subpackage or module)."""
  parts = module.split(".")
  if parts[0] == "grappler_bridge":
    return "grappler_bridge"
  return ".".join(parts[:2])


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = list(path.relative_to(root).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _imports(path: pathlib.Path, root: pathlib.Path):
  """(line, imported module) of every import in the file, relative resolved."""
  name = _module_name(path, root)
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([node.module] if node.module else []))
      for alias in node.names:
        candidate = f"{base}.{alias.name}"
        as_path = root.joinpath(*candidate.split("."))
        is_module = as_path.with_suffix(".py").exists() or as_path.is_dir()
        yield node.lineno, candidate if is_module else base


def upward_imports(root: pathlib.Path = _ROOT) -> list:
  """`file:line: importer -> imported` for every import against the layers."""
  found = []
  paths = [path for package in ("tf_gdp", "grappler_bridge")
           for path in sorted((root / package).rglob("*.py"))]
  for path in paths:
    importer = _unit(_module_name(path, root))
    for line, module in _imports(path, root):
      if not module.startswith(("tf_gdp", "grappler_bridge")):
        continue
      imported = _unit(module)
      if imported == importer:
        continue
      if importer not in _RANK or imported not in _RANK:
        found.append(f"{path.relative_to(root)}:{line}: {importer} -> "
                     f"{imported} (a unit missing from the layers)")
      elif _RANK[imported] <= _RANK[importer]:
        found.append(f"{path.relative_to(root)}:{line}: {importer} -> "
                     f"{imported}")
  return found


def test_every_import_runs_down_the_layers():
  assert upward_imports() == []


@pytest.mark.parametrize("source,expected", [
    ("from tf_gdp import placing\n", "tf_gdp.rl -> tf_gdp.placing"),
    ("def f():\n  from tf_gdp.bench import harness\n",
     "tf_gdp.rl -> tf_gdp.bench"),
    ("from .. import placing\n", "tf_gdp.rl -> tf_gdp.placing"),
])
def test_an_upward_import_is_found(tmp_path, source, expected):
  for module in ("rl/__init__", "placing", "bench/__init__", "bench/harness",
                 "cost/__init__", "cost/topology"):
    (tmp_path / "tf_gdp" / module).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "tf_gdp" / f"{module}.py").write_text("")
  (tmp_path / "tf_gdp" / "rl" / "probe.py").write_text(
      source + "from tf_gdp.cost import topology\n")
  (tmp_path / "grappler_bridge").mkdir()
  found = upward_imports(tmp_path)
  assert len(found) == 1 and expected in found[0], found
