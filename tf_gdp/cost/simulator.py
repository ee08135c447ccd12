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
  breaks its own ties by node id), so schedules are deterministic; a caller
  may give its own per-op priority instead (lowest first, ties by that
  order), e.g. a list scheduler's planned start times. An op on
  device `d` takes `costs[d.kind][op] / d.speed` microseconds; on a device
  whose kind the graph has no cost column for, the op's largest cost over the
  known kinds (pessimistic; such a placement is invalid anyway).
* A tensor (producer, output slot) needed on another device is sent once per
  destination device, however many ops there consume it. A transfer src ->
  dst takes `latency_us + bytes / (bandwidth_gbps * 1e3)` microseconds, or
  the topology's measured link table when it has one
  (`Topology.transfer_us`), and occupies every channel of its route for that
  time (a GPU's PCIe port per direction, a switch uplink, an NVLink: see
  `topology`; without channel data, the directed pair alone). A channel
  carries one transfer at a time. Transfers are tried in the order they
  became ready (the producer's end time; ties by producer rank, then output
  slot, then by the first consumer edge): each starts as soon as all its
  channels are free, so a later transfer whose route is free may start
  before an earlier one that waits. A tensor's size on a link and on the
  receiver is the largest `bytes` among its edges.
* Without the runtime's costs, a cross-device control edge costs the link
  latency only and occupies no channel (TF sends a tiny dummy tensor whose
  copy is dominated by latency); it moves no bytes and is not counted as a
  transfer.
* The runtime's own costs, when the topology has them (`runtime_costs`;
  the GPU presets do not): a step's fixed cost (one device, several) is
  added to its time; a cross-device control edge becomes a 0-byte transfer
  per (producer, destination device), through the link model and channels,
  as TF's partitioner sends a dummy tensor; a device busy when a transfer
  leaves or reaches it owes that transfer's CPU time, added to the next op
  it runs; and a device may run the op made ready last first (TF's executor
  on one inter-op thread) instead of the topological order. A given
  priority order overrides the executor order.
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

The per-placement pass is `schedule_kernel.run` (over `kernel_inputs`), its
results are the types of `sim_results`; device strings are parsed by
`device_names`; `simulator_reference.simulate_reference` is an independent,
plain-Python implementation of the same model that tests check it against.
"""

import dataclasses
import functools
import weakref

import numpy as np

from tf_gdp import errors
from tf_gdp.cost import device_names
from tf_gdp.cost import kernel_inputs
from tf_gdp.cost import loop_sends
from tf_gdp.cost import runtime_costs
from tf_gdp.cost import schedule_kernel
from tf_gdp.cost import sim_results
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

_GIB = float(1 << 30)


# ---- per-graph and per-(graph, topology) precomputation ----------------------


@dataclasses.dataclass(frozen=True, eq=False)
class SimulatorPlan:
  """Placement-independent structure of one graph, as flat numpy arrays.

  Built once per graph by `prepare`; holds no reference to the graph (it is
  cached in a weak dictionary keyed by the graph's `structure`, so a graph's
  `with_costs` copies share it: nothing here depends on costs).

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
    loops: how often while loops repeat each tensor and back edge.
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
  loops: loop_sends.LoopSends
  tensor_edge_ptr: np.ndarray
  tensor_edges: np.ndarray
  node_tensor_ptr: np.ndarray
  output_bytes: np.ndarray
  temp_bytes: np.ndarray
  memory_bytes: np.ndarray
  is_fetch: np.ndarray
  group_first: np.ndarray
  # Device kind -> bool[n] ops that may run on it (shared by topologies).
  kind_ok: dict = dataclasses.field(default_factory=dict, repr=False)

  @functools.cached_property
  def kernel_arrays(self) -> dict:
    """The arrays the compiled pass reads, in its types (cached)."""
    return kernel_inputs.build(self)

  @functools.cached_property
  def grouped(self) -> bool:
    """Whether some colocation group has more than one op."""
    return bool(np.any(self.group_first != np.arange(self.num_nodes)))


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceTables:
  """What one graph costs on one topology.

  Attributes:
    duration_us: float[n, d] op time on each device.
    latency_us: float[d, d] link latency.
    bytes_per_us: float[d, d] link bandwidth in bytes per microsecond.
    table_bytes: float[k] sizes of the measured link table (k = 0: none).
    table_us: float[d, d, k] measured link times at those sizes.
    num_channels, route_ptr, route_channels: the channels each directed pair
      occupies (`Topology.channel_routes`).
    kind_ok: bool[n, d] the op may run on the device's kind.
    pin_ok: bool[n, d] the device matches the op's pinned device (if any).
    capacity_bytes: int[d] device memory.
    runtime: the topology's `runtime_costs.RuntimeCosts`.
  """
  duration_us: np.ndarray
  latency_us: np.ndarray
  bytes_per_us: np.ndarray
  table_bytes: np.ndarray
  table_us: np.ndarray
  num_channels: int
  route_ptr: np.ndarray
  route_channels: np.ndarray
  kind_ok: np.ndarray
  pin_ok: np.ndarray
  capacity_bytes: np.ndarray
  runtime: runtime_costs.RuntimeCosts = runtime_costs.RuntimeCosts()

  @functools.cached_property
  def allowed(self) -> np.ndarray:
    """bool[n, d]: kind and pin constraints of each (op, device) hold."""
    return self.kind_ok & self.pin_ok

  @functools.cached_property
  def unconstrained(self) -> tuple:
    """(every op may run on every device's kind, no op is pinned away)."""
    return bool(self.kind_ok.all()), bool(self.pin_ok.all())


_PLANS = weakref.WeakKeyDictionary()  # graph.structure -> SimulatorPlan
_TABLES = weakref.WeakKeyDictionary()  # graph -> {topology: DeviceTables}


def prepare(graph: op_graph.OpGraph) -> SimulatorPlan:
  """The graph's `SimulatorPlan`, built on first use and cached per graph
  structure (its `with_costs` copies share it)."""
  plan = _PLANS.get(graph.structure)
  if plan is None:
    plan = _build_plan(graph)
    _PLANS[graph.structure] = plan
  return plan


def device_tables(graph: op_graph.OpGraph,
                  topology: topology_lib.Topology) -> DeviceTables:
  """Per-op durations and constraint masks for graph x topology (cached)."""
  of_graph = _TABLES.setdefault(graph, weakref.WeakKeyDictionary())
  tables = of_graph.get(topology)
  if tables is None:
    tables = of_graph[topology] = _build_tables(graph, topology)
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
      loops=loop_sends.loop_sends(graph, data, tensor_of_data, num_tensors),
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
  of_kind = prepare(graph).kind_ok
  for j, device in enumerate(topology.devices):
    duration[:, j] = graph.costs.get(device.kind, worst) / device.speed
    if device.kind not in of_kind:
      of_kind[device.kind] = np.array([
          device.kind in graph.costs and
          (allowed is None or device.kind in allowed)
          for allowed in graph.device_kinds], np.bool_)
    kind_ok[:, j] = of_kind[device.kind]
  pin_ok = np.ones((n, d), np.bool_)
  specs = [device_names.parse_device(name) for name in topology.device_names]
  for pin in set(p for p in graph.pinned_devices if p is not None):
    wanted = device_names.parse_device(pin)
    row = np.array([device_names.device_matches(wanted, spec) for spec in specs])
    rows = [i for i, p in enumerate(graph.pinned_devices) if p == pin]
    pin_ok[rows] = row
  bandwidth = topology.bandwidth_gbps.astype(np.float64) * 1e3
  np.fill_diagonal(bandwidth, 1.0)  # never used; keeps the table finite
  if topology.table_bytes is None:
    table_bytes, table_us = np.zeros(0), np.zeros((d, d, 0))
  else:
    table_bytes, table_us = topology.table_bytes, topology.table_us
  num_channels, route_ptr, route_channels = topology.channel_routes()
  return DeviceTables(
      duration_us=np.ascontiguousarray(duration),
      latency_us=np.ascontiguousarray(topology.latency_us, np.float64),
      bytes_per_us=bandwidth,
      table_bytes=np.ascontiguousarray(table_bytes, np.float64),
      table_us=np.ascontiguousarray(table_us, np.float64),
      num_channels=int(num_channels), route_ptr=route_ptr,
      route_channels=route_channels, kind_ok=kind_ok, pin_ok=pin_ok,
      capacity_bytes=topology.memory_bytes, runtime=topology.runtime)


# ---- the public entry points -----------------------------------------------


def simulate(graph: op_graph.OpGraph, placement,
             topology: topology_lib.Topology, *, check_memory: bool = True,
             record_schedule: bool = False,
             priority=None) -> sim_results.SimResult:
  """Simulates one step of `graph` placed by `placement` on `topology`.

  Args:
    graph: the op graph.
    placement: int[num_nodes] device index (into `topology.devices`) per op.
    topology: the devices and links.
    check_memory: whether exceeding a device's memory makes it invalid
      (the peak is tracked either way).
    record_schedule: also return every op's and transfer's start/end time.
    priority: optional int or float [num_nodes]; among ready ops a device
      runs the lowest first (ties by topological order). None: topological
      order.

  Returns:
    A `SimResult`; invalid placements are simulated too (valid=False).

  Raises:
    InputError: the placement or priority has the wrong shape, or the
      placement names no device.
  """
  plan = prepare(graph)
  tables = device_tables(graph, topology)
  placement = kernel_inputs.check_placement(placement, plan.num_nodes, topology.num_devices)
  out = schedule_kernel.run(
      placement.astype(np.uint32), topology.num_devices,
      bool(record_schedule), *kernel_inputs.ready_keys(plan, priority),
      *kernel_inputs.arguments(plan, tables, ordered=priority is not None))
  (step, busy, peak, moved, count, op_start, op_end,
   x_tensor, x_src, x_dst, x_start, x_end, x_node) = out
  if tables.runtime.step_overhead_us != (0.0, 0.0):
    several = placement.size and placement.min() != placement.max()
    step += tables.runtime.step_overhead(2 if several else 1)
  problems = constraint_problems(graph, placement, topology)
  if check_memory:
    problems += memory_problems(peak, topology)
  schedule = None
  if record_schedule:
    data = x_tensor >= 0  # the rest carry control edges
    slot = np.full(count, -1, np.int64)
    slot[data] = plan.tensor_slot[x_tensor[data]]
    nbytes = np.zeros(count, np.int64)
    nbytes[data] = plan.tensor_bytes[x_tensor[data]]
    schedule = sim_results.Schedule(
        op_device=placement.copy(), op_start_us=op_start, op_end_us=op_end,
        transfer_node=x_node.astype(np.int64),
        transfer_output=slot,
        transfer_src_device=x_src[:count].astype(np.int64),
        transfer_dst_device=x_dst[:count].astype(np.int64),
        transfer_bytes=nbytes,
        transfer_start_us=x_start[:count], transfer_end_us=x_end[:count])
  return sim_results.SimResult(
      step_time_us=float(step), device_busy_us=busy, peak_memory_bytes=peak,
      transfer_bytes=int(moved), num_transfers=int(count),
      valid=not problems, reason="; ".join(problems) or None,
      schedule=schedule)


def simulate_batch(graph: op_graph.OpGraph, placements,
                   topology: topology_lib.Topology, *,
                   check_memory: bool = True,
                   priority=None) -> sim_results.BatchSimResult:
  """Simulates B placements (int[B, num_nodes]); arrays, no reasons.

  `priority` ([num_nodes], shared by every row) is as in `simulate`.
  """
  plan = prepare(graph)
  tables = device_tables(graph, topology)
  d = topology.num_devices
  placements = kernel_inputs.check_placement(placements, plan.num_nodes, d, ndim=2)
  batch = placements.shape[0]
  step = np.empty(batch, np.float64)
  busy = np.empty((batch, d), np.float64)
  peak = np.empty((batch, d), np.int64)
  moved = np.empty(batch, np.int64)
  count = np.empty(batch, np.int64)
  args = kernel_inputs.ready_keys(plan, priority) + kernel_inputs.arguments(
      plan, tables, ordered=priority is not None)
  narrow = placements.astype(np.uint32)
  for b in range(batch):
    # A Python loop costs ~10 us per row against milliseconds of core time,
    # and spares compiling a second (batched) copy of the core.
    step[b], busy[b], peak[b], moved[b], count[b] = schedule_kernel.run(
        narrow[b], d, False, *args)[:5]
  overhead = tables.runtime.step_overhead_us
  if overhead[0] or overhead[1]:
    several = placements.min(axis=1) != placements.max(axis=1)
    step += np.where(several, overhead[1], overhead[0])
  fits = np.all(peak <= tables.capacity_bytes[None, :], axis=1)
  satisfied = constraints_hold(plan, tables, placements)
  return sim_results.BatchSimResult(
      step_time_us=step, device_busy_us=busy, peak_memory_bytes=peak,
      transfer_bytes=moved, num_transfers=count, fits_memory=fits,
      satisfies_constraints=satisfied,
      valid=satisfied & fits if check_memory else satisfied)


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
  any_kind, any_pin = tables.unconstrained
  bad_kind = _bad_nodes(tables.kind_ok, nodes, placement, any_kind)
  if bad_kind.size:
    i = int(bad_kind[0])
    device = topology.devices[placement[i]]
    allowed = graph.device_kinds[i] or graph.kinds
    problems.append(
        f"op {graph.node_names[i]!r} ({graph.op_types[i]}) is on {device.name} "
        f"of kind {device.kind} but may run only on {list(allowed)}"
        + _more(bad_kind.size))
  bad_pin = _bad_nodes(tables.pin_ok, nodes, placement, any_pin)
  if bad_pin.size:
    i = int(bad_pin[0])
    problems.append(
        f"op {graph.node_names[i]!r} is pinned to {graph.pinned_devices[i]} "
        f"but placed on {topology.devices[placement[i]].name}"
        + _more(bad_pin.size))
  split = (np.flatnonzero(placement != placement[plan.group_first])
           if plan.grouped else nodes[:0])
  if split.size:
    i = int(split[0])
    members = np.flatnonzero(plan.group_first == plan.group_first[i])
    used = sorted({topology.devices[placement[k]].name for k in members})
    problems.append(
        f"colocation group {graph.colocation_groups[i]!r} is split over "
        f"{used}; its ops must share one device")
  return problems


def _bad_nodes(ok: np.ndarray, nodes: np.ndarray, placement: np.ndarray,
               everywhere: bool) -> np.ndarray:
  """Nodes whose device fails `ok` (none without a look when `everywhere`)."""
  return nodes[:0] if everywhere else np.flatnonzero(~ok[nodes, placement])


def memory_problems(peak_bytes: np.ndarray,
                    topology: topology_lib.Topology) -> list:
  """One line per device whose peak memory exceeds its capacity."""
  return [f"OOM on {device.name}: needs "
          f"{_in_unit(peak_bytes[j], device.memory_bytes)}"
          for j, device in enumerate(topology.devices)
          if peak_bytes[j] > device.memory_bytes]


def _in_unit(needed, capacity) -> str:
  """"10.0 GiB, has 8.0 GiB": both in the unit of the larger one."""
  for unit, scale in (("GiB", _GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if max(needed, capacity) >= scale:
      return (f"{needed / scale:.1f} {unit}, has {capacity / scale:.1f} "
              f"{unit}")
  return f"{int(needed)} bytes, has {int(capacity)} bytes"


def _more(count: int) -> str:
  return f" (and {count - 1} more ops)" if count > 1 else ""
