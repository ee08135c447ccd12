"""Event-driven simulation of one step of a placed op graph on a topology.

The simulator is the reward of placement training, so it is called thousands
of times per graph: everything that depends only on the graph (adjacency,
topological ranks, tensors and their consumers) is computed once by
`prepare` and cached, everything that depends on graph x topology (per-op
durations on each device, constraint masks) once per pair, and the per-
placement work is one compiled pass (numba) over flat arrays.

The model, in the spirit of TensorFlow's executor:

* Every device runs one op at a time. An op is ready when each of its
  in-edges is satisfied on its device: a same-device producer has finished,
  or the tensor has arrived over a link. Among ready ops a device picks the
  one earliest in the graph's topological order (`OpGraph.topo_order`, which
  breaks its own ties by node id), so schedules are deterministic. An op on
  device `d` takes `costs[d.kind][op] / d.speed` microseconds; on a device
  whose kind the graph has no cost column for, the op's largest cost over the
  known kinds (pessimistic; such a placement is invalid anyway).
* A tensor (producer, output slot) needed on another device is sent once per
  destination device, however many ops there consume it. A transfer occupies
  the directed link (src device -> dst device) for
  `latency_us + bytes / (bandwidth_gbps * 1e3)` microseconds, or the
  topology's measured link table when it has one (`Topology.transfer_us`);
  a link carries
  one transfer at a time, in the order the transfers became ready (the
  producer's end time; ties by producer rank, then output slot, then by the
  first consumer edge). A tensor's size on a link and on the receiver is the
  largest `bytes` among its edges.
* A cross-device control edge costs the link latency only and does not
  occupy the link: TF sends a tiny dummy tensor whose copy is dominated by
  latency and which does not wait behind bulk DMA in practice. It moves no
  bytes and is not counted as a transfer.
* Memory per device: the persistent `memory_bytes` of the ops placed there,
  plus live tensors. An op's `output_bytes` are allocated on its device when
  it starts and freed when its last same-device data consumer has finished
  and every transfer of its outputs to other devices has finished (outputs
  nobody consumes are freed when the op ends, unless the op is a fetch: a
  fetched op's outputs are returned, so they live to the end of the step).
  A received tensor is allocated on the receiver when its transfer starts and
  freed when its last consumer there has finished. `temp_bytes` are held
  while the op runs. All frees at an instant happen before all allocations
  at that instant. The peak per device is reported.
* Events that happen at the same instant are all applied before any device
  or link picks its next op or transfer; so at a tie the best-ranked ready op
  wins, whatever the order in which the events were recorded.

A placement is valid when each device's peak memory fits its capacity and
the graph's hard constraints hold: allowed device kinds, colocation groups on
one device, and pinned devices (a pin constrains only the fields it names:
`/device:GPU:1` matches any job/task's GPU 1, `/job:worker/task:1` any device
of that task). Invalid placements are still simulated, so RL can shape its
reward from their step time.

`simulate_reference` is an independent, plain-Python implementation of the
same model (dicts, sets and heapq); tests check the compiled core against it.
"""

import dataclasses
import functools
import heapq
import re
import weakref
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

try:
  import numba  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover - numba is an install requirement
  numba = None

HAVE_NUMBA = numba is not None
_GIB = float(1 << 30)


def _jit(function):
  """Compiles `function` with numba (cached on disk) when numba is present.

  Without numba the same code runs as plain Python: correct but ~100x slower.
  """
  if numba is None:
    return function
  return numba.njit(cache=True, nogil=True, error_model="numpy")(function)


# ---- results ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Schedule:
  """When each op and transfer ran (for Gantt charts and debugging).

  Attributes:
    op_device: int[n] device index per op (the placement).
    op_start_us, op_end_us: float[n] start and end time per op.
    transfer_node: int[x] producer op of each transfer.
    transfer_output: int[x] output slot of the producer carried.
    transfer_src_device, transfer_dst_device: int[x] the directed link.
    transfer_bytes: int[x] bytes moved.
    transfer_start_us, transfer_end_us: float[x] when the link carried it.
  """
  op_device: np.ndarray
  op_start_us: np.ndarray
  op_end_us: np.ndarray
  transfer_node: np.ndarray
  transfer_output: np.ndarray
  transfer_src_device: np.ndarray
  transfer_dst_device: np.ndarray
  transfer_bytes: np.ndarray
  transfer_start_us: np.ndarray
  transfer_end_us: np.ndarray


@dataclasses.dataclass(frozen=True)
class SimResult:
  """Outcome of simulating one placement.

  Attributes:
    step_time_us: when the last op or transfer finished.
    device_busy_us: float[d] total op time per device.
    peak_memory_bytes: int[d] peak of persistent + live bytes per device.
    transfer_bytes: total bytes moved between devices.
    num_transfers: number of tensor transfers (control signals excluded).
    valid: memory fits (when checked) and all hard constraints hold.
    reason: why the placement is invalid (problems joined by "; "), or None.
    schedule: per-op and per-transfer times when `record_schedule=True`.
  """
  step_time_us: float
  device_busy_us: np.ndarray
  peak_memory_bytes: np.ndarray
  transfer_bytes: int
  num_transfers: int
  valid: bool
  reason: Optional[str] = None
  schedule: Optional[Schedule] = None


@dataclasses.dataclass(frozen=True)
class BatchSimResult:
  """Outcomes of B placements of one graph, as arrays (first axis = B).

  Attributes:
    step_time_us: float[B].
    device_busy_us: float[B, d].
    peak_memory_bytes: int[B, d].
    transfer_bytes: int[B].
    num_transfers: int[B].
    fits_memory: bool[B], every device's peak fits its capacity.
    satisfies_constraints: bool[B], kinds, colocation and pins hold.
    valid: bool[B], both of the above (memory only when checked).
  """
  step_time_us: np.ndarray
  device_busy_us: np.ndarray
  peak_memory_bytes: np.ndarray
  transfer_bytes: np.ndarray
  num_transfers: np.ndarray
  fits_memory: np.ndarray
  satisfies_constraints: np.ndarray
  valid: np.ndarray


# ---- per-graph and per-(graph, topology) precomputation ----------------------


@dataclasses.dataclass(frozen=True, eq=False)
class SimulatorPlan:
  """Placement-independent structure of one graph, as flat numpy arrays.

  Built once per graph by `prepare`; holds no reference to the graph (it is
  cached in a weak dictionary keyed by the graph).

  Attributes:
    num_nodes, num_edges: sizes.
    order: int[n] topological order; rank: int[n] position in it.
    in_ptr, in_edges: CSR of each node's in-edge ids.
    out_ptr, out_edges: CSR of each node's out-edge ids.
    edge_src, edge_dst: int[m] endpoints.
    edge_tensor: int[m] tensor id of a data edge, -1 for a control edge.
    tensor_src, tensor_slot: int[t] producer and output slot per tensor;
      tensors are sorted by (producer, slot).
    tensor_bytes: int[t] largest edge bytes of the tensor.
    tensor_edge_ptr, tensor_edges: CSR of each tensor's consumer edges.
    node_tensor_ptr: int[n + 1] tensors of node u are
      node_tensor_ptr[u]:node_tensor_ptr[u + 1].
    output_bytes, temp_bytes, memory_bytes: int[n] from the graph.
    is_fetch: bool[n] whether the op is fetched (its outputs live to the end).
    group_first: int[n] first node of each node's colocation group.
  """
  num_nodes: int
  num_edges: int
  order: np.ndarray
  rank: np.ndarray
  in_ptr: np.ndarray
  in_edges: np.ndarray
  out_ptr: np.ndarray
  out_edges: np.ndarray
  edge_src: np.ndarray
  edge_dst: np.ndarray
  edge_tensor: np.ndarray
  tensor_src: np.ndarray
  tensor_slot: np.ndarray
  tensor_bytes: np.ndarray
  tensor_edge_ptr: np.ndarray
  tensor_edges: np.ndarray
  node_tensor_ptr: np.ndarray
  output_bytes: np.ndarray
  temp_bytes: np.ndarray
  memory_bytes: np.ndarray
  is_fetch: np.ndarray
  group_first: np.ndarray
  tables: "weakref.WeakKeyDictionary" = dataclasses.field(
      default_factory=weakref.WeakKeyDictionary, repr=False)


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceTables:
  """What one graph costs on one topology.

  Attributes:
    duration_us: float[n, d] op time on each device.
    latency_us: float[d, d] link latency.
    bytes_per_us: float[d, d] link bandwidth in bytes per microsecond.
    table_bytes: float[k] sizes of the measured link table (k = 0: none).
    table_us: float[d, d, k] measured link times at those sizes.
    kind_ok: bool[n, d] the op may run on the device's kind.
    pin_ok: bool[n, d] the device matches the op's pinned device (if any).
    capacity_bytes: int[d] device memory.
  """
  duration_us: np.ndarray
  latency_us: np.ndarray
  bytes_per_us: np.ndarray
  table_bytes: np.ndarray
  table_us: np.ndarray
  kind_ok: np.ndarray
  pin_ok: np.ndarray
  capacity_bytes: np.ndarray

  @functools.cached_property
  def allowed(self) -> np.ndarray:
    """bool[n, d]: kind and pin constraints of each (op, device) hold."""
    return self.kind_ok & self.pin_ok


_PLANS = weakref.WeakKeyDictionary()


def prepare(graph: op_graph.OpGraph) -> SimulatorPlan:
  """The graph's `SimulatorPlan`, built on first use and cached per graph."""
  plan = _PLANS.get(graph)
  if plan is None:
    plan = _build_plan(graph)
    _PLANS[graph] = plan
  return plan


def device_tables(graph: op_graph.OpGraph,
                  topology: topology_lib.Topology) -> DeviceTables:
  """Per-op durations and constraint masks for graph x topology (cached)."""
  plan = prepare(graph)
  tables = plan.tables.get(topology)
  if tables is None:
    tables = _build_tables(graph, topology)
    plan.tables[topology] = tables
  return tables


def _build_plan(graph: op_graph.OpGraph) -> SimulatorPlan:
  n, m = graph.num_nodes, graph.num_edges
  src = graph.edge_src.astype(np.int64)
  dst = graph.edge_dst.astype(np.int64)
  order = graph.topo_order.astype(np.int64)
  rank = np.empty(n, np.int64)
  rank[order] = np.arange(n, dtype=np.int64)
  in_ptr, in_edges = _csr(dst, n)
  out_ptr, out_edges = _csr(src, n)

  data = np.flatnonzero(graph.edge_output >= 0)
  slot = graph.edge_output[data].astype(np.int64)
  keys = src[data] * (int(slot.max(initial=0)) + 1) + slot
  unique_keys, tensor_of_data = np.unique(keys, return_inverse=True)
  num_tensors = unique_keys.shape[0]
  edge_tensor = np.full(m, -1, np.int64)
  edge_tensor[data] = tensor_of_data
  tensor_src = np.empty(num_tensors, np.int64)
  tensor_src[tensor_of_data] = src[data]
  tensor_slot = np.empty(num_tensors, np.int64)
  tensor_slot[tensor_of_data] = slot
  tensor_bytes = np.zeros(num_tensors, np.int64)
  np.maximum.at(tensor_bytes, tensor_of_data, graph.edge_bytes[data])
  by_tensor = np.argsort(tensor_of_data, kind="stable")
  tensor_edges = data[by_tensor].astype(np.int64)
  tensor_edge_ptr = np.searchsorted(tensor_of_data[by_tensor],
                                    np.arange(num_tensors + 1)).astype(np.int64)
  node_tensor_ptr = np.searchsorted(tensor_src, np.arange(n + 1)).astype(
      np.int64)

  is_fetch = np.zeros(n, np.bool_)
  for name in graph.fetches:
    is_fetch[graph.node_index[name]] = True
  group_ids = graph.group_ids
  first_of_group = np.full(int(group_ids.max(initial=-1)) + 1, -1, np.int64)
  first_of_group[group_ids[::-1]] = np.arange(n - 1, -1, -1)
  return SimulatorPlan(
      num_nodes=n, num_edges=m, order=order, rank=rank,
      in_ptr=in_ptr, in_edges=in_edges, out_ptr=out_ptr, out_edges=out_edges,
      edge_src=src, edge_dst=dst, edge_tensor=edge_tensor,
      tensor_src=tensor_src, tensor_slot=tensor_slot, tensor_bytes=tensor_bytes,
      tensor_edge_ptr=tensor_edge_ptr, tensor_edges=tensor_edges,
      node_tensor_ptr=node_tensor_ptr,
      output_bytes=graph.output_bytes.astype(np.int64),
      temp_bytes=graph.temp_bytes.astype(np.int64),
      memory_bytes=graph.memory_bytes.astype(np.int64),
      is_fetch=is_fetch, group_first=first_of_group[group_ids])


def _csr(keys: np.ndarray, n: int):
  """(ptr[n + 1], ids): entries with key k are ids[ptr[k]:ptr[k + 1]]."""
  ids = np.argsort(keys, kind="stable").astype(np.int64)
  ptr = np.searchsorted(keys[ids], np.arange(n + 1)).astype(np.int64)
  return ptr, ids


def _build_tables(graph: op_graph.OpGraph,
                  topology: topology_lib.Topology) -> DeviceTables:
  n, d = graph.num_nodes, topology.num_devices
  worst = np.max(np.stack(list(graph.costs.values())), axis=0)
  duration = np.empty((n, d), np.float64)
  kind_ok = np.empty((n, d), np.bool_)
  for j, device in enumerate(topology.devices):
    duration[:, j] = graph.costs.get(device.kind, worst) / device.speed
    kind_ok[:, j] = [device.kind in graph.costs and
                     (allowed is None or device.kind in allowed)
                     for allowed in graph.device_kinds]
  pin_ok = np.ones((n, d), np.bool_)
  specs = [parse_device(name) for name in topology.device_names]
  for pin in set(p for p in graph.pinned_devices if p is not None):
    wanted = parse_device(pin)
    row = np.array([device_matches(wanted, spec) for spec in specs])
    rows = [i for i, p in enumerate(graph.pinned_devices) if p == pin]
    pin_ok[rows] = row
  bandwidth = topology.bandwidth_gbps.astype(np.float64) * 1e3
  np.fill_diagonal(bandwidth, 1.0)  # never used; keeps the table finite
  if topology.table_bytes is None:
    table_bytes, table_us = np.zeros(0), np.zeros((d, d, 0))
  else:
    table_bytes, table_us = topology.table_bytes, topology.table_us
  return DeviceTables(
      duration_us=np.ascontiguousarray(duration),
      latency_us=np.ascontiguousarray(topology.latency_us, np.float64),
      bytes_per_us=bandwidth,
      table_bytes=np.ascontiguousarray(table_bytes, np.float64),
      table_us=np.ascontiguousarray(table_us, np.float64), kind_ok=kind_ok, pin_ok=pin_ok,
      capacity_bytes=topology.memory_bytes)


# ---- TF device strings -----------------------------------------------------

_LEGACY_DEVICE = re.compile(r"^(cpu|gpu|tpu)(?::(\d+|\*))?$", re.IGNORECASE)


def parse_device(spec: str) -> dict:
  """Fields of a TF device string: job, replica, task, type, index.

  Accepts full names (`/job:w/replica:0/task:1/device:GPU:0`), partial ones
  (`/device:GPU:1`, `/job:worker/task:1`, `/gpu:0`) and `*` wildcards. Only
  the fields present are returned, so a pin constrains just what it names.
  """
  fields = {}
  for part in spec.strip().split("/"):
    if not part:
      continue
    key, _, rest = part.partition(":")
    key = key.lower()
    if key in ("job", "replica", "task"):
      if rest and rest != "*":
        fields[key] = rest if key == "job" else str(int(rest))
    elif key == "device":
      kind, _, index = rest.partition(":")
      if kind and kind != "*":
        fields["type"] = kind.upper()
      if index and index != "*":
        fields["index"] = str(int(index))
    elif _LEGACY_DEVICE.match(part):
      kind, _, index = part.partition(":")
      fields["type"] = kind.upper()
      if index and index != "*":
        fields["index"] = str(int(index))
    else:
      raise errors.InputError(f"{spec!r} is not a TF device string")
  return fields


def device_matches(wanted: dict, device: dict) -> bool:
  """Whether a device (parsed) satisfies every field of a (partial) spec."""
  return all(device.get(key) == value for key, value in wanted.items())


# ---- the public entry points -----------------------------------------------


def simulate(graph: op_graph.OpGraph, placement,
             topology: topology_lib.Topology, *, check_memory: bool = True,
             record_schedule: bool = False) -> SimResult:
  """Simulates one step of `graph` placed by `placement` on `topology`.

  Args:
    graph: the op graph.
    placement: int[num_nodes] device index (into `topology.devices`) per op.
    topology: the devices and links.
    check_memory: whether exceeding a device's memory makes it invalid
      (the peak is tracked either way).
    record_schedule: also return every op's and transfer's start/end time.

  Returns:
    A `SimResult`; invalid placements are simulated too (valid=False).

  Raises:
    InputError: the placement has the wrong shape or names no device.
  """
  plan = prepare(graph)
  tables = device_tables(graph, topology)
  placement = _check_placement(placement, plan.num_nodes, topology.num_devices)
  out = _simulate_core(placement, topology.num_devices, *_plan_args(plan),
                       *_link_args(tables))
  (step, busy, peak, moved, count, op_start, op_end,
   x_tensor, x_src, x_dst, x_start, x_end) = out
  problems = constraint_problems(graph, placement, topology)
  if check_memory:
    problems += memory_problems(peak, topology)
  schedule = None
  if record_schedule:
    x_tensor = x_tensor[:count]
    schedule = Schedule(
        op_device=placement.copy(), op_start_us=op_start, op_end_us=op_end,
        transfer_node=plan.tensor_src[x_tensor],
        transfer_output=plan.tensor_slot[x_tensor],
        transfer_src_device=x_src[:count], transfer_dst_device=x_dst[:count],
        transfer_bytes=plan.tensor_bytes[x_tensor],
        transfer_start_us=x_start[:count], transfer_end_us=x_end[:count])
  return SimResult(
      step_time_us=float(step), device_busy_us=busy, peak_memory_bytes=peak,
      transfer_bytes=int(moved), num_transfers=int(count),
      valid=not problems, reason="; ".join(problems) or None,
      schedule=schedule)


def simulate_batch(graph: op_graph.OpGraph, placements,
                   topology: topology_lib.Topology, *,
                   check_memory: bool = True) -> BatchSimResult:
  """Simulates B placements (int[B, num_nodes]); arrays, no reasons."""
  plan = prepare(graph)
  tables = device_tables(graph, topology)
  d = topology.num_devices
  placements = _check_placement(placements, plan.num_nodes, d, ndim=2)
  batch = placements.shape[0]
  step = np.empty(batch, np.float64)
  busy = np.empty((batch, d), np.float64)
  peak = np.empty((batch, d), np.int64)
  moved = np.empty(batch, np.int64)
  count = np.empty(batch, np.int64)
  args = _plan_args(plan)
  for b in range(batch):
    # A Python loop costs ~10 us per row against milliseconds of core time,
    # and spares compiling a second (batched) copy of the core.
    step[b], busy[b], peak[b], moved[b], count[b] = _simulate_core(
        placements[b], d, *args, *_link_args(tables))[:5]
  fits = np.all(peak <= tables.capacity_bytes[None, :], axis=1)
  satisfied = constraints_hold(plan, tables, placements)
  return BatchSimResult(
      step_time_us=step, device_busy_us=busy, peak_memory_bytes=peak,
      transfer_bytes=moved, num_transfers=count, fits_memory=fits,
      satisfies_constraints=satisfied,
      valid=satisfied & fits if check_memory else satisfied)


def _check_placement(placement, n: int, d: int, ndim: int = 1) -> np.ndarray:
  """int64 contiguous copy/view; InputError naming what is wrong."""
  array = np.asarray(placement)
  if array.ndim != ndim or array.shape[-1:] != (n,):
    want = f"[{n}]" if ndim == 1 else f"[batch, {n}]"
    raise errors.InputError(
        f"placement has shape {array.shape}; the graph has {n} nodes, so "
        f"it must be {want}")
  if array.size and not np.issubdtype(array.dtype, np.integer):
    raise errors.InputError("placement must hold integer device indices")
  array = np.ascontiguousarray(array, np.int64)
  if array.size and (array.min() < 0 or array.max() >= d):
    bad = int(array[(array < 0) | (array >= d)].flat[0])
    raise errors.InputError(
        f"placement names device {bad}; the topology has {d} devices")
  return array


def _link_args(tables: DeviceTables) -> tuple:
  return (tables.duration_us, tables.latency_us, tables.bytes_per_us,
          tables.table_bytes, tables.table_us)


def _plan_args(plan: SimulatorPlan) -> tuple:
  return (plan.rank, plan.order, plan.in_ptr, plan.in_edges, plan.out_ptr,
          plan.out_edges, plan.edge_src, plan.edge_dst, plan.edge_tensor,
          plan.tensor_src, plan.tensor_bytes, plan.tensor_edge_ptr,
          plan.tensor_edges, plan.node_tensor_ptr, plan.output_bytes,
          plan.temp_bytes, plan.memory_bytes, plan.is_fetch)


# ---- validity --------------------------------------------------------------


def constraints_hold(plan: SimulatorPlan, tables: DeviceTables,
                     placements: np.ndarray) -> np.ndarray:
  """bool[...]: kinds, pins and colocation hold for each placement row."""
  nodes = np.arange(plan.num_nodes)
  allowed = tables.allowed[nodes, placements].all(axis=-1)
  together = (placements == placements[..., plan.group_first]).all(axis=-1)
  return allowed & together


def constraint_problems(graph: op_graph.OpGraph, placement: np.ndarray,
                        topology: topology_lib.Topology) -> list:
  """One line per broken hard constraint kind (first offender named)."""
  plan = prepare(graph)
  tables = device_tables(graph, topology)
  nodes = np.arange(plan.num_nodes)
  problems = []
  bad_kind = np.flatnonzero(~tables.kind_ok[nodes, placement])
  if bad_kind.size:
    i = int(bad_kind[0])
    device = topology.devices[placement[i]]
    allowed = graph.device_kinds[i] or graph.kinds
    problems.append(
        f"op {graph.node_names[i]!r} ({graph.op_types[i]}) is on {device.name} "
        f"of kind {device.kind} but may run only on {list(allowed)}"
        + _more(bad_kind.size))
  bad_pin = np.flatnonzero(~tables.pin_ok[nodes, placement])
  if bad_pin.size:
    i = int(bad_pin[0])
    problems.append(
        f"op {graph.node_names[i]!r} is pinned to {graph.pinned_devices[i]} "
        f"but placed on {topology.devices[placement[i]].name}"
        + _more(bad_pin.size))
  split = np.flatnonzero(placement != placement[plan.group_first])
  if split.size:
    i = int(split[0])
    members = np.flatnonzero(plan.group_first == plan.group_first[i])
    used = sorted({topology.devices[placement[k]].name for k in members})
    problems.append(
        f"colocation group {graph.colocation_groups[i]!r} is split over "
        f"{used}; its ops must share one device")
  return problems


def memory_problems(peak_bytes: np.ndarray,
                    topology: topology_lib.Topology) -> list:
  """One line per device whose peak memory exceeds its capacity."""
  return [f"OOM on {device.name}: needs {peak_bytes[j] / _GIB:.1f} GiB, has "
          f"{device.memory_bytes / _GIB:.1f} GiB"
          for j, device in enumerate(topology.devices)
          if peak_bytes[j] > device.memory_bytes]


def _more(count: int) -> str:
  return f" (and {count - 1} more ops)" if count > 1 else ""


# ---- the compiled core -----------------------------------------------------
#
# Event codes: an op end is its topological rank (< n), a transfer end is
# n + transfer id, a control signal arrival is n + m + edge id. The event heap
# orders by (time, code), so at one instant op ends come first (by rank),
# then transfer ends (in creation order), then control arrivals.


@_jit
def _less(t1, c1, t2, c2):
  return t1 < t2 or (t1 == t2 and c1 < c2)


@_jit
def _event_push(times, codes, size, t, c):
  """Pushes (t, c) on the binary min-heap times/codes[:size]; new size."""
  i = size
  while i > 0:
    parent = (i - 1) >> 1
    if not _less(t, c, times[parent], codes[parent]):
      break
    times[i] = times[parent]
    codes[i] = codes[parent]
    i = parent
  times[i] = t
  codes[i] = c
  return size + 1


@_jit
def _event_pop(times, codes, size):
  """Removes the minimum (read times[0], codes[0] first); new size."""
  size -= 1
  t = times[size]
  c = codes[size]
  i = 0
  while True:
    child = 2 * i + 1
    if child >= size:
      break
    right = child + 1
    if right < size and _less(times[right], codes[right], times[child],
                              codes[child]):
      child = right
    if not _less(times[child], codes[child], t, c):
      break
    times[i] = times[child]
    codes[i] = codes[child]
    i = child
  times[i] = t
  codes[i] = c
  return size


@_jit
def _rank_push(heap, base, size, key):
  """Pushes `key` on the min-heap heap[base:base + size]; new size."""
  i = size
  while i > 0:
    parent = (i - 1) >> 1
    if heap[base + parent] <= key:
      break
    heap[base + i] = heap[base + parent]
    i = parent
  heap[base + i] = key
  return size + 1


@_jit
def _rank_pop(heap, base, size):
  """Pops the minimum of heap[base:base + size]; (minimum, new size)."""
  top = heap[base]
  size -= 1
  key = heap[base + size]
  i = 0
  while True:
    child = 2 * i + 1
    if child >= size:
      break
    if child + 1 < size and heap[base + child + 1] < heap[base + child]:
      child += 1
    if heap[base + child] >= key:
      break
    heap[base + i] = heap[base + child]
    i = child
  heap[base + i] = key
  return top, size


@_jit
def _link_us(s, t, size, latency, bytes_per_us, table_bytes, table_us):
  """Transfer time on link s -> t; mirrors `Topology.transfer_us`."""
  k = table_bytes.shape[0]
  if k == 0:
    return latency[s, t] + size / bytes_per_us[s, t]
  if size >= table_bytes[k - 1]:
    return table_us[s, t, k - 1] + (size - table_bytes[k - 1]) / bytes_per_us[s, t]
  low_bytes = 0.0
  low_us = latency[s, t]
  for i in range(k):
    if size <= table_bytes[i]:
      return low_us + (table_us[s, t, i] - low_us) * (
          (size - low_bytes) / (table_bytes[i] - low_bytes))
    low_bytes = table_bytes[i]
    low_us = table_us[s, t, i]
  return low_us


@_jit
def _simulate_core(placement, d, rank, order, in_ptr, in_edges, out_ptr,
                   out_edges, edge_src, edge_dst, edge_tensor, tensor_src,
                   tensor_bytes, tensor_edge_ptr, tensor_edges,
                   node_tensor_ptr, output_bytes, temp_bytes, memory_bytes,
                   is_fetch, duration, latency, bytes_per_us, table_bytes,
                   table_us):
  """One placement; returns times, busy, peak memory and the transfers."""
  n = rank.shape[0]
  m = edge_src.shape[0]

  # Transfers: one per (tensor, destination device), numbered in tensor
  # order; out_ref counts what keeps a producer's outputs alive.
  edge_xfer = np.empty(m, np.int64)
  x_tensor = np.empty(m, np.int64)
  x_src = np.empty(m, np.int64)
  x_dst = np.empty(m, np.int64)
  recv_ref = np.zeros(m, np.int64)
  node_x_ptr = np.zeros(n + 1, np.int64)
  out_ref = np.zeros(n, np.int64)
  seen_tensor = np.full(d, -1, np.int64)
  x_of_device = np.zeros(d, np.int64)
  num_x = 0
  for u in range(n):
    pu = placement[u]
    local = 0
    for ti in range(node_tensor_ptr[u], node_tensor_ptr[u + 1]):
      for k in range(tensor_edge_ptr[ti], tensor_edge_ptr[ti + 1]):
        e = tensor_edges[k]
        dv = placement[edge_dst[e]]
        if dv == pu:
          local += 1
          edge_xfer[e] = -1
          continue
        if seen_tensor[dv] != ti:
          seen_tensor[dv] = ti
          x_of_device[dv] = num_x
          x_tensor[num_x] = ti
          x_src[num_x] = pu
          x_dst[num_x] = dv
          num_x += 1
        x = x_of_device[dv]
        edge_xfer[e] = x
        recv_ref[x] += 1
    node_x_ptr[u + 1] = num_x
    out_ref[u] = local + num_x - node_x_ptr[u]

  # Per-link FIFO queues, packed: link l owns queue[link_base[l]:...].
  link_base = np.zeros(d * d + 1, np.int64)
  for x in range(num_x):
    link_base[x_src[x] * d + x_dst[x] + 1] += 1
  for l in range(d * d):
    link_base[l + 1] += link_base[l]
  queue = np.empty(max(num_x, 1), np.int64)
  q_head = np.zeros(d * d, np.int64)
  q_tail = np.zeros(d * d, np.int64)
  link_busy = np.zeros(d * d, np.bool_)

  # Per-device ready heaps of ranks, packed by device.
  dev_base = np.zeros(d + 1, np.int64)
  for v in range(n):
    dev_base[placement[v] + 1] += 1
  for j in range(d):
    dev_base[j + 1] += dev_base[j]
  ready = np.empty(max(n, 1), np.int64)
  ready_size = np.zeros(d, np.int64)
  dev_busy = np.zeros(d, np.bool_)

  memory = np.zeros(d, np.int64)
  for v in range(n):
    memory[placement[v]] += memory_bytes[v]
  peak = memory.copy()
  busy_us = np.zeros(d, np.float64)

  pending = np.empty(n, np.int64)
  for v in range(n):
    pending[v] = in_ptr[v + 1] - in_ptr[v]
    if pending[v] == 0:
      j = placement[v]
      ready_size[j] = _rank_push(ready, dev_base[j], ready_size[j], rank[v])

  ev_time = np.empty(n + m + 1, np.float64)
  ev_code = np.empty(n + m + 1, np.int64)
  ev_size = 0
  op_start = np.zeros(n, np.float64)
  op_end = np.zeros(n, np.float64)
  x_start = np.zeros(max(num_x, 1), np.float64)
  x_end = np.zeros(max(num_x, 1), np.float64)

  dirty_dev = np.ones(d, np.bool_)
  dirty_devs = np.arange(d).astype(np.int64)
  num_dirty_dev = d
  dirty_link = np.zeros(d * d, np.bool_)
  dirty_links = np.empty(d * d, np.int64)
  num_dirty_link = 0
  moved = 0
  now = 0.0

  while True:
    # Dispatch: idle devices take their best-ranked ready op, idle links
    # their oldest queued transfer. Only allocations happen here.
    for k in range(num_dirty_dev):
      j = dirty_devs[k]
      dirty_dev[j] = False
      if dev_busy[j] or ready_size[j] == 0:
        continue
      r, ready_size[j] = _rank_pop(ready, dev_base[j], ready_size[j])
      v = order[r]
      dev_busy[j] = True
      op_start[v] = now
      op_end[v] = now + duration[v, j]
      busy_us[j] += duration[v, j]
      memory[j] += output_bytes[v] + temp_bytes[v]
      if memory[j] > peak[j]:
        peak[j] = memory[j]
      ev_size = _event_push(ev_time, ev_code, ev_size, op_end[v], r)
    num_dirty_dev = 0
    for k in range(num_dirty_link):
      l = dirty_links[k]
      dirty_link[l] = False
      if link_busy[l] or q_head[l] == q_tail[l]:
        continue
      x = queue[link_base[l] + q_head[l]]
      q_head[l] += 1
      link_busy[l] = True
      s = x_src[x]
      dv = x_dst[x]
      size = tensor_bytes[x_tensor[x]]
      x_start[x] = now
      x_end[x] = now + _link_us(s, dv, size, latency, bytes_per_us,
                                table_bytes, table_us)
      moved += size
      memory[dv] += size
      if memory[dv] > peak[dv]:
        peak[dv] = memory[dv]
      ev_size = _event_push(ev_time, ev_code, ev_size, x_end[x], n + x)
    num_dirty_link = 0

    if ev_size == 0:
      break
    now = ev_time[0]
    # Apply every event at this instant (frees, readiness, queueing).
    while ev_size > 0 and ev_time[0] == now:
      code = ev_code[0]
      ev_size = _event_pop(ev_time, ev_code, ev_size)
      if code < n:
        v = order[code]
        j = placement[v]
        dev_busy[j] = False
        if not dirty_dev[j]:
          dirty_dev[j] = True
          dirty_devs[num_dirty_dev] = j
          num_dirty_dev += 1
        memory[j] -= temp_bytes[v]
        if out_ref[v] == 0 and not is_fetch[v]:
          memory[j] -= output_bytes[v]
        for k in range(in_ptr[v], in_ptr[v + 1]):
          e = in_edges[k]
          if edge_tensor[e] < 0:
            continue
          u = edge_src[e]
          if placement[u] == j:
            out_ref[u] -= 1
            if out_ref[u] == 0 and not is_fetch[u]:
              memory[j] -= output_bytes[u]
          else:
            x = edge_xfer[e]
            recv_ref[x] -= 1
            if recv_ref[x] == 0:
              memory[j] -= tensor_bytes[x_tensor[x]]
        for k in range(out_ptr[v], out_ptr[v + 1]):
          e = out_edges[k]
          w = edge_dst[e]
          jw = placement[w]
          if jw == j:
            pending[w] -= 1
            if pending[w] == 0:
              ready_size[j] = _rank_push(ready, dev_base[j], ready_size[j],
                                         rank[w])
          elif edge_tensor[e] < 0:
            ev_size = _event_push(ev_time, ev_code, ev_size,
                                  now + latency[j, jw], n + m + e)
        for x in range(node_x_ptr[v], node_x_ptr[v + 1]):
          l = x_src[x] * d + x_dst[x]
          queue[link_base[l] + q_tail[l]] = x
          q_tail[l] += 1
          if not dirty_link[l]:
            dirty_link[l] = True
            dirty_links[num_dirty_link] = l
            num_dirty_link += 1
      elif code < n + m:
        x = code - n
        l = x_src[x] * d + x_dst[x]
        link_busy[l] = False
        if not dirty_link[l]:
          dirty_link[l] = True
          dirty_links[num_dirty_link] = l
          num_dirty_link += 1
        dv = x_dst[x]
        ti = x_tensor[x]
        for k in range(tensor_edge_ptr[ti], tensor_edge_ptr[ti + 1]):
          w = edge_dst[tensor_edges[k]]
          if placement[w] != dv:
            continue
          pending[w] -= 1
          if pending[w] == 0:
            ready_size[dv] = _rank_push(ready, dev_base[dv], ready_size[dv],
                                        rank[w])
            if not dirty_dev[dv]:
              dirty_dev[dv] = True
              dirty_devs[num_dirty_dev] = dv
              num_dirty_dev += 1
        u = tensor_src[ti]
        out_ref[u] -= 1
        if out_ref[u] == 0 and not is_fetch[u]:
          memory[placement[u]] -= output_bytes[u]
      else:
        w = edge_dst[code - n - m]
        pending[w] -= 1
        if pending[w] == 0:
          j = placement[w]
          ready_size[j] = _rank_push(ready, dev_base[j], ready_size[j], rank[w])
          if not dirty_dev[j]:
            dirty_dev[j] = True
            dirty_devs[num_dirty_dev] = j
            num_dirty_dev += 1

  return (now, busy_us, peak, moved, num_x, op_start, op_end,
          x_tensor[:num_x], x_src[:num_x], x_dst[:num_x], x_start[:num_x],
          x_end[:num_x])


# ---- the plain-Python reference ------------------------------------------


def simulate_reference(graph: op_graph.OpGraph, placement,
                       topology: topology_lib.Topology) -> dict:
  """The same model written plainly (dicts, sets, heapq), for cross-checks.

  Slow (pure Python); returns a dict with step_time_us, device_busy_us,
  peak_memory_bytes, transfer_bytes, num_transfers, op_start_us, op_end_us.
  """
  placement = [int(p) for p in placement]
  return _ReferenceRun(graph, placement, topology).run()


class _ReferenceRun:
  """State of one reference simulation."""

  def __init__(self, graph, placement, topology):
    self.graph = graph
    self.place = placement
    self.topo = topology
    n = graph.num_nodes
    self.rank = {int(v): r for r, v in enumerate(graph.topo_order)}
    self.edges = [(int(s), int(t), int(b), int(o)) for s, t, b, o in zip(
        graph.edge_src, graph.edge_dst, graph.edge_bytes, graph.edge_output)]
    self.tensor_size = {}
    consumers = {}  # (src, slot) -> [edge ids]
    for e, (s, _, b, o) in enumerate(self.edges):
      if o >= 0:
        key = (s, o)
        self.tensor_size[key] = max(self.tensor_size.get(key, 0), b)
        consumers.setdefault(key, []).append(e)
    self.consumers = consumers
    self.pending = [0] * n
    for _, t, _, _ in self.edges:
      self.pending[t] += 1
    self.fetch = {graph.node_index[f] for f in graph.fetches}
    # Transfers: (tensor, dst device), created in (src, slot, edge id) order.
    self.transfers = []
    self.transfer_id = {}
    self.holders = [0] * n  # what keeps each op's outputs alive
    self.receivers = {}  # transfer id -> consumer edges still to finish
    for key in sorted(consumers):
      s = key[0]
      for e in consumers[key]:
        dst_dev = self.place[self.edges[e][1]]
        if dst_dev == self.place[s]:
          self.holders[s] += 1
          continue
        if (key, dst_dev) not in self.transfer_id:
          self.transfer_id[(key, dst_dev)] = len(self.transfers)
          self.transfers.append((key, self.place[s], dst_dev))
          self.holders[s] += 1
        x = self.transfer_id[(key, dst_dev)]
        self.receivers[x] = self.receivers.get(x, 0) + 1
    d = topology.num_devices
    self.memory = [0] * d
    for v in range(n):
      self.memory[self.place[v]] += int(graph.memory_bytes[v])
    self.peak = list(self.memory)
    self.busy = [0.0] * d
    self.ready = [[] for _ in range(d)]
    self.device_idle = [True] * d
    self.link_queue = {}
    self.link_idle = {}
    self.events = []
    self.start = [0.0] * n
    self.end = [0.0] * n
    self.moved = 0

  def duration(self, v, j):
    device = self.topo.devices[j]
    costs = self.graph.costs
    cost = (costs[device.kind][v] if device.kind in costs
            else max(c[v] for c in costs.values()))
    return float(cost) / device.speed

  def alloc(self, j, nbytes):
    self.memory[j] += nbytes
    self.peak[j] = max(self.peak[j], self.memory[j])

  def make_ready(self, v):
    heapq.heappush(self.ready[self.place[v]], (self.rank[v], v))

  def run(self) -> dict:
    for v in range(self.graph.num_nodes):
      if self.pending[v] == 0:
        self.make_ready(v)
    now = 0.0
    while True:
      self.dispatch(now)
      if not self.events:
        break
      now = self.events[0][0]
      while self.events and self.events[0][0] == now:
        _, kind, _, payload = heapq.heappop(self.events)
        (self.on_op, self.on_transfer, self.on_signal)[kind](now, payload)
    return {"step_time_us": now, "device_busy_us": self.busy,
            "peak_memory_bytes": self.peak, "transfer_bytes": self.moved,
            "num_transfers": len(self.transfers),
            "op_start_us": self.start, "op_end_us": self.end}

  def dispatch(self, now):
    for j in range(self.topo.num_devices):
      if self.device_idle[j] and self.ready[j]:
        _, v = heapq.heappop(self.ready[j])
        self.device_idle[j] = False
        took = self.duration(v, j)
        self.start[v], self.end[v] = now, now + took
        self.busy[j] += took
        self.alloc(j, int(self.graph.output_bytes[v]) +
                   int(self.graph.temp_bytes[v]))
        heapq.heappush(self.events, (now + took, 0, self.rank[v], v))
    for link, waiting in self.link_queue.items():
      if self.link_idle.get(link, True) and waiting:
        x = waiting.pop(0)
        self.link_idle[link] = False
        key, src_dev, dst_dev = self.transfers[x]
        size = self.tensor_size[key]
        self.moved += size
        self.alloc(dst_dev, size)
        done = now + self.topo.transfer_us(src_dev, dst_dev, size)
        heapq.heappush(self.events, (done, 1, x, x))

  def on_op(self, now, v):  # pylint: disable=unused-argument
    j = self.place[v]
    self.device_idle[j] = True
    self.memory[j] -= int(self.graph.temp_bytes[v])
    if self.holders[v] == 0 and v not in self.fetch:
      self.memory[j] -= int(self.graph.output_bytes[v])
    for e, (s, t, _, o) in enumerate(self.edges):
      if t == v and o >= 0:
        self.release_input(s, o, j)
    for e, (s, t, _, o) in enumerate(self.edges):
      if s != v:
        continue
      if self.place[t] == j:
        self.satisfy(t)
      elif o < 0:
        arrive = now + float(self.topo.latency_us[j, self.place[t]])
        heapq.heappush(self.events, (arrive, 2, e, t))
    for x, (key, src_dev, dst_dev) in enumerate(self.transfers):
      if key[0] == v:
        self.link_queue.setdefault((src_dev, dst_dev), []).append(x)

  def release_input(self, s, slot, j):
    if self.place[s] == j:
      self.holders[s] -= 1
      if self.holders[s] == 0 and s not in self.fetch:
        self.memory[j] -= int(self.graph.output_bytes[s])
      return
    x = self.transfer_id[((s, slot), j)]
    self.receivers[x] -= 1
    if self.receivers[x] == 0:
      self.memory[j] -= self.tensor_size[(s, slot)]

  def on_transfer(self, now, x):  # pylint: disable=unused-argument
    key, src_dev, dst_dev = self.transfers[x]
    self.link_idle[(src_dev, dst_dev)] = True
    for e in self.consumers[key]:
      t = self.edges[e][1]
      if self.place[t] == dst_dev:
        self.satisfy(t)
    s = key[0]
    self.holders[s] -= 1
    if self.holders[s] == 0 and s not in self.fetch:
      self.memory[self.place[s]] -= int(self.graph.output_bytes[s])

  def on_signal(self, now, t):  # pylint: disable=unused-argument
    self.satisfy(t)

  def satisfy(self, t):
    self.pending[t] -= 1
    if self.pending[t] == 0:
      self.make_ready(t)

