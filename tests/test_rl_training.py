"""PPO on the GDP policy: learning, checkpoints, kill-and-resume, zero-shot."""

import dataclasses
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

# tf_gdp.rl first: it imports tf-agents and repairs tf.keras after it.
from tf_gdp.rl import environment  # pylint: disable=g-bad-import-order
from rl_graphs import GIB, gpus, two_chains  # tests/ helper
from tf_gdp.rl import actor_network
from tf_gdp.rl import exploration
from tf_gdp.rl import placement_task
from tf_gdp.rl import policy_io
from tf_gdp.rl import run_dir
from tf_gdp.rl import train_config
from tf_gdp.rl import trainer as trainer_lib
from tf_gdp.rl import zero_shot
from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.baselines import contiguous_dp
from tf_gdp.baselines import heft
from tf_gdp.baselines import m_etf
from tf_gdp.baselines import m_sct
from tf_gdp.baselines import metis
from tf_gdp.baselines import side_offload
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph
from tf_gdp.policy import features
from tf_gdp.policy import network
import tensorflow as tf

# A small policy: tracing its forward and backward pass dominates test time.
TINY = {"hidden_size": 32, "op_embedding_size": 8, "gnn_rounds": 2,
        "placer_layers": 1, "num_heads": 2, "ffn_size": 64,
        "segment_length": 8, "memory_length": 8}
PLACERS = ("transformer_xl", "feedforward")


def tiny_policy(placer, seed=1):
  return network.GdpPolicy(network.PolicyConfig(placer=placer, seed=seed,
                                                **TINY))


def learn_config(seed=1):
  return train_config.TrainConfig(
      samples_per_graph=32, graphs_per_iteration=1, seed=seed,
      log_every_seconds=1e9, checkpoint_every_seconds=1e9,
      ppo=train_config.PpoConfig(learning_rate=3e-3,
                                 entropy_regularization=0.01))


@pytest.fixture(scope="module", params=PLACERS)
def trained(request, tmp_path_factory):
  """A trainer that learned to split two chains (or the test fails)."""
  placer = request.param
  root = str(tmp_path_factory.mktemp(f"two_chains_{placer}"))
  task = placement_task.PlacementTask(two_chains(), gpus())
  env = environment.PlacementEnv([task])
  trainer = trainer_lib.Trainer(env, tiny_policy(placer), config=learn_config(),
                              root_dir=root, log=lambda line: None)
  first = trainer.run_iteration()
  history = [first]
  # Learned = the policy's own greedy placement is optimal twice in a row.
  # (Seeds 1-3 took 5-27 iterations for either placer; TF thread scheduling
  # makes runs differ a little, hence the generous cap.)
  # Sampling must have concentrated too (mean reward up from random's).
  while len(history) < 120 and not (
      len(history) >= 2 and
      max(h["greedy_ratio"] for h in history[-2:]) <= 0.5 + 1e-6 and
      history[-1]["reward_mean"] > first["reward_mean"] + 0.2):
    history.append(trainer.run_iteration())
  trainer.save()
  return placer, trainer, history


def test_learns_to_split_two_chains(trained):
  placer, trainer, history = trained
  reference = trainer.env.reference(0)
  assert reference.method == "single_device"
  assert reference.step_time_us == pytest.approx(800.0)
  assert history[-1]["greedy_ratio"] == pytest.approx(0.5), (
      placer, [round(h["greedy_ratio"], 2) for h in history])
  # The greedy placement is the split (each chain whole on its own GPU) ...
  obs = {k: v[None] for k, v in trainer.env.observation(0).items()}
  greedy = np.argmax(trainer.policy(obs).numpy()[0], axis=-1)
  placement = features.group_to_node_placement(trainer.env.inputs(0), greedy)
  assert len(set(placement[:4])) == 1 and len(set(placement[4:])) == 1
  assert placement[0] != placement[4]
  # ... and sampling has concentrated on it: mean reward up from random's.
  assert history[-1]["reward_mean"] > history[0]["reward_mean"] + 0.2
  assert trainer.env.best(0).step_time_us == pytest.approx(400.0)


def test_checkpoint_round_trip(trained):
  placer, trainer, _ = trained
  env = trainer.env
  obs = {k: v[None] for k, v in env.observation(0).items()}
  fresh_env = environment.PlacementEnv(env.tasks)
  restored = trainer_lib.Trainer(fresh_env, tiny_policy(placer, seed=7),
                               config=learn_config(), root_dir=trainer.root_dir,
                               log=lambda line: None)
  np.testing.assert_allclose(restored.policy(obs).numpy(),
                             trainer.policy(obs).numpy(), rtol=1e-6,
                             atol=1e-5)
  assert int(restored.iteration.numpy()) == int(trainer.iteration.numpy())
  assert int(restored.train_step.numpy()) == int(trainer.train_step.numpy())
  assert int(restored.optimizer.iterations.numpy()) == int(
      trainer.optimizer.iterations.numpy())
  assert fresh_env.evaluations == env.evaluations
  assert fresh_env.best(0).step_time_us == env.best(0).step_time_us
  np.testing.assert_array_equal(fresh_env.best(0).placement,
                                env.best(0).placement)
  np.testing.assert_array_equal(restored.rng.state.numpy(),
                                trainer.rng.state.numpy())
  # A saved policy loads back with the same logits.
  path = policy_io.save_policy(trainer.policy,
                               os.path.join(trainer.root_dir, "exported"))
  loaded = policy_io.load_policy(path)
  np.testing.assert_allclose(loaded(obs).numpy(), trainer.policy(obs).numpy(),
                             rtol=1e-6, atol=1e-5)


def test_zeroshot_respects_constraints(trained):
  placer, trainer, _ = trained
  # An unseen graph on an unseen topology: 3 GPUs and a CPU, a CPU-only op,
  # a pinned op and a colocation group.
  length = 5
  graph = two_chains(length)
  n = graph.num_nodes
  kinds = [None] * n
  kinds[2] = ("CPU",)
  pins = [None] * n
  pins[6] = "/device:GPU:2"
  groups = [None] * n
  groups[3] = groups[4] = "g"
  graph = op_graph.OpGraph.build(
      name="constrained", node_names=graph.node_names,
      op_types=graph.op_types,
      costs={"GPU": graph.costs["GPU"], "CPU": graph.costs["GPU"] * 10},
      output_bytes=graph.output_bytes, memory_bytes=graph.memory_bytes,
      edge_src=graph.edge_src, edge_dst=graph.edge_dst,
      edge_bytes=graph.edge_bytes, device_kinds=kinds, pinned_devices=pins,
      colocation_groups=groups, fetches=graph.fetches)
  topology = topology_lib.get("p100x4")
  shot = zero_shot.zeroshot(trainer.policy,
                            placement_task.PlacementTask(graph, topology),
                            samples=8, seed=3)
  assert simulator.constraint_problems(graph, shot.placement, topology) == []
  assert shot.valid
  assert shot.sample_step_times_us.shape == (8,)
  assert shot.step_time_us <= shot.greedy_step_time_us
  assert shot.step_time_us == pytest.approx(
      simulator.simulate(graph, shot.placement, topology).step_time_us)
  del placer


def test_distribution_reports_logits_and_sums_groups():
  logits = tf.math.log([[[0.9, 0.1], [0.2, 0.8], [1.0, 0.0]]])
  dist = actor_network.GroupCategorical(logits)
  assert list(dist.parameters) == ["logits"]
  assert dist.event_shape == [3] and dist.batch_shape == [1]
  log_prob = dist.log_prob(tf.constant([[0, 1, 0]], tf.int32))
  assert float(log_prob[0]) == pytest.approx(np.log(0.9 * 0.8), rel=1e-5)


def test_rows_showing_one_graph_are_encoded_once():
  small = placement_task.PlacementTask(two_chains(3), gpus(), name="small")
  large = placement_task.PlacementTask(two_chains(5), gpus(3), name="large")
  env = environment.PlacementEnv([small, large])
  policy = tiny_policy("transformer_xl")
  batches = []

  def counting(observation, training=False):
    batches.append(int(observation["node_mask"].shape[0]))
    return policy(observation, training=training)

  rows = [env.observation(i) for i in (0, 1, 0, 0)]
  stacked = {k: tf.constant(np.stack([r[k] for r in rows])) for k in rows[0]}
  shared = actor_network.shared_logits(counting, stacked).numpy()
  assert batches == [2]
  for row, observation in zip(shared, rows):
    alone = policy({k: v[None] for k, v in observation.items()}).numpy()[0]
    np.testing.assert_allclose(row, alone, rtol=1e-5, atol=1e-4)


def _layers(layers):
  """A chain of `layers` numbered scopes, two ops each: pipeline stages."""
  n = 2 * layers
  names = [f"layer_{i // 2}/op{i}" for i in range(n)]
  return op_graph.OpGraph.build(
      name=f"layers{layers}", node_names=names, op_types=["MatMul"] * n,
      costs={"GPU": [100.0] * n}, output_bytes=[1000] * n,
      memory_bytes=[0] * n, edge_src=list(range(n - 1)),
      edge_dst=list(range(1, n)), edge_bytes=[1000] * (n - 1))


def test_rows_with_exploration_noise_get_their_own_logits():
  env = environment.PlacementEnv([
      placement_task.PlacementTask(_layers(3), gpus(), name="small"),
      placement_task.PlacementTask(_layers(5), gpus(), name="large")])
  policy = tiny_policy("feedforward")
  rng = np.random.default_rng(0)
  rows = []
  for index in (0, 0, 1):
    row = dict(env.observation(index))
    row["exploration_noise"] = rng.normal(
        size=row["exploration_noise"].shape).astype(np.float32)
    rows.append(row)
  stacked = {k: tf.constant(np.stack([r[k] for r in rows])) for k in rows[0]}
  shared = actor_network.shared_logits(policy, stacked).numpy()
  for row, observation in zip(shared, rows):
    alone = policy({k: v[None] for k, v in observation.items()}).numpy()[0]
    np.testing.assert_allclose(row, alone, rtol=1e-5, atol=1e-4)
  assert not np.allclose(shared[0], shared[1])


def test_exploring_trainer_stores_the_logits_its_samples_came_from():
  """PPO's first-epoch ratio must be exactly 1: the stored behaviour logits
  are what the policy gives each row under that row's noise."""
  env = environment.PlacementEnv([placement_task.PlacementTask(_layers(4),
                                                               gpus())])
  config = dataclasses.replace(learn_config(), samples_per_graph=4)
  trainer = trainer_lib.Trainer(env, tiny_policy("feedforward"), config=config,
                              log=lambda line: None)
  stacked = {k: v[None] for k, v in env.observation(0).items()}
  logits, actions, greedy, values, _, noise, _ = trainer._sample_fn(
      stacked, tf.constant([3, 4], tf.int32), 4)
  assert logits.shape[0] == 4 and noise.shape[0] == 4
  assert float(tf.reduce_max(tf.abs(noise))) > 0
  experience = trainer._experience(
      stacked, np.array([0]), logits.numpy(), actions.numpy(), values.numpy(),
      np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32),
      noise.numpy())
  replay = trainer.actor_net.logits(experience.observation).numpy()
  np.testing.assert_allclose(
      replay, experience.policy_info["dist_params"]["logits"].numpy(),
      rtol=1e-5, atol=1e-4)
  # The greedy action is the noise-free policy's.
  base = trainer.policy(stacked).numpy()
  np.testing.assert_array_equal(greedy.numpy(), np.argmax(base, -1))
  # And a whole iteration runs with it.
  assert trainer.run_iteration()["iteration"] == 1


def test_saved_policy_configs_load_with_the_behaviour_they_were_saved_with(
    tmp_path):
  path = policy_io.save_policy(tiny_policy("feedforward"),
                               str(tmp_path / "policy"))
  config_file = os.path.join(path, policy_io.POLICY_CONFIG_FILE)
  with open(config_file, encoding="utf-8") as f:
    config = json.load(f)
  assert config["scope_features"] is True and config["stage_affinity"] is True
  del config["scope_features"]  # as written before scope coordinates
  del config["stage_affinity"]  # and before the stage affinity
  with open(config_file, "w", encoding="utf-8") as f:
    json.dump(config, f)
  old = policy_io.read_policy_config(config_file)
  assert old["scope_features"] is False and old["stage_affinity"] is False
  with open(config_file, "w", encoding="utf-8") as f:
    f.write("{not json")
  with pytest.raises(errors.InputError, match="unreadable policy config"):
    policy_io.load_policy(path)


def test_weights_cut_short_are_one_input_error(tmp_path):
  path = policy_io.save_policy(tiny_policy("feedforward"),
                               str(tmp_path / "policy"))
  (data,) = glob.glob(os.path.join(path, policy_io.POLICY_WEIGHTS + ".data-*"))
  os.truncate(data, os.path.getsize(data) // 2)
  with pytest.raises(errors.InputError, match="the checkpoint cannot be read"):
    policy_io.load_policy(path)


@pytest.mark.parametrize("edit, match", [
    ({"hidden_size": 48}, "the checkpoint cannot be read"),
    ({"placer_layers": 2}, "the config does not belong to these weights"),
    ({"gnn_rounds": 1}, "the config does not belong to these weights")])
def test_a_config_edited_away_from_its_weights_is_refused_at_load(
    tmp_path, edit, match):
  path = policy_io.save_policy(tiny_policy("feedforward"),
                               str(tmp_path / "policy"))
  assert policy_io.load_policy(path).built  # as saved: loads
  config_file = os.path.join(path, policy_io.POLICY_CONFIG_FILE)
  with open(config_file, encoding="utf-8") as f:
    config = json.load(f)
  with open(config_file, "w", encoding="utf-8") as f:
    json.dump({**config, **edit}, f)
  with pytest.raises(errors.InputError, match=match):
    policy_io.load_policy(path)


_RESUME_SCRIPT = """
import sys
from tf_gdp.cli import pretrain, runner
runner.run_command(pretrain.main, ["tf-gdp pretrain"] + sys.argv[1:])
"""


def test_kill_and_resume_keeps_the_best_placement(tmp_path):
  root = str(tmp_path / "run")
  graphs, devices = "layered:60:width=6", "p100x2"
  args = [f"--graphs={graphs}", f"--devices={devices}", f"--root_dir={root}",
          "--budget_iterations=100000", "--samples=8",
          "--placer=feedforward", "--checkpoint_every=0", "--log_every=0",
          "--policy_config=" + json.dumps(TINY)]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.Popen([sys.executable, "-c", _RESUME_SCRIPT] + args,
                          env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
  try:
    deadline = time.time() + 120
    while time.time() < deadline:
      checkpoints = glob.glob(os.path.join(root, "checkpoints", "ckpt-*.index"))
      if len(checkpoints) >= 2 and glob.glob(os.path.join(root, "best", "*")):
        break
      assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
      time.sleep(0.2)
    else:
      pytest.fail("no checkpoint within 120 s")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
    proc.stderr.close()
  (best_file,) = glob.glob(os.path.join(root, "best", "*.json"))
  with open(best_file, encoding="utf-8") as f:
    before = json.load(f)
  assert before["method"] == "gdp" and before["step_time_source"] == "simulate"

  item = graph_specs.parse(graphs)[0]
  task = placement_task.PlacementTask(item.load(devices).graph,
                                      topology_lib.get(devices),
                                      name=f"{item.label}@{devices}")
  resumed_env = environment.PlacementEnv([task])
  with open(os.path.join(root, policy_io.POLICY_CONFIG_FILE)) as f:
    policy = policy_io.build_policy(json.load(f))
  trainer = trainer_lib.Trainer(
      resumed_env, policy,
      config=train_config.TrainConfig(samples_per_graph=8),
      root_dir=root, log=lambda line: None)
  iterations = int(trainer.iteration.numpy())
  assert iterations >= 1
  best = resumed_env.best(0)
  assert best is not None
  assert best.step_time_us <= before["step_time_us"]
  placement = [task.topology.device_names[d] for d in best.placement]
  if best.step_time_us == before["step_time_us"]:
    assert placement == [before["placement"][op] for op in task.graph.node_names]
  result = trainer.run(train_config.Budget(iterations=iterations + 1))
  assert result.iterations == iterations + 1
  assert result.best[task.name].step_time_us <= before["step_time_us"]

  # Stopped before its first checkpoint: only the best placements come back,
  # and the log does not claim a resumed iteration.
  shutil.rmtree(os.path.join(root, "checkpoints"))
  lines = []
  again = trainer_lib.Trainer(
      environment.PlacementEnv([task]), policy_io.build_policy(TINY),
      config=train_config.TrainConfig(samples_per_graph=8),
      root_dir=root, log=lines.append)
  assert int(again.iteration.numpy()) == 0
  assert again.env.best(0).step_time_us <= before["step_time_us"]
  assert any(line.startswith("no checkpoint yet") for line in lines), lines


_FINETUNE_SCRIPT = """
import sys
from tf_gdp.cli import finetune, runner
runner.run_command(finetune.main, ["tf-gdp finetune"] + sys.argv[1:])
"""


def test_best_placements_are_pictured_in_tensorboard(tmp_path):
  task = placement_task.PlacementTask(two_chains(), gpus())
  env = environment.PlacementEnv([task])
  config = train_config.TrainConfig(samples_per_graph=4, graphs_per_iteration=1,
                                 log_every_seconds=1e9,
                                 checkpoint_every_seconds=0)
  trainer = trainer_lib.Trainer(env, tiny_policy("feedforward"), config=config,
                              root_dir=str(tmp_path), log=lambda line: None)
  trainer.run(train_config.Budget(iterations=2))
  tags = set()
  for path in glob.glob(str(tmp_path / "train" / "events.out.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags.update(value.tag for value in event.summary.value)
  assert {"best/two_chains4_gpus/gantt", "best/two_chains4_gpus/devices"} <= tags, tags


def test_a_root_holding_another_run_is_refused(tmp_path):
  config = train_config.TrainConfig(samples_per_graph=2, graphs_per_iteration=1)
  first = environment.PlacementEnv([placement_task.PlacementTask(two_chains(),
                                                                 gpus())])
  trainer_lib.Trainer(first, tiny_policy("feedforward"), config=config,
                    root_dir=str(tmp_path), log=lambda line: None)
  other = environment.PlacementEnv([placement_task.PlacementTask(
      two_chains(length=3), gpus())])
  with pytest.raises(errors.InputError, match="holds a run over other graphs"):
    trainer_lib.Trainer(other, tiny_policy("feedforward"), config=config,
                      root_dir=str(tmp_path), log=lambda line: None)


def test_a_second_process_cannot_train_into_a_busy_root(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c",
       "import fcntl, os, sys, time\n"
       f"f = open({str(tmp_path / run_dir.LOCK_FILE)!r}, 'a+')\n"
       "fcntl.flock(f, fcntl.LOCK_EX)\n"
       "f.write(str(os.getpid())); f.flush()\n"
       "print('locked', flush=True)\n"
       "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(errors.InputError,
                       match=f"in use by another training run .pid {holder.pid}"):
      run_dir.lock_root_dir(str(tmp_path))
  finally:
    holder.kill()
    holder.wait()
  run_dir.lock_root_dir(str(tmp_path))  # free again once the holder died
  run_dir.lock_root_dir(str(tmp_path))  # and re-entrant in one process


def test_finetune_command_writes_a_placement(tmp_path):
  policy_dir = policy_io.save_policy(tiny_policy("feedforward"),
                                     str(tmp_path / "policy"))
  out = str(tmp_path / "placement.json")
  graph, devices = "cells:48:cell=12", "p100x2"
  result = subprocess.run(
      [sys.executable, "-c", _FINETUNE_SCRIPT, f"--policy={policy_dir}",
       f"--graph={graph}", f"--devices={devices}", "--budget_iterations=2",
       "--samples=4", f"--root_dir={tmp_path / 'run'}", f"--out={out}"],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True,
      text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "2 iterations" in result.stdout
  with open(out, encoding="utf-8") as f:
    document = json.load(f)
  loaded = graph_specs.parse(graph)[0].load(devices).graph
  topology = topology_lib.get(devices)
  index = {name: i for i, name in enumerate(topology.device_names)}
  placement = np.array([index[document["placement"][op]]
                        for op in loaded.node_names])
  assert simulator.constraint_problems(loaded, placement, topology) == []
  assert document["step_time_us"] == pytest.approx(
      simulator.simulate(loaded, placement, topology).step_time_us)
  assert document["command"].startswith("tf-gdp finetune")
  assert os.path.isdir(tmp_path / "run" / "policy")
  # Bad input: exit code 2 and one line.
  bad = subprocess.run(
      [sys.executable, "-c", _FINETUNE_SCRIPT, f"--policy={tmp_path}",
       f"--graph={graph}", "--zeroshot"],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True,
      text=True, timeout=300, check=False)
  assert bad.returncode == 2, bad.stderr[-2000:]
  assert "not a saved policy" in bad.stderr


def test_a_policy_stuck_on_one_placement_is_made_to_explore_again():
  task = placement_task.PlacementTask(two_chains(), gpus())
  env = environment.PlacementEnv([task])
  policy = tiny_policy("feedforward")
  config = dataclasses.replace(learn_config(), samples_per_graph=8,
                               refloor_after=2)
  lines = []
  trainer = trainer_lib.Trainer(env, policy, config=config,
                              log=lines.append)
  policy.logit_scale.assign(1e4)  # certain: every sample is the greedy one
  result = trainer.run(train_config.Budget(iterations=2))
  assert [h["distinct_samples"] for h in result.history] == [1.0, 1.0]
  assert float(policy.logit_scale.numpy()) < 1e3
  assert any("2 iterations sampled one placement only" in l for l in lines)
  with pytest.raises(errors.InputError, match="refloor_after"):
    train_config.TrainConfig(refloor_after=-1)


def test_every_other_sample_gets_a_pipeline_push():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  column = features.PIPELINE_NOISE_COLUMN
  rules = features.NUM_STAGE_RULES
  shift = features.PIPELINE_SHIFT_COLUMN
  placed = features.PLACEMENT_NOISE_COLUMN
  assert rules == 3 and shift == column + rules
  assert placed == shift + 1
  assert features.NUM_PLACEMENT_PUSHES == len(exploration.PUSH_ROWS) == 7
  assert features.EXPLORATION_SIZE == placed + 7
  noise = exploration.exploration_noise(
      [1200, 3, features.EXPLORATION_SIZE], tf.constant([1, 2]), 10.0).numpy()
  pushes = noise[..., column:shift]
  assert (noise[0::2, :, column:placed] == 0).all()
  # Rows 2, 4, ..., 14 of every 16 lean towards the cut, m-ETF's
  # placement, the side-branch offload, the fewest contiguous stages,
  # HEFT's and m-SCT's placements and one device instead, never shifted,
  # and no other row does.
  row = np.arange(1200)
  for p, push_row in enumerate((2, 4, 6, 8, 10, 12, 14)):
    leans = row % 16 == push_row
    assert (noise[~leans, :, placed + p] == 0).all()
    assert (np.delete(noise[leans], placed + p, axis=-1) == 0).all()
    assert (noise[leans, :, placed + p] >= 5.0).all()
    assert noise[leans, 0, placed + p].mean() == pytest.approx(
        10.0 * (0.5 + np.sqrt(2 / np.pi)), rel=0.2)
  # Each push draws from its own seed: they are not the same numbers.
  assert not np.allclose(noise[row % 16 == 2, 0, placed],
                         noise[row % 16 == 4, 0, placed + 1])
  assert not np.allclose(noise[row % 16 == 4, 0, placed + 1],
                         noise[row % 16 == 6, 0, placed + 2])
  assert not np.allclose(noise[row % 16 == 6, 0, placed + 2],
                         noise[row % 16 == 8, 0, placed + 3])
  assert not np.allclose(noise[row % 16 == 8, 0, placed + 3],
                         noise[row % 16 == 10, 0, placed + 4])
  assert not np.allclose(noise[row % 16 == 12, 0, placed + 5],
                         noise[row % 16 == 14, 0, placed + 6])
  # Pushed rows take the rules in turn (rows 1, 3, 5: rules 0, 1, 2), with
  # a gain of at least half the scale: 10 (0.5 + |N(0, 1)|).
  for rule in range(rules):
    rows = pushes[2 * rule + 1::2 * rules]
    assert (rows[..., rule] >= 5.0).all()
    assert (np.delete(rows, rule, axis=-1) == 0).all()
    assert rows[..., rule].mean() == pytest.approx(
        10.0 * (0.5 + np.sqrt(2 / np.pi)), rel=0.15)
  # Every other round of the rules (rows 7, 9, 11 of each 12) also shifts
  # the device centres, by uniform(-0.5, 0.5) slots.
  shifted = (row % 2 == 1) & ((row // 2) // rules % 2 == 1)
  assert (noise[~shifted, :, shift] == 0).all()
  values = noise[shifted, :, shift]
  assert (np.abs(values) <= 0.5).all() and (values != 0).all()
  assert values.std() == pytest.approx(1 / np.sqrt(12), rel=0.1)
  off = exploration.exploration_noise([4, 3, features.EXPLORATION_SIZE],
                                      tf.constant([1, 2]), 0.0)
  assert not np.any(off.numpy())


def _four_layer_chain():
  """Four numbered layers of three ops, a chain."""
  names = [f"layer_{i}/op{j}" for i in range(4) for j in range(3)]
  chain = list(range(len(names)))
  return op_graph.OpGraph.build(
      name="layers", node_names=names, op_types=["MatMul"] * len(names),
      costs={"GPU": [100.0] * len(names)}, output_bytes=[1000] * len(names),
      memory_bytes=[0] * len(names), edge_src=chain[:-1], edge_dst=chain[1:],
      edge_bytes=[1000] * (len(names) - 1))


def test_zero_shot_pushed_samples_are_their_pushed_logits_argmax(
    monkeypatch):
  # Four numbered layers of three ops on four GPUs, uniform logits: a push
  # without a shift sends layer i to GPU i. Every draw is replaced by
  # "device 0", so only the pushed samples can differ from it.
  graph = _four_layer_chain()
  names = graph.node_names
  task = placement_task.PlacementTask(graph, gpus(4))
  policy = tiny_policy("feedforward")
  exploration.policy_logits(policy, {
      k: tf.convert_to_tensor(v[None]) for k, v in features.as_tensors(
          features.policy_inputs(graph, task.topology)).items()})
  policy.logit_scale.assign(0.0)
  monkeypatch.setattr(exploration, "stateless_categorical_sample",
                      lambda logits, seed: tf.zeros(tf.shape(logits)[:-1],
                                                    tf.int32))
  shot = zero_shot.zeroshot(policy, task, samples=16, seed=0,
                            entropy_floor=0.0)
  noise = exploration.exploration_noise(
      [17, 4, features.EXPLORATION_SIZE], tf.constant([0, 1]),
      exploration.PIPELINE_EXPLORATION).numpy()
  pushed = exploration.pushed_samples(noise[1:]).numpy()
  # Rules 0, 1, 2, 0, 1, 2, ... in odd samples; the cut in sample 2, m-ETF
  # in 4, the side-branch offload in 6, the fewest stages in 8, HEFT in 10,
  # m-SCT in 12, one device in 14.
  np.testing.assert_array_equal(pushed, [True] * 15 + [False])
  greedy_and_samples = shot.valid_step_times_us
  one_device = simulator.simulate(graph, np.zeros(len(names), np.int32),
                                  task.topology).step_time_us
  assert greedy_and_samples[16] == pytest.approx(one_device)  # drawn: device 0
  # The chain fits one GPU: the fewest stages is one, and the one-device
  # push is absent (its sample is the uniform logits' argmax, device 0).
  assert len(set(contiguous_dp.fewest_stages(graph, task.topology))) == 1
  assert greedy_and_samples[8] == pytest.approx(one_device)
  assert greedy_and_samples[14] == pytest.approx(one_device)
  favourites = m_sct.place(graph, task.topology)
  assert greedy_and_samples[12] == pytest.approx(
      simulator.simulate(graph, favourites, task.topology).step_time_us)
  # A chain is all spine: the offload keeps it whole.
  offloaded = side_offload.place(graph, task.topology)
  assert len(set(offloaded.tolist())) == 1
  assert greedy_and_samples[6] == pytest.approx(
      simulator.simulate(graph, offloaded, task.topology).step_time_us)
  cut = metis.partition_devices(graph, task.topology)
  assert len(set(cut.tolist())) == 4
  assert greedy_and_samples[2] == pytest.approx(
      simulator.simulate(graph, cut.astype(np.int32),
                         task.topology).step_time_us)
  scheduled = m_etf.place(graph, task.topology)
  assert greedy_and_samples[4] == pytest.approx(
      simulator.simulate(graph, scheduled, task.topology).step_time_us)
  earliest_finish = heft.place(graph, task.topology)
  assert greedy_and_samples[10] == pytest.approx(
      simulator.simulate(graph, earliest_finish, task.topology).step_time_us)
  staged = simulator.simulate(graph, np.repeat(np.arange(4), 3),
                              task.topology).step_time_us
  assert staged != one_device
  assert greedy_and_samples[1] == pytest.approx(staged)  # rule 0, no shift


def test_zero_shot_unshifted_pushes_outweigh_a_confident_policy():
  # Logits scaled far beyond any push gain, and no entropy floor to shrink
  # them: the unshifted pipeline push is still the rule's pipeline (layer i
  # on GPU i), and the METIS push still the cut, while an unpushed sample
  # is the policy's own.
  graph = _four_layer_chain()
  task = placement_task.PlacementTask(graph, gpus(4))
  policy = tiny_policy("feedforward")
  observation = {k: tf.convert_to_tensor(v[None]) for k, v in
                 features.as_tensors(features.policy_inputs(
                     graph, task.topology)).items()}
  exploration.policy_logits(policy, observation)
  policy.logit_scale.assign(1e4)
  logits = exploration.policy_logits(policy, observation).numpy()[0]
  spread = logits.max(-1) - logits.min(-1)
  assert np.median(spread) > 10 * exploration.PIPELINE_EXPLORATION
  shot = zero_shot.zeroshot(policy, task, samples=10, seed=0,
                            entropy_floor=0.0)
  judge = lambda p: simulator.simulate(
      graph, np.asarray(p, np.int32), task.topology).step_time_us
  staged = judge(np.repeat(np.arange(4), 3))
  assert shot.valid_step_times_us[1] == pytest.approx(staged)
  cut = metis.partition_devices(graph, task.topology)
  assert shot.valid_step_times_us[2] == pytest.approx(judge(cut))


def test_zero_shot_placement_pushes_reach_a_lone_gpu_beside_the_host():
  # One GPU and the host CPU, a confident policy that sends some layers to
  # the slow CPU: the placement pushes (m-ETF, the offload, the fewest
  # stages, HEFT) all give the whole chain to the GPU, and their samples
  # must be that placement, though the GPU is the only one of its kind.
  names = [f"layer_{i}/op{j}" for i in range(4) for j in range(3)]
  chain = list(range(len(names)))
  graph = op_graph.OpGraph.build(
      name="layers", node_names=names, op_types=["MatMul"] * len(names),
      costs={"GPU": [100.0] * len(names), "CPU": [1000.0] * len(names)},
      output_bytes=[1000] * len(names), memory_bytes=[0] * len(names),
      edge_src=chain[:-1], edge_dst=chain[1:],
      edge_bytes=[1000] * (len(names) - 1))
  topology = topology_lib.custom("gpu_and_host", [
      topology_lib.Device("/job:localhost/replica:0/task:0/device:GPU:0",
                          "GPU", GIB),
      topology_lib.Device("/job:localhost/replica:0/task:0/device:CPU:0",
                          "CPU", GIB)], np.full((2, 2), 10.0),
                                  np.full((2, 2), 5.0))
  task = placement_task.PlacementTask(graph, topology)
  policy = tiny_policy("feedforward", seed=3)
  observation = {k: tf.convert_to_tensor(v[None]) for k, v in
                 features.as_tensors(features.policy_inputs(
                     graph, topology)).items()}
  exploration.policy_logits(policy, observation)
  policy.logit_scale.assign(1e4)
  shot = zero_shot.zeroshot(policy, task, samples=10, seed=0,
                            entropy_floor=0.0)
  judge = lambda p: simulator.simulate(
      graph, np.asarray(p, np.int32), topology).step_time_us
  on_gpu = judge(np.zeros(len(names)))
  assert shot.greedy_step_time_us > on_gpu  # the policy uses the CPU
  for name, row in zip(("m_etf", "side_offload", "contiguous_split", "heft"),
                       (4, 6, 8, 10)):
    assert shot.valid_step_times_us[row] == pytest.approx(on_gpu), name
  assert shot.step_time_us == pytest.approx(on_gpu)


def test_pipeline_pushes_stop_when_they_do_not_pay_off():
  task = placement_task.PlacementTask(two_chains(), gpus())
  env = environment.PlacementEnv([task])
  config = dataclasses.replace(learn_config(), samples_per_graph=4,
                               pipeline_patience=3)
  lines = []
  trainer = trainer_lib.Trainer(env, tiny_policy("feedforward"), config=config,
                              log=lines.append)
  won = iter([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
  real = trainer.run_iteration
  scales, raw = [], []

  def iteration():
    raw.append(real())
    scales.append(float(trainer.pipeline_scale.numpy()))
    return dict(raw[-1], pipeline_won=next(won))

  trainer.run_iteration = iteration
  trainer.run(train_config.Budget(iterations=7))
  # A win resets the count; three iterations without one switch them off.
  assert scales == [48.0] * 6 + [0.0]
  assert sum("pipeline exploration off" in l for l in lines) == 1
  # The two chains have no stages: pushed samples are drawn like the others,
  # so they win some iterations and not others, by chance.
  assert {r["pipeline_won"] for r in raw} <= {0.0, 1.0}
  with pytest.raises(errors.InputError, match="pipeline_patience"):
    train_config.TrainConfig(pipeline_patience=-1)


def test_self_imitation_trains_on_the_best_placement_so_far():
  """The extra row is the best placement, drawn as the noise-free policy
  would (ratio 1), with advantage max(0, its reward - the unpushed mean)."""
  env = environment.PlacementEnv([placement_task.PlacementTask(two_chains(),
                                                               gpus())])
  config = dataclasses.replace(learn_config(), samples_per_graph=4)
  trainer = trainer_lib.Trainer(env, tiny_policy("feedforward"), config=config,
                              log=lambda line: None)
  assert trainer._imitates
  trainer.run_iteration()
  best = env.best(0)
  stacked = {k: v[None] for k, v in env.observation(0).items()}
  _, _, greedy, values, _, noise, base = trainer._sample_fn(
      stacked, tf.constant([5, 6], tf.int32), 4)
  best_reward = float(np.log(env.reference(0).step_time_us /
                             best.step_time_us))
  pushed = np.array([[False, True, False, True]])
  # Unpushed rows average best - 1; pushed ones are better, and ignored.
  rewards = np.array([[best_reward - 1.5, best_reward + 2.0,
                       best_reward - 0.5, best_reward + 2.0]], np.float32)
  rows = trainer._imitation_experience(
      stacked, np.array([0]), base.numpy(), greedy.numpy(), values.numpy(),
      rewards, pushed, noise.numpy())
  action = rows.action.numpy()[0, 0]
  np.testing.assert_array_equal(action[:len(best.group_devices)],
                                best.group_devices)
  advantage = float(rows.policy_info["advantage"].numpy()[0, 0])
  assert advantage == pytest.approx(1.0 / rewards.std(), rel=1e-4)
  assert float(rows.policy_info["return"].numpy()[0, 0]) == pytest.approx(
      best_reward, rel=1e-4)
  np.testing.assert_array_equal(rows.observation["exploration_noise"].numpy(),
                                0.0)
  replay = trainer.actor_net.logits(rows.observation).numpy()
  np.testing.assert_allclose(
      replay, rows.policy_info["dist_params"]["logits"].numpy(),
      rtol=1e-5, atol=1e-4)
  # A best no better than the policy's own samples is not pushed for.
  rows = trainer._imitation_experience(
      stacked, np.array([0]), base.numpy(), greedy.numpy(), values.numpy(),
      rewards + 3.0, pushed, noise.numpy())
  assert float(rows.policy_info["advantage"].numpy()[0, 0]) == 0.0


def test_self_imitation_is_for_single_graph_runs_only():
  tasks = [placement_task.PlacementTask(two_chains(), gpus(), name=name)
           for name in ("a", "b")]
  config = learn_config()
  trainer = trainer_lib.Trainer(environment.PlacementEnv(tasks),
                              tiny_policy("feedforward"), config=config,
                              log=lambda line: None)
  assert not trainer._imitates
  off = trainer_lib.Trainer(
      environment.PlacementEnv(tasks[:1]), tiny_policy("feedforward"),
      config=dataclasses.replace(config, self_imitation=0.0),
      log=lambda line: None)
  assert not off._imitates
  with pytest.raises(errors.InputError, match="self_imitation"):
    train_config.TrainConfig(self_imitation=-1.0)


def test_patience_stops_a_run_whose_best_stops_improving():
  """Two chains on two GPUs have few placements: the best is found early, and
  a patient budget stops long before its iteration limit; without patience
  the same run uses every iteration."""
  def run(patience):
    task = placement_task.PlacementTask(two_chains(), gpus())
    env = environment.PlacementEnv([task])
    config = train_config.TrainConfig(
        samples_per_graph=4, graphs_per_iteration=1, log_every_seconds=1e9,
        checkpoint_every_seconds=1e9, evaluate_greedy=False)
    lines = []
    trainer = trainer_lib.Trainer(env, tiny_policy("feedforward"),
                                  config=config, log=lines.append)
    return trainer.run(train_config.Budget(iterations=30,
                                           patience=patience)), lines

  patient, lines = run(patience=8)
  assert patient.iterations < 30
  assert any("did not improve in 8 evaluations" in line for line in lines)
  # It stopped at the first iteration 8 evaluations past the last gain.
  best, gained = float("inf"), None
  for stats in patient.history:
    if stats["best_ratio"] < best * (1 - train_config.PATIENCE_GAIN):
      best, gained = stats["best_ratio"], stats["evaluations"]
  assert patient.history[-1]["evaluations"] - gained >= 8
  assert patient.history[-2]["evaluations"] - gained < 8
  assert run(patience=None)[0].iterations == 30


def test_a_budget_in_evaluations_stops_when_nothing_new_is_drawn():
  """Two chains on two GPUs have 256 group placements; a budget far above
  that cannot be spent on distinct ones, and the run stops instead of
  spinning on placements it priced before."""
  task = placement_task.PlacementTask(two_chains(), gpus())
  env = environment.PlacementEnv([task])
  config = train_config.TrainConfig(
      samples_per_graph=8, graphs_per_iteration=1, log_every_seconds=1e9,
      checkpoint_every_seconds=1e9, evaluate_greedy=False)
  lines = []
  trainer = trainer_lib.Trainer(env, tiny_policy("feedforward"),
                                config=config, log=lines.append)
  result = trainer.run(train_config.Budget(evaluations=100_000))
  assert result.evaluations <= 256
  assert any("drew no new placement" in line for line in lines)
  spent = [stats["evaluations"] for stats in result.history]
  assert spent[-trainer_lib.IDLE_ITERATIONS:] == (
      [spent[-1]] * trainer_lib.IDLE_ITERATIONS)


def test_a_budget_refuses_patience_below_one_evaluation():
  with pytest.raises(errors.InputError, match="patience"):
    train_config.Budget(iterations=3, patience=0)
