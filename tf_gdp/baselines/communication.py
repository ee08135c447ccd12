"""The communication model the list schedulers (m-ETF, m-SCT, HEFT) plan with.

It mirrors the simulator's (`tf_gdp.cost.simulator`): a tensor (producer,
output slot) needed on another device is sent once per destination device;
a transfer takes latency + bytes / bandwidth and occupies every channel of
its route (a GPU's PCIe port, a switch uplink, an NVLink; without channel
data, its directed pair), each carrying one transfer at a time; a control
edge costs the latency only and occupies no channel.

The textbook ETF and HEFT assume links of unlimited capacity (every
transfer overlaps every other). On this simulator that is badly wrong for
big graphs: contention-free m-ETF moved 51 GB over the 12 GPU links of
p100x4 for GNMT-8 and planned a 0.28 s step that simulated at 1.06 s. So the
schedulers book transfers on channels, as in contention-aware list
scheduling (Sinnen and Sousa, "Communication contention in task
scheduling", IEEE TPDS 16(6), 2005): each channel keeps the time it becomes
free, a new transfer starts at the latest of its producer's end and its
channels' free times and is appended there (no insertion into earlier idle
time). `link_contention=False` restores the textbook model for comparison.

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


def levels_from_entry(view: common.GroupView, op_time: np.ndarray,
                      edge_time: np.ndarray) -> np.ndarray:
  """float[n] longest path from an entry to each op, its own time included
  (op + edge times): `levels` on the reversed graph."""
  plan = simulator.prepare(view.graph)
  return _longest_path_to_exit(plan.order[::-1].copy(), plan.in_ptr,
                               plan.in_edges, plan.edge_src, op_time,
                               edge_time)


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


def channel_state(tables, in_ptr: np.ndarray) -> tuple:
  """The bookings `arrival_time` plans on, for one schedule (mutable).

  (free time per channel, route_ptr, route_channels, and an undo log of
  channel and time arrays sized for one op's tentative bookings), from the
  simulator's `DeviceTables`.
  """
  max_in = int(np.max(np.diff(in_ptr), initial=0))
  max_route = int(np.max(np.diff(tables.route_ptr), initial=0))
  size = max(max_in * max_route, 1)
  return (np.zeros(tables.num_channels, np.float64), tables.route_ptr,
          tables.route_channels, np.empty(size, np.int64),
          np.empty(size, np.float64))


@compiled.jit
def arrival_time(v, j, commit, contention, in_ptr, in_edges, edge_src,
                 is_data, edge_tensor, nbytes, device, finish, latency,
                 bytes_per_us, channels, arrival):
  """When every input of op v is on device j (all producers scheduled).

  With `contention`, a tensor not yet sent to j is booked on its route's
  channels after their earlier bookings; `commit` keeps the bookings
  (channel free times, arrival[tensor, j]), otherwise they are tentative
  and undone before returning. Without contention each transfer starts when
  its producer ends. `channels` is a `channel_state`.
  """
  chan_free, route_ptr, route_channels, undo_channel, undo_time = channels
  d = latency.shape[0]
  num_undo = 0
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
        l = du * d + j
        if contention:
          for r in range(route_ptr[l], route_ptr[l + 1]):
            if chan_free[route_channels[r]] > begin:
              begin = chan_free[route_channels[r]]
        t = begin + latency[du, j] + nbytes[e] / bytes_per_us[du, j]
        if contention:
          for r in range(route_ptr[l], route_ptr[l + 1]):
            c = route_channels[r]
            if not commit:
              undo_channel[num_undo] = c
              undo_time[num_undo] = chan_free[c]
              num_undo += 1
            chan_free[c] = t
        if commit:
          arrival[ti, j] = t
    if t > ready:
      ready = t
  for i in range(num_undo - 1, -1, -1):
    chan_free[undo_channel[i]] = undo_time[i]
  return ready
