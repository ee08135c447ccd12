"""The three ways to use a policy: pretrain, finetune, zeroshot.

    result = workflows.pretrain(graphs, [topology],
                                budget=train_config.Budget(seconds=600),
                                root_dir=d)
    result = workflows.finetune(d + "/policy", graph, topology,
                                budget=train_config.Budget(evaluations=2000))
    shot = workflows.zeroshot(d + "/policy", graph, topology, samples=16)

`pretrain` and `finetune` run a `trainer.Trainer` (`pretrain` optionally
after imitating search, `imitation`); `zeroshot` is one forward pass and a
batch of simulations.
"""

import dataclasses
import json
import os
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.baselines import repair
from tf_gdp.graph import op_graph
from tf_gdp.policy import features
from tf_gdp.rl import environment
from tf_gdp.rl import experience
from tf_gdp.rl import exploration
from tf_gdp.rl import imitation as imitation_lib
from tf_gdp.rl import policy_io
from tf_gdp.rl import train_config
from tf_gdp.rl import train_result
from tf_gdp.rl import trainer as trainer_lib


@dataclasses.dataclass(frozen=True)
class ZeroShotResult:
  """One forward pass of a policy on an unseen graph.

  Attributes:
    placement: int32[num_nodes] device per op: the best by the simulator of
      the greedy placement and the samples, each repaired to fit memory
      (`baselines.repair`; valid ones first).
    step_time_us: its simulated step time.
    valid: whether it fits memory (constraints always hold).
    chosen: "greedy" or "sample".
    greedy_step_time_us: the greedy placement's step time.
    sample_step_times_us: float[K] the samples' step times.
    group_devices: int32[num_groups] the chosen action (as executed, i.e.
      after repair).
    seconds: wall-clock time (inputs, forward pass, sampling, simulation).
    valid_step_times_us: float[1 + K] greedy then samples (repaired), in the
      order they count as reward evaluations; inf where one still does not
      fit memory (search-cost curves start from it).
    evaluations: simulations made, the repair's included.
    repaired: how many of the 1 + K placements the repair changed.
  """
  placement: np.ndarray
  step_time_us: float
  valid: bool
  chosen: str
  greedy_step_time_us: float
  sample_step_times_us: np.ndarray
  group_devices: np.ndarray
  seconds: float
  valid_step_times_us: np.ndarray
  evaluations: int = 0
  repaired: int = 0


def _as_task(item, topology=None) -> environment.PlacementTask:
  if isinstance(item, environment.PlacementTask):
    return item
  if isinstance(item, op_graph.OpGraph) and topology is not None:
    return environment.PlacementTask(item, topology)
  raise errors.InputError(
      "expected a PlacementTask, or an OpGraph and a topology")


def _env_options(env_options: Optional[dict],
                 config: Optional[train_config.TrainConfig]) -> dict:
  """`env_options` plus what the training settings imply (they win)."""
  return dict(env_options or {}, **(config.environment_options()
                                    if config is not None else {}))


def pretrain(graphs: Sequence[Any], topologies: Optional[Sequence[Any]] = None,
             *, budget: train_config.Budget, root_dir: str,
             policy_config: Optional[dict] = None,
             config: Optional[train_config.TrainConfig] = None,
             env_options: Optional[dict] = None,
             imitation: Optional[imitation_lib.ImitationConfig] = None,
             log: Optional[Callable[[str], None]] = None
             ) -> train_result.TrainResult:
  """Trains a fresh policy on many graphs; exports it to `<root_dir>/policy`.

  Args:
    graphs: PlacementTasks, or OpGraphs placed on each of `topologies`.
    topologies: Topologies for OpGraph entries (every graph on each).
    budget: when to stop (totals over the run, resumes included).
    root_dir: checkpoints, summaries, best placements, the final policy. A
      root directory with a run in it is resumed (its policy config wins).
    policy_config: PolicyConfig fields of the fresh policy.
    config: training loop settings.
    env_options: further `PlacementEnv` arguments (backend, measure_target).
    imitation: with epochs > 0, the policy first imitates each task's search
      target (`imitation.pretrain_phase`; not on a resumed run); its
      statistics are the result's `imitation`. Its evaluations and
      seconds are not PPO's and do not count against the budget.
    log: progress line sink.
  """
  tasks = []
  for item in graphs:
    if isinstance(item, environment.PlacementTask):
      tasks.append(item)
    else:
      tasks += [_as_task(item, t) for t in (topologies or [None])]
  os.makedirs(root_dir, exist_ok=True)
  config_path = os.path.join(root_dir, policy_io.POLICY_CONFIG_FILE)
  if os.path.isfile(config_path):
    policy_config = policy_io.read_policy_config(config_path)
  policy = policy_io.build_policy(policy_config)
  fileio.write_atomically(
      config_path, json.dumps(policy_io.policy_config_dict(policy), indent=1))
  env = environment.PlacementEnv(tasks, **_env_options(env_options, config))
  try:
    trainer = trainer_lib.Trainer(env, policy, config=config,
                                  root_dir=root_dir, log=log)
    imitated = imitation_lib.pretrain_phase(
        trainer, imitation or imitation_lib.ImitationConfig(), log=log)
    result = dataclasses.replace(trainer.run(budget), imitation=imitated)
  finally:
    env.close()
  policy_io.save_policy(policy, os.path.join(root_dir, "policy"))
  return result


def finetune(policy_path: str, task, topology=None, *,
             budget: train_config.Budget,
             root_dir: Optional[str] = None,
             config: Optional[train_config.TrainConfig] = None,
             env_options: Optional[dict] = None,
             log: Optional[Callable[[str], None]] = None,
             entropy_floor: float = exploration.ENTROPY_FLOOR
             ) -> train_result.TrainResult:
  """Continues training a saved policy on one graph.

  `task` is a PlacementTask, or an OpGraph with `topology`. The budget is
  seconds and/or evaluations (`train_config.Budget`). With a `root_dir`,
  checkpoints and the best placement go there and a killed fine-tuning run
  resumes from them (they take precedence over `policy_path`); the
  fine-tuned policy is exported to `<root_dir>/policy`. A policy less
  random than `entropy_floor` on this graph has its logits scaled down
  first (`exploration.entropy_floor_scale`).
  """
  task = _as_task(task, topology)
  policy = policy_io.load_policy(policy_path)
  if config is None:
    config = train_config.TrainConfig(graphs_per_iteration=1)
  if root_dir:
    os.makedirs(root_dir, exist_ok=True)
    fileio.write_atomically(
        os.path.join(root_dir, policy_io.POLICY_CONFIG_FILE),
        json.dumps(policy_io.policy_config_dict(policy), indent=1))
  env = environment.PlacementEnv([task], **_env_options(env_options, config))
  try:
    trainer = trainer_lib.Trainer(env, policy, config=config,
                                  root_dir=root_dir, log=log)
    exploration.apply_entropy_floor(policy, env.observation(0), entropy_floor,
                                    log)
    result = trainer.run(budget)
  finally:
    env.close()
  if root_dir:
    policy_io.save_policy(policy, os.path.join(root_dir, "policy"))
  return result


def zeroshot(policy, task, topology=None, *, samples: int = 16,
             seed: int = 0,
             entropy_floor: float = exploration.ENTROPY_FLOOR,
             pipeline_exploration: float = exploration.PIPELINE_EXPLORATION
             ) -> ZeroShotResult:
  """Places an unseen graph with one forward pass of `policy`.

  Greedy (argmax per group) and `samples` sampled placements are simulated
  in one batch, each repaired to fit memory if it does not
  (`baselines.repair`); the fastest valid one wins (the fastest overall if
  none fits). Hard constraints hold by construction: the policy masks devices a
  group may not use, and groups are placed whole.

  Args:
    policy: a policy model, or a path for `policy_io.load_policy`.
    task: a PlacementTask, or an OpGraph with `topology`.
    topology: the devices, when `task` is an OpGraph.
    samples: sampled placements besides the greedy one.
    seed: sampling seed.
    entropy_floor: samples are drawn from logits scaled so that their mean
      entropy is at least this (`exploration.entropy_floor_scale`): a
      nearly deterministic policy would otherwise only repeat its greedy
      choice.
    pipeline_exploration: the random pipeline gain of every other sample
      (as in training, `TrainConfig.pipeline_exploration`); 0 for none. The
      greedy placement never has noise.
  """
  started = time.perf_counter()
  task = _as_task(task, topology)
  if isinstance(policy, str):
    policy = policy_io.load_policy(policy)
  inputs = features.policy_inputs(task.graph, task.topology)
  observation = {k: tf.convert_to_tensor(v[None])
                 for k, v in features.as_tensors(inputs).items()}
  seed_pair = tf.constant([seed, 0], tf.int32)
  sample_logits = None
  if pipeline_exploration > 0 and hasattr(policy, "noisy_logits"):
    # One network pass: row 0 noise-free (greedy), then each sample under
    # its own exploration noise (pipeline pushes, `policy.network` doc).
    shape = [samples + 1] + observation["exploration_noise"].shape[1:].as_list()
    noise = exploration.exploration_noise(shape, seed_pair + [0, 1],
                                          pipeline_exploration)
    noise = tf.concat([tf.zeros_like(noise[:1]), noise[1:]], 0)
    every = policy.noisy_logits(observation, noise)
    logits, sample_logits = every[0], every[1:]
  else:
    logits = exploration.policy_logits(policy, observation)
  greedy = tf.argmax(logits, axis=-1, output_type=tf.int32)
  factor = exploration.entropy_floor_scale(
      logits.numpy(), observation["group_mask"][0], entropy_floor)
  if sample_logits is not None:
    # The floor's factor scales the policy's logits, not the noise (as in
    # training, where the noise is added after `logit_scale`).
    sampled = experience.stateless_categorical_sample(
        logits * factor + (sample_logits - logits), seed_pair)
  else:
    sampled = tf.transpose(tf.random.stateless_categorical(
        tf.reshape(logits * factor, [-1, tf.shape(logits)[-1]]), samples,
        seed=seed_pair, dtype=tf.int32))  # [K, G]
  actions = np.concatenate([greedy.numpy()[None], sampled.numpy()])
  placements = np.stack([features.group_to_node_placement(inputs, row)
                         for row in actions])
  fixed = repair.repair_batch(task.graph, task.topology, placements)
  step = np.array([f.step_time_us for f in fixed])
  valid = np.array([f.valid for f in fixed])
  candidates = np.flatnonzero(valid)
  if not candidates.size:
    candidates = np.arange(len(step))
  best = int(candidates[np.argmin(step[candidates])])
  return ZeroShotResult(
      placement=fixed[best].placement.astype(np.int32),
      step_time_us=float(step[best]), valid=bool(valid[best]),
      chosen="greedy" if best == 0 else "sample",
      greedy_step_time_us=float(step[0]), sample_step_times_us=step[1:],
      group_devices=features.node_to_group_placement(
          inputs, fixed[best].placement),
      seconds=time.perf_counter() - started,
      valid_step_times_us=np.where(valid, step, np.inf),
      evaluations=int(sum(f.evaluations for f in fixed)),
      repaired=int(sum(f.changed for f in fixed)))
