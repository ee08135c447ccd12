"""PPO training of a placement policy, and the three workflows built on it.

    result = train_lib.pretrain(graphs, [topology], budget=Budget(seconds=600),
                                root_dir=d)
    result = train_lib.finetune(d + "/policy", graph, topology,
                                budget=Budget(evaluations=2000))
    shot = train_lib.zeroshot(d + "/policy", graph, topology, samples=16)

One iteration of `Trainer`:
  1. draw `graphs_per_iteration` tasks (all of them when there are fewer);
  2. one policy forward pass over those graphs, then `samples_per_graph`
     placements sampled per graph from the logits (plus the greedy placement
     when `evaluate_greedy`: it only competes for the best placement, it is
     not trained on);
  3. price them all through the environment (`PlacementEnv.evaluate`: the
     simulator by default, batched);
  4. advantages: each row's reward minus the mean reward of its graph's
     samples, divided by their standard deviation (per graph, so that every
     graph weighs the same in a batch of very different graphs; floored at
     `advantage_scale_floor`); with
     `baseline="value"` the critic's prediction replaces the sample mean;
     a single-graph run adds one row: its best placement so far
     (self-imitation, `TrainConfig.self_imitation`);
  5. PPO (`ppo.PlacementPPOAgent.train`, `num_epochs` times) on the rows,
     as [rows, 1] trajectories.

Budgets count simulator (or measurement) evaluations, wall-clock seconds and
iterations; training stops at the first one reached. They are totals over
the run: a resumed run continues until the same totals.

Checkpoints (`<root_dir>/checkpoints`, `tf.train.CheckpointManager`) hold the
policy, the critic, the optimizer, the counters (iteration, PPO train step,
evaluations, seconds), the sampling RNG and the best placement per task.
Each time a task's best placement improves, it is also written at once to
`<root_dir>/best/<task>.json` (atomically, `fileio.write_atomically`), so a
run killed between checkpoints loses no placement it found: on resume the
better of the checkpoint's and the file's is kept. TensorBoard summaries go
to `<root_dir>/train` (rewards, best step time, entropy, PPO losses).
"""

import dataclasses
import fcntl
import json
import logging
import math
import os
import shutil
import time
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.cost import simulator
from tf_gdp.graph import op_graph
from tf_gdp.policy import features
from tf_gdp.rl import actor_network
from tf_gdp.rl import environment
from tf_gdp.rl import outputs
from tf_gdp.rl import ppo as ppo_lib

POLICY_CONFIG_FILE = "policy_config.json"
POLICY_WEIGHTS = "weights"
RUN_FILE = "run.json"
LOCK_FILE = ".lock"
# Root directories this process holds the lock of: path -> open lock file.
_HELD_LOCKS = {}


@dataclasses.dataclass
class Budget:
  """When to stop: the first limit reached (None = no limit)."""
  evaluations: Optional[int] = None
  seconds: Optional[float] = None
  iterations: Optional[int] = None

  def __post_init__(self):
    if self.evaluations is None and self.seconds is None and (
        self.iterations is None):
      raise errors.InputError(
          "a training budget needs evaluations, seconds or iterations")
    for name in ("evaluations", "seconds", "iterations"):
      value = getattr(self, name)
      if value is not None and value <= 0:
        raise errors.InputError(f"budget {name} must be > 0, got {value}")

  def exhausted(self, evaluations: int, seconds: float,
                iterations: int) -> bool:
    return ((self.evaluations is not None and evaluations >= self.evaluations)
            or (self.seconds is not None and seconds >= self.seconds) or
            (self.iterations is not None and iterations >= self.iterations))

  def remaining_seconds(self, evaluations: int, seconds: float,
                        iterations: int, rate: dict) -> Optional[float]:
    """Estimated seconds left, from this session's rates; None if unknown."""
    estimates = []
    if self.seconds is not None:
      estimates.append(self.seconds - seconds)
    if self.evaluations is not None and rate.get("evaluations"):
      estimates.append((self.evaluations - evaluations) / rate["evaluations"])
    if self.iterations is not None and rate.get("iterations"):
      estimates.append((self.iterations - iterations) / rate["iterations"])
    return max(min(estimates), 0.0) if estimates else None


# Standard deviation of the per-unit exploration noise of sampled placements
# (`policy.network` module doc: whole name scopes and stretches of the
# topological order lean towards one device per sample).
EXPLORATION_SCALE = 0.0
# Standard deviation of the random pipeline gain of every other sample
# (`policy.network` module doc), in logit units. The pushes must be large to
# jump a valley: on RNNLM-4 a gain of 10 makes the shipped policy's greedy
# placement worse (168 ms against 159.4), one of 30 gives the pipeline
# (126.8; the expert 120.8). Zero-shot best of 16 samples on GNMT-8 with
# 12 / 24 / 48: 602.0 / 510.9 / 507.9 ms (expert 508.3). Zero: none.
PIPELINE_EXPLORATION = 48.0
# A single-graph run stops the pipeline pushes after this many iterations in
# a row in which no pushed sample beat the graph's best unpushed one: on a
# graph that should not be pipelined they only halve the useful samples
# (zoo, 120 s: Transformer-XL 8 287.0 ms with pushes throughout, 244.7 with
# this; Transformer-XL 2 68.5 / 61.7; Inception-v3 119.3 / 114.6).
PIPELINE_PATIENCE = 10
# Weight of the self-imitation row's advantage in single-graph runs
# (`TrainConfig.self_imitation`); 0: off.
SELF_IMITATION = 1.0
# Single-graph runs re-floor the policy's entropy after this many iterations
# in a row of one sampled placement (`TrainConfig.refloor_after`).
# Self-imitation concentrates a policy on a small graph's best placement
# within seconds (the inception block of `bench.real_check`: entropy 0.000
# per group after 30 s); after that it would re-price one placement.
REFLOOR_AFTER = 20


@dataclasses.dataclass
class TrainConfig:
  """Training loop settings (PPO's own in `ppo`).

  Attributes:
    samples_per_graph: placements sampled per graph per iteration (B).
    graphs_per_iteration: graphs per iteration (all if fewer).
    evaluate_greedy: also price the greedy placement each iteration (for
      the best placement; not trained on).
    baseline: "sample_mean" (per-graph mean of the B rewards) or "value"
      (the critic's prediction).
    advantage_scale_floor: advantages are divided by max(std of the
      graph's rewards, this). Rewards are log step-time ratios, so 0.01 is a
      1% difference: once a policy has nearly converged, samples that differ
      by less are not blown up to unit advantages (which made PPO leave a
      found optimum again in tests).
    ppo: PPO hyper-parameters.
    checkpoint_every_seconds: wall-clock time between checkpoints.
    checkpoint_every_iterations: iterations between checkpoints (0 = only
      by time and at the end).
    max_checkpoints: checkpoints kept.
    log_every_seconds: time between progress lines.
    seed: seeds sampling and task draws.
    exploration_scale: standard deviation of the coherent exploration noise
      of sampled placements (`policy.network` module doc); 0 samples each
      group independently from the policy's logits.
    pipeline_exploration: standard deviation of the random pipeline gain
      of every other sampled placement (`PIPELINE_EXPLORATION`); 0: none.
    pipeline_patience: in single-graph runs, stop the pipeline pushes after
      this many iterations in a row in which no pushed sample beat every
      unpushed one (`PIPELINE_PATIENCE`); 0 = never stop.
    refloor_after: after this many iterations in a row in which all samples
      were one placement (no advantage, so PPO cannot move), lower the
      policy's logit scale to the entropy floor again, as fine-tuning does
      at its start. Measured rewards collapse a policy this way within
      seconds and it then re-measures cached placements for the rest of the
      budget. Single-graph runs only; 0 = never.
    self_imitation: weight of the advantage of the best placement so far,
      trained on once per iteration as an extra sample
      (`Trainer._imitation_experience`). Single-graph runs only; 0 = off.
  """
  samples_per_graph: int = 16
  graphs_per_iteration: int = 4
  exploration_scale: float = EXPLORATION_SCALE
  pipeline_exploration: float = PIPELINE_EXPLORATION
  pipeline_patience: int = PIPELINE_PATIENCE
  refloor_after: int = REFLOOR_AFTER
  self_imitation: float = SELF_IMITATION
  evaluate_greedy: bool = True
  baseline: str = "sample_mean"
  advantage_scale_floor: float = 0.01
  ppo: ppo_lib.PpoConfig = dataclasses.field(default_factory=ppo_lib.PpoConfig)
  checkpoint_every_seconds: float = 60.0
  checkpoint_every_iterations: int = 0
  max_checkpoints: int = 3
  log_every_seconds: float = 10.0
  seed: int = 0

  def __post_init__(self):
    if self.samples_per_graph < 2:
      raise errors.InputError("samples_per_graph must be >= 2 (advantages "
                              "compare a graph's samples)")
    if self.graphs_per_iteration < 1:
      raise errors.InputError("graphs_per_iteration must be >= 1")
    if self.refloor_after < 0:
      raise errors.InputError("refloor_after must be >= 0")
    if self.pipeline_patience < 0:
      raise errors.InputError("pipeline_patience must be >= 0")
    if self.self_imitation < 0:
      raise errors.InputError("self_imitation must be >= 0")
    if self.pipeline_exploration < 0:
      raise errors.InputError("pipeline_exploration must be >= 0")
    if self.baseline not in ("sample_mean", "value"):
      raise errors.InputError(
          f"baseline must be sample_mean or value, got {self.baseline!r}")


@dataclasses.dataclass
class TrainResult:
  """What a training run ended with.

  Attributes:
    iterations, evaluations, seconds: totals over the run (resumes included).
    best: task name -> Best (None if no valid placement was found).
    references: task name -> the reward's reference placement.
    measured_references: task name -> the reference's measured step time
      (us), for the measure and mix backends (None if never measured).
    history: one dict per iteration of this session (iteration,
      evaluations, seconds, reward_mean, best_ratio, entropy, loss).
    root_dir: where checkpoints and outputs went (None if nowhere).
    measurements: distinct placements run on the TF runtime in this session
      (measure and mix backends; evaluations count cached repeats too).
  """
  iterations: int
  evaluations: int
  seconds: float
  best: dict
  references: dict
  history: list
  root_dir: Optional[str] = None
  measured_references: dict = dataclasses.field(default_factory=dict)
  measurements: int = 0

  def best_step_time_us(self, name: Optional[str] = None) -> float:
    if name is None:
      if len(self.best) != 1:
        raise ValueError("name the task: the run placed several")
      name = next(iter(self.best))
    best = self.best[name]
    return best.step_time_us if best is not None else math.inf


@dataclasses.dataclass(frozen=True)
class ZeroShotResult:
  """One forward pass of a policy on an unseen graph.

  Attributes:
    placement: int32[num_nodes] device per op: the best by the simulator of
      the greedy placement and the samples (valid ones first).
    step_time_us: its simulated step time.
    valid: whether it fits memory (constraints always hold).
    chosen: "greedy" or "sample".
    greedy_step_time_us: the greedy placement's step time.
    sample_step_times_us: float[K] the samples' step times.
    group_devices: int32[num_groups] the chosen action.
    seconds: wall-clock time (inputs, forward pass, sampling, simulation).
    valid_step_times_us: float[1 + K] greedy then samples, in the order they
      count as reward evaluations; inf where a placement does not fit
      memory (search-cost curves start from it).
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


class Trainer:
  """PPO over a `PlacementEnv` (see the module doc)."""

  def __init__(self, env: environment.PlacementEnv, policy: tf.keras.Model,
               *, config: Optional[TrainConfig] = None,
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
    self.config = config or TrainConfig()
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
    self._explores = ((self.config.exploration_scale > 0 or
                       self.config.pipeline_exploration > 0) and
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
      lock_root_dir(root_dir)
      self._check_run_file()
      self.manager = tf.train.CheckpointManager(
          self.checkpoint, os.path.join(root_dir, "checkpoints"),
          max_to_keep=self.config.max_checkpoints)
      self.writer = tf.summary.create_file_writer(
          os.path.join(root_dir, "train"))
      self.restore()
    self.history: List[dict] = []
    self._pictured = {}  # task index -> the Best last drawn to TensorBoard

  # ---- checkpoints ---------------------------------------------------------

  def _run_document(self) -> dict:
    return {"tasks": [{"name": t.name,
                       "fingerprint": outputs.graph_fingerprint(t.graph),
                       "topology": t.topology.name}
                      for t in self.env.tasks]}

  def _check_run_file(self) -> None:
    path = os.path.join(self.root_dir, RUN_FILE)
    doc = self._run_document()
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as f:
        previous = json.load(f)
      if previous.get("tasks") != doc["tasks"]:
        raise errors.InputError(
            f"{self.root_dir} holds a run over other graphs or devices; "
            "resume it with the same ones or use a new root directory")
      return
    fileio.write_atomically(path, json.dumps(doc, indent=1))

  def restore(self) -> bool:
    """Restores the latest checkpoint and best files; True if resumed."""
    resumed = False
    if self.manager is not None and self.manager.latest_checkpoint:
      status = self.checkpoint.restore(self.manager.latest_checkpoint)
      status.assert_existing_objects_matched()
      resumed = True
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
        on_disk = outputs.read_best(self._best_path(task), task,
                                    self.env.inputs(i))
        current = self.env.best(i)
        if on_disk is not None and on_disk.source == self._judge_source() and (
            current is None or on_disk.step_time_us < current.step_time_us):
          self.env.set_best(i, on_disk)
          resumed = True
    if resumed:
      self._log(f"resumed at iteration {int(self.iteration.numpy())}, "
                f"{int(self.evaluations.numpy())} evaluations, "
                f"{self.seconds.numpy():.0f} s")
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
            name=f"best/{outputs.safe_name(task.name)}")
      self._pictured[i] = best
      drawn += 1

  def _best_path(self, task) -> str:
    return os.path.join(self.root_dir, "best",
                        outputs.safe_name(task.name) + ".json")

  # ---- one iteration ---------------------------------------------------------

  def _sample(self, observations, seed, num_samples: int):
    """Base logits' greedy actions and entropy; K sampled placements per graph.

    With coherent exploration (`policy.network` module doc) every sample has
    its own noise, so its own logits: rows [T*K] (row t*K + j is sample j of
    graph t) plus the T noise-free rows, in one call that runs the network
    once per graph. Returns (logits: [T, G, D], or [T*K, G, D] per sample
    with exploration; actions [K, T, G]; greedy [T, G]; values [T];
    entropy [T]; noise [T*K, D, k] or an empty tensor; base: the
    noise-free logits [T, G, D]).
    """
    if not self._explores:
      distribution, _ = self.actor_net(observations, training=False)
      logits = base = distribution.logits
      actions = distribution.sample(num_samples, seed=seed)
      noise = tf.zeros([0])
    else:
      noise_seed, sample_seed = tf.unstack(
          tf.random.experimental.stateless_split(seed, 2))
      rows = {k: tf.repeat(v, num_samples, axis=0)
              for k, v in observations.items()}
      noise = exploration_noise(
          tf.shape(rows["exploration_noise"]), noise_seed,
          self.config.exploration_scale, self.pipeline_scale)
      rows["exploration_noise"] = noise
      both = {k: tf.concat([rows[k], v], axis=0)
              for k, v in observations.items()}
      distribution, _ = self.actor_net(both, training=False)
      count = tf.shape(noise)[0]
      logits, base = distribution.logits[:count], distribution.logits[count:]
      sampled = stateless_categorical_sample(logits, sample_seed)  # [T*K, G]
      graphs = tf.shape(observations["node_mask"])[0]
      actions = tf.transpose(tf.reshape(
          sampled, [graphs, num_samples, -1]), [1, 0, 2])
    greedy = tf.argmax(base, axis=-1, output_type=tf.int32)
    values, _ = self.value_net(observations, training=False)
    entropy = tfp_categorical_entropy(base)
    mask = tf.cast(observations["group_mask"], tf.float32)
    entropy = tf.reduce_sum(entropy * mask, -1) / tf.maximum(
        tf.reduce_sum(mask, -1), 1.0)
    return logits, actions, greedy, values, entropy, noise, base

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
    """[T, 1] trajectories: each graph's best placement so far, as a sample.

    Self-imitation (Oh et al., 2018): the best placement is trained on as if
    the noise-free policy had drawn it, with advantage `self_imitation` x
    max(0, its reward - the mean reward of the graph's unpushed samples),
    scaled like the samples' advantages. Without it fine-tuning forgets a
    pipeline found by a push (which is then not in the policy's logits):
    the policy stays near uniform and re-draws instead of refining (RNNLM-4
    fine-tuned 120 s: within 1.1% of the expert in 4 of 4 runs without it,
    18.6% below it in the median of 7 with it). A graph
    with no valid placement yet gets its greedy placement with advantage 0.
    """
    count = len(tasks)
    actions = np.array(greedy, np.int32)  # [T, G]
    returns = np.zeros((count, 1), np.float32)
    advantages = np.zeros((count, 1), np.float32)
    for t, index in enumerate(tasks):
      best = self.env.best(int(index))
      if best is None:
        continue
      reward = environment.placement_reward(
          [best.step_time_us], [True],
          self.env.reference_us(int(index), best.source))[0]
      own = rewards[t][~pushed[t]] if (~pushed[t]).any() else rewards[t]
      scale = max(float(rewards[t].std()), self.config.advantage_scale_floor)
      actions[t, :len(best.group_devices)] = best.group_devices
      returns[t, 0] = reward
      advantages[t, 0] = self.config.self_imitation * max(
          0.0, float(reward - own.mean())) / scale
    if noise is not None:
      noise = np.zeros((count,) + tuple(np.shape(noise)[1:]), np.float32)
    return self._experience(stacked, tasks, base, actions[None], values,
                            returns, advantages, noise)

  def _experience(self, stacked, tasks, logits, actions, values, returns,
                  advantages, noise=None) -> trajectory.Trajectory:
    """[T*K, 1] trajectories, rows grouped by task (K = len(actions)).

    `logits` are per graph [T, ...], or per row [T*K, ...] when `noise`
    (the rows' exploration noise) is given.
    """
    k = np.shape(actions)[0]
    rows = np.repeat(np.arange(len(tasks)), k)

    def per_row(x, dtype=None):
      x = np.asarray(x)[rows][:, None]
      return tf.convert_to_tensor(x if dtype is None else x.astype(dtype))

    batch = rows.shape[0]
    observation = {key: per_row(value) for key, value in stacked.items()}
    if noise is not None:
      observation["exploration_noise"] = tf.convert_to_tensor(
          np.asarray(noise, np.float32)[:, None])
      behaviour = tf.convert_to_tensor(np.asarray(logits, np.float32)[:, None])
    else:
      behaviour = per_row(logits, np.float32)
    action = tf.convert_to_tensor(
        np.transpose(actions, (1, 0, 2)).reshape(batch, -1)[:, None]
        .astype(np.int32))
    flat = lambda x: tf.convert_to_tensor(
        np.asarray(x, np.float32).reshape(batch, 1))
    ones = np.ones((batch, 1), np.int32)
    return trajectory.Trajectory(
        step_type=tf.constant(ones * int(ts.StepType.FIRST)),
        observation=observation,
        action=action,
        policy_info={"dist_params": {"logits": behaviour},
                     "value_prediction": flat(np.asarray(values)[rows]),
                     "return": flat(returns),
                     "advantage": flat(advantages)},
        next_step_type=tf.constant(ones * int(ts.StepType.LAST)),
        reward=flat(returns),
        discount=tf.zeros((batch, 1), tf.float32))

  def _write_improved(self, indices) -> None:
    if not self.root_dir:
      return
    for index in indices:
      task = self.env.tasks[index]
      best = self.env.best(index)
      if best is not None:
        outputs.write_placement(
            self._best_path(task), task, best, self.env.reference(index),
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

  def run(self, budget: Budget) -> TrainResult:
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
    stalled = unpaid = 0
    while not budget.exhausted(int(self.env.evaluations), elapsed(),
                               int(self.iteration.numpy())):
      stats = self.run_iteration()
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
        apply_entropy_floor(
            self.policy, self.env.observation(0), ENTROPY_FLOOR,
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
    self.seconds.assign(elapsed())
    self.save()
    self._log_pictures(int(self.iteration.numpy()))
    self.writer.flush()
    if self.history and self.history[-1]["iteration"] != logged:
      self._log(self.progress_line(self.history[-1], 0.0))
    return self.result()

  def result(self) -> TrainResult:
    return TrainResult(
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
          tf.summary.scalar(f"best_step_time_ms/{outputs.safe_name(task.name)}",
                            best.step_time_us / 1e3, step=step)


def lock_root_dir(root_dir: str) -> None:
  """Refuses a second process training into the same root directory.

  Two runs interleaving checkpoints and best placements in one folder would
  corrupt each other's resume state. The lock is an flock on
  `<root>/.lock`, held until this process exits (the kernel drops it on a
  crash or SIGKILL, so a killed run never blocks its own restart); the same
  process may reopen its own root (sequential runs, tests).
  """
  path = os.path.join(os.path.abspath(root_dir), LOCK_FILE)
  if path in _HELD_LOCKS:
    return
  handle = open(path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    handle.seek(0)
    owner = handle.read().strip() or "unknown"
    handle.close()
    raise errors.InputError(
        f"{root_dir} is in use by another training run (pid {owner}); wait "
        "for it to finish or use another root directory") from e
  handle.seek(0)
  handle.truncate()
  handle.write(str(os.getpid()))
  handle.flush()
  _HELD_LOCKS[path] = handle


def stateless_categorical_sample(logits: tf.Tensor, seed) -> tf.Tensor:
  """One int32 draw per row of logits [..., D] (stateless, `seed` int32[2])."""
  flat = tf.reshape(logits, [-1, tf.shape(logits)[-1]])
  draws = tf.random.stateless_categorical(flat, 1, seed=seed, dtype=tf.int32)
  return tf.reshape(draws, tf.shape(logits)[:-1])


def tfp_categorical_entropy(logits: tf.Tensor) -> tf.Tensor:
  """Entropy per group of softmax(logits) over the last axis (nats)."""
  log_p = tf.nn.log_softmax(logits, axis=-1)
  return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)


def _duration(seconds: float) -> str:
  seconds = max(int(round(seconds)), 0)
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  if hours:
    return f"{hours}h{minutes:02d}m"
  if minutes:
    return f"{minutes}m{secs:02d}s"
  return f"{secs}s"


# ---- policies on disk ----------------------------------------------------------


def build_policy(config: Optional[dict] = None) -> tf.keras.Model:
  """A fresh `GdpPolicy` from a PolicyConfig dict (None: the defaults)."""
  from tf_gdp.policy import network  # pylint: disable=g-import-not-at-top
  try:
    policy_config = network.PolicyConfig(**(config or {}))
  except (TypeError, ValueError) as e:
    raise errors.InputError(f"bad policy config: {e}") from e
  return network.GdpPolicy(policy_config)


def read_policy_config(path: str) -> dict:
  """A saved policy config; fields it predates get their old behaviour."""
  from tf_gdp.policy import network  # pylint: disable=g-import-not-at-top
  try:
    with open(path, encoding="utf-8") as f:
      config = json.load(f)
  except (OSError, ValueError) as e:
    raise errors.InputError(f"{path}: unreadable policy config: {e}") from e
  if not isinstance(config, dict):
    raise errors.InputError(f"{path}: a policy config must be a JSON object")
  return {**network.SAVED_DEFAULTS, **config}


def policy_config_dict(policy: tf.keras.Model) -> dict:
  config = getattr(policy, "config", None)
  if config is None or not dataclasses.is_dataclass(config):
    raise errors.InputError(
        f"{type(policy).__name__} has no dataclass `config`; only policies "
        "that can be rebuilt from their config can be saved")
  return dataclasses.asdict(config)


def save_policy(policy: tf.keras.Model, directory: str) -> str:
  """Writes `policy_config.json` + weights into `directory`, atomically.

  Everything is written into a fresh sibling directory first, which then
  replaces `directory` by renames, so a reader (or a kill) sees the old
  policy or the new one, never half of each.
  """
  directory = os.path.abspath(directory)
  parent = os.path.dirname(directory)
  os.makedirs(parent, exist_ok=True)
  staging = f"{directory}.tmp-{os.getpid()}-{time.monotonic_ns()}"
  os.makedirs(staging)
  try:
    with open(os.path.join(staging, POLICY_CONFIG_FILE), "w",
              encoding="utf-8") as f:
      json.dump(policy_config_dict(policy), f, indent=1)
    tf.train.Checkpoint(policy=policy).write(
        os.path.join(staging, POLICY_WEIGHTS))
    old = None
    if os.path.exists(directory):
      old = f"{directory}.old-{os.getpid()}-{time.monotonic_ns()}"
      os.replace(directory, old)
    os.replace(staging, directory)
    if old is not None:
      shutil.rmtree(old, ignore_errors=True)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  return directory


def load_policy(path: str) -> tf.keras.Model:
  """A policy saved by `save_policy`, or the policy of a training root dir.

  `path` is a directory with `policy_config.json` and either `weights*`
  (an exported policy) or `checkpoints/` (a `pretrain` / `finetune` root
  directory: its latest checkpoint's policy is loaded).
  """
  config_path = os.path.join(path, POLICY_CONFIG_FILE)
  if not os.path.isfile(config_path):
    raise errors.InputError(
        f"{path}: not a saved policy (no {POLICY_CONFIG_FILE})")
  config = read_policy_config(config_path)
  policy = build_policy(config)
  prefix = os.path.join(path, POLICY_WEIGHTS)
  if not tf.io.gfile.exists(prefix + ".index"):
    prefix = tf.train.latest_checkpoint(os.path.join(path, "checkpoints"))
    if prefix is None:
      raise errors.InputError(f"{path}: no policy weights or checkpoints")
  # Deferred restoration: the variables are created (and restored) on the
  # policy's first call.
  tf.train.Checkpoint(policy=policy).restore(prefix).expect_partial()
  policy._tf_gdp_restored_from = prefix  # pylint: disable=protected-access
  return policy


# ---- workflows ---------------------------------------------------------------


def _as_task(item, topology=None) -> environment.PlacementTask:
  if isinstance(item, environment.PlacementTask):
    return item
  if isinstance(item, op_graph.OpGraph) and topology is not None:
    return environment.PlacementTask(item, topology)
  raise errors.InputError(
      "expected a PlacementTask, or an OpGraph and a topology")


def pretrain(graphs: Sequence[Any], topologies: Optional[Sequence[Any]] = None,
             *, budget: Budget, root_dir: str,
             policy_config: Optional[dict] = None,
             config: Optional[TrainConfig] = None,
             env_options: Optional[dict] = None,
             log: Optional[Callable[[str], None]] = None) -> TrainResult:
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
    log: progress line sink.
  """
  tasks = []
  for item in graphs:
    if isinstance(item, environment.PlacementTask):
      tasks.append(item)
    else:
      tasks += [_as_task(item, t) for t in (topologies or [None])]
  os.makedirs(root_dir, exist_ok=True)
  config_path = os.path.join(root_dir, POLICY_CONFIG_FILE)
  if os.path.isfile(config_path):
    policy_config = read_policy_config(config_path)
  policy = build_policy(policy_config)
  fileio.write_atomically(config_path,
                          json.dumps(policy_config_dict(policy), indent=1))
  env = environment.PlacementEnv(tasks, **(env_options or {}))
  try:
    trainer = Trainer(env, policy, config=config, root_dir=root_dir, log=log)
    result = trainer.run(budget)
  finally:
    env.close()
  save_policy(policy, os.path.join(root_dir, "policy"))
  return result


# Fine-tuning and zero-shot sampling start from at least this mean entropy
# per group, as a fraction of the uniform distribution's (see
# `entropy_floor_scale`).
ENTROPY_FLOOR = 0.25


def entropy_floor_scale(logits: np.ndarray, group_mask: np.ndarray,
                        floor: float) -> float:
  """Largest factor in (0, 1] putting softmax(factor * logits) at the floor.

  A pre-trained policy is often nearly deterministic on a graph it never
  saw (measured: mean entropy 0.017 nats on a two-worker CPU graph after
  pre-training on GPUs); then every sample is the greedy placement, PPO's
  advantages are all zero and fine-tuning cannot move. Scaling the logits
  down keeps the policy's preferences (the order of devices per group) but
  makes it explore again. `floor` is a fraction of the maximum entropy
  (uniform over each group's allowed devices), averaged over real groups
  with a choice; 1.0 if already above it.
  """
  logits = np.asarray(logits, np.float64)
  allowed = logits > network_neg_logit() / 2
  choice = np.asarray(group_mask, bool) & (allowed.sum(-1) >= 2)
  if floor <= 0 or not choice.any():
    return 1.0
  logits, allowed = logits[choice], allowed[choice]
  maximum = np.log(allowed.sum(-1))

  def mean_entropy(factor):
    z = np.where(allowed, logits * factor, -np.inf)
    z = z - z.max(-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(-1, keepdims=True)
    h = -np.sum(np.where(p > 0, p * np.log(np.maximum(p, 1e-300)), 0.0), -1)
    return float(np.mean(h / maximum))

  if mean_entropy(1.0) >= floor:
    return 1.0
  low, high = 1e-4, 1.0  # entropy falls as the factor grows
  for _ in range(40):
    middle = math.sqrt(low * high)
    if mean_entropy(middle) >= floor:
      low = middle
    else:
      high = middle
  return low


def network_neg_logit() -> float:
  from tf_gdp.policy import network  # pylint: disable=g-import-not-at-top
  return network.NEG_LOGIT


def apply_entropy_floor(policy, observation: dict, floor: float,
                        log: Optional[Callable[[str], None]] = None) -> float:
  """Lowers `policy.logit_scale` so its entropy on `observation` >= floor."""
  scale = getattr(policy, "logit_scale", None)
  if scale is None or floor <= 0:
    return 1.0
  batched = {k: tf.convert_to_tensor(v[None]) for k, v in observation.items()}
  logits = _policy_logits(policy, batched).numpy()
  factor = entropy_floor_scale(logits, observation["group_mask"], floor)
  if factor < 1.0:
    scale.assign(float(scale.numpy()) * factor)
    if log:
      log(f"policy too certain on this graph: logits scaled by {factor:.3g} "
          f"(entropy floor {floor:.2f} of uniform)")
  return factor


def finetune(policy_path: str, task, topology=None, *, budget: Budget,
             root_dir: Optional[str] = None,
             config: Optional[TrainConfig] = None,
             env_options: Optional[dict] = None,
             log: Optional[Callable[[str], None]] = None,
             entropy_floor: float = ENTROPY_FLOOR) -> TrainResult:
  """Continues training a saved policy on one graph.

  `task` is a PlacementTask, or an OpGraph with `topology`. The budget is
  seconds and/or evaluations (`Budget`). With a `root_dir`, checkpoints and
  the best placement go there and a killed fine-tuning run resumes from
  them (they take precedence over `policy_path`); the fine-tuned policy is
  exported to `<root_dir>/policy`. A policy less random than
  `entropy_floor` on this graph has its logits scaled down first
  (`entropy_floor_scale`).
  """
  task = _as_task(task, topology)
  policy = load_policy(policy_path)
  if config is None:
    config = TrainConfig(graphs_per_iteration=1)
  if root_dir:
    os.makedirs(root_dir, exist_ok=True)
    fileio.write_atomically(os.path.join(root_dir, POLICY_CONFIG_FILE),
                            json.dumps(policy_config_dict(policy), indent=1))
  env = environment.PlacementEnv([task], **(env_options or {}))
  try:
    trainer = Trainer(env, policy, config=config, root_dir=root_dir, log=log)
    apply_entropy_floor(policy, env.observation(0), entropy_floor, log)
    result = trainer.run(budget)
  finally:
    env.close()
  if root_dir:
    save_policy(policy, os.path.join(root_dir, "policy"))
  return result


def exploration_noise(shape, seed, scale: float,
                      pipeline: float) -> tf.Tensor:
  """Random noise of `shape` [S, D, EXPLORATION_SIZE] for S samples.

  Unit and bucket columns: normal, standard deviation `scale`. The pipeline
  columns (one per stage rule): `pipeline` times 0.5 + |N(0, 1)| (a
  negative gain would push every op away from its stage's device, no
  pipeline at all, and a gain under about half the default 48 rarely
  outweighs the policy's own logits), in odd rows only, so that every
  other sample (with an even number of samples per graph, half of each
  graph's) is drawn as without it: pipeline pushes make most samples of a
  graph that should stay whole a little worse. The pushed rows take the
  stage rules in turn (row 1 the first rule's column, row 3 the second's,
  ...): each push follows one rule. Every other round of the rules (pushed
  rows 2R+1 to 4R-1 of each 4R, R rules) also shifts the device centres by
  uniform(-0.5, 0.5) slots (`features.PIPELINE_SHIFT_COLUMN`), trying a
  neighbouring split of the stages over the devices.
  """
  from tf_gdp.policy import features  # pylint: disable=g-import-not-at-top
  first = features.PIPELINE_NOISE_COLUMN
  rules = features.NUM_STAGE_RULES
  shift_seed = tf.random.experimental.stateless_fold_in(seed, 1)
  column = tf.range(features.EXPLORATION_SIZE)
  is_gain = (column >= first) & (column < features.PIPELINE_SHIFT_COLUMN)
  is_shift = column == features.PIPELINE_SHIFT_COLUMN
  row = tf.range(shape[0])
  odd = row % 2 == 1
  # The gain column each row pushes along; -1 (none) for even rows.
  pushed = tf.where(odd, first + (row // 2) % rules, -1)
  shifted = odd & ((row // 2) // rules % 2 == 1)
  keep = ((~is_gain & ~is_shift)[None, :] |
          (column[None, :] == pushed[:, None]) |
          (is_shift[None, :] & shifted[:, None]))  # [S, SIZE]
  scales = tf.where(is_gain, tf.cast(pipeline, tf.float32),
                    tf.where(is_shift, tf.cast(pipeline > 0, tf.float32),
                             tf.cast(scale, tf.float32)))
  noise = tf.random.stateless_normal(shape, seed=seed)
  uniform = tf.random.stateless_uniform(shape, seed=shift_seed) - 0.5
  noise = tf.where(is_gain, 0.5 + tf.abs(noise),
                   tf.where(is_shift, uniform, noise))
  return noise * scales * tf.cast(keep, tf.float32)[:, None, :]


def zeroshot(policy, task, topology=None, *, samples: int = 16,
             seed: int = 0,
             entropy_floor: float = ENTROPY_FLOOR,
             exploration_scale: float = EXPLORATION_SCALE,
             pipeline_exploration: float = PIPELINE_EXPLORATION
             ) -> ZeroShotResult:
  """Places an unseen graph with one forward pass of `policy`.

  Greedy (argmax per group) and `samples` sampled placements are simulated
  in one batch; the fastest valid one wins (the fastest overall if none fits
  memory). Hard constraints hold by construction: the policy masks devices a
  group may not use, and groups are placed whole.

  Args:
    policy: a policy model, or a path for `load_policy`.
    task: a PlacementTask, or an OpGraph with `topology`.
    topology: the devices, when `task` is an OpGraph.
    samples: sampled placements besides the greedy one.
    seed: sampling seed.
    entropy_floor: samples are drawn from logits scaled so that their mean
      entropy is at least this (`entropy_floor_scale`): a nearly
      deterministic policy would otherwise only repeat its greedy choice.
    exploration_scale: each sample's coherent exploration noise (as in
      training, `TrainConfig.exploration_scale`); 0 for none.
    pipeline_exploration: the random pipeline gain of every other sample
      (as in training); 0 for none. The greedy placement never has noise.
  """
  started = time.perf_counter()
  task = _as_task(task, topology)
  if isinstance(policy, str):
    policy = load_policy(policy)
  inputs = features.policy_inputs(task.graph, task.topology)
  observation = {k: tf.convert_to_tensor(v[None])
                 for k, v in features.as_tensors(inputs).items()}
  seed_pair = tf.constant([seed, 0], tf.int32)
  sample_logits = None
  if ((exploration_scale > 0 or pipeline_exploration > 0) and
      hasattr(policy, "noisy_logits")):
    # One network pass: row 0 noise-free (greedy), then each sample under
    # its own exploration noise (coherent moves, `policy.network` doc).
    shape = [samples + 1] + observation["exploration_noise"].shape[1:].as_list()
    noise = exploration_noise(shape, seed_pair + [0, 1], exploration_scale,
                              pipeline_exploration)
    noise = tf.concat([tf.zeros_like(noise[:1]), noise[1:]], 0)
    every = policy.noisy_logits(observation, noise)
    logits, sample_logits = every[0], every[1:]
  else:
    logits = _policy_logits(policy, observation)
  greedy = tf.argmax(logits, axis=-1, output_type=tf.int32)
  factor = entropy_floor_scale(logits.numpy(), observation["group_mask"][0],
                               entropy_floor)
  if sample_logits is not None:
    # The floor's factor scales the policy's logits, not the noise (as in
    # training, where the noise is added after `logit_scale`).
    sampled = stateless_categorical_sample(
        logits * factor + (sample_logits - logits), seed_pair)
  else:
    sampled = tf.transpose(tf.random.stateless_categorical(
        tf.reshape(logits * factor, [-1, tf.shape(logits)[-1]]), samples,
        seed=seed_pair, dtype=tf.int32))  # [K, G]
  actions = np.concatenate([greedy.numpy()[None], sampled.numpy()])
  placements = np.stack([features.group_to_node_placement(inputs, row)
                         for row in actions])
  result = simulator.simulate_batch(task.graph, placements, task.topology)
  step = result.step_time_us
  candidates = np.flatnonzero(result.valid)
  if not candidates.size:
    candidates = np.arange(len(step))
  best = int(candidates[np.argmin(step[candidates])])
  return ZeroShotResult(
      placement=placements[best].astype(np.int32),
      step_time_us=float(step[best]), valid=bool(result.valid[best]),
      chosen="greedy" if best == 0 else "sample",
      greedy_step_time_us=float(step[0]), sample_step_times_us=step[1:],
      group_devices=actions[best, :inputs.num_groups].astype(np.int32),
      seconds=time.perf_counter() - started,
      valid_step_times_us=np.where(result.valid, step, np.inf))


def _policy_logits(policy, observation) -> tf.Tensor:
  """[G, D] logits of one observation."""
  return policy(observation, training=False)[0]
