"""The communication-free lower bound: hand-checked values, and never above
a simulated step time (property test over random graphs and topologies)."""

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from tf_gdp.cost import lower_bound
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

GIB = 1 << 30


def _graph(gpu, cpu, edges=(), kinds=None):
  n = len(gpu)
  return op_graph.OpGraph.build(
      name="t", node_names=[f"n{i}" for i in range(n)], op_types=["Op"] * n,
      costs={"GPU": gpu, "CPU": cpu}, output_bytes=[0] * n,
      memory_bytes=[0] * n, edge_src=[e[0] for e in edges],
      edge_dst=[e[1] for e in edges], edge_bytes=[0] * len(edges),
      device_kinds=kinds)


def _topo(kinds, speeds=None):
  speeds = speeds or [1.0] * len(kinds)
  d = len(kinds)
  devices = [topology.Device(f"/device:{k}:{i}", k, GIB, s)
             for i, (k, s) in enumerate(zip(kinds, speeds))]
  return topology.custom("t", devices, np.ones((d, d)), np.ones((d, d)))


def test_chain_bound_is_its_fastest_path():
  graph = _graph([1.0, 2.0, 3.0], [5.0, 1.0, 9.0], [(0, 1), (1, 2)])
  topo = _topo(["GPU", "CPU"])
  assert lower_bound.bound_terms(graph, topo)[0] == 1.0 + 1.0 + 3.0
  assert lower_bound.lower_bound(graph, topo) == 5.0


def test_critical_path_honours_kinds_and_speeds():
  graph = _graph([1.0, 2.0], [5.0, 1.0], [(0, 1)], kinds=[("CPU",), None])
  topo = _topo(["GPU", "CPU"], speeds=[1.0, 2.0])
  assert lower_bound.bound_terms(graph, topo)[0] == 2.5 + 0.5


def test_independent_ops_on_identical_devices_divide_the_work():
  graph = _graph([3.0] * 8, [3.0] * 8)
  assert lower_bound.lower_bound(graph, _topo(["GPU"] * 4)) == 6.0


def test_work_bound_splits_work_between_fast_and_slow_kinds():
  # 4 independent ops: 1 us on the GPU, 3 us on the CPU. Fractionally the GPU
  # takes 3/4 of them: T = 3. Total work / total speed would say only 2.
  # The simulator reaches 3 with three ops on the GPU and one on the CPU.
  graph = _graph([1.0] * 4, [3.0] * 4)
  topo = _topo(["GPU", "CPU"])
  bound = lower_bound.lower_bound(graph, topo)
  assert bound == pytest.approx(3.0, rel=1e-6)
  assert bound <= 3.0 + 1e-9
  best = simulator.simulate(graph, [0, 0, 0, 1], topo).step_time_us
  assert best == 3.0


def test_work_bound_with_three_kinds_stays_valid_and_beats_the_naive_one():
  graph = _graph([1.0] * 6, [4.0] * 6)
  n = 6
  graph = op_graph.OpGraph.build(
      name="t", node_names=[f"n{i}" for i in range(n)], op_types=["Op"] * n,
      costs={"GPU": [1.0] * n, "CPU": [4.0] * n, "TPU": [2.0] * n},
      output_bytes=[0] * n, memory_bytes=[0] * n, edge_src=[], edge_dst=[],
      edge_bytes=[])
  topo = _topo(["GPU", "CPU", "TPU"])
  # Fractional optimum: T = x * 1 = y * 4 = z * 2 with x + y + z = 6 ops:
  # T (1 + 1/4 + 1/2) = 6, T = 24 / 7.
  bound = lower_bound.lower_bound(graph, topo)
  assert bound == pytest.approx(24 / 7, rel=1e-6)
  assert bound > 6 / 3


def test_op_allowed_nowhere_in_the_topology_falls_back_to_every_device():
  graph = _graph([2.0], [4.0], kinds=[("CPU",)])
  assert lower_bound.lower_bound(graph, _topo(["GPU"])) == 2.0


def test_empty_graph_bound_is_zero():
  assert lower_bound.lower_bound(_graph([], []), _topo(["GPU"])) == 0.0


def _random_case(rng, n, d):
  order = rng.permutation(n)
  edges = set()
  for _ in range(int(rng.integers(0, 2 * n + 1))):
    a, b = sorted(rng.integers(0, n, 2))
    if a != b:
      edges.add((int(order[a]), int(order[b])))
  edges = sorted(edges)
  slots = rng.integers(-1, 2, len(edges))
  kinds = [None if rng.random() < 0.7 else
           (("CPU",) if rng.random() < 0.5 else ("GPU", "TPU"))
           for _ in range(n)]
  graph = op_graph.OpGraph.build(
      name="random", node_names=[f"n{i}" for i in range(n)],
      op_types=["Op"] * n,
      costs={"GPU": rng.uniform(0, 10, n), "CPU": rng.uniform(0, 60, n),
             "TPU": rng.uniform(0, 20, n)},
      output_bytes=[0] * n, memory_bytes=[0] * n,
      edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
      edge_bytes=np.where(slots < 0, 0, rng.integers(0, 10_000, len(edges))),
      edge_output=slots, device_kinds=kinds)
  device_kinds = rng.choice(["GPU", "GPU", "CPU", "TPU"], d).tolist()
  devices = [topology.Device(f"/device:{k}:{i}", k, GIB,
                             float(rng.uniform(0.25, 4.0)))
             for i, k in enumerate(device_kinds)]
  topo = topology.custom("random", devices, rng.uniform(0.1, 10, (d, d)),
                         rng.uniform(0, 5, (d, d)))
  return graph, topo


def _kind_respecting_placement(rng, graph, topo):
  """Each op on a random device of an allowed kind (any, if none is here)."""
  tables = simulator.device_tables(graph, topo)
  placement = np.empty(graph.num_nodes, np.int64)
  for i in range(graph.num_nodes):
    choices = np.flatnonzero(tables.kind_ok[i])
    if not choices.size:
      choices = np.arange(topo.num_devices)
    placement[i] = rng.choice(choices)
  return placement


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 25),
                  d=st.integers(1, 5))
def test_bound_is_never_above_a_simulated_step_time(seed, n, d):
  rng = np.random.default_rng(seed)
  graph, topo = _random_case(rng, n, d)
  bound = lower_bound.lower_bound(graph, topo)
  for _ in range(5):
    placement = _kind_respecting_placement(rng, graph, topo)
    step = simulator.simulate(graph, placement, topo).step_time_us
    assert bound <= step * (1 + 1e-9) + 1e-9


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6),
                  d=st.integers(1, 3))
def test_bound_is_never_above_the_best_placement(seed, n, d):
  # Every kind-respecting placement of a tiny graph, so the best schedule
  # (where a loose bound would be caught) is among them.
  rng = np.random.default_rng(seed)
  graph, topo = _random_case(rng, n, d)
  tables = simulator.device_tables(graph, topo)
  grid = np.stack(np.meshgrid(*[np.arange(d)] * n, indexing="ij"),
                  axis=-1).reshape(-1, n)
  ok = tables.kind_ok[np.arange(n), grid].all(axis=1)
  if not ok.any():
    return
  steps = simulator.simulate_batch(graph, grid[ok], topo).step_time_us
  assert lower_bound.lower_bound(graph, topo) <= steps.min() * (1 + 1e-9)


@hypothesis.settings(max_examples=50, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12))
def test_bound_is_tight_for_independent_ops_on_one_kind(seed, n):
  # Identical devices, equal ops: round robin is optimal when d divides n.
  rng = np.random.default_rng(seed)
  cost = float(rng.integers(1, 10))
  d = int(rng.integers(1, 4))
  graph = _graph([cost] * (n * d), [cost] * (n * d))
  topo = _topo(["GPU"] * d)
  step = simulator.simulate(graph, np.arange(n * d) % d, topo).step_time_us
  assert lower_bound.lower_bound(graph, topo) == pytest.approx(step)
