"""Shared link channels: fan-out, presets' wiring, contention never speeding up
a step with each device's order fixed (and the list-scheduling anomaly that
can when it is not), kernel vs reference on contended presets, priorities."""

import json

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp.cost import simulator
from tf_gdp.cost import derived_topologies
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

from test_simulator import assert_agrees_with_reference
from test_simulator import random_graph
from test_simulator import random_priority
from test_simulator import random_topology

PRESETS = ("p100x2", "p100x4", "v100x8", "h100x8")


def _graph(costs, edges=(), kinds=None):
  """Graph n0..n{k}; edges are (src, dst, bytes, slot); CPU costs = GPU's."""
  n = len(costs)
  return op_graph.OpGraph.build(
      name="t", node_names=[f"n{i}" for i in range(n)], op_types=["Op"] * n,
      costs={"GPU": costs, "CPU": costs}, output_bytes=[0] * n,
      memory_bytes=[0] * n, edge_src=[e[0] for e in edges],
      edge_dst=[e[1] for e in edges], edge_bytes=[e[2] for e in edges],
      edge_output=[e[3] for e in edges], device_kinds=kinds)


def _fan_out(nbytes, peers):
  """n0 on the sender makes one tensor per peer; n{k} consumes tensor k-1."""
  return _graph([0.0] * (len(peers) + 1),
                [(0, k + 1, nbytes, k) for k in range(len(peers))])


def test_fan_out_over_one_pcie_port_takes_three_transfer_times():
  topo = topology.get("p100x4")
  graph = _fan_out(1_200_000_000, [1, 2, 3])
  placement = [0, 1, 2, 3]
  one = topo.transfer_us(0, 1, 1.2e9)
  assert one == pytest.approx(10.0 + 1.2e9 / 12e3)  # ~0.1 s
  contended = simulator.simulate(graph, placement, topo).step_time_us
  assert contended == pytest.approx(3 * one)
  free = simulator.simulate(graph, placement,
                            derived_topologies.uncontended(topo)).step_time_us
  assert free == pytest.approx(one)


@pytest.mark.parametrize("preset,pairs,overlap", [
    # p100x4: GPUs 0-1 and 2-3 share a PCIe switch.
    ("p100x4", [(0, 1), (2, 3)], True),    # peer to peer inside each switch
    ("p100x4", [(0, 2), (1, 3)], False),   # both cross switch 0's uplink
    ("p100x4", [(0, 1), (2, 1)], False),   # GPU 1's PCIe port in
    ("p100x4", [(0, 4), (2, 4)], True),    # to the host by two uplinks
    ("p100x4", [(0, 4), (1, 4)], False),   # to the host by one uplink
    ("p100x2", [(0, 1), (1, 0)], True),    # the two directions of a port
    ("v100x8", [(0, 3), (0, 4)], True),    # two NVLinks of GPU 0
    ("v100x8", [(0, 3), (0, 5)], True),    # NVLink beside PCIe
    ("v100x8", [(0, 5), (0, 6)], False),   # PCIe: GPU 0's port out
    ("h100x8", [(0, 1), (0, 2)], False),   # GPU 0's NVSwitch port out
    ("h100x8", [(0, 1), (2, 3)], True),    # disjoint ports
    ("h100x8", [(0, 1), (2, 1)], False),   # GPU 1's NVSwitch port in
])
def test_preset_channels(preset, pairs, overlap):
  topo = topology.get(preset)
  # n0 -> n1 over pairs[0] and n2 -> n3 over pairs[1], both ready at 0.
  graph = _graph([0.0] * 4, [(0, 1, 10**8, 0), (2, 3, 10**8, 0)])
  (a, b), (c, d) = pairs
  schedule = simulator.simulate(graph, [a, b, c, d], topo,
                                record_schedule=True).schedule
  starts = schedule.transfer_start_us.tolist()
  assert (starts == [0.0, 0.0]) == overlap, starts


def test_nvlink_pairs_use_their_link_count():
  topo = topology.get("v100x8")
  assert topo.transfer_us(0, 3, 5e9) == pytest.approx(5.0 + 5e9 / 50e3)
  assert topo.transfer_us(0, 1, 5e9) == pytest.approx(5.0 + 5e9 / 25e3)
  assert topo.transfer_us(0, 5, 5e9) == pytest.approx(10.0 + 5e9 / 12e3)


# ---- contention never makes a step faster (with the orders fixed) ------------


def _with_device_orders(graph, placement, schedule):
  """`graph` plus a control edge between consecutive ops of each device.

  The order is the schedule's (by start, end, then topological rank, which
  keeps zero-time ops in a dependency-respecting order).
  """
  rank = np.empty(graph.num_nodes, np.int64)
  rank[graph.topo_order] = np.arange(graph.num_nodes)
  src, dst = list(graph.edge_src), list(graph.edge_dst)
  nbytes, slots = list(graph.edge_bytes), list(graph.edge_output)
  for j in set(int(p) for p in placement):
    ops = sorted(np.flatnonzero(np.asarray(placement) == j),
                 key=lambda v: (schedule.op_start_us[v], schedule.op_end_us[v],
                                rank[v]))
    for a, b in zip(ops, ops[1:]):
      src.append(int(a))
      dst.append(int(b))
      nbytes.append(0)
      slots.append(-1)
  return op_graph.OpGraph.build(
      name=graph.name, node_names=list(graph.node_names),
      op_types=list(graph.op_types), costs=graph.costs,
      output_bytes=graph.output_bytes, memory_bytes=graph.memory_bytes,
      temp_bytes=graph.temp_bytes, edge_src=src, edge_dst=dst,
      edge_bytes=nbytes, edge_output=slots,
      device_kinds=graph.device_kinds, fetches=graph.fetches)


def _scaled(graph, factor):
  """`graph` with every edge's bytes times `factor` (bigger transfers)."""
  return op_graph.OpGraph.build(
      name=graph.name, node_names=list(graph.node_names),
      op_types=list(graph.op_types), costs=graph.costs,
      output_bytes=graph.output_bytes, memory_bytes=graph.memory_bytes,
      temp_bytes=graph.temp_bytes, edge_src=graph.edge_src,
      edge_dst=graph.edge_dst, edge_bytes=graph.edge_bytes * factor,
      edge_output=graph.edge_output, device_kinds=graph.device_kinds,
      fetches=graph.fetches)


# A small random graph on a preset: (seed, n, preset, bytes scale).
_PRESET_CASES = dict(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30),
                     preset=st.sampled_from(PRESETS),
                     scale=st.sampled_from([1, 1000]))


def _preset_case(seed, n, preset, scale):
  """(rng, graph, topology, placement) of one drawn case."""
  rng = np.random.default_rng(seed)
  graph = _scaled(random_graph(rng, n), scale)
  topo = topology.get(preset)
  return rng, graph, topo, rng.integers(0, topo.num_devices, n)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(**_PRESET_CASES)
def test_contention_never_speeds_up_a_step_with_device_orders_fixed(
    seed, n, preset, scale):
  _, graph, topo, placement = _preset_case(seed, n, preset, scale)
  schedule = simulator.simulate(graph, placement, topo,
                                record_schedule=True).schedule
  # The order edges change the graph's topological ranks, hence same-instant
  # ties: compare both models on the fixed graph.
  fixed = _with_device_orders(graph, placement, schedule)
  contended = simulator.simulate(fixed, placement, topo)
  free = simulator.simulate(fixed, placement, derived_topologies.uncontended(topo))
  assert contended.step_time_us >= free.step_time_us
  assert contended.num_transfers == free.num_transfers


def test_contention_can_reorder_a_device_and_shorten_the_step():
  """A list-scheduling anomaly (Graham 1969), not a model error.

  p100x4, CPU = device 4. n2 (GPU 2) sends to n6 (CPU) through switch 1's
  uplink, which n0's transfer (GPU 3 -> GPU 0) holds first; without
  contention n6's input arrives at 15 us, while the CPU runs n5, so the CPU
  then runs n6 (earlier in topological order) before n7, whose control edge
  gates n4 on GPU 0: 64 us. With contention the input arrives at 23 us, the
  CPU runs n7 first, and the step ends at 54 us. Delays in any greedy list
  scheduler can shorten a schedule this way; with each device's order fixed
  they never do (the property test above).
  """
  costs = [3.0, 5.0, 0.0, 15.0, 5.0, 6.0, 10.0, 18.0]
  graph = _graph(costs, [(0, 4, 2000, 2), (2, 6, 2000, 1), (7, 4, 0, -1)])
  placement = [3, 2, 2, 4, 0, 4, 4, 4]
  topo = topology.get("p100x4")
  contended = simulator.simulate(graph, placement, topo, record_schedule=True)
  free = simulator.simulate(graph, placement, derived_topologies.uncontended(topo))
  assert (contended.step_time_us, free.step_time_us) == (54.0, 64.0)
  fixed = _with_device_orders(graph, placement, contended.schedule)
  assert simulator.simulate(fixed, placement,
                            derived_topologies.uncontended(topo)).step_time_us <= 54.0


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(**_PRESET_CASES)
def test_compiled_core_agrees_with_reference_on_contended_presets(
    seed, n, preset, scale):
  rng, graph, topo, placement = _preset_case(seed, n, preset, scale)
  assert_agrees_with_reference(graph, placement, topo, random_priority(rng, n))


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**32 - 1), n=st.integers(20, 120),
                  d=st.integers(3, 9))
def test_busy_channels_and_unrecorded_runs_agree_with_reference(seed, n, d):
  # Many devices and transfers over random shared routes: pairs wait on
  # several busy channels at once and are parked again as channels free
  # (up to 81 pairs, so candidate keys use up to 7 pair bits).
  rng = np.random.default_rng(seed)
  graph = random_graph(rng, n)
  topo = random_topology(rng, d)
  while not topo.contended:
    topo = random_topology(rng, d)
  placement = rng.integers(0, d, n)
  priority = random_priority(rng, n)
  assert_agrees_with_reference(graph, placement, topo, priority)
  recorded = simulator.simulate(graph, placement, topo, record_schedule=True,
                                priority=priority)
  plain = simulator.simulate(graph, placement, topo, priority=priority)
  assert plain.schedule is None
  assert plain.step_time_us == recorded.step_time_us
  assert plain.device_busy_us.tolist() == recorded.device_busy_us.tolist()
  assert (plain.peak_memory_bytes.tolist() ==
          recorded.peak_memory_bytes.tolist())
  assert plain.num_transfers == recorded.num_transfers
  assert plain.transfer_bytes == recorded.transfer_bytes


# ---- priorities --------------------------------------------------------------


def test_priority_orders_ready_ops_and_defaults_to_topological_order():
  # n0 and n1 are ready at once on one device; n1 feeds a long op elsewhere.
  graph = _graph([2.0, 1.0, 20.0], [(1, 2, 0, 0)])
  topo = topology.get("p100x2")
  default = simulator.simulate(graph, [0, 0, 1], topo, record_schedule=True)
  assert default.schedule.op_start_us.tolist()[:2] == [0.0, 2.0]
  first = simulator.simulate(graph, [0, 0, 1], topo, record_schedule=True,
                             priority=[1, 0, 0])
  assert first.schedule.op_start_us.tolist()[:2] == [1.0, 0.0]
  assert first.step_time_us < default.step_time_us
  rank = np.empty(3, np.int64)
  rank[graph.topo_order] = np.arange(3)
  same = simulator.simulate(graph, [0, 0, 1], topo, priority=rank)
  assert same.step_time_us == default.step_time_us
  batch = simulator.simulate_batch(graph, [[0, 0, 1], [0, 0, 1]], topo,
                                   priority=[1.5, -2.0, 0.0])
  assert batch.step_time_us.tolist() == [first.step_time_us] * 2


@pytest.mark.parametrize("priority,message", [
    ([0, 1], "shape"), ([0.0, np.nan, 1.0], "finite"),
    (["a", "b", "c"], "numbers")])
def test_bad_priorities_are_input_errors(priority, message):
  graph = _graph([1.0, 1.0, 1.0])
  with pytest.raises(errors.InputError, match=message):
    simulator.simulate(graph, [0, 0, 0], topology.get("p100x2"),
                       priority=priority)


# ---- channel data in topology files -----------------------------------------


def _document(links):
  return {"format": "tf-gdp-topology", "version": 1, "name": "t",
          "hardware": {"CPU": "host_cpu"},
          "devices": [{"name": f"/device:CPU:{i}", "kind": "CPU",
                       "memory_bytes": 1024} for i in range(2)],
          "links": {"latency_us": [[0, 5], [5, 0]], **links}}


_CHANNELS = [{"name": "bus", "bandwidth_gbps": 2.0},
             {"name": "slow", "bandwidth_gbps": 1.0}]


def test_channels_round_trip_and_set_the_pair_bandwidth(tmp_path):
  path = tmp_path / "t.json"
  routes = [[[], ["bus"]], [["bus", "slow"], []]]
  path.write_text(json.dumps(_document({"channels": _CHANNELS,
                                        "routes": routes})))
  topo = topology.get(str(path))
  assert topo.contended and topo.bandwidth_gbps.tolist() == [[0, 2], [1, 0]]
  document = topology.to_document(topo)
  assert document["links"]["routes"] == routes
  assert topology.to_document(topology.from_document(document)) == document
  free = derived_topologies.uncontended(topo)
  assert not free.contended and free.channel_routes()[0] == 4
  np.testing.assert_array_equal(free.bandwidth_gbps, topo.bandwidth_gbps)


def test_a_file_without_channels_has_one_channel_per_pair():
  topo = topology.from_document(_document({"bandwidth_gbps": [[0, 1], [1, 0]]}))
  assert not topo.contended
  count, ptr, channels = topo.channel_routes()
  assert count == 4 and ptr.tolist() == [0, 1, 2, 3, 4]
  assert channels.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("links,message", [
    ({"channels": _CHANNELS}, "both channels and routes"),
    ({"channels": _CHANNELS, "routes": [[[], ["bus"]], [["nope"], []]]},
     "unknown channel 'nope'"),
    ({"channels": _CHANNELS, "routes": [[[], ["bus"]], [[], []]]},
     r"routes\[1\]\[0\] must name one or more"),
    ({"channels": _CHANNELS, "routes": [[[], ["bus"]], [["bus"], []]],
      "bandwidth_gbps": [[0, 1], [2, 0]]}, "slowest channel"),
    ({"channels": [{"name": "bus", "bandwidth_gbps": 0}],
      "routes": [[[], ["bus"]], [["bus"], []]]}, "bandwidth > 0"),
    ({"channels": _CHANNELS, "routes": [[[], ["bus"]]]}, "2x2"),
])
def test_bad_channel_data_is_refused(links, message):
  with pytest.raises(errors.InputError, match=message):
    topology.from_document(_document(links))
