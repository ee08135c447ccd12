"""The feasibility repair: valid placements pass, invalid ones are made valid.

Hand cases for each step of `baselines.repair` (constraints, spilling an
over-full device, the memory-first fill), then random small problems:
whenever the repair says valid, the simulator agrees, and whenever some
placement is valid (checked exhaustively) the repair finds one.
"""

import itertools

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp import placing
from tf_gdp.baselines import repair
from tf_gdp.baselines import repair_moves
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

KIB = 1 << 10


def _chain(n, *, memory=None, output=None, groups=None, kinds=None,
           costs=None):
  return op_graph.OpGraph.build(
      name="chain", node_names=[f"op{i}" for i in range(n)],
      op_types=["MatMul"] * n,
      costs=costs or {"GPU": [1.0] * n, "CPU": [5.0] * n},
      output_bytes=output or [KIB] * n, memory_bytes=memory or [0] * n,
      edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
      edge_bytes=list(output or [KIB] * n)[:n - 1],
      colocation_groups=groups, device_kinds=kinds)


def _box(memories, kinds=None):
  kinds = kinds or ["GPU"] * len(memories)
  d = len(memories)
  devices = [topology.Device(
      f"/job:localhost/replica:0/task:0/device:{k}:{i}", k, m)
             for i, (k, m) in enumerate(zip(kinds, memories))]
  return topology.custom("box", devices, np.full((d, d), 10.0),
                         np.full((d, d), 1.0))


def test_a_valid_placement_comes_back_unchanged():
  graph = _chain(4, memory=[2 * KIB] * 4)
  box = _box([64 * KIB, 64 * KIB])
  placement = np.array([0, 0, 1, 1])
  fixed = repair.repair(graph, box, placement)
  assert fixed.valid and not fixed.changed and fixed.moved_groups == 0
  assert fixed.evaluations == 1 and fixed.original_reason is None
  np.testing.assert_array_equal(fixed.placement, placement)
  assert fixed.step_time_us == simulator.simulate(
      graph, placement, box).step_time_us


def test_an_over_full_device_is_spilled_until_it_fits():
  # 6 ops of 4 KiB persistent each: 24 KiB kept plus outputs on one 16 KiB
  # device cannot fit; two such devices can.
  graph = _chain(6, memory=[4 * KIB] * 6)
  box = _box([16 * KIB, 16 * KIB])
  before = simulator.simulate(graph, np.zeros(6, np.int32), box)
  assert not before.valid
  fixed = repair.repair(graph, box, np.zeros(6, np.int32))
  assert fixed.valid and fixed.changed and fixed.moved_groups >= 2
  assert fixed.original_reason.startswith("OOM on ")
  after = simulator.simulate(graph, fixed.placement, box)
  assert after.valid and fixed.reason is None
  assert fixed.evaluations >= 2
  assert np.all(after.peak_memory_bytes <= box.memory_bytes)


def test_the_cheapest_groups_leave_first():
  # op1 carries as many bytes as op2 but costs 10x the compute: op2 moves.
  graph = _chain(3, memory=[0, 6 * KIB, 6 * KIB],
                 costs={"GPU": [1.0, 10.0, 1.0], "CPU": [1.0] * 3})
  box = _box([12 * KIB, 64 * KIB])
  fixed = repair.repair(graph, box, np.zeros(3, np.int32))
  assert fixed.valid
  assert fixed.placement.tolist() == [0, 0, 1]


def test_a_pipeline_cut_shifts_instead_of_its_stage_scattering():
  # Ops 0-7 on GPU:0 hold 16 KiB, more than it has; op 3 is the cheapest
  # to move by compute, but moving it would cut the chain twice more.
  costs = [1.0] * 12
  costs[3] = 0.1
  graph = _chain(12, memory=[2 * KIB] * 12,
                 costs={"GPU": costs, "CPU": [5.0] * 12})
  box = _box([14 * KIB, 64 * KIB])
  start = np.array([0] * 8 + [1] * 4)
  assert not simulator.simulate(graph, start, box).valid
  fixed = repair.repair(graph, box, start)
  assert fixed.valid
  placement = fixed.placement.tolist()
  assert placement == sorted(placement)  # still one cut, moved earlier
  assert placement.count(0) < 8


def test_broken_constraints_are_fixed_whole_groups_first():
  graph = _chain(4, groups=["g", "g", None, None],
                 kinds=[None, None, ("CPU",), None])
  box = _box([64 * KIB, 64 * KIB], kinds=["GPU", "CPU"])
  # The group is split, op2 sits on a GPU it may not use.
  fixed = repair.repair(graph, box, np.array([0, 1, 0, 0]))
  assert fixed.valid and fixed.changed
  assert fixed.placement[0] == fixed.placement[1] == 0
  assert fixed.placement[2] == 1


def test_batches_repair_each_row_on_its_own():
  graph = _chain(6, memory=[4 * KIB] * 6)
  box = _box([16 * KIB, 16 * KIB])
  rows = np.array([[0, 0, 0, 1, 1, 1], [0] * 6, [1] * 6])
  fixed = repair.repair_batch(graph, box, rows)
  assert [f.changed for f in fixed] == [False, True, True]
  assert all(f.valid for f in fixed)
  with pytest.raises(errors.InputError, match="shape"):
    repair.repair_batch(graph, box, rows[:, :3])


def _training_chain(layers, variable_bytes):
  """f0 -> ... -> f{L-1}, its gradients back, one update per layer."""
  names = [f"f{i}/op" for i in range(layers)]
  names += [f"gradient_tape/f{i}/op_grad" for i in reversed(range(layers))]
  names += [f"f{i}/update" for i in range(layers)]
  types = ["MatMul"] * (2 * layers) + ["ResourceApplyGradientDescent"] * layers
  edges = [(i, i + 1) for i in range(2 * layers - 1)]
  edges += [(2 * layers - 1 - i, 2 * layers + i) for i in range(layers)]
  edges += [(i, 2 * layers - 1 - i) for i in range(layers)]  # saved inputs
  n = 3 * layers
  return op_graph.OpGraph.build(
      name="chain", node_names=names, op_types=types,
      costs={"GPU": [10.0] * n}, output_bytes=[KIB] * n,
      memory_bytes=[variable_bytes] * layers + [0] * (2 * layers),
      edge_src=[a for a, _ in edges], edge_dst=[b for _, b in edges],
      edge_bytes=[KIB] * len(edges))


def test_an_overfull_training_step_becomes_a_pipeline_of_whole_layers():
  layers = 12
  graph = _training_chain(layers, 100 * KIB)
  box = _box([800 * KIB] * 3)  # 1.2 MiB of variables: two devices at least
  fixed = repair.repair(graph, box, np.zeros(graph.num_nodes, np.int32))
  assert fixed.valid
  forward = fixed.placement[:layers]
  # Each layer's gradient and update stay with it.
  np.testing.assert_array_equal(fixed.placement[layers:2 * layers],
                                forward[::-1])
  np.testing.assert_array_equal(fixed.placement[2 * layers:], forward)
  # The layers on each device are one contiguous run.
  runs = 1 + int((forward[1:] != forward[:-1]).sum())
  assert runs == len(set(forward.tolist())) >= 2


def test_the_spill_runs_only_where_no_shift_fits(monkeypatch):
  graph = _training_chain(12, 100 * KIB)
  box = _box([800 * KIB] * 3)
  spills = []
  spill = repair_moves.Moves.spill

  def counted(self, *args):
    spills.append(1)
    return spill(self, *args)

  monkeypatch.setattr(repair_moves.Moves, "spill", counted)
  fixed = repair.repair(graph, box, np.zeros(graph.num_nodes, np.int32))
  assert fixed.valid and not spills
  # Where neither shift fits, the spill still makes it fit.
  for name in ("shift_last", "shift_first"):
    monkeypatch.setattr(repair_moves.Moves, name,
                        lambda self, groups, *args: groups.copy())
  fixed = repair.repair(graph, box, np.zeros(graph.num_nodes, np.int32))
  assert fixed.valid and spills


def test_every_simulation_the_repair_makes_is_counted(monkeypatch):
  graph = _training_chain(12, 100 * KIB)
  box = _box([800 * KIB] * 3)
  rows = []
  batch = simulator.simulate_batch

  def counted(graph, placements, *args, **kwargs):
    rows.append(len(placements))
    return batch(graph, placements, *args, **kwargs)

  monkeypatch.setattr(simulator, "simulate_batch", counted)
  starts = np.zeros((2, graph.num_nodes), np.int32)
  starts[1, -1] = 1  # an update away from its variable's device
  fixed = repair.repair_batch(graph, box, starts)
  assert all(f.valid for f in fixed)
  assert sum(f.evaluations for f in fixed) == sum(rows)
  # The check's simulation stands for a row the constraints leave alone.
  assert fixed[0].evaluations < fixed[1].evaluations + 2


def test_what_cannot_fit_stays_invalid_with_the_reason():
  graph = _chain(3, memory=[12 * KIB] * 3)
  box = _box([16 * KIB, 16 * KIB])  # 36 KiB kept, 32 KiB in all
  fixed = repair.repair(graph, box, np.zeros(3, np.int32))
  assert not fixed.valid and fixed.reason.startswith("OOM on ")


def test_a_small_problem_the_moves_miss_is_solved_exactly(monkeypatch):
  # Valid only with op3 alone on GPU:0: no spill, shift or fill finds it.
  graph = _chain(4, memory=[1, 0, 0, KIB], output=[2 * KIB, KIB, KIB, 1])
  box = _box([2161, 3307])
  start = np.array([0, 0, 0, 0])
  monkeypatch.setattr(repair, "EXHAUSTIVE", 0)
  assert not repair.repair(graph, box, start).valid
  monkeypatch.undo()
  fixed = repair.repair(graph, box, start)
  assert fixed.valid
  np.testing.assert_array_equal(fixed.placement, [1, 1, 1, 0])


@st.composite
def small_problems(draw):
  n = draw(st.integers(2, 5))
  d = draw(st.integers(1, 3))
  sizes = st.integers(0, 6 * KIB)
  graph = _chain(
      n, memory=[draw(sizes) for _ in range(n)],
      output=[draw(st.integers(1, 3 * KIB)) for _ in range(n)],
      groups=[draw(st.sampled_from([None, None, "g"])) for _ in range(n)],
      kinds=[draw(st.sampled_from([None, None, ("GPU",)])) for _ in range(n)],
      costs={"GPU": [draw(st.floats(0.1, 10.0)) for _ in range(n)],
             "CPU": [draw(st.floats(0.1, 10.0)) for _ in range(n)]})
  memories = [draw(st.integers(2 * KIB, 16 * KIB)) for _ in range(d)]
  kinds = ["GPU"] + [draw(st.sampled_from(["GPU", "CPU"]))
                     for _ in range(d - 1)]
  start = [draw(st.integers(0, d - 1)) for _ in range(n)]
  return graph, _box(memories, kinds), np.array(start)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(small_problems())
def test_random_problems_repair_to_valid_whenever_one_exists(problem):
  graph, box, start = problem
  fixed = repair.repair(graph, box, start)
  judged = simulator.simulate(graph, fixed.placement, box)
  assert judged.valid == fixed.valid
  assert judged.step_time_us == pytest.approx(fixed.step_time_us)
  every = np.array(list(itertools.product(range(box.num_devices),
                                          repeat=graph.num_nodes)), np.int32)
  if simulator.simulate_batch(graph, every, box).valid.any():
    assert fixed.valid, fixed.reason


METHODS = ("single_device", "round_robin", "random", "m_topo", "m_etf",
           "metis", "contiguous_dp")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(small_problems(), st.sampled_from(METHODS))
def test_place_returns_a_valid_placement_or_says_none_exists(problem, method):
  graph, box, _ = problem
  every = np.array(list(itertools.product(range(box.num_devices),
                                          repeat=graph.num_nodes)), np.int32)
  exists = bool(simulator.simulate_batch(graph, every, box).valid.any())
  try:
    result = placing.place(graph, box, method, compare=(), robust_members=0)
  except errors.InfeasibleError as e:  # the bound, or the gate
    assert not exists, str(e)
    assert "\n" not in str(e)
    return
  assert result.valid
  assert simulator.simulate(graph, result.placement, box).valid
