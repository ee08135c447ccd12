"""`tf-gdp measure`: run a placed graph with the TF runtime and time it.

Examples:
  tf-gdp place --graphs=rnnlm2:batch=8 --devices=cpu-workers:2 --out=out/
  tf-gdp measure --graph=rnnlm2:batch=8 --devices=cpu-workers:2 \
      --placement=out/rnnlm2_batch8/placement.json --target=cpu-workers:2

The graph is rebuilt (zoo model) or re-read (GraphDef / SavedModel), the
placement file is applied by op name, and the step runs on the target:
`local` (this process's devices), `cpu-workers:K` (K single-core worker
processes started for the measurement) or a `grpc://host:port` cluster. The
measured median is printed beside the simulator's prediction. A placement
that fails to run (OOM, kernel error, timeout) is reported with exit code 2.
Measuring runs the graph's ops: a graph with ops that reach outside the step
(file writes and reads, py_function, network ops) is refused before anything
runs unless --allow_side_effects is given.
"""

from absl import flags

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp import placement_file
from tf_gdp.cli import graph_flags
from tf_gdp.cost import shape_caveat
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.rl import cli_lib

_GRAPH = flags.DEFINE_string(
    "graph", None, "A TensorFlow graph: zoo model with knobs "
    "('rnnlm2:batch=8'), GraphDef/MetaGraphDef file or SavedModel directory "
    "(op-graph JSON has no TF graph to run).", required=True)
_DEVICES = flags.DEFINE_string(
    "devices", "cpu-workers:2", "The topology the placement was made for.")
_PLACEMENT = flags.DEFINE_string(
    "placement", None, "Placement file (from `place`, `finetune --out` or "
    "PlacedFunction.save); omit to run everything on the first device.")
_TARGET = flags.DEFINE_string(
    "target", None, "local, cpu-workers:K or grpc://host:port (default: "
    "--devices when it is cpu-workers:K, else local).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps first.",
                               lower_bound=0)
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed steps (median).",
                                lower_bound=1)
_TIMEOUT = flags.DEFINE_float("timeout", 120.0, "Seconds a step may take.",
                              lower_bound=0.1)
_SIGNATURE = graph_flags.define_signature(__name__)
_INPUT_SHAPES = graph_flags.define_input_shapes(__name__)
_ALLOW_SIDE_EFFECTS = cli_lib.define_allow_side_effects(__name__)


def main(argv):
  del argv
  cli_lib.quiet_tensorflow_logs()
  from grappler_bridge import side_effects  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import profiled_costs  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  items = graph_specs.parse(_GRAPH.value, signature=_SIGNATURE.value,
                           input_shapes=_INPUT_SHAPES.value)
  if len(items) != 1:
    raise errors.InputError("--graph names one graph")
  topology = topology_lib.get(_DEVICES.value)
  loaded = items[0].load(_DEVICES.value)
  if loaded.extracted is None:
    raise errors.InputError(
        f"{_GRAPH.value}: an op-graph JSON file has no TensorFlow graph to run")
  side_effects.check(loaded.extracted.graph_def, what=_GRAPH.value,
                     allow_side_effects=_ALLOW_SIDE_EFFECTS.value)
  if _PLACEMENT.value:  # a file for another graph is refused before profiling
    placement_file.load(loaded.graph, topology, _PLACEMENT.value)
  # The prediction prices ops as `place` did: profiled when the devices are
  # here (the same cached profile), else the roofline.
  graph, costs = profiled_costs.profiled_graph(
      loaded.graph, loaded.extracted, topology, log=cli_lib.progress)
  if _PLACEMENT.value:
    placement = placement_file.load(graph, topology, _PLACEMENT.value)
  else:
    placement = np.zeros(graph.num_nodes, np.int32)
  target = _TARGET.value or (_DEVICES.value if _DEVICES.value.startswith(
      topology_lib.CPU_WORKERS) else "local")
  predicted = simulator.simulate(graph, placement, topology)
  cli_lib.progress(f"running {graph.name} ({graph.num_nodes:,} ops) on {target}")
  result = measure.measure(loaded.extracted, placement, target,
                           topology=topology, warmup=_WARMUP.value,
                           repeats=_REPEATS.value, timeout_s=_TIMEOUT.value,
                           allow_side_effects=_ALLOW_SIDE_EFFECTS.value)
  print(f"predicted {predicted.step_time_us / 1e3:,.2f} ms (simulated on "
        f"{topology.name}; ops priced: {_priced(costs)}; links "
        f"{topology_lib.link_source(topology)})")
  if not result.valid:
    raise errors.PlacementError(f"the placed step failed on {target}: "
                                f"{result.reason}")
  times = ", ".join(f"{t / 1e3:.2f}" for t in result.times_us)
  print(f"measured  {result.step_time_us / 1e3:,.2f} ms (median of "
        f"{len(result.times_us)} steps: {times})")
  shapes = shape_caveat.caveat(graph, measured=True)
  if shapes:
    print(shapes)


def _priced(costs: dict) -> str:
  if costs["source"] == "profiled":
    return (f"{costs['profiled_ops']} profiled on {costs['target']}, "
            f"{costs['roofline_ops']} roofline")
  return f"{costs['source']} ({costs.get('why', '')})"
