"""The op-graph document (docs/OPGRAPH_FORMAT.md) of a flat TF graph.

The placer never sees TensorFlow: it sees the op-graph document. This module
only assembles it, from a flat MetaGraphDef (`extract.ExtractedGraph`) and
one HardwareSpec per device kind; each part has its own module:

* `graph_view`: the graph as given, and what is known of captured handles;
* `tensor_sizes`: output shapes (Grappler's static inference) and bytes, and
  `memory_bytes`, the size of the variable a node creates;
* `edges`: data/control edges (a DAG) and while-loop back-edges;
* `loops`: how many times each op of a while loop runs per step (its
  roofline cost is multiplied by it; the simulator repeats its transfers);
* `grappler_estimates`: FLOPs from Grappler's analytical cost model, and its
  per-op times for the optional cross-check;
* `roofline`: bytes accessed and the cost of a node on a device kind,
  `launch_overhead + max(flops / peak, bytes_accessed / bandwidth)`;
* `profiling`: measured per-op times (`profile_step`) that may replace the
  roofline of one kind;
* `constraints`: colocation groups and the kinds with a kernel for each op.

Metadata records what each number rests on: op types Grappler has no FLOP
count for (`flops_unknown_op_types`), nodes with unknown shapes
(`unknown_shape_nodes`), the cost source per kind.
"""

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import constraints  # pylint: disable=g-import-not-at-top
from grappler_bridge import edges as edges_lib  # pylint: disable=g-import-not-at-top
from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import grappler_estimates  # pylint: disable=g-import-not-at-top
from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top
from grappler_bridge import hardware as hw  # pylint: disable=g-import-not-at-top
from grappler_bridge import input_shapes  # pylint: disable=g-import-not-at-top
from grappler_bridge import loops  # pylint: disable=g-import-not-at-top
from grappler_bridge import profiling  # pylint: disable=g-import-not-at-top
from grappler_bridge import roofline  # pylint: disable=g-import-not-at-top
from grappler_bridge import tensor_sizes  # pylint: disable=g-import-not-at-top

FORMAT = "tf-gdp-opgraph"
VERSION = 1

# The other entry points of the cost layer, kept here for callers of `costs`.
grappler_op_costs = grappler_estimates.grappler_op_costs
profile_step = profiling.profile_step


# ---------------------------------------------------------------------------
# Argument checks.


def _check_hardware(hardware) -> Dict[str, hw.HardwareSpec]:
  """Kind -> spec; a spec may be given by preset name."""
  if not isinstance(hardware, Mapping) or not hardware:
    raise errors.InputError(
        "hardware must map device kinds (e.g. 'GPU', 'CPU') to specs")
  specs = {}
  for kind, spec in hardware.items():
    if kind not in hw.KINDS:
      raise errors.InputError(
          f"unknown device kind {kind!r} in hardware; known: {hw.KINDS}")
    if isinstance(spec, str):
      spec = hw.get_spec(spec)
    if not isinstance(spec, hw.HardwareSpec):
      raise errors.InputError(
          f"hardware[{kind!r}] is a {type(spec).__name__}, not a HardwareSpec")
    if spec.kind != kind:
      raise errors.InputError(
          f"hardware[{kind!r}] is {spec.name!r}, a {spec.kind} spec")
    specs[kind] = spec
  return specs


def _check_pinned(pinned, index: Dict[str, int]) -> Dict[str, str]:
  """Validates node names and device strings of user pins."""
  result = {}
  for name, device in (pinned or {}).items():
    if name not in index:
      raise errors.InputError(f"pinned node {name!r} is not in the graph")
    try:
      spec = tf.DeviceSpec.from_string(str(device))
    except ValueError as e:
      raise errors.InputError(
          f"pinned node {name!r}: bad device {device!r}: {errors.first_line(e)}"
      ) from e
    if not spec.to_string():
      raise errors.InputError(f"pinned node {name!r}: empty device string")
    result[name] = str(device)
  return result


def _check_profile(profile, profile_kind: str, specs) -> Dict[str, float]:
  if profile is None:
    return {}
  if profile_kind not in specs:
    raise errors.InputError(
        f"profile_kind {profile_kind!r} is not a kind of hardware "
        f"({sorted(specs)}): its unprofiled ops need a roofline spec")
  checked = {}
  for name, micros in profile.items():
    value = float(micros)
    if not math.isfinite(value) or value < 0:
      raise errors.InputError(
          f"profile time of {name!r} must be finite and >= 0, got {micros!r}")
    checked[name] = value
  return checked


# ---------------------------------------------------------------------------
# The document.


def op_graph_document(extracted_or_metagraph,
                      hardware: Mapping[str, Any],
                      *,
                      name: str,
                      pinned: Optional[Mapping[str, str]] = None,
                      profile: Optional[Mapping[str, float]] = None,
                      profile_kind: str = "CPU",
                      cross_check: bool = False) -> Dict[str, Any]:
  """Builds the op-graph document (format v1) of a flat graph.

  Args:
    extracted_or_metagraph: an `extract.ExtractedGraph` (preferred: it knows
      the shapes of captured variables), a flat MetaGraphDef or a GraphDef.
    hardware: device kind ("GPU", "CPU") -> HardwareSpec (or preset name);
      one roofline cost per kind and node.
    name: the document's graph name.
    pinned: node name -> TF device string the placer must keep.
    profile: node name -> measured microseconds (see `profile_step`); these
      replace the roofline of `profile_kind` for the nodes they cover.
    profile_kind: the device kind the profile was measured on.
    cross_check: also run Grappler's analytical model per kind and summarize
      the agreement in metadata["cross_check"].

  Returns:
    The document, a JSON-serializable dict.

  Raises:
    errors.InputError: bad arguments, or a graph Grappler cannot load.
  """
  if not isinstance(name, str) or not name:
    raise errors.InputError("the op graph needs a non-empty name")
  specs = _check_hardware(hardware)
  graph = graph_view.as_graph(extracted_or_metagraph)
  index = graph_view.node_index(graph.nodes)
  pins = _check_pinned(pinned, index)
  checked_profile = _check_profile(profile, profile_kind, specs)

  analysis = _analyze(graph, index)
  metadata = _base_metadata(graph, analysis)
  costs = {}
  needed = _needed(graph, analysis.edges)
  for kind, spec in specs.items():
    # A loop's ops run once per iteration (a profile counts them all); an
    # op no fetch needs never runs (the session prunes it).
    costs[kind] = (roofline.roofline_us(analysis.work, spec) *
                   analysis.loops.executions * needed)
    metadata["cost_source"][kind] = f"roofline:{spec.name}"
  if checked_profile:
    metadata["profile"] = _profile_metadata(
        costs, checked_profile, profile_kind, specs, index)
    metadata["cost_source"][profile_kind] = f"profiled:{profile_kind}"
  if cross_check:
    metadata["cross_check"] = grappler_estimates.cross_check(
        graph.nodes, analysis.item, analysis.work, specs)
  metadata["total_cost_us"] = {
      kind: round(float(cost.sum()), 3) for kind, cost in costs.items()}

  groups = constraints.colocation_group_names(
      graph.nodes, index, analysis.handle_inputs,
      analysis.item.GetColocationGroups())
  kinds, conflicts = constraints.device_kinds(graph.nodes, groups,
                                              constraints.KernelTable())
  _constraint_metadata(metadata, groups, kinds, conflicts)
  document = {"format": FORMAT, "version": VERSION, "name": name}
  if graph.fetches:
    document["fetches"] = [f for f in graph.fetches if f in index]
  document["metadata"] = metadata
  metadata["unneeded_nodes"] = int(len(needed) - needed.sum())
  document["nodes"] = _node_dicts(graph, costs, analysis, groups, kinds, pins,
                                  needed)
  document["edges"] = [e for e in analysis.edges.edges if needed[e["dst"]]]
  if analysis.edges.back_edges:
    document["back_edges"] = analysis.edges.back_edges
  return document


@dataclasses.dataclass
class _Analysis:
  """Everything derived from the graph that does not depend on hardware."""
  item: Any  # grappler Item of the analysis copy
  outputs: tensor_sizes.Outputs
  edges: edges_lib.Edges
  handle_inputs: graph_view.HandleInputs
  memory: List[int]
  work: roofline.Work
  loops: loops.Loops


def _analyze(graph: graph_view.Graph, index: Dict[str, int]) -> _Analysis:
  """Shapes, edges, memory and work (FLOPs, bytes) of every node."""
  nodes = graph.nodes
  item, analysis_graph = grappler_estimates.analysis_item(graph)
  outputs = tensor_sizes.node_outputs(nodes, item.GetOpProperties())
  edges = edges_lib.build_edges(nodes, index, outputs)
  edges_lib.check_acyclic(nodes, edges.edges)
  handle_inputs = graph_view.handle_inputs(nodes, index, outputs.dtypes)
  memory = tensor_sizes.memory_bytes(analysis_graph.graph_def.node,
                                     len(nodes))
  resource_bytes = roofline.resource_bytes_accessed(
      nodes, handle_inputs, outputs.dtypes, edges, memory)
  work = roofline.node_work(nodes, grappler_estimates.op_estimates(item),
                            outputs, edges.input_bytes, resource_bytes)
  return _Analysis(item, outputs, edges, handle_inputs, memory, work,
                   loops.analyze(nodes, outputs.shapes))


def _base_metadata(graph: graph_view.Graph, analysis: _Analysis):
  work = analysis.work
  return {
      "producer": "grappler_bridge.costs",
      "cost_source": {},
      "cost_model": ("launch_overhead + max(flops / peak, "
                     "(input + output bytes) / bandwidth); host-only ops "
                     "(Identity, Reshape, ReadVariableOp...): "
                     "min(launch_overhead, "
                     f"{roofline.HOST_OP_OVERHEAD_US} us); "
                     "no-kernel ops (Const, Placeholder, NoOp, loop "
                     "primitives): 0"),
      "flops_source": "grappler:OpLevelCostEstimator",
      "total_gflops": round(float(work.flops.sum()) / 1e9, 6),
      "flops_unknown_op_types": work.unknown_flop_op_types,
      "flops_unknown_rule": "1 FLOP per output element",
      "unknown_shape_nodes": analysis.outputs.unknown_shape_nodes,
      # Inputs whose shape the graph leaves unknown, each unknown dimension
      # priced as 1 (`input_shapes`): name -> dims, -1 unknown, None rank.
      "unknown_shape_inputs": _unknown_inputs(graph),
      "captured_variables_with_shape": len(graph.handle_shapes),
      # One LoopCond per lowered while loop; its iterations per run where
      # the graph fixes them (`loops`), else null: that loop is priced as
      # one iteration (`tf_gdp.cost.loop_caveat`).
      "while_loops": sum(node.op == "LoopCond" for node in graph.nodes),
      "loop_trips": analysis.loops.trips,
  }


def _unknown_inputs(graph: graph_view.Graph) -> Dict[str, Any]:
  captured = set(graph.handle_shapes)
  if graph.extracted is not None:
    captured.update(graph.extracted.capture_names)
  return {name: dims for name, dims in sorted(
      input_shapes.unknown(graph.meta_graph.graph_def).items())
          if name not in captured}


def _profile_metadata(costs, profile, kind: str, specs, index):
  covered, unmatched = _apply_profile(costs[kind], profile, index)
  return {
      "kind": kind,
      "profiled_nodes": covered,
      "fallback_nodes": len(index) - covered,
      "fallback_source": f"roofline:{specs[kind].name}",
      "unmatched_names": unmatched,
  }


def _apply_profile(cost: np.ndarray, profile: Mapping[str, float],
                   index: Dict[str, int]) -> Tuple[int, int]:
  """Replaces costs by profiled times; returns (covered, unmatched) counts."""
  covered = unmatched = 0
  for name, micros in profile.items():
    i = index.get(name)
    if i is None:
      unmatched += 1
      continue
    cost[i] = micros
    covered += 1
  return covered, unmatched


def _constraint_metadata(metadata, groups, kinds, conflicts):
  metadata["colocation_groups"] = len(set(groups.values()))
  metadata["restricted_kind_nodes"] = sum(k is not None for k in kinds)
  if conflicts:
    metadata["colocation_kind_conflicts"] = conflicts[:20]
  if not constraints.registry_has_gpu_kernels():
    metadata["kernel_registry"] = (
        "this TensorFlow build registers no GPU kernels: device_kinds not "
        "restricted")


def _needed(graph: graph_view.Graph, edges: edges_lib.Edges) -> np.ndarray:
  """bool[n]: the ops some fetch needs (through data, control and loop back
  edges). A session runs only these; without fetches, all."""
  n = len(graph.nodes)
  if not graph.fetches:
    return np.ones(n, np.bool_)
  sources: List[List[int]] = [[] for _ in range(n)]
  for edge in edges.edges + edges.back_edges:
    sources[edge["dst"]].append(edge["src"])
  index = graph_view.node_index(graph.nodes)
  needed = np.zeros(n, np.bool_)
  stack = [index[f] for f in graph.fetches if f in index]
  while stack:
    v = stack.pop()
    if not needed[v]:
      needed[v] = True
      stack.extend(sources[v])
  return needed


def _node_dicts(graph: graph_view.Graph, costs, analysis: _Analysis, groups,
                kinds, pins, needed) -> List[Dict[str, Any]]:
  """One document node per NodeDef, in graph order."""
  outputs, work = analysis.outputs, analysis.work
  result = []
  cost_lists = {kind: cost.tolist() for kind, cost in costs.items()}
  capture_names = _capture_names(graph)
  for i, node in enumerate(graph.nodes):
    entry = {
        "name": node.name,
        "op": node.op,
        "cost": {kind: round(c[i], 4) for kind, c in cost_lists.items()},
        "output_bytes": int(sum(outputs.nbytes[i])) if needed[i] else 0,
        "memory_bytes": int(analysis.memory[i]),
        "temp_bytes": int(work.temp_bytes[i]) if needed[i] else 0,
    }
    if analysis.loops.executions[i] > 1:
      entry["executions"] = int(analysis.loops.executions[i])
    if i in groups:
      entry["colocation_group"] = groups[i]
    if kinds[i] is not None:
      entry["device_kinds"] = list(kinds[i])
    device = pins.get(node.name) or (
        "" if node.name in capture_names else node.device)
    if device:
      entry["device"] = device
    entry["output_shapes"] = outputs.shapes[i]
    result.append(entry)
  return result


def _capture_names(graph: graph_view.Graph) -> frozenset:
  """Names of the placeholders that stand for captured variables.

  Their device is where the variable happened to be created, not a user
  pin, so it is not kept. Other captured tensors keep the device scope they
  were traced in (a replica's, under a distribution strategy).
  """
  if graph.extracted is None:
    return frozenset()
  return graph.extracted.resource_captures
