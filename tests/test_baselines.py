"""Placement baselines on small graphs whose best placement is known, their
constraints (kinds, colocation, pins, memory), determinism and `run`."""

import numpy as np
import pytest

from tf_gdp import baselines
from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.baselines import heft
from tf_gdp.baselines import m_sct
from tf_gdp.cost import simulator
from tf_gdp.cost import derived_topologies
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

GIB = 1 << 30
MIB = 1 << 20
# Everything but the colleagues' methods (expert rules need a zoo graph;
# HDP trains a network).
CLASSIC = ("single_device", "random", "round_robin", "m_topo", "m_etf",
           "m_sct", "heft", "metis", "side_offload")
MEMORY_CONSTRAINED = ("random", "round_robin", "m_topo", "m_etf", "m_sct",
                      "heft", "metis", "side_offload")
SCHEDULERS = ("m_etf", "m_sct", "heft", "metis")
# The stage rules' placements, the pipeline DP and the local search.
PIPELINE_AND_SEARCH = ("stage_pipeline", "contiguous_dp", "local_search")


def _graph(costs, edges=(), *, output_bytes=None, memory_bytes=None,
           groups=None, kinds=None, pins=None, cpu_costs=None):
  """Ops n0..n{k-1}; edges are (src, dst, bytes) or (src, dst, bytes, slot)."""
  n = len(costs)
  edges = [tuple(e) + (0,) * (4 - len(e)) for e in edges]
  return op_graph.OpGraph.build(
      name="t", node_names=[f"n{i}" for i in range(n)], op_types=["Op"] * n,
      costs={"GPU": costs,
             "CPU": cpu_costs if cpu_costs is not None else costs},
      output_bytes=output_bytes if output_bytes is not None else [0] * n,
      memory_bytes=memory_bytes if memory_bytes is not None else [0] * n,
      edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
      edge_bytes=[e[2] for e in edges], edge_output=[e[3] for e in edges],
      colocation_groups=groups,
      device_kinds=kinds, pinned_devices=pins)


def _topo(kinds=("GPU", "GPU"), *, gbps=1.0, latency=0.0, memory=GIB):
  """Devices /job:w/replica:0/task:0/device:{kind}:{i}; 1 GB/s = 1000 B/us."""
  d = len(kinds)
  devices = [topology.Device(f"/job:w/replica:0/task:0/device:{k}:{i}", k,
                             memory)
             for i, k in enumerate(kinds)]
  return topology.custom("test", devices, np.full((d, d), gbps),
                         np.full((d, d), latency))


def _chain(start, length, nbytes):
  return [(i, i + 1, nbytes) for i in range(start, start + length - 1)]


# ---- the contract ----------------------------------------------------------


def test_public_api_is_pinned():
  assert sorted(baselines.__all__) == sorted(
      ["InternalError", "METHODS", "MethodResult", "get", "method_names",
       "run"])
  assert set(baselines.METHODS) == (set(CLASSIC) | set(PIPELINE_AND_SEARCH) |
                                    {"human_expert", "hdp"})
  assert baselines.method_names() == sorted(baselines.METHODS)


def test_unknown_method_lists_the_known_ones():
  graph = _graph([1.0])
  with pytest.raises(errors.InputError, match="known: .*m_sct"):
    baselines.run("magic", graph, _topo())


def test_unknown_option_is_an_input_error():
  graph = _graph([1.0])
  with pytest.raises(errors.InputError, match="no option.*budget"):
    baselines.run("m_etf", graph, _topo(), budget=3)


def test_run_reports_time_evaluations_and_memory():
  graph = _graph([5.0] * 4, _chain(0, 4, 100), output_bytes=[100] * 4,
                 memory_bytes=[MIB] * 4)
  result = baselines.run("single_device", graph, _topo())
  assert result.method == "single_device"
  assert result.placement.dtype == np.int32
  assert result.search_seconds > 0
  assert result.evaluations == 2  # one simulation per device
  assert result.info["simulated_step_time_us"] == 20.0
  assert result.info["memory_problems"] == []
  assert result.info["peak_memory_bytes"][0] >= 4 * MIB
  result = baselines.run("m_etf", graph, _topo())
  assert result.evaluations == 1  # calibrating the activation fraction
  assert 0.0 <= result.info["activation_fraction"] <= 1.0


def test_run_reports_an_overflow_instead_of_hiding_it():
  # The activation estimate says 0 live bytes, the simulator sees 3 GiB.
  graph = _graph([1.0, 1.0], [(0, 1, GIB)], output_bytes=[3 * GIB, GIB])
  result = baselines.run("round_robin", graph, _topo(memory=2 * GIB),
                         activation_fraction=0.0)
  assert result.info["memory_problems"]
  assert "OOM" in result.info["memory_problems"][0]


def test_run_rejects_a_method_that_breaks_constraints(monkeypatch):
  graph = _graph([1.0, 1.0], groups=["g", "g"])
  monkeypatch.setattr(
      baselines.registry, "METHODS",
      {"bad": lambda g, t, seed=0: np.array([0, 1], np.int32)})
  with pytest.raises(baselines.InternalError, match="colocation group"):
    baselines.run("bad", graph, _topo())


# ---- graphs with a known best placement ------------------------------------


@pytest.mark.parametrize("method", ("m_topo",) + SCHEDULERS)
def test_two_independent_chains_run_in_parallel(method):
  graph = _graph([10.0] * 8, _chain(0, 4, 1000) + _chain(4, 4, 1000))
  result = baselines.run(method, graph, _topo())
  assert result.info["simulated_step_time_us"] == 40.0  # one chain's time
  assert len(set(result.placement.tolist())) == 2


@pytest.mark.parametrize("method", SCHEDULERS)
def test_a_chain_with_costly_transfers_stays_on_one_device(method):
  # Each transfer would take 1 s; the whole chain computes in 60 us.
  graph = _graph([10.0] * 6, _chain(0, 6, 10**6), output_bytes=[10**6] * 6)
  result = baselines.run(method, graph, _topo(gbps=0.001))
  assert len(set(result.placement.tolist())) == 1
  assert result.info["simulated_step_time_us"] == 60.0


@pytest.mark.parametrize("method", MEMORY_CONSTRAINED + PIPELINE_AND_SEARCH)
def test_a_memory_cap_forces_a_split_without_overflow(method):
  # Four 400 MiB variables; a device holds two (1 GiB x 0.9 headroom).
  graph = _graph([10.0] * 4, _chain(0, 4, 1000),
                 memory_bytes=[400 * MIB] * 4)
  result = baselines.run(method, graph, _topo())
  assert len(set(result.placement.tolist())) == 2
  assert result.info["memory_problems"] == []


def test_single_device_says_why_no_device_holds_the_graph():
  graph = _graph([10.0] * 4, _chain(0, 4, 1000),
                 memory_bytes=[400 * MIB] * 4)
  with pytest.raises(errors.InputError, match=r"needs 1\.56\d GiB.*has 1\.0"):
    baselines.run("single_device", graph, _topo())


@pytest.mark.parametrize("method", CLASSIC + PIPELINE_AND_SEARCH)
def test_infeasible_memory_names_needed_and_available(method):
  # Three 600 MiB variables, two devices that hold one each.
  graph = _graph([10.0] * 3, _chain(0, 3, 1000),
                 memory_bytes=[600 * MIB] * 3)
  with pytest.raises(errors.InputError, match=r"needs \d+\.\d+ GiB") as info:
    baselines.run(method, graph, _topo())
  assert "GiB" in str(info.value).split("needs", 1)[1]


@pytest.mark.parametrize("method", MEMORY_CONSTRAINED + PIPELINE_AND_SEARCH)
def test_a_group_bigger_than_any_device_is_infeasible(method):
  graph = _graph([1.0, 1.0], [(0, 1, 10)], memory_bytes=[2 * GIB, 0])
  with pytest.raises(errors.InputError,
                     match=r"op 'n0' needs 2\.000 GiB.*0\.900 GiB available"):
    baselines.run(method, graph, _topo())


# ---- hard constraints ------------------------------------------------------


def _constrained_graph():
  """A colocation group spanning the step, a CPU-only op and a pinned op."""
  costs = [5.0, 20.0, 20.0, 3.0, 20.0, 20.0, 5.0, 2.0]
  edges = [(0, 1, 4000), (0, 2, 4000), (1, 3, 4000), (2, 4, 4000),
           (3, 5, 4000), (4, 5, 4000), (5, 6, 4000), (6, 7, 4000)]
  groups = ["var", None, None, None, None, None, None, "var"]
  kinds = [None, None, None, ("CPU",), None, None, None, None]
  pins = [None, None, None, None, "/device:GPU:1", None, None, None]
  return _graph(costs, edges, output_bytes=[4000] * 8,
                memory_bytes=[MIB] + [0] * 7, groups=groups, kinds=kinds,
                pins=pins, cpu_costs=[c * 10 for c in costs])


@pytest.mark.parametrize("method", CLASSIC + PIPELINE_AND_SEARCH)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_placement_satisfies_kinds_groups_and_pins(method, seed):
  graph = _constrained_graph()
  topo = _topo(("GPU", "GPU", "CPU"), latency=5.0)
  result = baselines.run(method, graph, topo, seed=seed)
  placement = result.placement
  assert simulator.constraint_problems(graph, placement, topo) == []
  assert placement[0] == placement[7]  # the colocation group
  assert placement[3] == 2  # CPU-only
  assert placement[4] == 1  # pinned to GPU:1


def test_a_group_no_device_satisfies_is_an_input_error():
  graph = _graph([1.0, 1.0], groups=["g", "g"], kinds=[("CPU",), None],
                 pins=[None, "/device:GPU:0"])
  with pytest.raises(errors.InputError, match="colocation group 'g'"):
    baselines.run("m_etf", graph, _topo(("GPU", "CPU")))


# ---- determinism -----------------------------------------------------------


def _wide_graph(n=60, width=6):
  rng = np.random.default_rng(7)
  edges = [(int(u), v, int(rng.integers(100, 10**5)))
           for v in range(width, n)
           for u in set(rng.integers(max(0, v - 2 * width), v - v % width,
                                     size=2).tolist())]
  return _graph(rng.uniform(1, 50, n).tolist(), edges,
                output_bytes=[10**5] * n, memory_bytes=[MIB] * n)


@pytest.mark.parametrize("method", CLASSIC + PIPELINE_AND_SEARCH)
def test_a_fixed_seed_gives_the_same_placement(method):
  graph, topo = _wide_graph(), _topo(("GPU",) * 4, latency=2.0)
  first = baselines.run(method, graph, topo, seed=3).placement
  again = baselines.run(method, graph, topo, seed=3).placement
  np.testing.assert_array_equal(first, again)


def test_random_depends_on_the_seed_only():
  graph, topo = _wide_graph(), _topo(("GPU",) * 4)
  one = baselines.run("random", graph, topo, seed=1).placement
  two = baselines.run("random", graph, topo, seed=2).placement
  assert not np.array_equal(one, two)
  assert set(one.tolist()) == {0, 1, 2, 3}


# ---- the shared group view -------------------------------------------------


def test_group_view_orders_cyclic_groups_and_counts_a_tensor_once():
  # n0 -> n1 -> n2 -> n3 with {n0, n3} one group: the group graph has a
  # cycle (A -> n1 -> n2 -> A). n1's output goes to n2 twice (one tensor).
  graph = op_graph.OpGraph.build(
      name="t", node_names=["n0", "n1", "n2", "n3"], op_types=["Op"] * 4,
      costs={"GPU": [1.0, 2.0, 3.0, 4.0]}, output_bytes=[0] * 4,
      memory_bytes=[7, 0, 0, 5], edge_src=[0, 1, 1, 2],
      edge_dst=[1, 2, 2, 3], edge_bytes=[10, 20, 20, 30],
      edge_output=[0, 0, 0, 0], colocation_groups=["A", None, None, "A"])
  view = common.group_view(graph, _topo(("GPU",)))
  a, n1, n2 = view.group_of[0], view.group_of[1], view.group_of[2]
  assert view.group_of[3] == a
  assert view.order.tolist() == [a, n1, n2]
  assert view.duration[a, 0] == 5.0 and view.persistent_bytes[a] == 12
  edges = {(int(s), int(t)): int(b) for s, t, b in zip(*view.edges)}
  assert edges == {(a, n1): 10, (n1, n2): 20, (n2, a): 30}


def test_primary_devices_are_the_fastest_kind():
  graph = _graph([1.0, 1.0], cpu_costs=[10.0, 10.0])
  view = common.group_view(graph, _topo(("GPU", "CPU", "GPU")))
  assert view.primary.tolist() == [0, 2]


def test_activation_fraction_reproduces_the_single_device_peak():
  # n0 (1 MiB out) -> n1 (1 MiB out) -> n2: peak is 2 MiB of 3 MiB outputs.
  graph = _graph([1.0] * 3, _chain(0, 3, MIB), output_bytes=[MIB] * 3)
  view = common.group_view(graph, _topo())
  assert common.calibrate_activation_fraction(view) == pytest.approx(2 / 3)


# ---- algorithm pieces ------------------------------------------------------


def test_sct_lp_makes_the_critical_child_the_favorite_across_windows():
  # n0 -> n1 -> n2 -> n3 carries the work and costly tensors (10 ms each);
  # n1 -> n4 is a cheap side branch. n1 may keep only one child: n2.
  # Windows of 2 ops split the LP; the answer must not change.
  graph = _graph([10.0, 10.0, 1000.0, 1000.0, 1.0],
                 _chain(0, 4, 10**5) + [(1, 4, 100)])
  view = common.group_view(graph, _topo(gbps=0.01))
  for window in (2, 100):
    favorite = m_sct.favorite_parents(view, window=window)
    assert favorite.tolist() == [-1, 0, 1, 2, -1]


def test_heft_slot_fills_a_gap_when_it_fits():
  starts = np.array([[0.0, 20.0, 0.0]])
  ends = np.array([[10.0, 30.0, 0.0]])
  slot = heft._slot  # pylint: disable=protected-access
  assert slot(starts, ends, 0, 2, 5.0, 5.0, 100) == (10.0, 1)
  assert slot(starts, ends, 0, 2, 5.0, 15.0, 100) == (30.0, 2)
  assert slot(starts, ends, 0, 2, 35.0, 1.0, 100) == (35.0, 2)
  # With a window of one gap, the search gives up and appends.
  assert slot(starts, ends, 0, 2, 0.0, 15.0, 1) == (30.0, 2)


def test_link_contention_is_planned():
  # n0's two outputs (1 ms of transfer each) both feed n2 on the other
  # device: the contention-aware plan queues them on the link, the
  # textbook one overlaps them.
  graph = _graph([1.0, 5000.0, 5000.0],
                 [(0, 1, 10**6, 0), (0, 2, 10**6, 0), (0, 2, 10**6, 1)],
                 output_bytes=[2 * 10**6, 0, 0])
  aware = baselines.run("heft", graph, _topo()).info["scheduled_makespan_us"]
  naive = baselines.run("heft", graph, _topo(), link_contention=False).info[
      "scheduled_makespan_us"]
  assert naive == pytest.approx(1.0 + 1000.0 + 5000.0)
  assert aware == pytest.approx(1.0 + 2000.0 + 5000.0)


@pytest.mark.parametrize("method", ("m_etf", "heft"))
def test_list_schedulers_plan_with_shared_channels(method):
  # GPU 0 sends one 120 MB tensor to each of GPUs 1-3 of p100x4: the three
  # transfers share GPU 0's PCIe port, so the plan queues them there.
  pins = [f"/device:GPU:{i}" for i in range(4)]
  graph = _graph([0.0] * 4, [(0, k, 120_000_000, k - 1) for k in (1, 2, 3)],
                 pins=pins)
  contended = topology.get("p100x4")
  one = contended.transfer_us(0, 1, 1.2e8)
  for topo, transfers in ((contended, 3), (derived_topologies.uncontended(contended), 1)):
    result = baselines.run(method, graph, topo)
    assert result.info["scheduled_makespan_us"] == pytest.approx(
        transfers * one)
    assert result.info["simulated_step_time_us"] == pytest.approx(
        transfers * one)


@pytest.mark.parametrize("method", ("m_etf", "m_sct", "heft"))
def test_list_schedulers_give_their_planned_order(method):
  # n0 and n1 are pinned to GPU 0, n1 feeds n2 (100 us) pinned to GPU 1.
  # The simulator's default order runs n0 first (topological order); the
  # plans run n1 first, which starts n2 10 us earlier.
  pins = ["/device:GPU:0", "/device:GPU:0", "/device:GPU:1"]
  graph = _graph([10.0, 10.0, 100.0], [(1, 2, 1000)], pins=pins)
  result = baselines.run(method, graph, _topo())
  assert result.placement.tolist() == [0, 0, 1]
  assert result.priority.shape == (3,)
  assert result.priority[1] < result.priority[0]
  assert result.info["simulated_step_time_us"] == 10.0 + 10.0 + 1.0 + 100.0
  assert result.info["simulated_step_time_planned_us"] == 10.0 + 1.0 + 100.0
  planned = simulator.simulate(graph, result.placement, _topo(),
                               priority=result.priority)
  assert planned.step_time_us == 111.0


@pytest.mark.parametrize("method", ("single_device", "metis", "m_topo"))
def test_methods_without_a_schedule_give_no_order(method):
  result = baselines.run(method, _graph([1.0, 2.0], [(0, 1, 10)]), _topo())
  assert result.priority is None
  assert "simulated_step_time_planned_us" not in result.info


def test_human_expert_is_imported_lazily_and_rejects_non_zoo_graphs():
  # The expert rules (tf_gdp.zoo.expert) know zoo models only.
  with pytest.raises(errors.InputError):
    baselines.run("human_expert", _graph([1.0, 1.0], [(0, 1, 8)]), _topo())
