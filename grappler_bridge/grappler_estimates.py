"""What Grappler's analytical model says about a flat graph.

Grappler gives three things the op graph needs: static shapes (through a
Grappler Item), FLOP counts and, for comparison, its own per-op times. Both
counts are read from a VirtualCluster with one made-up device:

* FLOPs: on a device so slow (1 MFLOP/s) that its compute time is the FLOP
  count (Grappler rounds times to whole microseconds, which zeroes small ops
  on a realistic device, so it reports nanoseconds = FLOPs here);
* times on a spec: on a device `_GRAPPLER_TIME_SCALE` times slower than the
  spec, so the rounding becomes nanosecond rounding.

Grappler only infers all shapes of a graph it can fully see, so it works on
an analysis copy: captured handles become their variables, placeholders of
known shape become `Empty` tensors of that shape.
"""

import dataclasses
import math
from typing import Any, Dict, List, Tuple

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import device_properties_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import meta_graph_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.python.grappler import cluster as grappler_cluster  # pylint: disable=g-import-not-at-top
from tensorflow.python.grappler import item as grappler_item  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top
from grappler_bridge import hardware as hw  # pylint: disable=g-import-not-at-top
from grappler_bridge import roofline  # pylint: disable=g-import-not-at-top

# Grappler's virtual device for FLOP counting: 0.001 GFLOP/s, 0.001 GB/s, so
# a time of 1 us (Grappler's resolution) is exactly 1 FLOP or 1 byte.
_FLOP_COUNTING_GFLOPS = 1e-3
# grappler_op_costs runs Grappler on a device this many times slower than the
# spec, so that its whole-microsecond rounding becomes nanosecond rounding.
_GRAPPLER_TIME_SCALE = 1000.0
_VIRTUAL_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"
_CROSS_CHECK_TOP_OPS = 5


@dataclasses.dataclass(frozen=True)
class OpEstimate:
  """Grappler's count for one node: FLOPs and temporary bytes."""
  flops: float
  temp_bytes: int


def analysis_item(graph: graph_view.Graph, placement=None):
  """A Grappler Item of the analysis copy, and that copy's MetaGraphDef.

  `placement` (node name -> device) sets the copy's device fields; without
  it they are cleared, for a single-device virtual cluster.
  """
  meta_graph = _analysis_meta_graph(graph, placement or {})
  return _new_item(meta_graph), meta_graph


def _analysis_meta_graph(graph: graph_view.Graph, placement
                        ) -> meta_graph_pb2.MetaGraphDef:
  """A copy of the graph that Grappler can infer all shapes of.

  Devices come from `placement` (cleared if absent); a captured
  resource placeholder becomes the VarHandleOp it stands for, so readers get
  the variable's shape; a placeholder of known shape becomes `Empty` of that
  shape, because Grappler forgets the shapes of fed placeholders. Every sink
  is fetched, so every node is costed. Original nodes keep their positions;
  helper nodes are appended.

  Args:
    graph: the graph to copy.
    placement: node name -> device string for the copy.

  Returns:
    The analysis MetaGraphDef.
  """
  meta_graph = meta_graph_pb2.MetaGraphDef()
  meta_graph.CopyFrom(graph.meta_graph)
  nodes = meta_graph.graph_def.node
  names = {node.name for node in nodes}
  shape_consts = []
  for node in nodes:
    node.device = placement.get(node.name, "")
    if node.op != "Placeholder":
      continue
    if node.name in graph.handle_shapes:
      graph_view.materialize_var_handle(node, *graph.handle_shapes[node.name])
    elif _fully_defined(node.attr["shape"].shape):
      shape_consts.append(_make_empty(node, names))
  for name, dims in shape_consts:
    const = nodes.add(name=name, op="Const")
    const.attr["dtype"].type = types_pb2.DT_INT32
    const.attr["value"].tensor.CopyFrom(
        tf.make_tensor_proto(np.array(dims, np.int32)))
  fetches = meta_graph.collection_def[extract.FETCH_COLLECTION].node_list
  wanted = list(dict.fromkeys(list(graph.fetches) + graph_view.sinks(nodes)))
  fetches.ClearField("value")
  fetches.value.extend(wanted)
  return meta_graph


def _make_empty(node, names) -> Tuple[str, List[int]]:
  """Turns a placeholder into `Empty`; returns its new shape input node."""
  dims = [d.size for d in node.attr["shape"].shape.dim]
  dtype = node.attr["dtype"].type
  shape_name = _fresh_name(node.name + "/tf_gdp_shape", names)
  node.op = "Empty"
  node.ClearField("attr")
  node.attr["dtype"].type = dtype
  node.attr["init"].b = False
  node.input.insert(0, shape_name)
  return shape_name, dims


def _fresh_name(base: str, names) -> str:
  name, i = base, 0
  while name in names:
    i += 1
    name = f"{base}_{i}"
  names.add(name)
  return name


def _fully_defined(shape) -> bool:
  return not shape.unknown_rank and all(d.size >= 0 for d in shape.dim)


def _new_item(meta_graph) -> grappler_item.Item:
  try:
    return grappler_item.Item(meta_graph, ignore_colocation=False)
  except (ValueError, tf.errors.OpError) as e:
    raise errors.GraphLoadError(
        f"Grappler cannot load the graph: {errors.first_line(e)}") from e


def _virtual_device(gflops: float, gbps: float, name: str = _VIRTUAL_DEVICE):
  """A Grappler device with the given rates.

  Without `environment["architecture"]` Grappler ignores a GPU's cores and
  clock (it assumes 100 GFLOP/s, 12 GB/s); a "CPU" device's rate is exactly
  num_cores * frequency, so every rate is described as a CPU.

  Args:
    gflops: compute rate in GFLOP/s.
    gbps: memory bandwidth in GB/s.

  Returns:
    A NamedDevice.
  """
  properties = device_properties_pb2.DeviceProperties(
      type="CPU", num_cores=1, frequency=max(1, round(gflops * 1e3)),
      bandwidth=max(1, round(gbps * 1e6)))  # MHz, KB/s
  return device_properties_pb2.NamedDevice(name=name, properties=properties)


def _measure(item, gflops: float, gbps: float) -> Dict[str, Any]:
  """Grappler's OpPerformance record per node on a virtual device."""
  op_perfs, _ = _measure_costs(item, [_virtual_device(gflops, gbps)])
  return {perf.node: perf for perf in op_perfs}


def _measure_costs(item, devices):
  """(op_perfs, run_time in seconds) from a VirtualCluster of `devices`."""
  cluster = grappler_cluster.Cluster(devices=devices)
  try:
    op_perfs, run_time, _ = cluster.MeasureCosts(item)
  except (ValueError, RuntimeError, tf.errors.OpError) as e:
    raise errors.GraphLoadError(
        f"Grappler cannot cost the graph: {errors.first_line(e)}") from e
  finally:
    cluster.Shutdown()
  return op_perfs, run_time


def op_estimates(item) -> Dict[str, OpEstimate]:
  """Grappler's FLOPs and temporary bytes per node name."""
  perfs = _measure(item, _FLOP_COUNTING_GFLOPS, _FLOP_COUNTING_GFLOPS)
  return {
      name: OpEstimate(
          flops=perf.compute_time / 1e3,  # ns on a 1 MFLOP/s device = FLOPs
          temp_bytes=int(max(perf.temporary_memory_size,
                             perf.op_memory.temp_memory, 0)))
      for name, perf in perfs.items()}


def _grappler_costs_us(item, spec: hw.HardwareSpec) -> Dict[str, float]:
  """Grappler's per-node time (compute + memory, no overlap) on `spec`."""
  scale = _GRAPPLER_TIME_SCALE
  perfs = _measure(item, spec.peak_gflops / scale,
                   spec.mem_bandwidth_gbps / scale)
  return {name: perf.compute_cost / (1e3 * scale)
          for name, perf in perfs.items()}


def grappler_op_costs(metagraph, spec: hw.HardwareSpec) -> Dict[str, float]:
  """Grappler's analytical time per node, in microseconds, on `spec`.

  Grappler's VirtualCluster with a device of the spec's peak and bandwidth
  (no `environment["architecture"]`): per op, compute time + memory time
  (Grappler does not overlap them), without launch overhead.

  Args:
    metagraph: an ExtractedGraph, MetaGraphDef or GraphDef.
    spec: the device.

  Returns:
    Node name -> microseconds, for every node of the graph.
  """
  graph = graph_view.as_graph(metagraph)
  item, _ = analysis_item(graph)
  costs = _grappler_costs_us(item, spec)
  return {node.name: costs.get(node.name, 0.0) for node in graph.nodes}


def placed_step_time_us(metagraph, placement, devices) -> float:
  """Grappler's VirtualCluster estimate of one step under `placement`.

  Each device is described with its spec's rates (as in `grappler_op_costs`).
  Beware: in TF 2.21 the VirtualCluster does not charge cross-device
  transfers, so this is only a fair judge of single-device placements.

  Args:
    metagraph: an ExtractedGraph, MetaGraphDef or GraphDef.
    placement: node name -> device name (one of `devices`).
    devices: (device name, HardwareSpec) pairs, the cluster.

  Returns:
    The estimated step time in microseconds.
  """
  graph = graph_view.as_graph(metagraph)
  item, _ = analysis_item(graph, placement)
  scale = _GRAPPLER_TIME_SCALE
  named = [_virtual_device(spec.peak_gflops / scale,
                           spec.mem_bandwidth_gbps / scale, name)
           for name, spec in devices]
  _, run_time = _measure_costs(item, named)
  return run_time * 1e6 / scale


def cross_check(nodes, item, work: roofline.Work, specs):
  """Per kind: roofline vs Grappler's analytical totals and worst op types.

  Grappler adds no launch overhead, so op types are compared on the roofline
  without it ("roofline_us" in worst_op_types); the ratio is roofline /
  Grappler per op type, the worst being furthest from 1.

  Args:
    nodes: the graph's NodeDefs.
    item: the Grappler Item of the graph's analysis copy.
    work: the roofline's work per node.
    specs: kind -> spec.

  Returns:
    Kind -> summary dict.
  """
  summary = {}
  for kind, spec in specs.items():
    full = roofline.roofline_us(work, spec)
    bare = roofline.roofline_us(
        work, dataclasses.replace(spec, launch_overhead_us=0))
    grappler = _grappler_costs_us(item, spec)
    by_type: Dict[str, List[float]] = {}
    for i, node in enumerate(nodes):
      totals = by_type.setdefault(node.op, [0.0, 0.0])
      totals[0] += float(bare[i])
      totals[1] += grappler.get(node.name, 0.0)
    grappler_total = sum(t[1] for t in by_type.values())
    summary[kind] = {
        "grappler_device": f"virtual:{spec.name} (no architecture)",
        "roofline_total_us": round(float(full.sum()), 3),
        "roofline_without_overhead_us": round(float(bare.sum()), 3),
        "grappler_total_us": round(grappler_total, 3),
        "worst_op_types": _worst_op_types(by_type),
    }
  return summary


def _worst_op_types(by_type: Dict[str, List[float]]):
  rows = []
  for op, (roofline_us, grappler_us) in by_type.items():
    if roofline_us > 0 and grappler_us > 0:
      rows.append((abs(math.log(roofline_us / grappler_us)), op, roofline_us,
                   grappler_us))
  rows.sort(reverse=True)
  return [{"op": op, "roofline_us": round(r, 3), "grappler_us": round(g, 3),
           "ratio": round(r / g, 3)}
          for _, op, r, g in rows[:_CROSS_CHECK_TOP_OPS]]
