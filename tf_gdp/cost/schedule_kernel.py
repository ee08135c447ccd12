"""The simulator's event loop, compiled: one placement over flat arrays.

`simulator` owns the model, the precomputation and the results; this module
is only the per-placement pass it calls thousands of times per graph, with
the binary heaps it runs on. Everything here is numba-compiled
(`compiled.jit`) and takes numpy arrays only.

Event codes: an op end is its topological rank (< n), a transfer end is
n + transfer id, a control signal arrival is n + m + the edge's position in
the out-edge lists (`out_ptr`), and when part of the latency pipelines, a
transfer's channels free at n + 2m + transfer id. The event heap
orders by (time, code), so at one instant op ends come first (by rank),
then transfer ends (in creation order), then control arrivals.

Each device's ready ops wait in a heap keyed by `ready_key` (the topological
rank, or the rank of the op in a given priority order), `key_node` mapping a
key back to its op.

Transfers take sequence numbers in the order they became ready and wait in
one FIFO queue per directed pair: transfers of one pair share a route, so
only a queue's head can start before the others. A pair with a waiting head
is either a candidate (one heap, keyed by its head's sequence number) or
parked on a busy channel of its route (a list per channel); a channel that
frees makes its parked pairs candidates again. Candidates are tried oldest
head first, so transfers start exactly as a scan over all waiting transfers
in sequence order would start them, at O(log d) per transfer and release.
A pair freed from one channel that still has another busy channel parks on
that one directly: channels only free between two dispatches, so it could
not start before then.

Index arrays are unsigned (uint32, built by `kernel_inputs`): an unsigned
index spares numba's negative-index fix-up on every read of the event loop.
"""

import numpy as np

from tf_gdp.cost import compiled
from tf_gdp.cost import kernel_heaps as heaps


@compiled.jit
def _first_busy(chan_busy, route_ptr, route_channels, l):
  """The first busy channel on pair l's route, or -1 if all are free."""
  for k in range(route_ptr[l], route_ptr[l + 1]):
    if chan_busy[route_channels[k]]:
      return route_channels[k]
  return -1


@compiled.jit
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


@compiled.jit
def run(placement, d, record, ready_key, key_node, rank, order, in_ptr,
        in_src, in_control, out_ptr, out_dst, out_control, tensor_bytes,
        tensor_repeats, back_src, back_dst, back_bytes, back_repeats,
        tensor_edge_ptr, tensor_dst, tensor_in_pos, node_tensor_ptr,
        start_bytes, temp_bytes, memory_bytes, free_bytes, duration, latency,
        bytes_per_us, table_bytes, table_us, num_channels, route_ptr,
        route_channels, control_transfers, cpu_send, cpu_recv, lifo,
        pipelined, cpu_send_per_byte, cpu_recv_per_byte):
  """Simulates one placement on `d` devices (`kernel_inputs.arguments`).

  `placement` is uint32[n]; `ready_key[v]` (uint32) orders ready ops on a
  device (a permutation of 0..n-1; `key_node` is its inverse), unless
  `lifo`: then a device runs the op made ready last. `record`: whether to
  keep every op's and transfer's start and end time. The runtime's costs
  (`runtime_costs`): `control_transfers` sends a cross-device control edge
  as a 0-byte transfer (one per producer and destination device) instead of
  a bare latency; a device busy when a transfer leaves it (arrives at it)
  owes `cpu_send` (`cpu_recv`) us plus `cpu_send_per_byte`
  (`cpu_recv_per_byte`) us per byte, added to the next op it runs; an idle
  device spends the same time on it: a sender's core is taken for it as the
  transfer leaves, a receiver's as it arrives, but a receiver's handling
  overlaps the transfer's own latency (a lone arrival costs nothing more; a
  burst queues on the core), and an op started while its core is still
  handling waits for it; a transfer
  holds its route's channels for its link time less `pipelined` us (at
  least until it starts), after which the next transfer may start. A tensor
  made inside a while loop is sent `tensor_repeats` times per step: its
  transfer takes that many link times, owes that many CPU costs and
  pipelines that many latencies. A loop's back edge (`back_src` ->
  `back_dst`, NextIteration to Merge) between two devices sends its
  `back_bytes` once per iteration (`back_repeats`): the Merge waits that
  many link times and both ends' CPU costs, one iteration after another.

  Returns:
    (step time, busy us per device, peak bytes per device, bytes moved,
    number of transfers, op start and end times, and per transfer: tensor id
    (-1 for a control edge's), source and destination device, start and end
    time; the four time arrays are empty unless `record`).
  """
  n = rank.shape[0]
  m = in_src.shape[0]

  # Transfers: one per (tensor, destination device), numbered in tensor
  # order; out_ref counts what keeps a producer's outputs alive. in_x[k] is
  # the transfer that in-edge k (a data edge) receives, -1 if it is local.
  in_x = np.empty(m, np.int32)
  k_x = np.empty(m, np.int32)
  x_tensor = np.empty(m, np.int32)
  x_bytes = np.empty(m, np.int64)
  x_rep = np.empty(m, np.int64)
  x_src = np.empty(m, np.uint32)
  x_dst = np.empty(m, np.uint32)
  x_pair = np.empty(m, np.uint32)  # src * d + dst
  x_node = np.empty(m, np.uint32)  # the producer
  recv_ref = np.empty(m, np.uint32)
  node_x_ptr = np.empty(n + 1, np.uint32)
  node_x_ptr[0] = 0
  out_ref = np.empty(n, np.uint32)
  # The consumers each transfer feeds: xc_node[xc_ptr[x]:xc_ptr[x + 1]].
  xc_ptr = np.empty(m + 1, np.uint32)
  xc_ptr[0] = 0
  xc_fill = np.empty(m, np.uint32)
  xc_node = np.empty(m, np.uint32)
  seen_tensor = np.full(d, -1, np.int32)
  seen_control = np.full(d, -1, np.int64)
  x_of_device = np.zeros(d, np.uint32)
  # Per op on its device: its time (gathered here in order: the event loop
  # reads ops out of order, and a row of `duration` each would miss cache),
  # persistent memory and ready-heap slot counts.
  op_us = np.empty(n, np.float64)
  end_bytes = np.empty(n, np.int64)
  memory = np.zeros(d, np.int64)
  dev_base = np.zeros(d + 1, np.uint32)
  num_x = 0
  for u in range(n):
    pu = placement[u]
    op_us[u] = duration[u, pu]
    memory[pu] += memory_bytes[u]
    dev_base[pu + 1] += 1
    local = 0
    for ti in range(node_tensor_ptr[u], node_tensor_ptr[u + 1]):
      first_x = num_x
      for k in range(tensor_edge_ptr[ti], tensor_edge_ptr[ti + 1]):
        dv = placement[tensor_dst[k]]
        if dv == pu:
          local += 1
          k_x[k] = -1
          in_x[tensor_in_pos[k]] = -1
          continue
        if seen_tensor[dv] != ti:
          seen_tensor[dv] = ti
          x_of_device[dv] = num_x
          x_tensor[num_x] = ti
          x_bytes[num_x] = tensor_bytes[ti]
          x_rep[num_x] = tensor_repeats[ti]
          x_src[num_x] = pu
          x_dst[num_x] = dv
          x_pair[num_x] = pu * d + dv
          x_node[num_x] = u
          recv_ref[num_x] = 0
          num_x += 1
        x = x_of_device[dv]
        k_x[k] = x
        in_x[tensor_in_pos[k]] = x
        recv_ref[x] += 1
      if first_x == num_x:
        continue
      for x in range(first_x, num_x):
        xc_ptr[x + 1] = xc_ptr[x] + recv_ref[x]
        xc_fill[x] = xc_ptr[x]
      for k in range(tensor_edge_ptr[ti], tensor_edge_ptr[ti + 1]):
        x = k_x[k]
        if x >= 0:
          xc_node[xc_fill[x]] = tensor_dst[k]
          xc_fill[x] += 1
    data_x = num_x
    if control_transfers:
      first_x = num_x
      for k in range(out_ptr[u], out_ptr[u + 1]):
        dv = placement[out_dst[k]]
        if not out_control[k] or dv == pu:
          continue
        if seen_control[dv] != u:
          seen_control[dv] = u
          x_of_device[dv] = num_x
          x_tensor[num_x] = -1
          x_bytes[num_x] = 0
          x_rep[num_x] = 1
          x_src[num_x] = pu
          x_dst[num_x] = dv
          x_pair[num_x] = pu * d + dv
          x_node[num_x] = u
          recv_ref[num_x] = 0
          num_x += 1
        recv_ref[x_of_device[dv]] += 1
      for x in range(first_x, num_x):
        xc_ptr[x + 1] = xc_ptr[x] + recv_ref[x]
        xc_fill[x] = xc_ptr[x]
      for k in range(out_ptr[u], out_ptr[u + 1]):
        dv = placement[out_dst[k]]
        if out_control[k] and dv != pu:
          x = x_of_device[dv]
          xc_node[xc_fill[x]] = out_dst[k]
          xc_fill[x] += 1
    node_x_ptr[u + 1] = num_x
    # A control edge's transfer keeps no output alive.
    out_ref[u] = local + data_x - node_x_ptr[u]
    # What the op frees as it ends: its temporaries, and its outputs if
    # nothing consumes them (consumers start only after it ends).
    end_bytes[u] = temp_bytes[u] + (free_bytes[u] if out_ref[u] == 0 else 0)

  # A loop state that crosses devices on its way back to the next iteration.
  for b in range(back_src.shape[0]):
    ps = placement[back_src[b]]
    pt = placement[back_dst[b]]
    if ps != pt:
      size = back_bytes[b]
      op_us[back_dst[b]] += back_repeats[b] * (
          _link_us(ps, pt, size, latency, bytes_per_us, table_bytes,
                   table_us) + cpu_send + cpu_recv +
          size * (cpu_send_per_byte + cpu_recv_per_byte))

  # Per-pair FIFO queues, packed: pair l owns queue[link_base[l]:...].
  dd = d * d
  link_base = np.zeros(dd + 1, np.uint32)
  for x in range(num_x):
    link_base[x_pair[x] + 1] += 1
  for l in range(dd):
    link_base[l + 1] += link_base[l]
  queue = np.empty(max(num_x, 1), np.uint32)
  q_head = np.zeros(dd, np.uint32)
  q_tail = np.zeros(dd, np.uint32)
  x_seq = np.empty(max(num_x, 1), np.uint32)
  num_seq = 0
  # Candidate pairs: a heap of (head sequence << pair_bits) | pair (sequence
  # numbers are unique, so the pair only rides along). Parked pairs: a
  # linked list per busy channel.
  pair_bits = 1
  while (1 << pair_bits) < dd:
    pair_bits += 1
  pair_mask = (1 << pair_bits) - 1
  cand = np.empty(dd, np.int64)
  cand_size = 0
  chan_busy = np.zeros(num_channels, np.bool_)
  park_first = np.full(num_channels, -1, np.int32)
  park_next = np.full(dd, -1, np.int32)

  # Per-device ready heaps of keys, packed by device.
  for j in range(d):
    dev_base[j + 1] += dev_base[j]
  ready = np.empty(max(n, 1), np.uint32)
  ready_size = np.zeros(d, np.uint32)
  dev_busy = np.zeros(d, np.bool_)

  peak = memory.copy()
  busy_us = np.zeros(d, np.float64)

  pending = np.empty(n, np.uint32)
  for v in range(n):
    pending[v] = in_ptr[v + 1] - in_ptr[v]
    if pending[v] == 0:
      j = placement[v]
      ready_size[j] = heaps.ready_push(ready, dev_base[j], ready_size[j], v,
                                       ready_key, lifo)
  debt = np.zeros(d, np.float64)
  handled_until = np.zeros(d, np.float64)  # an idle core's transfer handling

  # Channel releases apart from arrivals only when some latency pipelines.
  split_release = pipelined > 0.0
  num_events = n + 2 * m + 1 if split_release else n + m + 1
  ev_time = np.empty(num_events, np.float64)
  ev_code = np.empty(num_events, np.uint32)
  ev_size = 0
  # Start and end times are kept only when recorded (the stores miss cache).
  op_start = np.zeros(n if record else 0, np.float64)
  op_end = np.zeros(n if record else 0, np.float64)
  x_start = np.zeros(num_x if record else 0, np.float64)
  x_end = np.zeros(num_x if record else 0, np.float64)

  dirty_dev = np.ones(d, np.bool_)
  dirty_devs = np.arange(d).astype(np.uint32)
  num_dirty_dev = d
  moved = 0
  now = 0.0

  while True:
    # Dispatch: idle devices take their best ready op, then candidate
    # transfers, oldest first, start when their route is free or park on
    # its first busy channel. Only allocations happen here.
    for k in range(num_dirty_dev):
      j = dirty_devs[k]
      dirty_dev[j] = False
      if dev_busy[j] or ready_size[j] == 0:
        continue
      v, ready_size[j] = heaps.ready_pop(ready, dev_base[j], ready_size[j],
                                         key_node, lifo)
      dev_busy[j] = True
      took = op_us[v] + debt[j] + max(0.0, handled_until[j] - now)
      debt[j] = 0.0
      end = now + took
      if record:
        op_start[v] = now
        op_end[v] = end
      busy_us[j] += took
      memory[j] += start_bytes[v]
      if memory[j] > peak[j]:
        peak[j] = memory[j]
      ev_size = heaps.event_push(ev_time, ev_code, ev_size, end, rank[v])
    num_dirty_dev = 0
    while cand_size > 0:
      key, cand_size = heaps.rank_pop(cand, 0, cand_size)
      l = key & pair_mask
      blocked = _first_busy(chan_busy, route_ptr, route_channels, l)
      if blocked < 0:
        for k in range(route_ptr[l], route_ptr[l + 1]):
          chan_busy[route_channels[k]] = True
        x = queue[link_base[l] + q_head[l]]
        q_head[l] += 1
        s = x_src[x]
        dv = x_dst[x]
        size = x_bytes[x]
        rep = x_rep[x]
        end = now + rep * _link_us(s, dv, size, latency, bytes_per_us,
                                   table_bytes, table_us)
        handling = rep * (cpu_send + size * cpu_send_per_byte)
        if dev_busy[s]:
          debt[s] += handling
        else:
          handled_until[s] = max(handled_until[s], now) + handling
        if record:
          x_start[x] = now
          x_end[x] = end
        moved += rep * size
        memory[dv] += size
        if memory[dv] > peak[dv]:
          peak[dv] = memory[dv]
        ev_size = heaps.event_push(ev_time, ev_code, ev_size, end, n + x)
        if split_release:
          ev_size = heaps.event_push(ev_time, ev_code, ev_size,
                                     max(now, end - rep * pipelined),
                                     n + 2 * m + x)
        if q_head[l] < q_tail[l]:
          blocked = route_channels[route_ptr[l]]  # its own route is busy
      if blocked >= 0:
        park_next[l] = park_first[blocked]
        park_first[blocked] = l

    if ev_size == 0:
      break
    now = ev_time[0]
    # Apply every event at this instant (frees, readiness, queueing).
    while ev_size > 0 and ev_time[0] == now:
      code = ev_code[0]
      ev_size = heaps.event_pop(ev_time, ev_code, ev_size)
      if code < n:
        v = order[code]
        j = placement[v]
        dev_busy[j] = False
        if not dirty_dev[j]:
          dirty_dev[j] = True
          dirty_devs[num_dirty_dev] = j
          num_dirty_dev += 1
        memory[j] -= end_bytes[v]
        for k in range(in_ptr[v], in_ptr[v + 1]):
          if in_control[k]:
            continue
          x = in_x[k]
          if x < 0:
            u = in_src[k]
            out_ref[u] -= 1
            if out_ref[u] == 0:
              memory[j] -= free_bytes[u]
          else:
            recv_ref[x] -= 1
            if recv_ref[x] == 0:
              memory[j] -= x_bytes[x]
        for k in range(out_ptr[v], out_ptr[v + 1]):
          w = out_dst[k]
          jw = placement[w]
          if jw == j:
            pending[w] -= 1
            if pending[w] == 0:
              ready_size[j] = heaps.ready_push(
                  ready, dev_base[j], ready_size[j], w, ready_key, lifo)
          elif out_control[k] and not control_transfers:
            ev_size = heaps.event_push(ev_time, ev_code, ev_size,
                                       now + latency[j, jw], n + m + k)
        for x in range(node_x_ptr[v], node_x_ptr[v + 1]):
          l = x_pair[x]
          x_seq[x] = num_seq
          num_seq += 1
          if q_head[l] == q_tail[l]:
            cand_size = heaps.rank_push(cand, 0, cand_size,
                                        (np.int64(x_seq[x]) << pair_bits) | l)
          queue[link_base[l] + q_tail[l]] = x
          q_tail[l] += 1
      elif code < n + m or code >= n + 2 * m:
        arrival = code < n + m
        x = code - n if arrival else code - n - 2 * m
        l = x_pair[x]
        for k in range(route_ptr[l], route_ptr[l + 1]):
          if arrival and split_release:
            break  # its channels free by their own event
          c = route_channels[k]
          chan_busy[c] = False
          p = park_first[c]
          park_first[c] = -1
          while p >= 0:
            following = park_next[p]
            # Channels only free until the next dispatch: a pair with another
            # busy channel cannot start yet, so it parks there directly.
            blocked = _first_busy(chan_busy, route_ptr, route_channels, p)
            if blocked >= 0:
              park_next[p] = park_first[blocked]
              park_first[blocked] = p
            else:
              head = queue[link_base[p] + q_head[p]]
              cand_size = heaps.rank_push(
                  cand, 0, cand_size, (np.int64(x_seq[head]) << pair_bits) | p)
            p = following
        if not arrival:
          continue
        dv = x_dst[x]
        handling = x_rep[x] * (cpu_recv + x_bytes[x] * cpu_recv_per_byte)
        if dev_busy[dv]:
          debt[dv] += handling
        else:
          handled_until[dv] = max(handled_until[dv], now - handling) + handling
        for k in range(xc_ptr[x], xc_ptr[x + 1]):
          w = xc_node[k]
          pending[w] -= 1
          if pending[w] == 0:
            ready_size[dv] = heaps.ready_push(
                ready, dev_base[dv], ready_size[dv], w, ready_key, lifo)
            if not dirty_dev[dv]:
              dirty_dev[dv] = True
              dirty_devs[num_dirty_dev] = dv
              num_dirty_dev += 1
        if x_tensor[x] >= 0:
          u = x_node[x]
          out_ref[u] -= 1
          if out_ref[u] == 0:
            memory[x_src[x]] -= free_bytes[u]
      else:
        w = out_dst[code - n - m]
        pending[w] -= 1
        if pending[w] == 0:
          j = placement[w]
          ready_size[j] = heaps.ready_push(ready, dev_base[j], ready_size[j], w,
                                           ready_key, lifo)
          if not dirty_dev[j]:
            dirty_dev[j] = True
            dirty_devs[num_dirty_dev] = j
            num_dirty_dev += 1

  return (now, busy_us, peak, moved, num_x, op_start, op_end,
          x_tensor[:num_x], x_src[:num_x], x_dst[:num_x], x_start, x_end,
          x_node[:num_x])
