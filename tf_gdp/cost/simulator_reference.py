"""The simulator's model written plainly (dicts, sets, heapq), for cross-checks.

An independent implementation of the model that `simulator` documents: slow
(pure Python, no precomputation), but short enough to read against the
model's description. Tests check the compiled schedule against it.
"""

import heapq

from tf_gdp.cost import runtime_costs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


def simulate_reference(graph: op_graph.OpGraph, placement,
                       topology: topology_lib.Topology, priority=None) -> dict:
  """The same model written plainly (dicts, sets, heapq), for cross-checks.

  Slow (pure Python); `priority` as in `simulator.simulate`. Returns a dict
  with step_time_us, device_busy_us, peak_memory_bytes, transfer_bytes,
  num_transfers, op_start_us, op_end_us, transfer_start_us, transfer_end_us
  (per transfer, in the simulator's transfer order).
  """
  placement = [int(p) for p in placement]
  priority = None if priority is None else list(priority)
  return _ReferenceRun(graph, placement, topology, priority).run()


class _ReferenceRun:
  """State of one reference simulation."""

  def __init__(self, graph, placement, topology, priority):
    self.graph = graph
    self.place = placement
    self.topo = topology
    self.runtime = topology.runtime
    # A given priority overrides the executor's own order.
    self.lifo = (priority is None and topology.runtime.executor_order ==
                 runtime_costs.LAST_READY_FIRST)
    self.made_ready = 0
    self.owed = [0.0] * topology.num_devices
    self.handled_until = [0.0] * topology.num_devices  # idle cores
    n = graph.num_nodes
    self.rank = {int(v): r for r, v in enumerate(graph.topo_order)}
    # A ready op's key on its device: (priority, rank), or rank alone.
    self.key = {v: (r,) if priority is None else (priority[v], r)
                for v, r in self.rank.items()}
    self.edges = [(int(s), int(t), int(b), int(o)) for s, t, b, o in zip(
        graph.edge_src, graph.edge_dst, graph.edge_bytes, graph.edge_output)]
    self.tensor_size = {}
    self.repeats = {}  # (src, slot) -> sends per step (loops)
    consumers = {}  # (src, slot) -> [edge ids]
    runs = graph.executions
    for e, (s, t, b, o) in enumerate(self.edges):
      if o >= 0:
        key = (s, o)
        self.tensor_size[key] = max(self.tensor_size.get(key, 0), b)
        self.repeats[key] = max(self.repeats.get(key, 1),
                                int(min(runs[s], runs[t])))
        consumers.setdefault(key, []).append(e)
    self.consumers = consumers
    self.pending = [0] * n
    for _, t, _, _ in self.edges:
      self.pending[t] += 1
    self.fetch = {graph.node_index[f] for f in graph.fetches}
    # Transfers: (tensor, dst device), created in (src, slot, edge id) order;
    # with control transfers, a producer's control edges to each other
    # device follow its tensors as one more transfer, key (src, -1).
    self.transfers = []
    self.transfer_id = {}
    self.holders = [0] * n  # what keeps each op's outputs alive
    self.receivers = {}  # transfer id -> consumer edges still to finish
    if topology.runtime.control_transfers:
      for e, (s, _, _, o) in enumerate(self.edges):
        if o < 0:
          self.consumers.setdefault((s, -1), []).append(e)
          self.tensor_size[(s, -1)] = 0
    for key in sorted(self.consumers, key=lambda k: (k[0], k[1] < 0, k[1])):
      s = key[0]
      for e in self.consumers[key]:
        dst_dev = self.place[self.edges[e][1]]
        if dst_dev == self.place[s]:
          if key[1] >= 0:
            self.holders[s] += 1
          continue
        if (key, dst_dev) not in self.transfer_id:
          self.transfer_id[(key, dst_dev)] = len(self.transfers)
          self.transfers.append((key, self.place[s], dst_dev))
          if key[1] >= 0:
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
    self.waiting = []  # transfers in the order they became ready
    self.busy_channels = set()
    self.transfer_start = [0.0] * len(self.transfers)
    self.transfer_end = [0.0] * len(self.transfers)
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

  def back_wait(self, v):
    """Time a loop's Merge waits for its state sent back from another
    device, once per iteration."""
    wait = 0.0
    for s, t in self.graph.back_edges.tolist():
      ps, pt = self.place[s], self.place[t]
      if t != v or ps == pt:
        continue
      size = int(self.graph.output_bytes[s])
      runtime = self.runtime
      wait += int(self.graph.executions[t]) * (
          self.topo.transfer_us(ps, pt, size) + runtime.transfer_cpu_us[0] +
          runtime.transfer_cpu_us[1] + size * (
              runtime.transfer_cpu_us_per_mb[0] / 1e6 +
              runtime.transfer_cpu_us_per_mb[1] / 1e6))
    return wait

  def alloc(self, j, nbytes):
    self.memory[j] += nbytes
    self.peak[j] = max(self.peak[j], self.memory[j])

  def make_ready(self, v):
    self.made_ready += 1
    key = (-self.made_ready,) if self.lifo else self.key[v]
    heapq.heappush(self.ready[self.place[v]], (key, v))

  def channels(self, x) -> set:
    """The channels transfer x occupies: its route, or its directed pair."""
    _, src_dev, dst_dev = self.transfers[x]
    if self.topo.routes is None:
      return {("pair", src_dev, dst_dev)}
    return set(self.topo.routes[src_dev][dst_dev])

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
        (self.on_op, self.on_transfer, self.on_signal,
         self.on_release)[kind](now, payload)
    used = len(set(self.place))
    now += self.runtime.step_overhead(used)
    return {"step_time_us": now, "device_busy_us": self.busy,
            "peak_memory_bytes": self.peak, "transfer_bytes": self.moved,
            "num_transfers": len(self.transfers),
            "op_start_us": self.start, "op_end_us": self.end,
            "transfer_start_us": self.transfer_start,
            "transfer_end_us": self.transfer_end}

  def dispatch(self, now):
    for j in range(self.topo.num_devices):
      if self.device_idle[j] and self.ready[j]:
        _, v = heapq.heappop(self.ready[j])
        self.device_idle[j] = False
        took = (self.duration(v, j) + self.back_wait(v) + self.owed[j] +
                max(0.0, self.handled_until[j] - now))
        self.owed[j] = 0.0
        self.start[v], self.end[v] = now, now + took
        self.busy[j] += took
        self.alloc(j, int(self.graph.output_bytes[v]) +
                   int(self.graph.temp_bytes[v]))
        heapq.heappush(self.events, (now + took, 0, self.rank[v], v))
    for x in list(self.waiting):  # oldest first; each starts if it can
      if self.channels(x) & self.busy_channels:
        continue
      self.waiting.remove(x)
      self.busy_channels |= self.channels(x)
      key, src_dev, dst_dev = self.transfers[x]
      size = self.tensor_size[key]
      times = self.repeats.get(key, 1)
      handling = times * (self.runtime.transfer_cpu_us[0] + size * (
          self.runtime.transfer_cpu_us_per_mb[0] / 1e6))
      if not self.device_idle[src_dev]:
        self.owed[src_dev] += handling
      else:  # an idle sender's core handles it as it leaves
        self.handled_until[src_dev] = max(self.handled_until[src_dev],
                                          now) + handling
      self.moved += times * size
      self.alloc(dst_dev, size)
      done = now + times * self.topo.transfer_us(src_dev, dst_dev, size)
      self.transfer_start[x], self.transfer_end[x] = now, done
      heapq.heappush(self.events, (done, 1, x, x))
      # Its channels free a pipelined latency (per send) before it arrives.
      release = max(now, done - times * self.runtime.pipelined_latency_us)
      heapq.heappush(self.events, (release, 3, x, x))

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
      elif o < 0 and not self.runtime.control_transfers:
        arrive = now + float(self.topo.latency_us[j, self.place[t]])
        heapq.heappush(self.events, (arrive, 2, (s, e), t))
    for x, (key, _, _) in enumerate(self.transfers):
      if key[0] == v:
        self.waiting.append(x)

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
    key, _, dst_dev = self.transfers[x]
    handling = self.repeats.get(key, 1) * (
        self.runtime.transfer_cpu_us[1] + self.tensor_size[key] * (
            self.runtime.transfer_cpu_us_per_mb[1] / 1e6))
    if not self.device_idle[dst_dev]:
      self.owed[dst_dev] += handling
    else:  # within its latency, unless earlier arrivals still hold the core
      self.handled_until[dst_dev] = max(self.handled_until[dst_dev],
                                        now - handling) + handling
    for e in self.consumers[key]:
      t = self.edges[e][1]
      if self.place[t] == dst_dev:
        self.satisfy(t)
    s = key[0]
    if key[1] < 0:
      return  # a control edge's transfer keeps no output alive
    self.holders[s] -= 1
    if self.holders[s] == 0 and s not in self.fetch:
      self.memory[self.place[s]] -= int(self.graph.output_bytes[s])

  def on_release(self, now, x):  # pylint: disable=unused-argument
    self.busy_channels -= self.channels(x)

  def on_signal(self, now, t):  # pylint: disable=unused-argument
    self.satisfy(t)

  def satisfy(self, t):
    self.pending[t] -= 1
    if self.pending[t] == 0:
      self.make_ready(t)

