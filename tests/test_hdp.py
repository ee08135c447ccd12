"""The HDP-style baseline on tiny graphs: constraints, learning, determinism."""

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp.baselines import hdp
from tf_gdp.baselines import hdp_problem
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

GIB = 1 << 30
# Small networks keep each search to a few seconds; the algorithm is the same.
_FAST = {"placer_hidden": 32, "grouper_hidden": 16}


def _graph(n, edges, *, cost=10.0, nbytes=1000, groups=None, kinds=None,
           pins=None, memory=None, op_types=None):
  return op_graph.OpGraph.build(
      name="t", node_names=[f"n{i}" for i in range(n)],
      op_types=op_types or ["MatMul"] * n,
      costs={"GPU": [cost] * n, "CPU": [cost * 10] * n},
      output_bytes=[nbytes] * n,
      memory_bytes=memory if memory is not None else [0] * n,
      edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges],
      edge_bytes=[nbytes] * len(edges), colocation_groups=groups,
      device_kinds=kinds, pinned_devices=pins)


def _two_chains(length):
  edges = [(c * length + i, c * length + i + 1)
           for c in range(2) for i in range(length - 1)]
  return _graph(2 * length, edges)


def _topo(kinds=("GPU", "GPU"), *, memory=GIB, latency=1.0):
  d = len(kinds)
  devices = [topology.Device(f"/job:w/replica:0/task:0/device:{k}:{i}", k,
                             memory) for i, k in enumerate(kinds)]
  return topology.custom("test", devices, np.full((d, d), 1.0),
                         np.full((d, d), latency))


def test_two_chains_learns_to_split_them():
  graph = _two_chains(6)  # 6 ops of 10 us per chain; a transfer costs 2 us
  topo = _topo()
  single = simulator.simulate(graph, np.zeros(12, np.int64), topo)
  result = hdp.search(graph, topo, seed=0, budget=480, num_groups=4,
                       learning_rate=1e-3)
  assert result.evaluations == 480
  assert result.valid
  # One chain per device is 60 us; allow a few transfers more.
  assert result.best_step_time_us <= 70.0 < single.step_time_us == 120.0
  assert simulator.simulate(graph, result.placement,
                            topo).step_time_us == result.best_step_time_us
  # The policy itself improved, not just the best-so-far.
  means = result.batch_mean_us
  assert np.mean(means[-10:]) < np.mean(means[:5])


def test_history_is_monotone_and_counts_the_budget():
  graph = _two_chains(4)
  result = hdp.search(graph, _topo(), seed=3, budget=21, batch_size=4,
                      **_FAST)
  evaluations = [e for e, _ in result.history]
  best = [t for _, t in result.history]
  assert evaluations == [4, 8, 12, 16, 20, 21]  # the last batch is partial
  assert result.evaluations == 21
  assert all(b <= a for a, b in zip(best, best[1:]))
  assert best[-1] == result.best_step_time_us
  assert result.seconds > 0
  assert result.placement.dtype == np.int32


def test_same_seed_same_placement():
  graph = _two_chains(5)
  topo = _topo(("GPU", "GPU", "CPU"))
  first = hdp.search(graph, topo, seed=7, budget=24, **_FAST)
  second = hdp.search(graph, topo, seed=7, budget=24, **_FAST)
  np.testing.assert_array_equal(first.placement, second.placement)
  assert first.history == second.history
  assert first.batch_mean_us == second.batch_mean_us


def test_constraints_hold():
  # Colocated pairs, a CPU-only op, an op pinned to GPU:1, and a group whose
  # ops together allow no device (it must be repaired per unit).
  n = 10
  edges = [(i, i + 1) for i in range(n - 1)]
  groups = ["a", "a", None, "b", "b", "b", None, None, None, None]
  kinds = [None] * n
  kinds[2] = ("CPU",)
  kinds[7] = ("GPU",)
  pins = [None] * n
  pins[6] = "/device:GPU:1"
  graph = _graph(n, edges, groups=groups, kinds=kinds, pins=pins)
  topo = _topo(("GPU", "GPU", "CPU"))
  for num_groups, budget in ((1, 8), (3, 16)):  # 1: a group mixes them all
    result = hdp.search(graph, topo, seed=1, budget=budget,
                        num_groups=num_groups, **_FAST)
    assert simulator.constraint_problems(graph, result.placement, topo) == []
    assert result.valid
    assert result.placement[2] == 2 and result.placement[6] == 1
    assert result.placement[0] == result.placement[1]
    assert len(set(result.placement[3:6].tolist())) == 1


def test_memory_cap_forces_a_split():
  # Each op holds 0.6 GiB of variables; a device has 1 GiB: one op per device.
  graph = _graph(2, [], memory=[int(0.6 * GIB)] * 2)
  topo = _topo(memory=GIB)
  result = hdp.search(graph, topo, seed=0, budget=16, **_FAST)
  assert result.valid
  assert sorted(result.placement.tolist()) == [0, 1]
  assert simulator.simulate(graph, result.placement, topo).valid


def test_group_count_is_capped_by_colocation_units():
  graph = _graph(6, [(0, 1), (2, 3)], groups=["x", "x", "y", "y", None, None])
  result = hdp.search(graph, _topo(), seed=0, budget=8, **_FAST)
  assert result.num_groups == 4


def test_trivial_cases():
  graph = _two_chains(3)
  one_device = _topo(("GPU",))
  assert hdp.place(graph, one_device, budget=5).tolist() == [0] * 6
  empty = _graph(0, [])
  assert hdp.place(empty, _topo(), budget=5).shape == (0,)


def test_bad_options_are_input_errors():
  graph = _two_chains(3)
  with pytest.raises(errors.InputError, match="unknown option"):
    hdp.search(graph, _topo(), budget=8, num_grups=4)
  with pytest.raises(errors.InputError, match="budget"):
    hdp.search(graph, _topo(), budget=0)
  with pytest.raises(errors.InputError, match="batch_size"):
    hdp.search(graph, _topo(), budget=8, batch_size=0)


def test_max_seconds_stops_after_the_first_batch():
  graph = _two_chains(4)
  result = hdp.search(graph, _topo(), seed=0, budget=1000, batch_size=4,
                      max_seconds=1e-6, **_FAST)
  assert result.evaluations == 4
  assert len(result.history) == 1


def test_training_scores_exactly_what_was_sampled():
  """The teacher-forced log-probabilities the update uses equal those of the
  autoregressive sampler, and masked devices are never drawn."""
  from tf_gdp.baselines import hdp_model  # pylint: disable=g-import-not-at-top
  graph = _graph(8, [(i, i + 1) for i in range(7)],
                 kinds=[("CPU",)] + [None] * 7)
  topo = _topo(("GPU", "GPU", "CPU"))
  config = hdp.HdpConfig(num_groups=5, **_FAST)
  problem = hdp_problem.Problem(graph, topo, num_groups=config.num_groups,
                                num_op_types=config.num_op_types)
  policy = hdp_model.HdpPolicy(
      num_unit_features=problem.num_unit_features,
      num_group_features=problem.num_group_features, num_groups=5,
      num_devices=3, grouper_hidden=16, placer_hidden=32,
      device_embedding=8, seed=4, learning_rate=1e-3,
      grouper_learning_rate=1e-3, entropy_weight=0.0, grad_clip=0.0)
  groups = policy.sample_groups(problem.unit_features, 6,
                                np.array([1, 2], np.int32)).numpy()
  assert groups.shape == (6, 8) and groups.min() >= 0 and groups.max() < 5
  mask = problem.group_mask(groups)
  group_x = problem.group_features(groups, mask)
  devices, sampled_logp = policy.sample_devices(group_x, mask,
                                                np.array([3, 4], np.int32))
  devices = devices.numpy()
  assert mask[np.arange(6)[:, None], np.arange(5)[None, :], devices].all()
  # Groups holding the CPU-only op 0 may only use the CPU.
  cpu_groups = groups[:, 0]
  assert (devices[np.arange(6), cpu_groups] == 2).all()
  _, forced_logp, _ = policy.log_probs(problem.unit_features, groups, group_x,
                                       mask, devices)
  np.testing.assert_allclose(forced_logp.numpy(), sampled_logp.numpy(),
                             rtol=1e-5, atol=1e-5)
