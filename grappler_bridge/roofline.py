"""Per-op work (FLOPs, bytes accessed) and its roofline time on a device.

The cost of an op on a device kind is
`launch_overhead + max(flops / peak, bytes_accessed / bandwidth)`, with
`bytes_accessed` = input bytes + output bytes + the bytes of the variables
the op reads or writes through resource handles. Ops that launch no kernel
(NO_KERNEL_OPS) cost 0; host-only ops that touch no tensor data
(METADATA_OPS) cost a small executor overhead. An op type Grappler has no
FLOP count for is counted as 1 FLOP per output element and reported, so
that a reader of the document knows which costs are guesses.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top

from grappler_bridge import edges as edges_lib  # pylint: disable=g-import-not-at-top
from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top
from grappler_bridge import hardware as hw  # pylint: disable=g-import-not-at-top
from grappler_bridge import tensor_sizes  # pylint: disable=g-import-not-at-top

# Ops that launch no kernel in a step: constants and variables are set up
# once, placeholders are fed, control-flow primitives only route tensors in
# the executor. They cost 0.
NO_KERNEL_OPS = frozenset({
    "NoOp", "Const", "HostConst", "Placeholder", "PlaceholderV2",
    "VarHandleOp", "VariableV2", "Variable", "_Arg", "_Retval",
    "Enter", "RefEnter", "Exit", "RefExit", "Merge", "RefMerge", "Switch",
    "RefSwitch", "NextIteration", "RefNextIteration", "LoopCond",
    "ControlTrigger",
})
# Ops whose outputs alias their inputs or only describe shapes: they run on
# the host (no device kernel launch) and touch no tensor data, so they cost
# only executor bookkeeping: HOST_OP_OVERHEAD_US (capped at the spec's launch
# overhead). Measured here: ~0.4-0.5 us per trivial op in a Session.
METADATA_OPS = frozenset({
    "Identity", "RefIdentity", "IdentityN", "StopGradient", "PreventGradient",
    "PlaceholderWithDefault", "ReadVariableOp", "Reshape", "Squeeze",
    "ExpandDims", "Shape", "ShapeN", "Size", "Rank", "VariableShape",
    "EnsureShape", "Bitcast", "BroadcastGradientArgs", "ConcatOffset",
})
HOST_OP_OVERHEAD_US = 1.0
# Ops that only move or fill memory: Grappler rightly gives them no FLOPs,
# so they are not reported as unknown; the roofline's byte term costs them.
DATA_MOVEMENT_OPS = frozenset({
    "Transpose", "ConjugateTranspose", "Concat", "ConcatV2", "Pack", "Unpack",
    "Split", "SplitV", "Slice", "StridedSlice", "StridedSliceGrad", "Pad",
    "PadV2", "MirrorPad", "Tile", "Gather", "GatherV2", "GatherNd",
    "ResourceGather", "ScatterNd", "TensorScatterUpdate", "DynamicStitch",
    "ParallelDynamicStitch", "DynamicPartition", "Reverse", "ReverseV2",
    "ReverseSequence", "BroadcastTo", "Fill", "ZerosLike", "OnesLike", "Empty",
    "Range", "Copy", "CopyHost", "Snapshot", "DeepCopy", "AssignVariableOp",
    "Assign", "OneHot", "ResourceScatterUpdate", "DepthToSpace",
    "SpaceToDepth", "SpaceToBatchND", "BatchToSpaceND", "InvertPermutation",
    "_Send", "_Recv", "_HostSend", "_HostRecv",
})
# Ops that pass a resource handle through unchanged (to find its variable).
_HANDLE_FORWARDING_OPS = frozenset({
    "Identity", "IdentityN", "Enter", "Exit", "Switch", "Merge",
    "NextIteration", "RefIdentity", "RefEnter", "RefExit", "RefSwitch",
    "RefMerge", "RefNextIteration",
})
# Dense variable updates read and write every variable they get a handle of.
_DENSE_UPDATE_PREFIXES = ("ResourceApply", "AssignAddVariableOp",
                          "AssignSubVariableOp")


@dataclasses.dataclass
class Work:
  """Per node: FLOPs, bytes accessed and cost category."""
  flops: np.ndarray
  bytes_accessed: np.ndarray
  overhead_only: np.ndarray  # bool: metadata ops
  no_kernel: np.ndarray  # bool
  temp_bytes: List[int]
  unknown_flop_op_types: List[str]


def node_work(nodes, estimates: Mapping[str, Any],
              outputs: tensor_sizes.Outputs, input_bytes: Sequence[int],
              resource_bytes: Sequence[int]) -> Work:
  """FLOPs from Grappler (1 FLOP/element if it has none), bytes from shapes.

  Args:
    nodes: the graph's NodeDefs.
    estimates: node name -> Grappler's estimate (`flops`, `temp_bytes`).
    outputs: output shapes and bytes per node.
    input_bytes: bytes of the data inputs per node.
    resource_bytes: variable bytes accessed through handles per node.

  Returns:
    The work of every node.
  """
  n = len(nodes)
  flops = np.zeros(n)
  nbytes = np.zeros(n)
  overhead_only = np.zeros(n, bool)
  no_kernel = np.zeros(n, bool)
  temp = [0] * n
  unknown = set()
  for i, node in enumerate(nodes):
    estimate = estimates.get(node.name)
    nbytes[i] = input_bytes[i] + sum(outputs.nbytes[i]) + resource_bytes[i]
    if estimate is not None:
      flops[i] = estimate.flops
      temp[i] = estimate.temp_bytes
    op = node.op
    if op in NO_KERNEL_OPS:
      no_kernel[i] = True
    elif op in METADATA_OPS:
      overhead_only[i] = True
    elif flops[i] <= 0 and op not in DATA_MOVEMENT_OPS:
      flops[i] = max(1, sum(tensor_sizes.num_elements(s)
                            for s in outputs.shapes[i]))
      unknown.add(op)
  return Work(flops, nbytes, overhead_only, no_kernel, temp, sorted(unknown))


def roofline_us(work: Work, spec: hw.HardwareSpec) -> np.ndarray:
  """launch + max(flops / peak, bytes / bandwidth), in microseconds."""
  compute = work.flops / (spec.peak_gflops * 1e3)
  memory = work.bytes_accessed / (spec.mem_bandwidth_gbps * 1e3)
  cost = spec.launch_overhead_us + np.maximum(compute, memory)
  host_overhead = min(spec.launch_overhead_us, HOST_OP_OVERHEAD_US)
  cost = np.where(work.overhead_only, host_overhead, cost)
  return np.where(work.no_kernel, 0.0, cost)


def resource_bytes_accessed(nodes, handle_inputs: graph_view.HandleInputs,
                            dtypes,
                            edges: edges_lib.Edges,
                            memory: List[int]) -> List[int]:
  """Variable bytes an op reads/writes through resource handles.

  Ref edges already carry the variable's bytes; resource edges carry 0, so
  the variable behind the handle is added: once for reads and plain writes,
  twice for dense updates (read + write), never for sparse/scatter/gather.

  Args:
    nodes: the graph's NodeDefs.
    handle_inputs: per node, (source, slot) of its resource/ref inputs.
    dtypes: output dtypes per node.
    edges: the graph's edges (for the data sources of each node).
    memory: variable bytes per node.

  Returns:
    Extra bytes accessed per node.
  """
  cache: Dict[int, int] = {}
  accessed = [0] * len(nodes)
  for i, node in enumerate(nodes):
    if not handle_inputs[i]:
      continue
    factor = _variable_access_factor(node.op)
    if not factor:
      continue
    for src, slot in handle_inputs[i]:
      if dtypes[src][slot] != types_pb2.DT_RESOURCE:
        continue  # a ref edge already carries the variable's bytes
      accessed[i] += factor * _trace_variable(src, nodes, edges.data_sources,
                                              memory, cache)
  return accessed


def _variable_access_factor(op: str) -> int:
  if "Sparse" in op or "Scatter" in op or "Gather" in op:
    return 0  # touches only the indexed rows, already in the other inputs
  return 2 if op.startswith(_DENSE_UPDATE_PREFIXES) else 1


def _trace_variable(start: int, nodes, data_sources: List[List[int]],
                    memory: List[int], cache: Dict[int, int]) -> int:
  """Follows a handle back through Identity/Enter/Switch... to its variable.

  A forwarding op's handle is taken from its first data input (for Merge,
  the loop's Enter side, as back-edges come second).

  Args:
    start: the node producing the handle.
    nodes: the graph's nodes.
    data_sources: per node, the source index of each data input.
    memory: variable bytes per node.
    cache: node -> resolved bytes, shared between calls.

  Returns:
    The variable's bytes, or 0 if the handle leads to no known variable.
  """
  chain, current = [], start
  value = 0
  while current not in cache:
    chain.append(current)
    if memory[current]:
      value = memory[current]
      break
    if nodes[current].op not in _HANDLE_FORWARDING_OPS or not (
        data_sources[current]):
      break
    current = data_sources[current][0]
    if current in chain:
      break
  else:
    value = cache[current]
  for visited in chain:
    cache[visited] = value
  return value
