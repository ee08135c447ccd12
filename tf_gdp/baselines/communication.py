"""The communication model the list schedulers (m-ETF, m-SCT, HEFT) plan with.

It mirrors the simulator's (`tf_gdp.cost.simulator`): a tensor (producer,
output slot) needed on another device is sent once per destination device;
a transfer takes latency + bytes / bandwidth and occupies its directed link,
which carries one transfer at a time; a control edge costs the latency only
and does not occupy the link.

The textbook ETF and HEFT assume links of unlimited capacity (every
transfer overlaps every other). On this simulator that is badly wrong for
big graphs: contention-free m-ETF moved 51 GB over the 12 GPU links of
p100x4 for GNMT-8 and planned a 0.28 s step that simulated at 1.06 s. So the
schedulers book transfers on links, as in contention-aware list scheduling
(Sinnen and Sousa, "Communication contention in task scheduling", IEEE TPDS
16(6), 2005): each link keeps the time it becomes free, a new transfer
starts at max(producer end, link free) and is appended there (no insertion
into earlier idle link time). `link_contention=False` restores the textbook
model for comparison.

Also here: the static priorities (longest path to an exit with mean op and
mean communication times), shared by ETF's tie-break and HEFT's upward rank.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.cost import compiled
from tf_gdp.cost import simulator

def edge_costs(view: common.GroupView) -> tuple:
  """(is_data bool[m], tensor id int[m] (-1 control), tensor bytes float[m])."""
  plan = simulator.prepare(view.graph)
  is_data = plan.edge_tensor >= 0
  nbytes = np.where(is_data, plan.tensor_bytes[np.maximum(plan.edge_tensor, 0)],
                    0).astype(np.float64)
  return is_data, plan.edge_tensor.astype(np.int64), nbytes


def mean_link(view: common.GroupView, devices: np.ndarray) -> tuple:
  """(mean latency us, mean us per byte) over ordered pairs of `devices`."""
  tables = view.tables
  if devices.size < 2:
    return 0.0, 0.0
  pairs = [(a, b) for a in devices for b in devices if a != b]
  latency = np.mean([tables.latency_us[a, b] for a, b in pairs])
  per_byte = np.mean([1.0 / tables.bytes_per_us[a, b] for a, b in pairs])
  return float(latency), float(per_byte)


def mean_edge_times(view: common.GroupView, devices: np.ndarray,
                    is_data: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
  """float[m] mean transfer time of each edge over pairs of `devices`."""
  latency, per_byte = mean_link(view, devices)
  return latency + np.where(is_data, nbytes * per_byte, 0.0)


def mean_op_times(view: common.GroupView, usable: np.ndarray) -> np.ndarray:
  """float[n] mean op time over the devices marked in bool[n, d] `usable`."""
  durations = np.where(usable, view.tables.duration_us, 0.0)
  return durations.sum(axis=1) / np.maximum(usable.sum(axis=1), 1)


def levels(view: common.GroupView, op_time: np.ndarray,
           edge_time: np.ndarray) -> np.ndarray:
  """float[n] longest path from each op to an exit (op + edge times)."""
  plan = simulator.prepare(view.graph)
  return _longest_path_to_exit(plan.order, plan.out_ptr, plan.out_edges,
                               plan.edge_dst, op_time, edge_time)


@compiled.jit
def _longest_path_to_exit(order, out_ptr, out_edges, edge_dst, op_time,
                          edge_time):
  level = np.zeros(order.shape[0], np.float64)
  for k in range(order.shape[0] - 1, -1, -1):
    v = order[k]
    best = 0.0
    for i in range(out_ptr[v], out_ptr[v + 1]):
      e = out_edges[i]
      value = edge_time[e] + level[edge_dst[e]]
      if value > best:
        best = value
    level[v] = op_time[v] + best
  return level


@compiled.jit
def arrival_time(v, j, commit, contention, in_ptr, in_edges, edge_src,
                 is_data, edge_tensor, nbytes, device, finish, latency,
                 bytes_per_us, link_free, arrival, scratch):
  """When every input of op v is on device j (all producers scheduled).

  With `contention`, a tensor not yet sent to j is booked on its link after
  the link's earlier bookings; `commit` records the bookings (link_free,
  arrival[tensor, j]), otherwise they are only tentative (in `scratch`,
  float[d]). Without contention each transfer starts when its producer ends.
  """
  d = link_free.shape[0]
  for a in range(d):
    scratch[a] = link_free[a, j]
  ready = 0.0
  for k in range(in_ptr[v], in_ptr[v + 1]):
    e = in_edges[k]
    u = edge_src[e]
    du = device[u]
    if du == j:
      t = finish[u]
    elif not is_data[e]:
      t = finish[u] + latency[du, j]
    else:
      ti = edge_tensor[e]
      if arrival[ti, j] >= 0.0:
        t = arrival[ti, j]
      else:
        begin = finish[u]
        if contention and scratch[du] > begin:
          begin = scratch[du]
        t = begin + latency[du, j] + nbytes[e] / bytes_per_us[du, j]
        if contention:
          scratch[du] = t
        if commit:
          arrival[ti, j] = t
    if t > ready:
      ready = t
  if commit and contention:
    for a in range(d):
      link_free[a, j] = scratch[a]
  return ready
