"""The examples run, and they use the public API only."""

import ast
import json
import os
import pathlib
import subprocess
import sys

import api_surface

_EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _project_imports(path: pathlib.Path):
  """(module, name or None) of every tf_gdp / grappler_bridge import."""
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split(".")[0] in ("tf_gdp", "grappler_bridge"):
          yield alias.name, None
    elif isinstance(node, ast.ImportFrom) and node.module and (
        node.module.split(".")[0] in ("tf_gdp", "grappler_bridge")):
      for alias in node.names:
        yield node.module, alias.name


def _is_public(module: str, name) -> bool:
  """A public package, a name it lists, or a public module of one."""
  packages = api_surface.PACKAGES
  if name is not None and module in packages:
    return name in api_surface.public_names(module)
  if module in packages:
    return True
  parent, _, child = module.rpartition(".")
  return parent in packages and child in api_surface.public_names(parent)


def test_examples_import_public_names_only():
  found = [(path.name, module, name)
           for path in sorted(_EXAMPLES.glob("*.py"))
           for module, name in _project_imports(path)]
  assert found, "no example imports tf_gdp"
  assert [f for f in found if not _is_public(f[1], f[2])] == []


def test_internal_import_is_not_public():
  assert not _is_public("tf_gdp", "placing")
  assert not _is_public("tf_gdp.placing", None)
  assert not _is_public("tf_gdp.cost", "schedule_kernel")
  assert _is_public("tf_gdp.cost", "presets")
  assert _is_public("tf_gdp.graph.describe", None)


def test_place_gnmt_example_places_a_tiny_gnmt(tmp_path):
  out = tmp_path / "out"
  result = subprocess.run(
      [sys.executable, str(_EXAMPLES / "place_gnmt.py"),
       "--knobs=hidden_size=32,vocab_size=100,batch=4,source_length=4,"
       "target_length=4", "--method=metis", "--compare=single_device",
       f"--out={out}"],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), text=True,
      capture_output=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr
  assert "placing with metis on p100x4" in result.stdout
  document = json.loads((out / "placement.json").read_text())
  assert document["method"] == "metis" and document["placement"]
  assert (out / "report.json").is_file() and (out / "gantt.png").is_file()
