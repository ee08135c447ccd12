"""HEFT: Heterogeneous Earliest Finish Time, made memory-aware.

Topcuoglu, Hariri and Wu, "Performance-effective and low-complexity task
scheduling for heterogeneous computing", IEEE TPDS 13(3), 2002. Two phases:

1. Task prioritising. The upward rank of op v is
       rank_u(v) = w(v) + max over successors s of (c(v, s) + rank_u(s)),
   with w(v) the op's mean time over the devices it may use and c the mean
   communication time of the edge (mean latency plus bytes times the mean
   time per byte over all ordered device pairs; latency only for a control
   edge). Ops are taken in decreasing rank_u, which is a topological order
   (ties go by topological rank).
2. Processor selection. Each op goes to the device that gives it the
   earliest finish time, where its start is the earliest idle slot on the
   device, at or after its inputs' arrival, that is long enough for it
   (the insertion policy: an op may fill a gap left between ops scheduled
   earlier).

Communication follows `communication`: a tensor is sent once per device
and, unless `link_contention=False`, transfers are booked on their routes'
channels one after another (the arrival times the finish times are
computed from).

Constraints, as in the other baselines: only devices the op's colocation
group may use; the group's first op binds the group to its device; and a
device is a candidate only while its memory budget holds the group
(`common.memory_model`), which makes this a memory-constrained HEFT.

Speed: the insertion search walks a device's idle gaps from the input
arrival time onward; on 60k-op graphs the gap lists grow long, so the walk
looks at most `insertion_window` gaps (default 1000) before appending at the
device's end. Everything runs in one compiled pass.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.baselines import communication
from tf_gdp.baselines import list_scheduler
from tf_gdp.baselines.communication import arrival_time
from tf_gdp.cost import compiled
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, insertion_window: int = 1000,
          link_contention: bool = True, activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """Earliest-finish-time placement in upward-rank order; deterministic."""
  del seed
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  plan = simulator.prepare(graph)
  tables = view.tables
  allowed = np.ascontiguousarray(view.ops_allowed)
  is_data, edge_tensor, nbytes = communication.edge_costs(view)
  upward = communication.levels(
      view, communication.mean_op_times(view, allowed),
      communication.mean_edge_times(view, np.arange(view.num_devices),
                                    is_data, nbytes))
  order = np.lexsort((plan.rank, -upward)).astype(np.int64)
  device, start, finish, failed = _heft(
      order, plan.in_ptr, plan.in_edges, plan.edge_src, is_data, edge_tensor,
      nbytes, plan.tensor_bytes.shape[0],
      np.ascontiguousarray(tables.duration_us), allowed, tables.latency_us,
      tables.bytes_per_us, view.group_of.astype(np.int64), model.need,
      model.budget, max(1, int(insertion_window)), bool(link_contention),
      communication.channel_state(tables, plan.in_ptr))
  if failed >= 0:
    raise common.no_room_error(
        view, model, int(view.group_of[failed]),
        list_scheduler.reserved_memory(view, model, device))
  common.note("scheduled_makespan_us", round(float(finish.max(initial=0.0)), 3))
  common.note_priority(start)  # each device runs its ops by planned start
  return device.astype(np.int32)


@compiled.jit
def _slot(starts, ends, j, count, ready, duration, max_scan):
  """Earliest start >= ready of a gap on device j fitting `duration`.

  Returns (start, index to insert the new interval at).
  """
  lo = 0
  hi = count
  while lo < hi:
    mid = (lo + hi) >> 1
    if ends[j, mid] <= ready:
      lo = mid + 1
    else:
      hi = mid
  t = ready
  k = lo
  scanned = 0
  while k < count:
    if t + duration <= starts[j, k]:
      return t, k
    if ends[j, k] > t:
      t = ends[j, k]
    k += 1
    scanned += 1
    if scanned >= max_scan and k < count:
      return max(ready, ends[j, count - 1]), count
  return t, count


@compiled.jit
def _heft(order, in_ptr, in_edges, edge_src, is_data, edge_tensor, nbytes,
          num_tensors, duration, allowed, latency, bytes_per_us, group_of,
          need, budget, max_scan, contention, channels):
  """Places ops in `order`; returns (device, start, finish, failed op or -1)."""
  n = order.shape[0]
  d = duration.shape[1]
  device = np.full(n, -1, np.int64)
  start_at = np.zeros(n, np.float64)
  finish = np.zeros(n, np.float64)
  bound = np.full(need.shape[0], -1, np.int64)
  used = np.zeros(d, np.float64)
  arrival = np.full((max(num_tensors, 1), d), -1.0)
  cap = max(n, 1)
  starts = np.empty((d, cap), np.float64)
  ends = np.empty((d, cap), np.float64)
  count = np.zeros(d, np.int64)
  for v in order:
    g = group_of[v]
    best_j = -1
    best_start = 0.0
    best_finish = np.inf
    best_pos = 0
    for j in range(d):
      if not allowed[v, j]:
        continue
      if bound[g] >= 0:
        if bound[g] != j:
          continue
      elif used[j] + need[g] > budget[j]:
        continue
      ready = arrival_time(v, j, False, contention, in_ptr, in_edges,
                           edge_src, is_data, edge_tensor, nbytes, device,
                           finish, latency, bytes_per_us, channels, arrival)
      start, pos = _slot(starts, ends, j, count[j], ready, duration[v, j],
                         max_scan)
      if start + duration[v, j] < best_finish:
        best_j = j
        best_start = start
        best_finish = start + duration[v, j]
        best_pos = pos
    if best_j < 0:
      return device, start_at, finish, v
    j = best_j
    arrival_time(v, j, True, contention, in_ptr, in_edges, edge_src, is_data,
                 edge_tensor, nbytes, device, finish, latency, bytes_per_us,
                 channels, arrival)
    for i in range(count[j], best_pos, -1):
      starts[j, i] = starts[j, i - 1]
      ends[j, i] = ends[j, i - 1]
    starts[j, best_pos] = best_start
    ends[j, best_pos] = best_finish
    count[j] += 1
    device[v] = j
    start_at[v] = best_start
    finish[v] = best_finish
    if bound[g] < 0:
      bound[g] = j
      used[j] += need[g]
  return device, start_at, finish, -1
