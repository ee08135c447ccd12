"""The graphs a benchmark names: graph specs and training steps built by code.

A benchmark's `--graphs` is a graph spec (`tf_gdp.graph_specs`: zoo models
with knobs, `zoo`, files, generated graphs) whose items may also name the
TensorFlow steps that `real_graphs`, `keras_app_graphs` and
`third_party_graphs` build from code (`BUILDERS`): real model code that
neither the zoo nor the shipped policy's training has, costed for the
benchmark's devices like any other graph.
"""

import dataclasses
from typing import List

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.bench import keras_app_graphs
from tf_gdp.bench import real_graphs
from tf_gdp.bench import third_party_graphs

BUILDERS = {**real_graphs.BUILDERS, **keras_app_graphs.BUILDERS,
            **third_party_graphs.BUILDERS}
# The help of a benchmark's --graphs flag.
GRAPHS_HELP = ("Graphs: zoo names with knobs, 'zoo', files, generated graphs, "
               f"and the training steps {', '.join(BUILDERS)} built by code.")


@dataclasses.dataclass(frozen=True)
class BuiltGraph:
  """One graph of `BUILDERS`, loaded like a `graph_specs.GraphSpec`."""
  label: str

  def load(self, devices) -> graph_specs.LoadedGraph:
    """Builds the step, flattens it and costs it for `devices`."""
    from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
    extracted = extract.from_function(BUILDERS[self.label]())
    return graph_specs.LoadedGraph(
        graph_specs.op_graph_from_extracted(extracted, name=self.label,
                                            devices=devices), extracted)


def check_built(names) -> None:
  """Exits with one line if a name is no step `BUILDERS` builds (for checks
  that run built steps only)."""
  unknown = sorted(set(names) - set(BUILDERS))
  if unknown:
    raise SystemExit(f"error: unknown graph(s) {unknown}; known: "
                     f"{sorted(BUILDERS)}")


def parse(spec: str) -> List[object]:
  """The graphs of `spec`: its `GraphSpec`s, then its `BuiltGraph`s.

  Raises:
    InputError: a bad item, no graph, a graph named twice, or a graph whose
      model library is not installed.
  """
  items = [s.strip() for s in spec.split(",") if s.strip()]
  built = [BuiltGraph(item) for item in items if item in BUILDERS]
  if any(b.label in third_party_graphs.BUILDERS for b in built):
    third_party_graphs.require_library()
  others = ",".join(item for item in items if item not in BUILDERS)
  sources = (graph_specs.parse(others) if others or not built else []) + built
  labels = [s.label for s in sources]
  if len(set(labels)) != len(labels):
    raise errors.InputError(f"the graph set names a graph twice: {labels}")
  return sources
