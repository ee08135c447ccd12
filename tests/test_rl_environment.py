"""The placement bandit: specs, rewards, references, batches, best, backends."""

import dataclasses
import types

import numpy as np
import pytest

# tf_gdp.rl first: it imports tf-agents and repairs tf.keras after it (see
# tf_gdp.rl.tf_agents_import).
from tf_gdp.rl import environment  # pylint: disable=g-bad-import-order
from rl_graphs import GIB, gpus, two_chains  # tests/ helper
from tf_gdp.rl import observations
from tf_gdp.rl import outputs
from tf_gdp.rl import placement_task
from tf_gdp.rl import rewards
from tf_gdp.rl import tasks as tasks_lib
from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.runtime import measure as measure_lib
from tf_gdp.cost import ensemble
from tf_gdp.cost import simulator
from tf_gdp.policy import features
from tf_agents.environments import utils as env_utils
from tf_agents.trajectories import time_step as ts
from tensorflow.core.framework import graph_pb2

# Stands in for a task's ExtractedGraph where `measure` is faked.
_NO_TF_GRAPH = types.SimpleNamespace(graph_def=graph_pb2.GraphDef())



def split_action(env, index=0):
  """Chain a on device 0, chain b on device 1, as a group action."""
  inputs = env.inputs(index)
  groups = np.zeros(env.action_spec().shape, np.int32)
  order = inputs.order
  for position in range(inputs.num_nodes):
    node = order[position]
    groups[inputs.group_ids[position]] = 0 if node < inputs.num_nodes // 2 else 1
  return groups


def test_specs_and_one_step():
  task = placement_task.PlacementTask(two_chains(), gpus())
  env = environment.PlacementEnv([task])
  action_spec = env.action_spec()
  assert action_spec.shape == (8,) and action_spec.dtype == np.int32
  assert (action_spec.minimum, action_spec.maximum) == (0, 1)
  obs_spec = env.observation_spec()
  assert obs_spec["node_features"].shape[0] == 8
  assert observations.GRAPH_ID in obs_spec
  first = env.reset()
  assert first.step_type == ts.StepType.FIRST
  for name, spec in obs_spec.items():
    assert first.observation[name].shape == spec.shape, name
  last = env.step(split_action(env))
  assert last.step_type == ts.StepType.LAST
  # Reference: both chains on one GPU = 800 us; split = 400 us.
  assert env.reference(0).method == "single_device"
  assert env.reference(0).step_time_us == pytest.approx(800.0)
  assert last.reward == pytest.approx(np.log(2.0), rel=1e-5)
  assert env.best(0).step_time_us == pytest.approx(400.0)
  assert env.evaluations == 1
  env_utils.validate_py_environment(env, episodes=3)


def test_batch_rewards_match_the_simulator_and_keep_the_best():
  graph, topology = two_chains(), gpus()
  env = environment.PlacementEnv(
      [placement_task.PlacementTask(graph, topology)])
  rng = np.random.default_rng(0)
  actions = rng.integers(0, 2, (12, 8)).astype(np.int32)
  evaluation = env.evaluate(0, actions)
  expected = simulator.simulate_batch(graph, evaluation.placements, topology)
  np.testing.assert_allclose(evaluation.step_time_us, expected.step_time_us)
  np.testing.assert_allclose(
      evaluation.reward, np.log(800.0 / expected.step_time_us), rtol=1e-5)
  best = env.best(0)
  assert best.step_time_us == pytest.approx(expected.step_time_us.min())
  assert env.evaluations == 12
  # A worse batch does not replace it.
  env.evaluate(0, np.zeros((2, 8), np.int32) + 1)
  assert env.best(0) is best
  # Placements honour groups: the simulator accepts them as they are.
  assert not simulator.constraint_problems(graph, best.placement, topology)


def test_a_placement_priced_before_costs_no_evaluation():
  env = environment.PlacementEnv(
      [placement_task.PlacementTask(two_chains(), gpus())])
  split = split_action(env)
  together = np.zeros_like(split)
  first = env.evaluate(0, [split, together, split])
  assert env.evaluations == 2  # the repeat in one batch is free
  again = env.evaluate(0, [together, split])
  assert env.evaluations == 2
  np.testing.assert_allclose(again.step_time_us, first.step_time_us[1::-1])
  env.evaluate(0, [np.where(np.arange(split.size) == 0, 1 - split, split)])
  assert env.evaluations == 3


def test_out_of_memory_is_penalized_below_the_reference():
  # 600 MiB per op: one chain (2.4 GiB) fits a 3 GiB GPU, both do not.
  graph = two_chains(memory=600 << 20)
  topology = gpus(memory=3 * GIB)
  env = environment.PlacementEnv(
      [placement_task.PlacementTask(graph, topology)], repair_invalid=False)
  together = np.zeros((1, 8), np.int32)
  evaluation = env.evaluate(0, np.concatenate([together, [split_action(env)]]))
  assert list(evaluation.valid) == [False, True]
  # No single device holds the graph: the reference is the lower bound.
  assert env.reference(0).method == "lower_bound"
  assert env.reference(0).step_time_us == pytest.approx(400.0)
  assert evaluation.reward[0] <= -rewards.INVALID_PENALTY
  assert evaluation.reward[1] == pytest.approx(0.0, abs=1e-6)
  assert env.best(0).step_time_us == pytest.approx(400.0)
  assert env.evaluations == 2


def test_an_out_of_memory_action_is_repaired_and_returned_as_executed():
  graph = two_chains(memory=600 << 20)
  topology = gpus(memory=3 * GIB)
  env = environment.PlacementEnv(
      [placement_task.PlacementTask(graph, topology)])
  together = np.zeros((1, 8), np.int32)
  evaluation = env.evaluate(0, together)
  assert list(evaluation.valid) == [True]
  executed = evaluation.group_devices[0]
  assert set(executed.tolist()) == {0, 1}  # the chains were split
  np.testing.assert_array_equal(
      evaluation.placements[0],
      features.group_to_node_placement(env.inputs(0), executed))
  assert evaluation.reward[0] > -rewards.INVALID_PENALTY
  assert env.evaluations > 1  # the repair's simulations count
  # A valid action is executed as given, with one simulation.
  before = env.evaluations
  again = env.evaluate(0, [split_action(env)])
  np.testing.assert_array_equal(again.group_devices[0],
                                split_action(env)[:env.inputs(0).num_groups])
  assert env.evaluations == before + 1


def test_reward_function():
  reward = rewards.placement_reward([50.0, 100.0, 200.0, 50.0, np.nan],
                                    [True, True, True, False, False], 100.0)
  np.testing.assert_allclose(
      reward, [np.log(2), 0, -np.log(2), -rewards.INVALID_PENALTY,
               -rewards.INVALID_PENALTY], rtol=1e-6)


def test_several_tasks_pad_to_the_largest_and_observe_each():
  small = placement_task.PlacementTask(two_chains(2), gpus(2), name="small")
  large = placement_task.PlacementTask(two_chains(5), gpus(4, name="g4"),
                                       name="large")
  env = environment.PlacementEnv([small, large], seed=3)
  assert env.padding == {"max_nodes": 10, "max_edges": 8, "max_groups": 10,
                         "max_devices": 4}
  seen = set()
  for _ in range(12):
    step = env.reset()
    seen.add(int(step.observation[observations.GRAPH_ID]))
    assert env.current_task in (0, 1)
    # Padding devices are never allowed.
    allowed = step.observation["allowed"]
    if env.current_task == 0:
      assert not allowed[:, 2:].any()
  assert seen == {0, 1}
  # An action naming a device the task does not have is invalid, not a crash.
  bad = np.full((1, 10), 3, np.int32)
  evaluation = env.evaluate(0, bad)
  assert not evaluation.valid[0]


def test_bad_arguments():
  task = placement_task.PlacementTask(two_chains(), gpus())
  with pytest.raises(errors.InputError):
    environment.PlacementEnv([])
  with pytest.raises(errors.InputError):
    environment.PlacementEnv([task], backend="guess")
  with pytest.raises(errors.InputError, match="TensorFlow graph"):
    environment.PlacementEnv([task], backend="measure", measure_target="local")
  other = placement_task.PlacementTask(two_chains(), gpus(), name="other")
  with pytest.raises(errors.InputError,
                     match=r"unique; given more than once: \S+ \(") as e:
    environment.PlacementEnv([task, other, task])
  assert "other" not in str(e.value)
  with pytest.raises(errors.InputError, match="simulate backend"):
    environment.PlacementEnv([task], backend="mix", measure_target="local",
                             robust_members=3)


def test_the_robust_objective_rewards_the_median_over_members():
  graph, topology = two_chains(), gpus()
  task = placement_task.PlacementTask(graph, topology)
  env = environment.PlacementEnv([task], robust_members=5)
  actions = np.random.default_rng(1).integers(0, 2, (8, 8)).astype(np.int32)
  evaluation = env.evaluate(0, actions)
  members = ensemble.Ensemble(graph, topology, members=5,
                              seed=ensemble.OBJECTIVE_SEED)
  medians = np.median(members.step_times(evaluation.placements), axis=0)
  reference = np.median(members.step_times(env.reference(0).placement[None]))
  np.testing.assert_allclose(evaluation.reward, np.log(reference / medians),
                             rtol=1e-5)
  nominal = simulator.simulate_batch(graph, evaluation.placements, topology)
  np.testing.assert_allclose(evaluation.step_time_us, nominal.step_time_us)
  plain = environment.PlacementEnv([task]).evaluate(0, actions)
  assert not np.allclose(plain.reward, evaluation.reward)
  # The best is the lowest median; its step time stays the nominal one.
  chosen = int(np.argmin(medians))
  best = env.best(0)
  np.testing.assert_array_equal(best.placement, evaluation.placements[chosen])
  assert best.step_time_us == pytest.approx(nominal.step_time_us[chosen])
  assert env.best_reward(0) == pytest.approx(
      np.log(reference / medians[chosen]), rel=1e-5)
  restored = dataclasses.replace(best)  # e.g. from a checkpoint
  env.set_best(0, restored)
  assert env.best_reward(0) == pytest.approx(
      np.log(reference / medians[chosen]), rel=1e-5)


def test_mix_measures_the_best_candidates_and_judges_by_measurement(monkeypatch):
  task = placement_task.PlacementTask(two_chains(), gpus(),
                                      extracted=_NO_TF_GRAPH)
  env = environment.PlacementEnv([task], backend="mix", measure_target="local",
                                 measure_top_k=1, measure_confirm=0)
  measured = []

  def fake_measure(extracted, placement, target, *, topology, repeats, warmup,
                   allow_side_effects):
    del extracted, target, topology, repeats, warmup, allow_side_effects
    measured.append(np.asarray(placement).copy())
    # "Reality" is twice as slow as the simulator, everywhere.
    sim = simulator.simulate(task.graph, placement, task.topology)
    return measure_lib.Measurement(step_time_us=2 * sim.step_time_us)

  monkeypatch.setattr(measure_lib, "measure", fake_measure)
  split = split_action(env)
  actions = np.stack([np.zeros(8, np.int32), split, split])
  evaluation = env.evaluate(0, actions)
  # The reference (single device) and the fastest candidate were measured,
  # the duplicate of the split placement only once.
  assert len(measured) == 2
  assert list(evaluation.measured) == [False, True, False]
  assert evaluation.step_time_us[1] == pytest.approx(800.0)
  # Measured reward: measured ratio to the measured reference (1600 us).
  assert evaluation.reward[1] == pytest.approx(np.log(2.0), rel=1e-5)
  assert env.best(0).source == "measure"
  assert env.best(0).step_time_us == pytest.approx(800.0)
  # Cached: measuring the same placement again costs nothing.
  env.evaluate(0, split[None])
  assert len(measured) == 2 == env.measurements


def test_a_lucky_measurement_does_not_become_the_best(monkeypatch):
  task = placement_task.PlacementTask(two_chains(), gpus(),
                                      extracted=_NO_TF_GRAPH)
  env = environment.PlacementEnv([task], backend="measure",
                                 measure_target="local", measure_confirm=2)
  split = split_action(env)
  other = split.copy()
  other[0] = 1 - other[0]  # a worse split: one op away from its chain

  def key(action):
    placement = features.group_to_node_placement(env.inputs(0), action)
    return np.asarray(placement, np.int64).tobytes()

  # Per placement, the step times its successive measurements return.
  runs = {key(split): [500.0, 900.0, 950.0],   # lucky once, 900 really
          key(other): [850.0, 860.0, 870.0]}   # steady 860

  def fake_measure(extracted, placement, target, *, topology, repeats, warmup,
                   allow_side_effects):
    del extracted, target, topology, repeats, warmup, allow_side_effects
    times = runs.get(np.asarray(placement, np.int64).tobytes(), [1600.0])
    return measure_lib.Measurement(step_time_us=times.pop(0) if len(times) > 1
                                   else times[0])

  monkeypatch.setattr(measure_lib, "measure", fake_measure)
  env.evaluate(0, split[None])
  # Confirmed at the median of 500, 900 and 950.
  assert env.best(0).step_time_us == pytest.approx(900.0)
  assert (env.measurements, env.confirmations) == (2, 2)
  env.evaluate(0, np.stack([other, split]))
  assert env.best(0).step_time_us == pytest.approx(860.0)
  np.testing.assert_array_equal(env.best(0).group_devices, other[:8])
  # Each placement is confirmed once; cached afterwards.
  env.evaluate(0, np.stack([other, split]))
  assert (env.measurements, env.confirmations) == (3, 4)
  with pytest.raises(errors.InputError, match="measure_confirm"):
    environment.PlacementEnv([task], backend="measure", measure_target="local",
                             measure_confirm=-1)


def test_placement_file_round_trip(tmp_path):
  task = placement_task.PlacementTask(two_chains(), gpus())
  env = environment.PlacementEnv([task])
  env.evaluate(0, split_action(env)[None])
  path = str(tmp_path / "best.json")
  outputs.write_placement(path, task, env.best(0), env.reference(0))
  restored = outputs.read_best(path, task, env.inputs(0))
  assert restored.step_time_us == env.best(0).step_time_us
  np.testing.assert_array_equal(restored.placement, env.best(0).placement)
  other = placement_task.PlacementTask(two_chains(3), gpus())
  assert outputs.read_best(path, other, env.inputs(0)) is None


def test_an_item_may_name_its_own_topology():
  items = graph_specs.parse("layered:40:width=4,branches:30@p100x4",
                            allow_devices=True)
  tasks = tasks_lib.placement_tasks(items, ["p100x2", "v100x8"])
  assert [t.name for t in tasks] == ["layered_40_width4@p100x2",
                                     "layered_40_width4@v100x8",
                                     "branches_30@p100x4"]
  assert [t.topology.name for t in tasks] == ["p100x2", "v100x8", "p100x4"]
  with pytest.raises(errors.InputError, match="for pretrain"):
    graph_specs.parse("branches:30@p100x4")
  with pytest.raises(errors.InputError, match="GRAPH@DEVICES"):
    graph_specs.parse("branches:30@", allow_devices=True)
