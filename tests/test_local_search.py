"""local_search: starts, budget, determinism, curve and constraints."""

import numpy as np
import pytest

from tf_gdp import baselines
from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.baselines import common
from tf_gdp.baselines import local_search
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import generators
from tf_gdp.graph import op_graph


def _layered(devices="p100x2", seed=1):
  return (generators.random_layered_graph(200, width=20, seed=seed),
          topology.get(devices))


@pytest.mark.parametrize("devices", ["p100x2", "p100x4"])
@pytest.mark.parametrize("spec", ["layered:200", "cells:200", "branches:200"])
def test_never_worse_than_its_start_and_valid(devices, spec):
  graph = graph_specs.load_graph(spec, devices=devices).graph
  topo = topology.get(devices)
  result = baselines.run("local_search", graph, topo, seed=0, evaluations=150)
  start = min(t for t in result.info["starts"].values() if t is not None)
  assert result.info["simulated_step_time_us"] <= start + 1e-3  # rounded
  assert simulator.simulate(graph, result.placement, topo).valid
  assert result.info["starts"][result.info["start"]] == pytest.approx(start)


def test_the_budget_is_exact_and_counts_the_starts():
  graph, topo = _layered()
  for budget in (100, 137):
    result = baselines.run("local_search", graph, topo, evaluations=budget)
    assert result.evaluations == budget
    assert result.info["best_so_far"][-1][0] == budget
    assert result.info["start_evaluations"] < budget


def test_the_best_so_far_curve_is_monotone_and_ends_at_the_result():
  graph, topo = _layered("p100x4")
  result = baselines.run("local_search", graph, topo, evaluations=200)
  curve = result.info["best_so_far"]
  counts = [e for e, _ in curve]
  times = [t for _, t in curve]
  assert counts == sorted(counts)
  assert all(b <= a for a, b in zip(times, times[1:]))
  assert times[-1] == pytest.approx(result.info["simulated_step_time_us"])


def test_deterministic_for_a_seed():
  graph, topo = _layered("p100x4")
  runs = [baselines.run("local_search", graph, topo, seed=s, evaluations=120)
          for s in (3, 3)]
  np.testing.assert_array_equal(runs[0].placement, runs[1].placement)
  assert runs[0].info["best_so_far"] == runs[1].info["best_so_far"]


def test_seconds_stop_the_search_early():
  graph, topo = _layered()
  result = baselines.run("local_search", graph, topo, evaluations=10**6,
                         seconds=0.0)
  assert result.evaluations == result.info["start_evaluations"]
  assert result.info["rounds"] == 0


def test_groups_kinds_and_pins_hold_under_every_move():
  n = 40
  names = [f"block{i // 10}/op{i}" for i in range(n)]
  groups = [f"g{i // 2}" if i < 10 else None for i in range(n)]
  kinds = [("CPU",) if i == 15 else None for i in range(n)]
  pins = ["/device:GPU:1" if i == 25 else None for i in range(n)]
  graph = op_graph.OpGraph.build(
      name="c", node_names=names, op_types=["MatMul"] * n,
      costs={"GPU": np.full(n, 20.0), "CPU": np.full(n, 200.0)},
      output_bytes=np.full(n, 1000), memory_bytes=np.zeros(n, int),
      edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
      edge_bytes=np.full(n - 1, 1000), colocation_groups=groups,
      device_kinds=kinds, pinned_devices=pins)
  topo = topology.get("p100x4")
  result = baselines.run("local_search", graph, topo, evaluations=300)
  assert not simulator.constraint_problems(graph, result.placement, topo)
  assert result.info["rounds"] > 0
  moves = local_search._Moves(common.group_view(graph, topo),
                              np.random.default_rng(0))
  assert len(moves.scopes) == 4  # block0..block3, as groups
  current = np.array([moves.view.fastest_allowed(g)
                      for g in range(moves.view.num_groups)])
  for _ in range(50):
    proposal = moves.propose(current)
    assert moves.view.allowed[np.arange(proposal.size), proposal].all()


def test_bad_budget_is_an_input_error():
  graph, topo = _layered()
  with pytest.raises(errors.InputError, match="evaluations >= 1"):
    baselines.run("local_search", graph, topo, evaluations=0)


def test_climb_from_a_given_start_never_returns_worse_and_keeps_the_budget():
  graph, topo = _layered("p100x4")
  start = np.zeros(graph.num_nodes, np.int32)
  start_us = simulator.simulate(graph, start, topo).step_time_us
  climbed = local_search.climb(graph, topo, start, start_us, evaluations=96,
                               used=16, seed=2)
  # 80 distinct candidates; a repeat (a move back) costs nothing.
  assert climbed.evaluations == 96 and climbed.rounds >= 5
  assert climbed.step_time_us < start_us  # one device is far from best here
  judged = simulator.simulate(graph, climbed.placement, topo)
  assert judged.valid
  assert judged.step_time_us == pytest.approx(climbed.step_time_us)
  assert climbed.curve[0] == [16, start_us]
  assert climbed.curve[-1] == [96, climbed.step_time_us]


def test_a_climb_over_few_placements_stops_when_none_is_new():
  """A four-op graph on p100x2's three devices (two GPUs and the host) has at
  most 81 placements, the start priced already: a budget of 1000 buys at
  most the other 80, then the climb stops."""
  graph = generators.random_layered_graph(4, width=2, seed=0)
  topo = topology.get("p100x2")
  start = np.zeros(graph.num_nodes, np.int32)
  start_us = simulator.simulate(graph, start, topo).step_time_us
  climbed = local_search.climb(graph, topo, start, start_us,
                               evaluations=1000, seed=0)
  groups = len(np.unique(graph.group_ids))
  assert climbed.evaluations <= len(topo.devices) ** groups - 1
  assert climbed.rounds > local_search.IDLE_ROUNDS


def test_climb_without_budget_returns_the_start_as_given():
  graph, topo = _layered("p100x4")
  start = np.arange(graph.num_nodes, dtype=np.int32) % 4
  climbed = local_search.climb(graph, topo, start, 123.0, evaluations=10,
                               used=10)
  np.testing.assert_array_equal(climbed.placement, start)
  assert climbed.step_time_us == 123.0 and climbed.rounds == 0


def _chain_moves(kinds, n=40):
  """Moves over an n-op chain (one group per op, topological order = index)."""
  graph = op_graph.OpGraph.build(
      name="chain", node_names=[f"op{i}" for i in range(n)],
      op_types=["MatMul"] * n, costs={"GPU": np.full(n, 20.0)},
      output_bytes=np.full(n, 1000), memory_bytes=np.zeros(n, int),
      edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
      edge_bytes=np.full(n - 1, 1000))
  view = common.group_view(graph, topology.get("p100x4"))
  assert view.num_groups == n
  return local_search._Moves(view, np.random.default_rng(0), kinds)


def test_a_border_move_takes_one_group_across_the_cut():
  moves = _chain_moves(("border",))
  current = np.where(np.arange(40) < 25, 0, 2)
  seen = set()
  for _ in range(40):
    changed = np.flatnonzero(moves.propose(current) != current)
    assert changed.size == 1 and int(changed[0]) in (24, 25)
    seen.add(int(changed[0]))
  assert seen == {24, 25}  # both ends of the cut edge move


def test_a_shift_moves_a_run_beside_the_cut_to_the_other_side():
  moves = _chain_moves(("shift",))
  current = np.where(np.arange(40) < 25, 1, 3)
  lengths, sides = set(), set()
  for _ in range(60):
    proposal = moves.propose(current)
    changed = np.flatnonzero(proposal != current)
    assert changed.size >= 1
    np.testing.assert_array_equal(changed, np.arange(changed[0],
                                                     changed[-1] + 1))
    assert changed[-1] == 24 or changed[0] == 25  # ends at the cut
    assert set(proposal[changed]) == ({3} if changed[-1] == 24 else {1})
    lengths.add(changed.size)
    sides.add(bool(changed[-1] == 24))
  assert len(lengths) > 2  # runs of several lengths
  assert sides == {True, False}  # runs before and after the cut cross it


def test_moves_along_the_cut_need_a_cut():
  moves = _chain_moves(local_search.BORDER_MOVES)
  current = np.full(40, 2)
  np.testing.assert_array_equal(moves.propose(current), current)
  with pytest.raises(ValueError, match="unknown local_search moves"):
    _chain_moves(("border", "teleport"))


def test_a_start_that_does_not_fit_competes_repaired(monkeypatch):
  # Eight 2 KiB ops of a chain on two 10 KiB GPUs. One start puts them all
  # on GPU 0 (it overflows), the other alternates them (it fits, with a
  # transfer per edge). Repaired, the first becomes two stages and is the
  # faster start: judged as the baseline table judges starts, it wins.
  n, kib = 8, 1 << 10
  graph = op_graph.OpGraph.build(
      name="tight", node_names=[f"op{i}" for i in range(n)],
      op_types=["MatMul"] * n, costs={"GPU": [10.0] * n},
      output_bytes=[kib] * n, memory_bytes=[2 * kib] * n,
      edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
      edge_bytes=[kib] * (n - 1))
  devices = [topology.Device(f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                             "GPU", 10 * kib) for i in range(2)]
  box = topology.custom("box", devices, np.full((2, 2), 10.0),
                        np.full((2, 2), 1.0))
  everything_on_zero = np.zeros(n, np.int32)
  alternating = np.arange(n, dtype=np.int32) % 2
  assert not simulator.simulate(graph, everything_on_zero, box).valid
  assert simulator.simulate(graph, alternating, box).valid
  monkeypatch.setattr(local_search, "STARTS", {
      "on_zero": lambda g, t, seed: everything_on_zero,
      "alternating": lambda g, t, seed: alternating})
  result = baselines.run("local_search", graph, box, evaluations=40)
  assert result.info["starts_repaired"] == ["on_zero"]
  assert result.info["start"] == "on_zero"
  assert (result.info["starts"]["on_zero"] <
          result.info["starts"]["alternating"])
  assert result.info["start_evaluations"] > 2  # the repair's count
  assert simulator.simulate(graph, result.placement, box).valid
