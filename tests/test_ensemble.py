"""The ensemble of perturbed cost models: members, ranges, robustness."""

import dataclasses

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp.cost import ensemble
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators

ZERO_WIDTH = ensemble.Ranges(op_time=(1.0, 1.0), launch=(1.0, 1.0),
                             bandwidth=(1.0, 1.0), latency=(1.0, 1.0))


@pytest.fixture(scope="module")
def graph():
  return generators.random_layered_graph(150, width=8, seed=3, name="lay")


@pytest.fixture(name="topology", scope="module")
def p100x4():
  """Four GPUs and the host on PCIe, priced as P100s (launch overhead 5 us)."""
  return topology_lib.get("p100x4")


@pytest.fixture(scope="module")
def placements(graph, topology):
  rng = np.random.default_rng(0)
  return rng.integers(0, topology.num_devices - 1, (3, graph.num_nodes))


def _tabled(count=3):
  """A cpu-workers-like topology with a measured link table."""
  devices = [topology_lib.Device(f"/job:worker/replica:0/task:{i}/device:CPU:0",
                                 "CPU", 1 << 33) for i in range(count)]
  sizes = [1e3, 1e6]
  table = np.zeros((count, count, 2))
  table[..., 0], table[..., 1] = 320.0, 1400.0
  return topology_lib.custom(
      "tabled", devices, np.full((count, count), 1.0),
      np.full((count, count), 300.0), {"CPU": "local_cpu_core"}, sizes, table)


def test_members_are_deterministic_per_seed_and_prefixes(graph, topology):
  first = ensemble.Ensemble(graph, topology, members=6, seed=4)
  again = ensemble.Ensemble(graph, topology, members=6, seed=4)
  fewer = ensemble.Ensemble(graph, topology, members=3, seed=4)
  other = ensemble.Ensemble(graph, topology, members=6, seed=5)
  for a, b in zip(first.members, again.members):
    for kind in graph.kinds:
      np.testing.assert_array_equal(a.graph.costs[kind], b.graph.costs[kind])
    np.testing.assert_array_equal(a.topology.bandwidth_gbps,
                                  b.topology.bandwidth_gbps)
    np.testing.assert_array_equal(a.topology.latency_us, b.topology.latency_us)
  for a, b in zip(first.members, fewer.members):  # member k whatever K
    np.testing.assert_array_equal(a.graph.costs["GPU"], b.graph.costs["GPU"])
  assert not np.array_equal(first.members[1].graph.costs["GPU"],
                            other.members[1].graph.costs["GPU"])


def test_member_0_and_a_zero_width_ensemble_are_the_nominal_model(
    graph, topology, placements):
  nominal = simulator.simulate_batch(graph, placements, topology).step_time_us
  judged = ensemble.Ensemble(graph, topology, members=5)
  steps = judged.step_times(placements)
  np.testing.assert_array_equal(steps[0], nominal)
  assert judged.members[0].graph is graph
  assert not np.allclose(steps[1], nominal)
  flat = ensemble.Ensemble(graph, topology, members=4, ranges=ZERO_WIDTH)
  np.testing.assert_allclose(flat.step_times(placements),
                             np.tile(nominal, (4, 1)), rtol=1e-12)
  # Given member 0's times, the ensemble does not simulate them again.
  np.testing.assert_array_equal(
      judged.step_times(placements, nominal_us=nominal), steps)


def test_perturbed_costs_and_links_stay_within_the_stated_ranges(graph,
                                                                 topology):
  judged = ensemble.Ensemble(graph, topology, members=8, seed=2)
  ranges = ensemble.RANGES
  launch_gpu = judged.members[0].launch_us["GPU"]
  assert launch_gpu == 5.0  # p100's HardwareSpec.launch_overhead_us
  for member in judged.members[1:]:
    for kind in graph.kinds:
      nominal, cost = graph.costs[kind], member.graph.costs[kind]
      launch = member.launch_us[kind]
      assert ranges.launch[0] <= member.launch_factor[kind] <= ranges.launch[1]
      low = ranges.op_time[0] * nominal
      high = ranges.op_time[1] * nominal + np.where(
          nominal >= launch, (ranges.launch[1] - 1) * launch, 0.0)
      assert np.all(cost >= low - 1e-9) and np.all(cost <= high + 1e-9)
      assert np.all(cost[nominal == 0] == 0)
    off = ~np.eye(topology.num_devices, dtype=bool)
    bandwidth = (member.topology.bandwidth_gbps[off] /
                 topology.bandwidth_gbps[off])
    latency = member.topology.latency_us[off] / topology.latency_us[off]
    assert np.all((bandwidth >= 0.5) & (bandwidth <= 1.0))
    assert np.all((latency >= 1.0) & (latency <= 3.0))
    # Everything not perturbed carries over.
    assert member.topology.devices == topology.devices
    assert member.topology.hardware == topology.hardware
    assert member.graph.node_names == graph.node_names
    assert member.graph.topo_order is graph.topo_order


def test_a_measured_link_table_is_perturbed_consistently():
  topo = _tabled()
  graph = generators.random_layered_graph(40, width=3, seed=1, name="cpu")
  graph = graph.with_costs({kind: graph.costs[kind] for kind in graph.kinds})
  for member in ensemble.Ensemble(graph, topo, members=6).members[1:]:
    table = member.topology.table_us
    latency = member.topology.latency_us
    np.testing.assert_allclose(
        table, latency[:, :, None] + (topo.table_us - 300.0)
        / member.bandwidth_factor[:, :, None])
    off = ~np.eye(3, dtype=bool)
    assert np.all(table[off][:, 0] >= latency[off])  # Topology checked it too


def test_robustness_is_judged_against_the_single_device(graph, topology,
                                                        placements):
  single = np.zeros(graph.num_nodes, np.int64)
  robust = ensemble.judge_robust(graph, topology, placements[0],
                                 single_device=single, members=6)
  assert robust.members == 6
  steps = ensemble.Ensemble(graph, topology, members=6).step_times(
      np.stack([placements[0], single]))
  ratios = steps[:, 0] / steps[:, 1]
  np.testing.assert_allclose(robust.ratios, ratios)
  summary = robust.summary()
  assert summary["median_ratio"] == pytest.approx(np.median(ratios))
  assert summary["worst_ratio"] == pytest.approx(np.max(ratios))
  assert summary["worst_ratio"] >= summary["median_ratio"]
  itself = ensemble.judge_robust(graph, topology, single, single_device=single,
                                 members=3)
  assert itself.median_ratio == itself.worst_ratio == 1.0


def test_bad_ensembles_are_input_errors(graph, topology):
  with pytest.raises(errors.InputError, match=">= 1 member"):
    ensemble.Ensemble(graph, topology, members=0)
  with pytest.raises(errors.InputError, match="0 < low <= high"):
    ensemble.Ranges(op_time=(1.3, 0.7))
  with pytest.raises(errors.InputError, match="launch factor"):
    ensemble.Ranges(launch=(0.5, 1.0))


def test_with_costs_copies_cheaply_and_checks_the_columns(graph):
  order = graph.topo_order
  doubled = graph.with_costs({k: 2 * v for k, v in graph.costs.items()})
  assert doubled.topo_order is order and doubled.edge_src is graph.edge_src
  np.testing.assert_array_equal(doubled.costs["GPU"], 2 * graph.costs["GPU"])
  assert dataclasses.replace(doubled, costs=graph.costs).name == graph.name
  with pytest.raises(errors.GraphFormatError, match="differ"):
    graph.with_costs({"GPU": graph.costs["GPU"]})
  with pytest.raises(errors.GraphFormatError, match="one entry per node"):
    graph.with_costs({k: v[:-1] for k, v in graph.costs.items()})
  with pytest.raises(errors.GraphFormatError, match="finite"):
    graph.with_costs({k: -v - 1 for k, v in graph.costs.items()})
