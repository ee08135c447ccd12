"""Memory-constrained ETF list scheduling, the engine of m-ETF and m-SCT.

Earliest Task First (Hwang, Chow, Anger and Lee, "Scheduling precedence
graphs in systems with interprocessor communication times", SIAM J. Comput.
1989), as Baechi (Jeon et al., SoCC 2020) uses it: repeatedly,
over every ready op v (all predecessors scheduled) and every device j,

    est(v, j) = max(free(j), max over in-edges (u, v) of
                    finish(u) + comm(u -> v, device(u), j)),

and schedule the pair with the smallest est (ties: larger static level,
i.e. the longest remaining path including mean communication, then
topological rank, then device index). comm follows `communication`: 0 on
one device, else latency plus bytes / bandwidth (latency only for a control
edge), a tensor sent once per device, and (unless `link_contention=False`)
each transfer booked on its route's channels after their earlier transfers.

The m- (memory-constrained) rule: a device is a candidate for v only if it
still has room for v's colocation group (`common.memory_model`); the first
scheduled op of a group binds the whole group to its device and reserves the
group's memory there, so a colocation group never splits. Devices: the
primary ones (`GroupView.primary`), plus any device an op's group may use
when it may use no primary device (CPU-only ops, pins); ETF optimises start
times, not finish times, so offering it a slow CPU would misuse it.

m-SCT adds favorite children, with Hanen and Munier's rule: when an op
becomes ready and its favorite parent is still the last op of its device,
and the op could start there the moment the device is free (its inputs
have arrived; the device is allowed and has room), the device is reserved
for it: it goes there next, before any other op. Otherwise the favorite
link lapses and the op is scheduled like any other.

Efficiency (60k-op graphs): each device keeps two heaps, ops whose inputs
have not arrived by the device's free time, keyed by data-ready time, and
arrived ops, keyed by priority (their est is the device's free time).
Data-ready times only grow as links get busier, so a key is a lower bound:
a device's top is re-evaluated and re-queued until its key is exact (lazy
evaluation). Stale entries (op scheduled elsewhere, group bound elsewhere,
no room left: all permanent) are dropped when they surface. Everything runs
in one compiled loop, about O(n d log n).
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.baselines import communication
from tf_gdp.baselines.communication import arrival_time
from tf_gdp.cost import compiled
from tf_gdp.cost import simulator

def candidate_devices(view: common.GroupView) -> np.ndarray:
  """bool[n, d]: primary devices an op may use, or all it may use if none."""
  allowed = view.ops_allowed
  primary = np.zeros(view.num_devices, np.bool_)
  primary[view.primary] = True
  on_primary = allowed & primary[None, :]
  return np.where(on_primary.any(axis=1)[:, None], on_primary, allowed)


def schedule(view: common.GroupView, model: common.MemoryModel, *,
             favorite_parent=None, link_contention: bool = True) -> tuple:
  """Runs m-ETF; returns (op device int32[n], planned makespan us, list
  order int64[n]: the step at which each op was scheduled).

  Raises InputError when some op's group fits on none of its devices.
  """
  graph = view.graph
  plan = simulator.prepare(graph)
  tables = view.tables
  candidate = candidate_devices(view)
  is_data, edge_tensor, nbytes = communication.edge_costs(view)
  priority = communication.levels(
      view, communication.mean_op_times(view, candidate),
      communication.mean_edge_times(view, view.primary, is_data, nbytes))
  if favorite_parent is None:
    favorite_parent = np.full(graph.num_nodes, -1, np.int64)
  device, finish, step, failed = _etf(
      plan.order, plan.rank, plan.in_ptr, plan.in_edges, plan.out_ptr,
      plan.out_edges, plan.edge_src, plan.edge_dst, is_data, edge_tensor,
      nbytes, plan.tensor_bytes.shape[0],
      np.ascontiguousarray(tables.duration_us),
      np.ascontiguousarray(candidate), tables.latency_us, tables.bytes_per_us,
      view.group_of.astype(np.int64), model.need, model.budget, priority,
      np.asarray(favorite_parent, np.int64), bool(link_contention),
      communication.channel_state(tables, plan.in_ptr))
  if failed >= 0:
    raise common.no_room_error(view, model, int(view.group_of[failed]),
                               reserved_memory(view, model, device))
  return device.astype(np.int32), float(finish.max(initial=0.0)), step


def reserved_memory(view: common.GroupView, model: common.MemoryModel,
                    device: np.ndarray) -> np.ndarray:
  """float[d] memory reserved by the groups a partial schedule has bound."""
  placed = device >= 0
  group_device = np.full(view.num_groups, -1, np.int64)
  group_device[view.group_of[placed]] = device[placed]
  bound = group_device >= 0
  return np.bincount(group_device[bound], weights=model.need[bound],
                     minlength=view.num_devices)


@compiled.jit
def _less3(a1, a2, a3, b1, b2, b3):
  if a1 != b1:
    return a1 < b1
  if a2 != b2:
    return a2 < b2
  return a3 < b3


@compiled.jit
def _push(k1, k2, k3, row, size, x1, x2, x3):
  """Pushes (x1, x2, x3) on the min-heap in row `row`; new size."""
  i = size
  while i > 0:
    parent = (i - 1) >> 1
    if not _less3(x1, x2, x3, k1[row, parent], k2[row, parent],
                  k3[row, parent]):
      break
    k1[row, i] = k1[row, parent]
    k2[row, i] = k2[row, parent]
    k3[row, i] = k3[row, parent]
    i = parent
  k1[row, i] = x1
  k2[row, i] = x2
  k3[row, i] = x3
  return size + 1


@compiled.jit
def _pop(k1, k2, k3, row, size):
  """Removes the top of the heap in row `row`; new size."""
  size -= 1
  x1 = k1[row, size]
  x2 = k2[row, size]
  x3 = k3[row, size]
  i = 0
  while True:
    child = 2 * i + 1
    if child >= size:
      break
    right = child + 1
    if right < size and _less3(k1[row, right], k2[row, right], k3[row, right],
                               k1[row, child], k2[row, child], k3[row, child]):
      child = right
    if not _less3(k1[row, child], k2[row, child], k3[row, child], x1, x2, x3):
      break
    k1[row, i] = k1[row, child]
    k2[row, i] = k2[row, child]
    k3[row, i] = k3[row, child]
    i = child
  k1[row, i] = x1
  k2[row, i] = x2
  k3[row, i] = x3
  return size


@compiled.jit
def _fits(v, j, device, group_of, bound, used, need, budget):
  """v is unscheduled and its group is bound to j or has room on j."""
  if device[v] >= 0:
    return False
  g = group_of[v]
  if bound[g] >= 0:
    return bound[g] == j
  return used[j] + need[g] <= budget[j]


@compiled.jit
def _etf(order, rank, in_ptr, in_edges, out_ptr, out_edges, edge_src,
         edge_dst, is_data, edge_tensor, nbytes, num_tensors, duration,
         candidate, latency, bytes_per_us, group_of, need, budget, priority,
         favorite_parent, contention, channels):
  """The ETF loop; returns (device, finish, list step, failed op or -1).

  Heap keys are lower bounds of an op's data-ready time (links only get
  busier), so a device's best candidate is found by re-evaluating the top
  and re-queueing it while its true time is later (lazy evaluation).
  """
  n = order.shape[0]
  d = duration.shape[1]
  device = np.full(n, -1, np.int64)
  finish = np.zeros(n, np.float64)
  step = np.full(n, -1, np.int64)
  bound = np.full(need.shape[0], -1, np.int64)
  used = np.zeros(d, np.float64)
  free_t = np.zeros(d, np.float64)
  last_op = np.full(d, -1, np.int64)
  arrival = np.full((max(num_tensors, 1), d), -1.0)
  pending = np.empty(n, np.int64)
  for v in range(n):
    pending[v] = in_ptr[v + 1] - in_ptr[v]
  cap = max(n, 1)
  # Heap A (waiting): (data ready, -priority, rank). B (arrived by the
  # device's free time): (-priority, rank, rank).
  a1 = np.empty((d, cap), np.float64)
  a2 = np.empty((d, cap), np.float64)
  a3 = np.empty((d, cap), np.int64)
  a_size = np.zeros(d, np.int64)
  b1 = np.empty((d, cap), np.float64)
  b2 = np.empty((d, cap), np.float64)
  b3 = np.empty((d, cap), np.int64)
  b_size = np.zeros(d, np.int64)

  for r in range(n):
    v = order[r]
    if pending[v] == 0:
      for j in range(d):
        if candidate[v, j] and _fits(v, j, device, group_of, bound, used,
                                     need, budget):
          a_size[j] = _push(a1, a2, a3, j, a_size[j], 0.0, -priority[v], r)

  for t in range(n):
    best_j = -1
    best_1 = 0.0
    best_2 = 0.0
    best_3 = 0
    for j in range(d):
      found = False
      est = 0.0
      k2 = 0.0
      k3 = 0
      while True:
        while a_size[j] > 0 and a1[j, 0] <= free_t[j]:
          prio = a2[j, 0]
          r = a3[j, 0]
          a_size[j] = _pop(a1, a2, a3, j, a_size[j])
          if _fits(order[r], j, device, group_of, bound, used, need, budget):
            b_size[j] = _push(b1, b2, b3, j, b_size[j], prio, float(r), r)
        while b_size[j] > 0 and not _fits(order[b3[j, 0]], j, device,
                                          group_of, bound, used, need, budget):
          b_size[j] = _pop(b1, b2, b3, j, b_size[j])
        if b_size[j] > 0:
          r = b3[j, 0]
          ready = arrival_time(order[r], j, False, contention, in_ptr,
                               in_edges, edge_src, is_data, edge_tensor,
                               nbytes, device, finish, latency, bytes_per_us,
                               channels, arrival)
          prio = b1[j, 0]
          if ready <= free_t[j]:
            found = True
            est = free_t[j]
            k2 = prio
            k3 = r
            break
          b_size[j] = _pop(b1, b2, b3, j, b_size[j])
          a_size[j] = _push(a1, a2, a3, j, a_size[j], ready, prio, r)
          continue
        while a_size[j] > 0 and not _fits(order[a3[j, 0]], j, device,
                                          group_of, bound, used, need, budget):
          a_size[j] = _pop(a1, a2, a3, j, a_size[j])
        if a_size[j] == 0:
          break
        r = a3[j, 0]
        ready = arrival_time(order[r], j, False, contention, in_ptr, in_edges,
                             edge_src, is_data, edge_tensor, nbytes, device,
                             finish, latency, bytes_per_us, channels,
                             arrival)
        if ready <= a1[j, 0]:
          found = True
          est = a1[j, 0]
          k2 = a2[j, 0]
          k3 = r
          break
        prio = a2[j, 0]
        a_size[j] = _pop(a1, a2, a3, j, a_size[j])
        a_size[j] = _push(a1, a2, a3, j, a_size[j], ready, prio, r)
      if found and (best_j < 0 or _less3(est, k2, k3, best_1, best_2,
                                         best_3)):
        best_j = j
        best_1 = est
        best_2 = k2
        best_3 = k3
    if best_j < 0:
      for v in range(n):
        if pending[v] == 0 and device[v] < 0:
          return device, finish, step, v
      return device, finish, step, 0  # unreachable for a DAG
    j = best_j
    v = order[best_3]
    # The chosen op is the top of B (arrived) or of A on device j.
    if b_size[j] > 0 and b3[j, 0] == best_3:
      b_size[j] = _pop(b1, b2, b3, j, b_size[j])
    else:
      a_size[j] = _pop(a1, a2, a3, j, a_size[j])
    arrival_time(v, j, True, contention, in_ptr, in_edges, edge_src, is_data,
                 edge_tensor, nbytes, device, finish, latency, bytes_per_us,
                 channels, arrival)
    g = group_of[v]
    device[v] = j
    step[v] = t
    finish[v] = best_1 + duration[v, j]
    free_t[j] = finish[v]
    last_op[j] = v
    if bound[g] < 0:
      bound[g] = j
      used[j] += need[g]
    for k in range(out_ptr[v], out_ptr[v + 1]):
      w = edge_dst[out_edges[k]]
      pending[w] -= 1
      if pending[w] > 0:
        continue
      # Hanen-Munier's rule: a favorite child that can start on its
      # parent's device the moment that device is free again (the parent is
      # still the device's last op) is urgent there; otherwise it is an
      # ordinary ready op.
      jf = -1
      fav = favorite_parent[w]
      if fav >= 0:
        jf = device[fav]
        if (last_op[jf] != fav or not candidate[w, jf] or
            not _fits(w, jf, device, group_of, bound, used, need, budget)):
          jf = -1
      if jf >= 0:
        ready = arrival_time(w, jf, False, contention, in_ptr, in_edges,
                             edge_src, is_data, edge_tensor, nbytes, device,
                             finish, latency, bytes_per_us, channels,
                             arrival)
        if ready <= free_t[jf]:
          b_size[jf] = _push(b1, b2, b3, jf, b_size[jf], -np.inf,
                             float(rank[w]), rank[w])
          continue
      for jw in range(d):
        if not candidate[w, jw]:
          continue
        if not _fits(w, jw, device, group_of, bound, used, need, budget):
          continue
        ready = arrival_time(w, jw, False, contention, in_ptr, in_edges,
                             edge_src, is_data, edge_tensor, nbytes, device,
                             finish, latency, bytes_per_us, channels,
                             arrival)
        a_size[jw] = _push(a1, a2, a3, jw, a_size[jw], ready, -priority[w],
                           rank[w])
  return device, finish, step, -1
