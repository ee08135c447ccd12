"""Fine-tuning anchored on the zero-shot placement (`rl.anchor`)."""

import numpy as np
import pytest

# tf_gdp.rl first: it imports tf-agents and repairs tf.keras after it.
from tf_gdp.rl import environment  # pylint: disable=g-bad-import-order
from tf_gdp import graph_specs
from tf_gdp.policy import features
from tf_gdp.rl import anchor
from tf_gdp.rl import exploration
from tf_gdp.rl import policy_io
from tf_gdp.rl import tasks as tasks_lib
from tf_gdp.rl import train_config
from tf_gdp.rl import workflows

TINY_POLICY = {"hidden_size": 16, "op_embedding_size": 4, "gnn_rounds": 1,
               "placer_layers": 1, "num_heads": 2, "ffn_size": 32,
               "segment_length": 8, "memory_length": 8, "seed": 5}


@pytest.fixture(scope="module")
def task():
  return tasks_lib.placement_tasks(graph_specs.parse("cells:40"),
                                   ["p100x4"])[0]


def _anchor_placement(task):
  """A valid placement the untrained policy would not choose: one device
  per quarter of the op order."""
  placement = (np.arange(task.graph.num_nodes) * 4 //
               task.graph.num_nodes).astype(np.int32)
  env = environment.PlacementEnv([task])
  try:
    groups = features.node_to_group_placement(env.inputs(0), placement)
    placement = features.group_to_node_placement(env.inputs(0), groups)
  finally:
    env.close()
  return placement.astype(np.int32)


def _greedy_groups(policy, env):
  observation = env.observation(0)
  logits = exploration.policy_logits(
      policy, {k: v[None] for k, v in observation.items()}).numpy()
  groups = env.inputs(0).num_groups
  return logits[:groups].argmax(-1)


def test_the_fit_makes_the_anchor_the_greedy_placement(task):
  placement = _anchor_placement(task)
  env = environment.PlacementEnv([task])
  try:
    wanted = features.node_to_group_placement(env.inputs(0), placement)
    policy = policy_io.build_policy(TINY_POLICY)
    before = np.mean(_greedy_groups(policy, env) == wanted)
    stats = anchor.fit(policy, env, placement, 1000.0, epochs=60)
    after = np.mean(_greedy_groups(policy, env) == wanted)
  finally:
    env.close()
  assert before < 0.6
  assert after >= 0.95 and stats["accuracy"] >= 0.95
  assert stats["steps"] == 60


def test_a_fit_in_seconds_stops_at_a_chunk_boundary(task, monkeypatch):
  # A clock on which every reading is ten seconds after the last.
  ticks = iter(range(0, 10**6, 10))
  monkeypatch.setattr(anchor.time, "perf_counter", lambda: next(ticks))
  env = environment.PlacementEnv([task])
  try:
    stats = anchor.fit(policy_io.build_policy(TINY_POLICY), env,
                       _anchor_placement(task), 1000.0, epochs=400,
                       seconds=anchor.MIN_SECONDS)
    assert stats["steps"] == anchor._CHUNK  # pylint: disable=protected-access
    # A budget too small to trace the fit's step is left to PPO.
    assert anchor.fit(policy_io.build_policy(TINY_POLICY), env,
                      _anchor_placement(task), 1000.0,
                      seconds=anchor.MIN_SECONDS / 2)["steps"] == 0
  finally:
    env.close()


def test_finetuning_anchors_once_and_counts_the_fit_as_time(task, tmp_path):
  saved = str(tmp_path / "policy")
  policy_io.save_policy(policy_io.build_policy(TINY_POLICY), saved)
  placement = _anchor_placement(task)
  config = train_config.TrainConfig(graphs_per_iteration=1,
                                    samples_per_graph=4, seed=0,
                                    checkpoint_every_iterations=1)
  root = str(tmp_path / "run")
  lines = []
  first = workflows.finetune(
      saved, task, budget=train_config.Budget(iterations=1), config=config,
      root_dir=root, log=lines.append, anchor=(placement, 1000.0),
      anchor_epochs=5)
  assert sum("anchored on the zero-shot placement" in l for l in lines) == 1
  assert first.seconds > 0
  # A resumed run goes on from its checkpoint: fitting again would undo it.
  lines.clear()
  workflows.finetune(
      saved, task, budget=train_config.Budget(iterations=2), config=config,
      root_dir=root, log=lines.append, anchor=(placement, 1000.0),
      anchor_epochs=5)
  assert not any("anchored" in l for l in lines), lines
  # No steps: no fit.
  lines.clear()
  workflows.finetune(saved, task, budget=train_config.Budget(iterations=1),
                     config=config, log=lines.append,
                     anchor=(placement, 1000.0), anchor_epochs=0)
  assert not any("anchored" in l for l in lines), lines
