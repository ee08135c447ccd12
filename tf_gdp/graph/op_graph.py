"""The op-graph IR: a TF-free, numpy view of one dataflow graph to place.

This is the contract between the Grappler bridge and the learning code: node
names, op types, per-device-kind compute costs, bytes, memory, placement
constraints and the edges with the bytes they carry. The simulator and the
policy read the arrays directly, so they are plain numpy and built once.
"""

import dataclasses
import functools
import heapq
from typing import Mapping, Optional, Sequence

import numpy as np

from tf_gdp import errors

CONTROL_OUTPUT = -1  # `edge_output` value of a control dependency


@dataclasses.dataclass(frozen=True, eq=False)
class OpGraph:
  """One op graph. Construct through `OpGraph.build` (it validates).

  Attributes:
    name: graph name.
    node_names: unique op names, index = node id.
    op_types: op type per node.
    costs: device kind -> float64[num_nodes] compute time in microseconds.
    output_bytes: int64[num_nodes], total bytes of each op's outputs.
    memory_bytes: int64[num_nodes], persistent bytes (variables).
    temp_bytes: int64[num_nodes], scratch bytes while the op runs.
    edge_src, edge_dst: int32[num_edges] node ids; the edges form a DAG.
    edge_bytes: int64[num_edges] bytes carried (0 for control edges).
    edge_output: int32[num_edges] output slot of src, -1 for control edges.
    colocation_groups: per node a group name or None.
    device_kinds: per node a tuple of allowed kinds or None (any kind).
    pinned_devices: per node a device string the user pinned it to, or None.
    output_shapes: per node a list of shapes (or None) when known.
    back_edges: int32[k, 2] loop back-edges (src, dst), not part of the DAG.
    fetches: node names whose execution is the step.
    metadata: free-form JSON-able dict (cost sources, producer, knobs).
    executions: int64[num_nodes], how many times each op runs per step (the
      iterations of the while loops around it; 1 elsewhere). Its costs
      already count them; the simulator repeats its transfers.
  """
  name: str
  node_names: tuple
  op_types: tuple
  costs: Mapping[str, np.ndarray]
  output_bytes: np.ndarray
  memory_bytes: np.ndarray
  temp_bytes: np.ndarray
  edge_src: np.ndarray
  edge_dst: np.ndarray
  edge_bytes: np.ndarray
  edge_output: np.ndarray
  colocation_groups: tuple
  device_kinds: tuple
  pinned_devices: tuple
  output_shapes: tuple
  back_edges: np.ndarray
  fetches: tuple
  metadata: dict
  executions: Optional[np.ndarray] = None

  @classmethod
  def build(cls, *, name: str, node_names: Sequence[str],
            op_types: Sequence[str], costs: Mapping[str, Sequence[float]],
            output_bytes, memory_bytes, edge_src, edge_dst, edge_bytes,
            temp_bytes=None, edge_output=None,
            colocation_groups: Optional[Sequence[Optional[str]]] = None,
            device_kinds=None, pinned_devices=None, output_shapes=None,
            back_edges=None, fetches=(), metadata=None,
            executions=None) -> "OpGraph":
    """Converts and validates all fields; raises GraphFormatError."""
    n = len(node_names)
    none_list = (None,) * n
    graph = cls(
        name=str(name),
        node_names=tuple(node_names),
        op_types=tuple(op_types),
        costs={kind: _float_array(values, f"cost[{kind}]")
               for kind, values in sorted(costs.items())},
        output_bytes=_int_array(output_bytes, "output_bytes"),
        memory_bytes=_int_array(memory_bytes, "memory_bytes"),
        temp_bytes=(_int_array(temp_bytes, "temp_bytes")
                    if temp_bytes is not None else np.zeros(n, np.int64)),
        edge_src=_int_array(edge_src, "edge src", np.int32),
        edge_dst=_int_array(edge_dst, "edge dst", np.int32),
        edge_bytes=_int_array(edge_bytes, "edge bytes"),
        edge_output=(_int_array(edge_output, "edge output", np.int32,
                                minimum=CONTROL_OUTPUT)
                     if edge_output is not None
                     else np.zeros(len(edge_src), np.int32)),
        colocation_groups=tuple(colocation_groups or none_list),
        device_kinds=tuple(None if k is None else tuple(k)
                           for k in (device_kinds or none_list)),
        pinned_devices=tuple(pinned_devices or none_list),
        output_shapes=tuple(output_shapes or none_list),
        back_edges=(np.asarray(back_edges, np.int32).reshape(-1, 2)
                    if back_edges is not None and len(back_edges)
                    else np.zeros((0, 2), np.int32)),
        fetches=tuple(fetches),
        metadata=dict(metadata or {}),
        executions=(_int_array(executions, "executions", minimum=1)
                    if executions is not None else np.ones(n, np.int64)),
    )
    graph._validate()  # pylint: disable=protected-access
    return graph

  # ---- sizes and lookups -------------------------------------------------

  @property
  def num_nodes(self) -> int:
    return len(self.node_names)

  @property
  def num_edges(self) -> int:
    return int(self.edge_src.shape[0])

  @property
  def kinds(self) -> tuple:
    """Device kinds that have costs, sorted (e.g. ("CPU", "GPU"))."""
    return tuple(self.costs)

  @functools.cached_property
  def node_index(self) -> dict:
    return {name: i for i, name in enumerate(self.node_names)}

  @functools.cached_property
  def topo_order(self) -> np.ndarray:
    """A topological order of the nodes (stable: ties go by node id)."""
    order = _topological_order(self.num_nodes, self.edge_src, self.edge_dst)
    assert order is not None  # _validate rejected cycles
    return order

  @functools.cached_property
  def structure(self) -> "Structure":
    """What this graph shares with its `with_costs` copies: caches of what
    does not depend on costs (the simulator's plan) are keyed on it."""
    return Structure()

  @functools.cached_property
  def group_ids(self) -> np.ndarray:
    """int32[num_nodes]: colocation group id, or the node's own singleton id.

    Ids are dense in [0, num_groups); every node gets one, so code that places
    groups never special-cases ungrouped nodes.
    """
    ids = np.empty(self.num_nodes, np.int32)
    by_name = {}
    for i, group in enumerate(self.colocation_groups):
      key = ("group", group) if group is not None else ("node", i)
      ids[i] = by_name.setdefault(key, len(by_name))
    return ids

  def total_cost(self, kind: str) -> float:
    return float(self.costs[kind].sum())

  def with_costs(self, costs: Mapping[str, Sequence[float]]) -> "OpGraph":
    """A copy pricing the same ops with other costs (the same device kinds).

    Cheap: the structure is shared, not validated again, and its cached
    topological order, node index, group ids and `structure` carry over. Raises
    GraphFormatError when the kinds differ or a column is malformed.
    """
    if set(costs) != set(self.costs):
      raise errors.GraphFormatError(
          f"cost kinds {sorted(costs)} differ from the graph's "
          f"{sorted(self.costs)}")
    columns = {kind: _float_array(values, f"cost[{kind}]")
               for kind, values in sorted(costs.items())}
    for kind, values in columns.items():
      if values.shape != (self.num_nodes,):
        raise errors.GraphFormatError(
            f"cost[{kind}] must have one entry per node")
    copy = dataclasses.replace(self, costs=columns,
                               metadata=dict(self.metadata))
    for name in ("node_index", "topo_order", "group_ids", "structure"):
      if name in self.__dict__:  # functools.cached_property's store
        copy.__dict__[name] = self.__dict__[name]
    return copy

  # ---- validation ----------------------------------------------------------

  def _validate(self):
    n = self.num_nodes
    if len(set(self.node_names)) != n:
      seen = set()
      dup = next(x for x in self.node_names if x in seen or seen.add(x))
      raise errors.GraphFormatError(f"duplicate node name {dup!r}")
    for field in ("op_types", "colocation_groups", "device_kinds",
                  "pinned_devices", "output_shapes"):
      if len(getattr(self, field)) != n:
        raise errors.GraphFormatError(
            f"{field} has {len(getattr(self, field))} entries for {n} nodes")
    if self.executions is None:
      object.__setattr__(self, "executions", np.ones(n, np.int64))
    for field in ("output_bytes", "memory_bytes", "temp_bytes", "executions"):
      if getattr(self, field).shape != (n,):
        raise errors.GraphFormatError(f"{field} must have one entry per node")
    if not self.costs:
      raise errors.GraphFormatError("no device kind has costs")
    for kind, values in self.costs.items():
      if values.shape != (n,):
        raise errors.GraphFormatError(f"cost[{kind}] must have one entry per node")
    m = self.num_edges
    for field in ("edge_dst", "edge_bytes", "edge_output"):
      if getattr(self, field).shape != (m,):
        raise errors.GraphFormatError(f"{field} must have one entry per edge")
    for field, endpoints in (("src", self.edge_src), ("dst", self.edge_dst),
                             ("back-edge", self.back_edges.ravel())):
      bad = np.flatnonzero((endpoints < 0) | (endpoints >= n))
      if bad.size:
        raise errors.GraphFormatError(
            f"edge {field} {int(endpoints[bad[0]])} is not a node index "
            f"(graph has {n} nodes)")
    loops = np.flatnonzero(self.edge_src == self.edge_dst)
    if loops.size:
      raise errors.GraphFormatError(
          f"edge {int(loops[0])} is a self-loop on "
          f"{self.node_names[self.edge_src[loops[0]]]!r}")
    known_kinds = set(self.costs)
    for i, allowed in enumerate(self.device_kinds):
      if allowed is not None and (not allowed or not set(allowed) <= known_kinds):
        raise errors.GraphFormatError(
            f"node {self.node_names[i]!r}: device_kinds {list(allowed)} must be "
            f"a non-empty subset of the cost kinds {sorted(known_kinds)}")
    missing = [f for f in self.fetches if f not in self.node_index]
    if missing:
      raise errors.GraphFormatError(f"fetch {missing[0]!r} is not a node")
    order = _topological_order(n, self.edge_src, self.edge_dst)
    if order is None:
      raise errors.GraphFormatError(
          f"the edges contain a cycle (through {self._a_cycle_node()!r}); "
          "loop back-edges belong in back_edges")
    self.__dict__["topo_order"] = order  # what `topo_order` would compute

  def _a_cycle_node(self) -> str:
    """Name of one node on a cycle, for the error message."""
    indegree = np.bincount(self.edge_dst, minlength=self.num_nodes)
    order = _topological_order(self.num_nodes, self.edge_src, self.edge_dst,
                               indegree_out=indegree)
    del order
    return self.node_names[int(np.flatnonzero(indegree > 0)[0])]


class Structure:
  """A weakly referenceable token of one graph structure (`OpGraph.structure`)."""
  __slots__ = ("__weakref__",)


def _topological_order(n, src, dst, indegree_out=None) -> Optional[np.ndarray]:
  """Kahn's algorithm over CSR adjacency; None when there is a cycle.

  If `indegree_out` is given it is decremented in place, so afterwards its
  positive entries are exactly the nodes on or behind a cycle.
  """
  indegree = (indegree_out if indegree_out is not None
              else np.bincount(dst, minlength=n).astype(np.int64))
  by_src = np.argsort(src, kind="stable")
  # Python lists: the loop visits every edge, and numpy scalars are slow.
  targets = dst[by_src].tolist()
  starts = np.searchsorted(src[by_src], np.arange(n + 1)).tolist()
  remaining = indegree.tolist()
  order = []
  heap = np.flatnonzero(indegree == 0).tolist()
  heapq.heapify(heap)
  while heap:
    node = heapq.heappop(heap)
    order.append(node)
    for succ in targets[starts[node]:starts[node + 1]]:
      remaining[succ] -= 1
      if remaining[succ] == 0:
        heapq.heappush(heap, succ)
  if indegree_out is not None:
    indegree_out[:] = remaining
  if len(order) != n:
    return None
  return np.asarray(order, np.int32)


def _float_array(values, what: str) -> np.ndarray:
  array = np.asarray(values, np.float64).ravel()
  bad = np.flatnonzero(~np.isfinite(array) | (array < 0))
  if bad.size:
    raise errors.GraphFormatError(
        f"{what} of node {int(bad[0])} is {array[bad[0]]!r}: costs must be "
        "finite and >= 0")
  return array


def _int_array(values, what: str, dtype=np.int64, minimum: int = 0) -> np.ndarray:
  array = np.asarray(values)
  if array.size and not np.issubdtype(array.dtype, np.integer):
    raise errors.GraphFormatError(f"{what} must be integers")
  array = array.astype(dtype).ravel()
  bad = np.flatnonzero(array < minimum)
  if bad.size:
    raise errors.GraphFormatError(
        f"{what}[{int(bad[0])}] is {int(array[bad[0]])}: must be >= {minimum}")
  return array
