"""PPO training of a placement policy: `Trainer`.

    trainer = Trainer(env, policy, config=train_config.TrainConfig(),
                      root_dir=d)
    result = trainer.run(train_config.Budget(seconds=600))

The workflows built on it (pretrain, finetune, zeroshot) are in `workflows`;
the loop's settings and budgets in `train_config`; what a run ends with in
`train_result`.

One iteration of `Trainer`:
  1. draw `graphs_per_iteration` tasks (all of them when there are fewer);
  2. one policy forward pass over those graphs, then `samples_per_graph`
     placements sampled per graph from the logits (`experience.sample`;
     every other one under a pipeline push, `exploration`), plus the greedy
     placement when `evaluate_greedy` (it only competes for the best
     placement, it is not trained on);
  3. price them all through the environment (`PlacementEnv.evaluate`: the
     simulator by default, batched); a placement that breaks memory is
     repaired there, and the repaired (executed) action is trained on;
  4. advantages: each row's reward minus the mean reward of its graph's
     samples, divided by their standard deviation (per graph, so that every
     graph weighs the same in a batch of very different graphs; floored at
     `advantage_scale_floor`); with
     `baseline="value"` the critic's prediction replaces the sample mean;
     a single-graph run adds one row: its best placement so far
     (self-imitation, `TrainConfig.self_imitation`);
  5. PPO (`ppo.PlacementPPOAgent.train`, `num_epochs` times) on the rows,
     as [rows, 1] trajectories.

Checkpoints (`<root_dir>/checkpoints`, `tf.train.CheckpointManager`) hold the
policy, the critic, the optimizer, the counters (iteration, PPO train step,
evaluations, seconds), the sampling RNG and the best placement per task.
Each time a task's best placement improves, it is also written at once to
`<root_dir>/best/<task>.json` (atomically, `fileio.write_atomically`), so a
run killed between checkpoints loses no placement it found: on resume the
better of the checkpoint's and the file's is kept. TensorBoard summaries go
to `<root_dir>/train` (rewards, best step time, entropy, PPO losses). The
root directory's layout and lock: `run_dir`.
"""

import json
import logging
import math
import os
import time
from typing import Callable, List, Optional

import numpy as np
import tensorflow as tf
# pylint: disable=g-bad-import-order,unused-import
from tf_gdp.rl import tf_agents_import  # before any tf_agents module
# pylint: enable=g-bad-import-order,unused-import
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

from tf_gdp.graph import identity
from tf_gdp.rl import actor_network
from tf_gdp.rl import environment
from tf_gdp.rl import experience as experience_lib
from tf_gdp.rl import exploration
from tf_gdp.rl import outputs
from tf_gdp.rl import ppo as ppo_lib
from tf_gdp.rl import run_dir
from tf_gdp.rl import train_config
from tf_gdp.rl import train_result

# A run in evaluations (distinct placements) stops after this many iterations
# in a row that drew nothing new, rather than spin without spending.
IDLE_ITERATIONS = 20


class Trainer:
  """PPO over a `PlacementEnv` (see the module doc)."""

  def __init__(self, env: environment.PlacementEnv, policy: tf.keras.Model,
               *, config: Optional[train_config.TrainConfig] = None,
               root_dir: Optional[str] = None,
               log: Optional[Callable[[str], None]] = None):
    """Builds the networks, the agent and, with a root_dir, restores.

    Args:
      env: the environment (its tasks are what is trained on).
      policy: call(observation_batch, training) -> logits [B, G, D].
      config: loop settings.
      root_dir: checkpoints, summaries and best placements go here; an
        existing run in it is resumed.
      log: progress line sink (default: absl/`logging.info`).
    """
    self.env = env
    self.policy = policy
    self.config = config or train_config.TrainConfig()
    self.root_dir = root_dir
    self._log = log or logging.info
    obs_spec, action_spec = actor_network.tensor_specs(env)
    example = env.observation(0)
    self.actor_net = actor_network.PlacementActorNetwork(
        obs_spec, action_spec, policy, example_observation=example)
    self.value_net = actor_network.PlacementValueNetwork(
        obs_spec, example_observation=example)
    self.optimizer = tf.keras.optimizers.Adam(
        learning_rate=self.config.ppo.learning_rate)
    self.train_step = tf.Variable(0, dtype=tf.int64, name="train_step")
    self.agent = ppo_lib.create_agent(
        obs_spec, action_spec, self.actor_net, self.value_net,
        self.config.ppo, optimizer=self.optimizer,
        train_step_counter=self.train_step)
    # Optimizer slots are checkpointed in build order, so build in the
    # networks' structural order: variable *names* carry per-process layer
    # counters (dense_3 vs dense_23) and would order a resumed run
    # differently.
    self._variables = list({id(v): v for v in (
        self.actor_net.trainable_weights +
        self.value_net.trainable_weights)}.values())
    self.optimizer.build(self._variables)
    self.iteration = tf.Variable(0, dtype=tf.int64, name="iteration")
    self.evaluations = tf.Variable(0, dtype=tf.int64, name="evaluations")
    self.seconds = tf.Variable(0.0, dtype=tf.float64, name="seconds")
    self.rng = tf.random.Generator.from_seed(self.config.seed)
    self.best_json = tf.Variable("{}", dtype=tf.string, name="best")
    self._train_fn = common.function(self.agent.train)
    self._explores = (self.config.pipeline_exploration > 0 and
                      hasattr(policy, "finish"))
    # Not checkpointed: a resumed run explores pipelines again at first.
    self.pipeline_scale = tf.Variable(
        float(self.config.pipeline_exploration), trainable=False,
        name="pipeline_scale")
    self._sample_fn = tf.function(self._sample)
    self._imitates = (self.config.self_imitation > 0 and
                      self.env.num_tasks == 1)
    self.checkpoint = tf.train.Checkpoint(
        policy=policy, value_net=self.value_net, optimizer=self.optimizer,
        train_step=self.train_step, iteration=self.iteration,
        evaluations=self.evaluations, seconds=self.seconds, rng=self.rng,
        best=self.best_json)
    self.manager = None
    self.writer = tf.summary.create_noop_writer()
    if root_dir:
      os.makedirs(root_dir, exist_ok=True)
      run_dir.lock_root_dir(root_dir)
      run_dir.check_run_file(root_dir, self.env.tasks)
      self.manager = tf.train.CheckpointManager(
          self.checkpoint, os.path.join(root_dir, "checkpoints"),
          max_to_keep=self.config.max_checkpoints)
      self.writer = tf.summary.create_file_writer(
          os.path.join(root_dir, "train"))
      self.restore()
    self.history: List[dict] = []
    self._pictured = {}  # task index -> the Best last drawn to TensorBoard

  # ---- checkpoints ---------------------------------------------------------

  def restore(self) -> bool:
    """Restores the latest checkpoint and best files; True if resumed."""
    resumed = checkpointed = False
    if self.manager is not None and self.manager.latest_checkpoint:
      run_dir.restore_checkpoint(self.checkpoint,
                                 self.manager.latest_checkpoint)
      resumed = checkpointed = True
      self.env.evaluations = int(self.evaluations.numpy())
      records = json.loads(self.best_json.numpy().decode("utf-8") or "{}")
      for i, task in enumerate(self.env.tasks):
        if task.name in records:
          best = outputs.best_from_record(records[task.name],
                                          self.env.inputs(i))
          if best is not None:
            self.env.set_best(i, best)
    if self.root_dir:
      for i, task in enumerate(self.env.tasks):
        on_disk = outputs.read_best(run_dir.best_path(self.root_dir, task),
                                    task, self.env.inputs(i))
        current = self.env.best(i)
        if on_disk is not None and on_disk.source == self._judge_source() and (
            current is None or on_disk.step_time_us < current.step_time_us):
          self.env.set_best(i, on_disk)
          resumed = True
    if resumed:
      self._log(run_dir.resumed_line(
          checkpointed, int(self.iteration.numpy()),
          int(self.evaluations.numpy()), float(self.seconds.numpy())))
    return resumed

  def _judge_source(self) -> str:
    return "simulate" if self.env.backend == "simulate" else "measure"

  def save(self) -> Optional[str]:
    """Writes a checkpoint (no-op without a root_dir); returns its path."""
    if self.manager is None:
      return None
    records = {task.name: outputs.best_record(self.env.best(i))
               for i, task in enumerate(self.env.tasks)
               if self.env.best(i) is not None}
    self.best_json.assign(json.dumps(records))
    return self.manager.save(checkpoint_number=int(self.iteration.numpy()))

  def _log_pictures(self, step: int) -> None:
    """Gantt + device charts of best placements that changed, to TensorBoard.

    At checkpoint time only, and at most 4 tasks per time: rendering a 50k-op
    schedule takes ~0.5 s, which must not tax every iteration.
    """
    if self.manager is None:
      return
    from tf_gdp.viz import tensorboard  # pylint: disable=g-import-not-at-top
    drawn = 0
    for i, task in enumerate(self.env.tasks):
      best = self.env.best(i)
      if best is None or self._pictured.get(i) is best or drawn >= 4:
        continue
      with self.writer.as_default():
        tensorboard.log_placement_images(
            step, task.graph, task.topology, best.placement,
            name=f"best/{identity.safe_name(task.name)}")
      self._pictured[i] = best
      drawn += 1

  # ---- one iteration ---------------------------------------------------------

  def _sample(self, observations, seed, num_samples: int):
    """`experience.sample` with this trainer's networks and pushes."""
    return experience_lib.sample(
        self.actor_net, self.value_net, observations, seed, num_samples,
        self.pipeline_scale if self._explores else None)

  def _draw_tasks(self) -> np.ndarray:
    count = min(self.config.graphs_per_iteration, self.env.num_tasks)
    if count == self.env.num_tasks:
      return np.arange(count)
    rng = np.random.default_rng((self.config.seed, int(self.iteration.numpy())))
    return np.sort(rng.choice(self.env.num_tasks, count, replace=False))

  def run_iteration(self) -> dict:
    """Collects and trains once; returns this iteration's statistics."""
    clock = time.perf_counter()
    tasks = self._draw_tasks()
    k = self.config.samples_per_graph
    stacked = {key: np.stack([self.env.observation(int(i))[key] for i in tasks])
               for key in self.env.observation(int(tasks[0]))}
    seed = tf.cast(self.rng.make_seeds(1)[:, 0], tf.int32)
    logits, actions, greedy, values, entropy, noise, base = self._sample_fn(
        stacked, seed, k)
    logits, actions, greedy = logits.numpy(), actions.numpy(), greedy.numpy()
    base = base.numpy()
    noise = noise.numpy() if self._explores else None
    values, entropy = values.numpy(), entropy.numpy()
    forward_seconds = time.perf_counter() - clock

    clock = time.perf_counter()
    rewards = np.zeros((len(tasks), k), np.float32)
    # Rows t*K + j with an odd index carry the pipeline push (if any).
    pushed = (np.arange(len(tasks))[:, None] * k + np.arange(k)) % 2 == 1
    distinct = [len(np.unique(actions[:, t], axis=0)) for t in range(len(tasks))]
    greedy_ratios = []
    improved = []
    for t, index in enumerate(tasks):
      index = int(index)
      before = self.env.best(index)
      batch = actions[:, t]
      if self.config.evaluate_greedy:
        batch = np.concatenate([batch, greedy[t][None]], axis=0)
      evaluation = self.env.evaluate(index, batch)
      executed = evaluation.group_devices[:k]
      actions[:, t, :executed.shape[1]] = executed
      rewards[t] = evaluation.reward[:k]
      if self.config.evaluate_greedy:
        greedy_ratios.append(float(np.exp(-evaluation.reward[k])))
      if self.env.best(index) is not before:
        improved.append(index)
    self._write_improved(improved)
    evaluate_seconds = time.perf_counter() - clock

    clock = time.perf_counter()
    returns = rewards
    if self.config.baseline == "value":
      centred = rewards - values[:, None]
    else:
      centred = rewards - rewards.mean(axis=1, keepdims=True)
    advantages = centred / np.maximum(rewards.std(axis=1, keepdims=True),
                                      self.config.advantage_scale_floor)
    experience = self._experience(stacked, tasks, logits, actions, values,
                                  returns, advantages, noise)
    if self._imitates:
      imitation = self._imitation_experience(
          stacked, tasks, base, greedy, values, rewards, pushed, noise)
      experience = tf.nest.map_structure(
          lambda a, b: tf.concat([a, b], axis=0), experience, imitation)
    with self.writer.as_default():
      for _ in range(self.config.ppo.num_epochs):
        loss_info = self._train_fn(experience=experience)
    train_seconds = time.perf_counter() - clock
    self.iteration.assign_add(1)
    self.evaluations.assign(self.env.evaluations)
    stats = {
        "iteration": int(self.iteration.numpy()),
        "evaluations": int(self.env.evaluations),
        "reward_mean": float(rewards.mean()),
        "reward_max": float(rewards.max()),
        "value_mean": float(values.mean()),
        "entropy": float(entropy.mean()),
        "distinct_samples": float(np.mean(distinct)),
        # Some graph's best sample was one with a pipeline push.
        "pipeline_won": float(self._explores and any(
            rewards[t][pushed[t]].max() > rewards[t][~pushed[t]].max()
            for t in range(len(tasks)) if pushed[t].any() and
            (~pushed[t]).any())),
        "loss": float(loss_info.loss.numpy()),
        # Wall-clock split: policy forward + sampling, pricing the
        # placements, PPO epochs.
        "seconds_forward": forward_seconds,
        "seconds_evaluate": evaluate_seconds,
        "seconds_train": train_seconds,
    }
    for name, value in loss_info.extra._asdict().items():
      stats[name] = float(np.mean(value))
    stats["best_ratio"] = self.best_ratio()
    if greedy_ratios:
      # exp(-reward): the greedy placement's step time over the reference
      # (penalized when invalid), geometric mean over this iteration's graphs.
      stats["greedy_ratio"] = float(np.exp(np.mean(np.log(greedy_ratios))))
    return stats

  def _imitation_experience(self, stacked, tasks, base, greedy, values,
                            rewards, pushed, noise) -> trajectory.Trajectory:
    """`experience.imitation_experience` with this run's weight and floor."""
    return experience_lib.imitation_experience(
        self.env, stacked, tasks, base, greedy, values, rewards, pushed, noise,
        weight=self.config.self_imitation,
        scale_floor=self.config.advantage_scale_floor)

  def _experience(self, stacked, tasks, logits, actions, values, returns,
                  advantages, noise=None) -> trajectory.Trajectory:
    return experience_lib.experience(stacked, tasks, logits, actions, values,
                                     returns, advantages, noise)

  def _write_improved(self, indices) -> None:
    if not self.root_dir:
      return
    for index in indices:
      task = self.env.tasks[index]
      best = self.env.best(index)
      if best is not None:
        outputs.write_placement(
            run_dir.best_path(self.root_dir, task), task, best,
            self.env.reference(index),
            reference_measured_us=self.env.measured_reference_us(index))

  def best_ratio(self) -> float:
    """Geometric mean over tasks of best / reference step time (NaN: none)."""
    ratios = []
    source = self._judge_source()
    for i in range(self.env.num_tasks):
      best = self.env.best(i)
      if best is not None:
        ratios.append(best.step_time_us / self.env.reference_us(i, source))
    return float(np.exp(np.mean(np.log(ratios)))) if ratios else math.nan

  # ---- the loop ----------------------------------------------------------------

  def run(self, budget: train_config.Budget) -> train_result.TrainResult:
    """Trains until the budget is spent; checkpoints and logs on the way."""
    started = time.perf_counter()
    base_seconds = float(self.seconds.numpy())
    base_evaluations = int(self.evaluations.numpy())
    base_iterations = int(self.iteration.numpy())
    last_save = last_log = started
    logged = None
    elapsed = lambda: base_seconds + time.perf_counter() - started
    for i in range(self.env.num_tasks):  # references before the clock matters
      self.env.reference(i)
    stalled = unpaid = idle = 0
    patience = _Patience(budget.patience if self.env.num_tasks == 1 else None,
                         int(self.env.evaluations))
    while not budget.exhausted(int(self.env.evaluations), elapsed(),
                               int(self.iteration.numpy())):
      spent = int(self.env.evaluations)
      stats = self.run_iteration()
      idle = idle + 1 if int(self.env.evaluations) == spent else 0
      unpaid = 0 if stats["pipeline_won"] else unpaid + 1
      if (self.config.pipeline_patience and self.env.num_tasks == 1 and
          unpaid >= self.config.pipeline_patience and
          float(self.pipeline_scale.numpy()) > 0):
        self.pipeline_scale.assign(0.0)
        self._log(f"no pipeline-pushed sample won in {unpaid} iterations: "
                  "pipeline exploration off for this run")
      stalled = stalled + 1 if stats["distinct_samples"] <= 1 else 0
      if (self.config.refloor_after and self.env.num_tasks == 1 and
          stalled >= self.config.refloor_after):
        exploration.apply_entropy_floor(
            self.policy, self.env.observation(0), exploration.ENTROPY_FLOOR,
            lambda line, n=stalled: self._log(
                f"{n} iterations sampled one placement only; {line}"))
        stalled = 0
      self.seconds.assign(elapsed())
      stats["seconds"] = elapsed()
      self.history.append(stats)
      self._summaries(stats)
      now = time.perf_counter()
      every = self.config.checkpoint_every_iterations
      if (now - last_save >= self.config.checkpoint_every_seconds or
          (every and stats["iteration"] % every == 0)):
        self.save()
        self._log_pictures(stats["iteration"])
        last_save = now
      if now - last_log >= self.config.log_every_seconds:
        session = now - started
        rate = {"evaluations": (stats["evaluations"] - base_evaluations) /
                               max(session, 1e-9),
                "iterations": (stats["iteration"] - base_iterations) /
                              max(session, 1e-9)}
        self._log(self.progress_line(stats, budget.remaining_seconds(
            stats["evaluations"], stats["seconds"], stats["iteration"], rate)))
        last_log = now
        logged = stats["iteration"]
      if budget.evaluations is not None and idle >= IDLE_ITERATIONS:
        self._log(f"{idle} iterations drew no new placement: stopping early")
        break
      if patience.lost(stats["best_ratio"], stats["evaluations"]):
        self._log(f"the best placement did not improve in {budget.patience} "
                  "evaluations: stopping early")
        break
    self.seconds.assign(elapsed())
    self.save()
    self._log_pictures(int(self.iteration.numpy()))
    self.writer.flush()
    if self.history and self.history[-1]["iteration"] != logged:
      self._log(self.progress_line(self.history[-1], 0.0))
    return self.result()

  def result(self) -> train_result.TrainResult:
    return train_result.TrainResult(
        iterations=int(self.iteration.numpy()),
        evaluations=int(self.env.evaluations),
        seconds=float(self.seconds.numpy()),
        best={t.name: self.env.best(i) for i, t in enumerate(self.env.tasks)},
        references={t.name: self.env.reference(i)
                    for i, t in enumerate(self.env.tasks)},
        history=list(self.history), root_dir=self.root_dir,
        measured_references={t.name: self.env.measured_reference_us(i)
                             for i, t in enumerate(self.env.tasks)},
        measurements=int(getattr(self.env, "measurements", 0)))

  def progress_line(self, stats: dict, eta_seconds: Optional[float]) -> str:
    if self.env.num_tasks == 1:
      best = self.env.best(0)
      best_text = (f"best {best.step_time_us / 1e3:.3f} ms "
                   f"({stats['best_ratio']:.3f}x {self.env.reference(0).method})"
                   if best is not None else "best none valid")
    else:
      best_text = f"best/ref {stats['best_ratio']:.3f} (geomean)"
    eta = "?" if eta_seconds is None else _duration(eta_seconds)
    return (f"iter {stats['iteration']} | evals {stats['evaluations']} | "
            f"{best_text} | reward {stats['reward_mean']:+.3f} | "
            f"entropy {stats['entropy']:.3f} | {_duration(stats['seconds'])} | "
            f"ETA {eta}")

  def _summaries(self, stats: dict) -> None:
    step = stats["iteration"]
    with self.writer.as_default():
      for name in ("reward_mean", "reward_max", "greedy_ratio", "value_mean",
                   "entropy", "loss",
                   "policy_gradient_loss", "value_estimation_loss",
                   "entropy_regularization_loss", "evaluations"):
        if name in stats:
          tf.summary.scalar(f"gdp/{name}", stats[name], step=step)
      if math.isfinite(stats["best_ratio"]):
        tf.summary.scalar("gdp/best_over_reference", stats["best_ratio"],
                          step=step)
      for i, task in enumerate(self.env.tasks):
        best = self.env.best(i)
        if best is not None:
          tf.summary.scalar(f"best_step_time_ms/{identity.safe_name(task.name)}",
                            best.step_time_us / 1e3, step=step)


def _duration(seconds: float) -> str:
  seconds = max(int(round(seconds)), 0)
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  if hours:
    return f"{hours}h{minutes:02d}m"
  if minutes:
    return f"{minutes}m{secs:02d}s"
  return f"{secs}s"


class _Patience:
  """Counts evaluations since the best ratio last improved (`Budget.patience`)."""

  def __init__(self, patience: Optional[int], evaluations: int):
    self.patience = patience
    self.best = math.inf
    self.since = evaluations

  def lost(self, best_ratio: float, evaluations: int) -> bool:
    """Whether `patience` evaluations passed without a gain; notes a gain."""
    if not self.patience:
      return False
    if best_ratio < self.best * (1.0 - train_config.PATIENCE_GAIN):
      self.best, self.since = best_ratio, evaluations
    return evaluations - self.since >= self.patience
