"""The op-graph IR, the cost model and the baselines run without TensorFlow.

Every module of these packages is imported in a fresh interpreter, found by
walking the packages (so a new module is covered without editing this
file); TensorFlow must not have been imported afterwards.
"""

import json
import os
import subprocess
import sys

# Packages that must stay TF-free, module by module.
_TF_FREE_PACKAGES = ("tf_gdp.graph", "tf_gdp.cost", "tf_gdp.baselines")
# Modules of those packages that are TensorFlow code by design and are
# imported only on first use: the networks of the HDP baseline.
_TF_BY_DESIGN = ("tf_gdp.baselines.hdp_model",)

_CHECK = """
import importlib, json, pkgutil, sys
packages, skip = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
imported, tf_after = [], None
for package_name in packages:
  package = importlib.import_module(package_name)
  names = [package_name] + [
      m.name for m in pkgutil.walk_packages(getattr(package, "__path__", []),
                                            package_name + ".")]
  for name in names:
    if name in skip:
      continue
    importlib.import_module(name)
    imported.append(name)
    if tf_after is None and "tensorflow" in sys.modules:
      tf_after = name
print(json.dumps({"imported": imported, "tensorflow_after": tf_after}))
"""


def _import_in_fresh_interpreter(packages, skip=()):
  """Imports `packages` and all their modules but `skip` in a new Python."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                  os.environ.get("PYTHONPATH", "")] if p)
  result = subprocess.run(
      [sys.executable, "-c", _CHECK, json.dumps(list(packages)),
       json.dumps(list(skip))],
      env=env, text=True, capture_output=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr
  return json.loads(result.stdout.strip().splitlines()[-1])


def test_graph_cost_and_baselines_import_no_tensorflow():
  found = _import_in_fresh_interpreter(_TF_FREE_PACKAGES, _TF_BY_DESIGN)
  assert found["tensorflow_after"] is None, (
      f"importing {found['tensorflow_after']} imported TensorFlow")
  # The walk found the modules (not just the packages' __init__).
  for module in ("tf_gdp.graph.op_graph", "tf_gdp.cost.simulator",
                 "tf_gdp.cost.topology", "tf_gdp.baselines.heft"):
    assert module in found["imported"]


def test_the_exemptions_exist_and_do_import_tensorflow():
  # An exemption that no longer needs TF (or no longer exists) must go.
  for module in _TF_BY_DESIGN:
    found = _import_in_fresh_interpreter([module])
    assert found["tensorflow_after"] == module
