"""Imitation of search: targets, their cache, the supervised phase, pretrain."""

import glob
import json
import math
import os
import subprocess
import sys
import types

import numpy as np
import pytest

# tf_gdp.rl first: it imports tf-agents and repairs tf.keras after it.
from tf_gdp.rl import environment  # pylint: disable=g-bad-import-order
from tf_gdp.rl import actor_network
from tf_gdp import baselines
from tf_gdp import graph_specs
from tf_gdp.cost import simulator
from tf_gdp.policy import features
from tf_gdp.rl import imitation
from tf_gdp.rl import policy_io
from tf_gdp.rl import run_dir
from tf_gdp.rl import search_targets
from tf_gdp.rl import shipped
from tf_gdp.rl import tasks as tasks_lib
from tf_gdp.rl import train_config
from tf_gdp.rl import workflows
from tf_gdp.rl import zero_shot

TINY_POLICY = {"hidden_size": 16, "op_embedding_size": 4, "gnn_rounds": 1,
               "placer_layers": 1, "num_heads": 2, "ffn_size": 32,
               "segment_length": 8, "memory_length": 8}
GRAPHS = "layered:30,cells:40"
DEVICES = "p100x2"
EVALUATIONS = 200  # the targets' local search: small, the graphs are too


@pytest.fixture(scope="module")
def tasks():
  return tasks_lib.placement_tasks(graph_specs.parse(GRAPHS), [DEVICES])


@pytest.fixture(scope="module")
def cached(tasks, tmp_path_factory):
  """(cache dir, targets) searched once for the module."""
  cache = str(tmp_path_factory.mktemp("targets"))
  return cache, search_targets.targets(tasks, cache, evaluations=EVALUATIONS)


def test_targets_are_valid_and_no_worse_than_one_device(tasks, cached):
  _, found = cached
  for task, target in zip(tasks, found):
    assert target.task == task.name and target.method is not None
    judged = simulator.simulate(task.graph, target.placement, task.topology)
    assert judged.valid
    assert not simulator.constraint_problems(task.graph, target.placement,
                                             task.topology)
    assert judged.step_time_us == pytest.approx(target.step_time_us)
    single = baselines.run("single_device", task.graph, task.topology)
    assert target.step_time_us <= single.info["simulated_step_time_us"]
    # The winner is the fastest valid candidate; the local search ran.
    valid_times = [c["step_time_us"] for c in target.candidates.values()
                   if c["valid"]]
    assert target.step_time_us == min(valid_times)
    assert target.candidates["local_search"]["evaluations"] == EVALUATIONS
    assert target.evaluations >= EVALUATIONS
    # Generated graphs have no expert rules: skipped, and said so.
    assert "human_expert" in target.skipped
    inputs = features.policy_inputs(task.graph, task.topology)
    np.testing.assert_array_equal(
        features.group_to_node_placement(inputs, target.group_devices),
        target.placement)


def test_cached_targets_are_reused(tasks, cached, monkeypatch):
  cache, found = cached
  assert len(glob.glob(os.path.join(cache, "*.json"))) == len(tasks)
  calls = []
  monkeypatch.setattr(
      search_targets, "search_target",
      lambda *a, **k: calls.append(a) or pytest.fail("searched"))
  again = search_targets.targets(tasks, cache, evaluations=EVALUATIONS)
  assert not calls
  for old, new in zip(found, again):
    assert (old.method, old.step_time_us) == (new.method, new.step_time_us)
    np.testing.assert_array_equal(old.placement, new.placement)
  # Another budget is another target.
  other = search_targets.cache_path(cache, tasks[0], EVALUATIONS + 1)
  assert other != search_targets.cache_path(cache, tasks[0], EVALUATIONS)


def _cut_bytes(graph, placement):
  cut = placement[graph.edge_src] != placement[graph.edge_dst]
  return graph.edge_bytes[cut].sum()


def test_a_tolerance_trades_a_little_speed_for_the_fewest_cut_bytes(
    tasks, cached, tmp_path):
  _, fastest = cached
  tolerance = 0.5
  found = search_targets.targets(tasks, str(tmp_path), evaluations=EVALUATIONS,
                                 tolerance=tolerance)
  for task, target, best in zip(tasks, found, fastest):
    assert target.fastest_us == pytest.approx(best.step_time_us)
    assert target.step_time_us <= (1 + tolerance) * best.step_time_us
    assert _cut_bytes(task.graph, target.placement) <= _cut_bytes(
        task.graph, best.placement)
    # No candidate within the tolerance cuts fewer bytes.
    near = [name for name, c in target.candidates.items() if c["valid"] and
            c["step_time_us"] <= (1 + tolerance) * best.step_time_us]
    assert target.method in near
    if "single_device" in near:  # nothing cuts fewer bytes than one device
      assert _cut_bytes(task.graph, target.placement) == 0
  assert any(t.method != b.method for t, b in zip(found, fastest))
  # Cached under its own name, and read back as it was.
  path = search_targets.cache_path(str(tmp_path), tasks[0], EVALUATIONS,
                                   tolerance)
  assert os.path.isfile(path) and path != search_targets.cache_path(
      str(tmp_path), tasks[0], EVALUATIONS)
  again, problem = search_targets.read_target(path, tasks[0], EVALUATIONS, 0,
                                              tolerance)
  assert problem is None and again.method == found[0].method
  assert again.fastest_us == pytest.approx(found[0].fastest_us)
  _, problem = search_targets.read_target(path, tasks[0], EVALUATIONS, 0)
  assert "tolerance" in problem


def _rewrite(path, edit):
  with open(path, encoding="utf-8") as f:
    doc = json.load(f)
  edit(doc)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "time", "device",
                                    "graph"])
def test_a_damaged_cache_file_is_searched_again(tasks, cached, tmp_path,
                                                damage):
  source, found = cached
  cache = str(tmp_path)
  task = tasks[0]
  path = search_targets.cache_path(cache, task, EVALUATIONS)
  with open(search_targets.cache_path(source, task, EVALUATIONS),
            encoding="utf-8") as f:
    text = f.read()
  with open(path, "w", encoding="utf-8") as f:
    f.write({"garbage": "{not json", "truncated": text[:len(text) // 2]}.get(
        damage, text))
  if damage == "time":
    _rewrite(path, lambda d: d.update(step_time_us=d["step_time_us"] / 2))
  elif damage == "device":
    _rewrite(path, lambda d: d["placement"].__setitem__(0, 7))
  elif damage == "graph":
    _rewrite(path, lambda d: d.update(fingerprint="0" * 64))
  lines = []
  (again,) = search_targets.targets([task], cache, evaluations=EVALUATIONS,
                                    log=lines.append)
  assert any("searching again" in line for line in lines), lines
  assert again.step_time_us == found[0].step_time_us
  np.testing.assert_array_equal(again.placement, found[0].placement)
  # The file was rewritten whole.
  assert search_targets.read_target(path, task, EVALUATIONS, 0)[0] is not None


def _fresh(tasks):
  return (environment.PlacementEnv(tasks),
          policy_io.build_policy(dict(TINY_POLICY, seed=3)))


def test_cutting_a_batch_to_its_sizes_keeps_the_logits():
  # Two graphs on two topologies: the environment pads to the larger graph
  # and topology; the smaller task alone is cut to its own sizes.
  both = (tasks_lib.placement_tasks(graph_specs.parse("layered:30"), [DEVICES])
          + tasks_lib.placement_tasks(graph_specs.parse("cells:40"),
                                      ["p100x4"]))
  env = environment.PlacementEnv(both)
  try:
    policy = policy_io.build_policy(TINY_POLICY)
    for batch in ([0], [1], [0, 1]):
      stacked = {k: np.stack([env.observation(i)[k] for i in batch])
                 for k in env.observation(0)}
      cut = features.trim_batch(stacked)
      full = actor_network.shared_logits(policy, stacked).numpy()
      small = actor_network.shared_logits(policy, cut).numpy()
      assert small.shape[1:] == cut["allowed"].shape[1:]
      for row, i in enumerate(batch):
        groups, devices = (env.inputs(i).num_groups,
                           both[i].topology.num_devices)
        np.testing.assert_allclose(small[row, :groups, :devices],
                                   full[row, :groups, :devices],
                                   rtol=1e-4, atol=1e-4)
    assert features.trim_batch(stacked)["node_mask"].shape == (2, 40)
    alone = features.trim_batch({k: v[:1] for k, v in stacked.items()})
    devices = both[0].topology.num_devices
    assert devices < env.padding["max_devices"]
    assert alone["allowed"].shape == (1, env.inputs(0).num_groups, devices)
    assert alone["node_mask"].shape == (1, 30)
  finally:
    env.close()


def test_imitation_learns_the_targets(tasks, cached):
  _, found = cached
  env, policy = _fresh(tasks)
  config = imitation.ImitationConfig(epochs=40, learning_rate=1e-2)
  stats = imitation.imitate(policy, env, found, config=config)
  history = stats["history"]
  assert len(history) == 40 and stats["tasks"] == len(tasks)
  assert history[-1]["loss"] < 0.5 * history[0]["loss"]
  # Two devices: a uniform guess is right half the time.
  assert stats["accuracy"] >= 0.9
  assert stats["loss"] < history[0]["loss"]
  for task, target in zip(tasks, found):
    greedy = stats["greedy"][task.name]
    assert greedy["valid"] and greedy["target_us"] == target.step_time_us
  assert stats["greedy_ratio"] <= 1.05


def test_matched_labels_learn_the_targets_up_to_a_renaming(tasks, cached):
  _, found = cached
  env, policy = _fresh(tasks)
  config = imitation.ImitationConfig(epochs=40, learning_rate=1e-2,
                                     matched_labels=True)
  stats = imitation.imitate(policy, env, found, config=config)
  assert stats["accuracy"] >= 0.9
  # The greedy placement of a renamed target simulates as the target.
  assert stats["greedy_ratio"] <= 1.05


def test_imitation_is_deterministic_for_a_seed(tasks, cached):
  _, found = cached
  config = imitation.ImitationConfig(epochs=3, learning_rate=1e-2, seed=5,
                                     graphs_per_step=1, greedy_check=False)
  assert config.graphs_per_step < len(tasks)  # the seeded order matters
  runs = []
  for _ in range(2):
    env, policy = _fresh(tasks)
    runs.append(imitation.imitate(policy, env, found, config=config))
  for a, b in zip(runs[0]["history"], runs[1]["history"]):
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert a["accuracy"] == b["accuracy"]


def test_restarting_adam_is_fitting_in_separate_runs(tasks, cached):
  # One traced fit whose Adam restarts every 2 epochs moves the weights as
  # two 2-epoch fits in a row do, each with a fresh optimizer; without the
  # restarts Adam's moments carry over and the weights differ.
  _, found = cached
  one = dict(learning_rate=3e-2, graphs_per_step=len(tasks),
             greedy_check=False)
  weights = {}
  for name, configs in (
      ("restarts", [dict(epochs=4, restart_every=2)]),
      ("runs", [dict(epochs=2), dict(epochs=2)]),
      ("one_adam", [dict(epochs=4)])):
    env, policy = _fresh(tasks)
    try:
      for config in configs:
        imitation.imitate(policy, env, found,
                          config=imitation.ImitationConfig(**one, **config))
    finally:
      env.close()
    weights[name] = [v.numpy() for v in policy.trainable_variables]
  def gap(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))
  assert gap(weights["restarts"], weights["runs"]) < 1e-5
  assert gap(weights["restarts"], weights["one_adam"]) > 1e-3


def test_a_stop_is_asked_where_adam_restarts(tasks, cached):
  _, found = cached
  env, policy = _fresh(tasks)
  asked = []
  try:
    stats = imitation.imitate(
        policy, env, found, config=imitation.ImitationConfig(
            epochs=9, restart_every=3, greedy_check=False),
        stop=lambda: asked.append(len(asked)) or len(asked) == 2)
  finally:
    env.close()
  assert stats["epochs"] == 6 and len(stats["history"]) == 6
  assert asked == [0, 1]


def test_keep_best_prefers_fewer_invalid_placements_to_a_lower_mean():
  # The geometric mean leaves invalid placements out, so it cannot decide
  # alone: an epoch that makes a held-out graph unplaceable never wins.
  key = imitation._validation_key  # pylint: disable=protected-access
  all_valid = key({"invalid": 0, "greedy_ratio": 3.0})
  one_invalid = key({"invalid": 1, "greedy_ratio": 1.1})
  none_valid = key({"invalid": 2, "greedy_ratio": math.nan})
  assert all_valid < one_invalid < none_valid


def test_held_out_tasks_are_judged_and_the_best_epoch_is_kept(tasks, cached):
  _, found = cached
  env, policy = _fresh(tasks[:1])
  held_out = environment.PlacementEnv(tasks[1:])
  config = imitation.ImitationConfig(epochs=6, learning_rate=3e-2,
                                     validate_every=2, keep_best=True)
  stats = imitation.imitate(policy, env, found[:1], config=config,
                            validation=(held_out, found[1:]))
  assert stats["tasks"] == 1 and set(stats["greedy"]) == {tasks[0].name}
  judged = {row["epoch"]: row["validation_ratio"] for row in stats["history"]
            if "validation_ratio" in row}
  assert sorted(judged) == [2, 4, 6]
  assert all(row["validation_invalid"] == 0 for row in stats["history"]
             if "validation_ratio" in row)
  judged[0] = stats["validation_start"]
  assert all(ratio >= 1.0 - 1e-9 for ratio in judged.values())
  best = min(judged, key=lambda epoch: (judged[epoch], epoch))
  assert stats["best_epoch"] == best
  # The policy ends with that epoch's weights: it places the held-out
  # graph as it did then.
  assert stats["validation"]["greedy_ratio"] == pytest.approx(judged[best])
  assert set(stats["validation"]["tasks"]) == {tasks[1].name}
  again = imitation.imitate(
      policy, env, found[:1], validation=(held_out, found[1:]),
      config=imitation.ImitationConfig(epochs=0))
  assert again["validation"]["greedy_ratio"] == pytest.approx(judged[best])


def test_tasks_without_a_target_are_left_out(tasks, cached):
  _, found = cached
  missing = search_targets.Target(
      task=tasks[1].name, method=None, step_time_us=float("nan"),
      evaluations=0, group_devices=None, placement=None, candidates={},
      skipped={}, reason="no valid placement")
  env, policy = _fresh(tasks)
  stats = imitation.imitate(policy, env, [found[0], missing],
                            config=imitation.ImitationConfig(epochs=1))
  assert stats["tasks"] == 1 and stats["without_target"] == [tasks[1].name]
  assert list(stats["greedy"]) == [tasks[0].name]


def _pretrain(tasks, root, iterations, epochs, lines):
  return workflows.pretrain(
      tasks, budget=train_config.Budget(iterations=iterations),
      root_dir=root, policy_config=dict(TINY_POLICY, placer="feedforward"),
      config=train_config.TrainConfig(samples_per_graph=4,
                                      log_every_seconds=1e9,
                                      checkpoint_every_seconds=1e9),
      imitation=imitation.ImitationConfig(epochs=epochs,
                                          evaluations=EVALUATIONS),
      log=lines.append)


def test_pretrain_imitates_first_and_resumes_without_imitating(
    tasks, tmp_path, monkeypatch):
  root = str(tmp_path / "run")
  lines = []
  first = _pretrain(tasks, root, 1, 5, lines)
  assert first.iterations == 1
  assert first.imitation["epochs"] == 5 and len(first.imitation["history"]) == 5
  assert set(first.imitation["targets"]) == {t.name for t in tasks}
  assert any(line.startswith("imitation epoch 5/5") for line in lines)
  with open(run_dir.imitation_path(root), encoding="utf-8") as f:
    marker = json.load(f)
  assert marker["loss"] == pytest.approx(first.imitation["loss"])
  assert len(os.listdir(run_dir.targets_dir(root))) == len(tasks)
  # Resumed: neither the targets nor the fit run again; the stats are kept.
  monkeypatch.setattr(imitation, "imitate",
                      lambda *a, **k: pytest.fail("imitated again"))
  monkeypatch.setattr(search_targets, "targets",
                      lambda *a, **k: pytest.fail("searched again"))
  second = _pretrain(tasks, root, 2, 5, [])
  assert second.iterations == 2
  assert second.imitation["loss"] == pytest.approx(first.imitation["loss"])


def test_zero_ppo_iterations_ship_the_imitated_policy(tasks, tmp_path):
  root = str(tmp_path / "run")
  result = _pretrain(tasks, root, 0, 5, [])
  assert result.iterations == 0 and result.imitation["epochs"] == 5
  # The exported policy is the imitated one: its greedy placements are the
  # ones the imitation phase judged.
  policy = policy_io.load_policy(os.path.join(root, "policy"))
  for task in tasks:
    shot = zero_shot.zeroshot(policy, task, samples=1)
    assert shot.greedy_step_time_us == pytest.approx(
        result.imitation["greedy"][task.name]["step_time_us"])
  # Shipped, its provenance says how it was imitated.
  out = str(tmp_path / "shipped")
  provenance = shipped.ship(root, out, command="pretrain ...", held_out=[])
  assert provenance["iterations"] == 0
  assert provenance["imitation"]["epochs"] == 5
  assert provenance["imitation"]["accuracy"] == pytest.approx(
      result.imitation["accuracy"])
  assert set(provenance["imitation"]["targets"]) == {t.name for t in tasks}
  policy_io.load_policy(os.path.join(out, "policy"))


def test_pretrain_can_continue_a_saved_policy(tasks, tmp_path):
  start = str(tmp_path / "start")
  _pretrain(tasks, start, 1, 0, [])
  saved = os.path.join(start, "policy")
  before = {t.name: zero_shot.zeroshot(saved, t, samples=1).greedy_step_time_us
            for t in tasks}
  root = str(tmp_path / "continued")
  # Zero iterations: the exported policy is the one it started from, whose
  # architecture wins over the (different) policy_config asked for.
  workflows.pretrain(
      tasks, budget=train_config.Budget(iterations=0), root_dir=root,
      policy_config=dict(TINY_POLICY, placer="transformer_xl"),
      init_policy=saved)
  with open(os.path.join(root, policy_io.POLICY_CONFIG_FILE),
            encoding="utf-8") as f:
    assert json.load(f)["placer"] == "feedforward"
  exported = policy_io.load_policy(os.path.join(root, "policy"))
  for task in tasks:
    assert zero_shot.zeroshot(exported, task, samples=1).greedy_step_time_us \
        == pytest.approx(before[task.name])
  original = policy_io.load_policy(saved)
  zero_shot.zeroshot(original, tasks[0], samples=1)  # builds (restores) it
  assert len(exported.weights) == len(original.weights) > 0
  assert all(np.array_equal(a.numpy(), b.numpy())
             for a, b in zip(exported.weights, original.weights))


def test_a_run_with_a_ppo_checkpoint_does_not_imitate(tasks, tmp_path,
                                                      monkeypatch):
  # The phase reads only the trainer's root, checkpoint manager, env, policy.
  trainer = types.SimpleNamespace(
      root_dir=str(tmp_path), env=None, policy=None,
      manager=types.SimpleNamespace(latest_checkpoint="ckpt-3"))
  monkeypatch.setattr(search_targets, "targets",
                      lambda *a, **k: pytest.fail("searched"))
  lines = []
  assert imitation.pretrain_phase(
      trainer, imitation.ImitationConfig(epochs=5), log=lines.append) is None
  assert any("no imitation phase" in line for line in lines), lines
  assert not os.path.exists(run_dir.imitation_path(str(tmp_path)))
  # Off: nothing is searched or written.
  assert imitation.pretrain_phase(trainer, imitation.ImitationConfig()) is None
  # An earlier session's statistics are the run's, whatever the flags now.
  with open(run_dir.imitation_path(str(tmp_path)), "w", encoding="utf-8") as f:
    json.dump({"epochs": 7}, f)
  for epochs in (0, 5):
    assert imitation.pretrain_phase(
        trainer, imitation.ImitationConfig(epochs=epochs)) == {"epochs": 7}


def test_pretrain_command_imitation_flags(tmp_path):
  root = str(tmp_path / "run")
  args = [sys.executable, "-m", "tf_gdp", "pretrain", "--graphs=layered:30",
          f"--devices={DEVICES}", f"--root_dir={root}",
          "--budget_iterations=1", "--samples=4", "--placer=feedforward",
          "--imitation_epochs=2", f"--imitation_evaluations={EVALUATIONS}",
          "--imitation_learning_rate=0.003", "--learning_rate=0.0001",
          "--imitation_validation_graphs=cells:40",
          "--imitation_validate_every=1", "--imitation_keep_best",
          "--policy_config=" + json.dumps(TINY_POLICY)]
  done = subprocess.run(args, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                        text=True, capture_output=True, timeout=300,
                        check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert "imitation epoch 2/2" in done.stderr
  assert "validation greedy / target" in done.stderr
  assert done.stdout.startswith("imitation: 2 epochs over 1 tasks, loss ")
  targets = os.listdir(run_dir.targets_dir(root))  # trained and held out
  assert len(targets) == 2
  assert all(t.endswith(f"-{EVALUATIONS}.json") for t in targets)
  with open(run_dir.imitation_path(root), encoding="utf-8") as f:
    stats = json.load(f)
  assert stats["learning_rate"] == 0.003 and stats["best_epoch"] in (0, 1, 2)
  assert stats["tasks"] == 1 and len(stats["validation"]["tasks"]) == 1


@pytest.mark.parametrize("flag, message", [
    ("--imitation_keep_best",
     "--imitation_keep_best needs --imitation_validation_graphs"),
    ("--imitation_validation_graphs=corpus:nope",
     "--imitation_validation_graphs: 'corpus:nope': use corpus:train"),
    ("--init_policy=/no/such/policy", "no policy at /no/such/policy")])
def test_pretrain_refuses_bad_validation_flags_before_loading(tmp_path, flag,
                                                             message):
  root = str(tmp_path / "run")
  done = subprocess.run(
      [sys.executable, "-m", "tf_gdp", "pretrain", "--graphs=layered:30",
       f"--devices={DEVICES}", f"--root_dir={root}", "--imitation_epochs=1",
       "--budget_iterations=0", flag],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), text=True,
      capture_output=True, timeout=300, check=False)
  assert done.returncode != 0
  assert message in done.stderr
  assert "loading" not in done.stderr and not os.path.exists(root)
