"""Imitation of search: a supervised phase before PPO.

A fresh policy samples near-uniform placements, and PPO from there spends
thousands of evaluations rediscovering what a plain search already knows.
Pre-training can therefore start by fitting the policy to each task's
search target (`search_targets`: the best valid placement of the one-shot
baselines and a budgeted local search): minimise the mean cross-entropy of
the policy's logits [groups, devices] (`actor_network.shared_logits`, the
logits PPO samples from) against the target's device per colocation group,
over the real groups of each graph (padding groups and devices masked as
in the environment), each graph weighing the same. With `matched_labels`
each target is first relabelled by the symmetry of its topology
(`device_symmetries`: a renaming of interchangeable devices that simulates
the same) under which the policy's current logits score it best, so the
policy is taught the target's shape, not the search's arbitrary names for
equal GPUs. Adam; `epochs` passes
over the tasks in an order drawn from the seed, `graphs_per_step` graphs
per gradient step.

    stats = imitation.imitate(policy, env, found, config=ImitationConfig(
        epochs=30))

Per epoch the statistics give the mean loss and the accuracy (the fraction
of groups whose most likely device is the target's) seen while training;
at the end, one more pass gives the final loss and accuracy and the greedy
placement of every task, repaired to fit memory as zero-shot placements are
(`zero_shot.zeroshot`), and its step time over the target's.

Fitting the training targets is not the point: the policy is for graphs it
has never seen. Validation tasks (graphs of families kept out of training,
with their own targets) are judged the same way every few epochs, and
`keep_best` ends with the weights that placed them best: early stopping on
held-out families.

`pretrain_phase` is the phase inside `workflows.pretrain`: targets cached
under `<root_dir>/targets/`, the statistics written to
`<root_dir>/imitation.json` at the end, and a checkpoint saved right after,
so that a resumed run (one with a checkpoint or that file) never imitates
again.
"""

import dataclasses
import json
import math
import os
import time
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tf_gdp import fileio
from tf_gdp.baselines import repair
from tf_gdp.policy import features
from tf_gdp.rl import actor_network
from tf_gdp.rl import canonical_devices
from tf_gdp.rl import device_symmetries
from tf_gdp.rl import environment
from tf_gdp.rl import run_dir
from tf_gdp.rl import search_targets


@dataclasses.dataclass(frozen=True)
class ImitationConfig:
  """Settings of the imitation phase.

  Attributes:
    epochs: passes over the tasks (0: no imitation phase).
    evaluations: the targets' local-search budget, in simulator
      evaluations.
    learning_rate: Adam step size.
    graphs_per_step: tasks per gradient step.
    seed: the task order of each epoch.
    greedy_check: end with the greedy placements judged against the
      targets.
    canonical_labels: imitate each target with its interchangeable devices
      numbered by first use, where that is no slower
      (`canonical_devices`).
    matched_labels: imitate each target under the symmetry of its topology
      closest to the policy's prediction (module doc).
    target_tolerance: imitate the simplest candidate within this fraction
      of the fastest (`search_targets`; 0: the fastest).
    validate_every: with validation tasks, their greedy placements are
      judged against their targets every this many epochs (0: at the end
      only).
    keep_best: with validation tasks, end with the weights of the epoch
      whose greedy placements were invalid on the fewest validation tasks,
      and among those had the lowest greedy / target (early stopping).
    restart_every: Adam starts afresh (moments and step count zeroed) after
      every this many epochs; 0: never.
  """
  epochs: int = 0
  evaluations: int = search_targets.DEFAULT_EVALUATIONS
  learning_rate: float = 1e-3
  graphs_per_step: int = 4
  seed: int = 0
  greedy_check: bool = True
  canonical_labels: bool = False
  matched_labels: bool = False
  target_tolerance: float = 0.0
  validate_every: int = 0
  keep_best: bool = False
  restart_every: int = 0

  def __post_init__(self):
    if (self.epochs < 0 or self.evaluations < 1 or self.learning_rate <= 0
        or self.graphs_per_step < 1 or not 0 <= self.target_tolerance < 1
        or self.validate_every < 0 or self.restart_every < 0):
      raise ValueError(
          "imitation needs epochs >= 0, evaluations >= 1, learning_rate > 0, "
          "graphs_per_step >= 1, target_tolerance in [0, 1) and "
          f"validate_every, restart_every >= 0; got {self}")


def imitate(policy: tf.keras.Model, env: environment.PlacementEnv,
            targets: Sequence[search_targets.Target], *,
            config: ImitationConfig,
            validation: Optional[Tuple[environment.PlacementEnv,
                                       Sequence[search_targets.Target]]] = None,
            log: Optional[Callable[[str], None]] = None,
            stop: Optional[Callable[[], bool]] = None) -> dict:
  """Fits `policy` to the targets of `env`'s tasks; returns the statistics.

  `stop()`, asked where Adam restarts (after every epoch without
  restarts), ends training early when True (a budget in seconds); one
  traced step serves the whole fit.

  `targets[i]` belongs to task i; tasks without a target (`method` None)
  are left out. Statistics: epochs (those run), learning_rate, tasks,
  without_target (task names),
  history (per epoch: epoch, loss, accuracy, seconds), loss and accuracy
  (a last pass after training), greedy (task -> step_time_us, target_us,
  ratio, valid), greedy_ratio (geometric mean of the ratios, valid greedy
  placements only; NaN without any), evaluations (the greedy check's
  simulations), seconds.

  `validation` (env, targets) are tasks never trained on, judged the same
  way every `config.validate_every` epochs and at the end: each history
  row judged gains validation_ratio and validation_invalid, and the
  statistics gain validation (the last judgement: per task, geometric mean
  and how many are invalid), validation_start
  (the geometric mean before the first epoch, when judged every few
  epochs) and, with `config.keep_best`, best_epoch (whose weights the
  policy ends with; 0: the policy as it started).
  """
  log = log or (lambda line: None)
  started = time.perf_counter()
  if len(targets) != env.num_tasks:
    raise ValueError(f"{len(targets)} targets for {env.num_tasks} tasks")
  indices = [i for i, t in enumerate(targets) if t.method is not None]
  stats = {"epochs": int(config.epochs),
           "learning_rate": float(config.learning_rate), "tasks": len(indices),
           "without_target": [t.task for t in targets if t.method is None],
           "history": [], "greedy": {}, "evaluations": 0}
  if not indices:
    log("imitation: no task has a target; nothing to imitate")
    return dict(stats, loss=math.nan, accuracy=math.nan,
                greedy_ratio=math.nan, seconds=time.perf_counter() - started)
  labels, masks, relabelled = _labels(env, targets, config.canonical_labels)
  stats["relabelled"] = relabelled
  symmetries = _symmetries(env, config.matched_labels)
  variables = _built_variables(policy, env, indices[0])
  optimizer = tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
  optimizer.build(variables)

  @tf.function(reduce_retracing=True)
  def train_step(observation, label, mask, symmetry):
    with tf.GradientTape() as tape:
      logits = actor_network.shared_logits(policy, observation, training=True)
      loss, hits = _loss_and_hits(logits, _matched(logits, label, mask,
                                                   symmetry), mask)
    gradients = tape.gradient(loss, variables)
    optimizer.apply_gradients([(g, v) for g, v in zip(gradients, variables)
                               if g is not None])
    return loss, hits

  groups = float(sum(masks[i].sum() for i in indices))
  judge = _Validation(policy, validation, config) if validation else None
  best = None  # (ratio, epoch, weights)
  if judge is not None and config.validate_every and config.epochs:
    start = judge.judge()
    stats["validation_start"] = start["greedy_ratio"]  # before any epoch
    if config.keep_best:
      best = (_validation_key(start), 0,
              [v.numpy() for v in policy.variables])
  for epoch in range(1, config.epochs + 1):
    clock = time.perf_counter()
    order = np.random.default_rng((config.seed, epoch)).permutation(indices)
    total_loss = total_hits = 0.0
    for batch in _batches(order, config.graphs_per_step):
      loss, hits = train_step(*_batch(env, batch, labels, masks, symmetries))
      total_loss += float(loss) * len(batch)
      total_hits += float(hits)
    row = {"epoch": epoch, "loss": total_loss / len(indices),
           "accuracy": total_hits / groups,
           "seconds": time.perf_counter() - clock}
    if judge is not None and (epoch == config.epochs or (
        config.validate_every and epoch % config.validate_every == 0)):
      stats["validation"] = judge.judge()
      row["validation_ratio"] = stats["validation"]["greedy_ratio"]
      row["validation_invalid"] = stats["validation"]["invalid"]
      key = _validation_key(stats["validation"])
      if config.keep_best and (best is None or key < best[0]):
        best = (key, epoch, [v.numpy() for v in policy.variables])
    stats["history"].append(row)
    log(f"imitation epoch {epoch}/{config.epochs}: loss {row['loss']:.4f}, "
        f"accuracy {row['accuracy']:.3f}" + (
            f", validation greedy / target {row['validation_ratio']:.3f}"
            if "validation_ratio" in row else ""))
    stats["epochs"] = epoch
    period = config.restart_every or 1
    if epoch < config.epochs and epoch % period == 0:
      if stop is not None and stop():
        break
      if config.restart_every:
        for variable in optimizer.variables:
          variable.assign(tf.zeros_like(variable))
  if judge is not None and "validation" not in stats:  # no epochs
    stats["validation"] = judge.judge()
  if best is not None:
    for variable, value in zip(policy.variables, best[2]):
      variable.assign(value)
    stats["best_epoch"] = best[1]
    if best[1] != stats["epochs"]:
      stats["validation"] = judge.judge()
    log(f"imitation: the weights of epoch {best[1]} (validation greedy / "
        f"target {best[0][1]:.3f}, {best[0][0]} invalid)")
  loss, accuracy, greedy = _final_pass(policy, env, indices, labels, masks,
                                       symmetries, config.graphs_per_step)
  stats.update(loss=loss, accuracy=accuracy)
  if config.greedy_check:
    judged = _judge_greedy(env, targets, greedy)
    stats.update(greedy=judged["tasks"], evaluations=judged["evaluations"])
    stats["greedy_ratio"] = judged["greedy_ratio"]
  else:
    stats["greedy_ratio"] = math.nan
  stats["seconds"] = time.perf_counter() - started
  log(f"imitation done: loss {loss:.4f}, accuracy {accuracy:.3f}"
      + (f", greedy / target {stats['greedy_ratio']:.3f} (geomean)"
         if math.isfinite(stats["greedy_ratio"]) else ""))
  return stats


class _Validation:
  """Judges the policy's greedy placements of tasks it is not trained on."""

  def __init__(self, policy, validation, config: ImitationConfig):
    self.policy = policy
    self.env, self.targets = validation
    if len(self.targets) != self.env.num_tasks:
      raise ValueError(f"{len(self.targets)} validation targets for "
                       f"{self.env.num_tasks} tasks")
    self.indices = [i for i, t in enumerate(self.targets)
                    if t.method is not None]
    self.labels, self.masks, _ = _labels(self.env, self.targets, False)
    self.symmetries = _symmetries(self.env, False)
    self.size = config.graphs_per_step

  def judge(self) -> dict:
    """{"tasks", "greedy_ratio", "invalid", "evaluations"} of
    `_judge_greedy`."""
    if not self.indices:
      return {"tasks": {}, "greedy_ratio": math.nan, "invalid": 0,
              "evaluations": 0}
    _, _, greedy = _final_pass(self.policy, self.env, self.indices,
                               self.labels, self.masks, self.symmetries,
                               self.size)
    return _judge_greedy(self.env, self.targets, greedy)


def _judge_greedy(env, targets, greedy) -> dict:
  """Each task's greedy placement, repaired as zero-shot ones are, over its
  target: tasks (name -> step_time_us, target_us, ratio, valid, repaired),
  greedy_ratio (geometric mean over the valid ones; NaN without any),
  invalid (how many the repair could not make valid) and evaluations (the
  repair's simulations)."""
  tasks, ratios, evaluations = {}, [], 0
  for i, devices in greedy.items():
    task, target = env.tasks[i], targets[i]
    placement = features.group_to_node_placement(
        env.inputs(i), devices[:env.inputs(i).num_groups])
    fixed = repair.repair(task.graph, task.topology, placement)
    evaluations += int(fixed.evaluations)
    ratio = fixed.step_time_us / target.step_time_us
    tasks[task.name] = {
        "step_time_us": float(fixed.step_time_us),
        "target_us": float(target.step_time_us), "ratio": float(ratio),
        "valid": bool(fixed.valid), "repaired": bool(fixed.changed)}
    if fixed.valid:
      ratios.append(ratio)
  return {"tasks": tasks, "evaluations": evaluations,
          "invalid": len(tasks) - len(ratios),
          "greedy_ratio": (float(np.exp(np.mean(np.log(ratios))))
                           if ratios else math.nan)}


def _validation_key(judged: dict) -> tuple:
  """What `keep_best` minimises: invalid placements first (the geometric
  mean leaves them out, so a lower mean could hide one), then the mean."""
  ratio = judged["greedy_ratio"]
  return (judged["invalid"], ratio if math.isfinite(ratio) else math.inf)


def pretrain_phase(trainer, config: ImitationConfig, *,
                   validation_env: Optional[environment.PlacementEnv] = None,
                   log: Optional[Callable[[str], None]] = None
                   ) -> Optional[dict]:
  """The imitation phase of a pretrain run (module doc); its statistics.

  `trainer` is the run's `trainer.Trainer` (built, so restored if the root
  directory holds a run). Returns the statistics (read back from
  `<root_dir>/imitation.json` when an earlier start of this run imitated),
  or None when the phase is off or the run is past it. The targets are searched
  with seed 0 whatever the run's seed: they are data, shared by runs that
  differ only in their seed.
  """
  log = log or (lambda line: None)
  if not trainer.root_dir:
    return None
  marker = run_dir.imitation_path(trainer.root_dir)
  if os.path.isfile(marker):
    try:
      with open(marker, encoding="utf-8") as f:
        return json.load(f)
    except (OSError, ValueError) as e:
      log(f"imitation ran before, but {marker} is unreadable ({e})")
      return None
  if config.epochs <= 0:
    return None
  if trainer.manager is not None and trainer.manager.latest_checkpoint:
    log("the run has a PPO checkpoint: no imitation phase")
    return None
  found = search_targets.targets(
      trainer.env.tasks, run_dir.targets_dir(trainer.root_dir),
      evaluations=config.evaluations, tolerance=config.target_tolerance,
      log=log)
  validation = None
  if validation_env is not None and validation_env.num_tasks:
    validation = (validation_env, search_targets.targets(
        validation_env.tasks, run_dir.targets_dir(trainer.root_dir),
        evaluations=config.evaluations, tolerance=config.target_tolerance,
        log=log))
  stats = imitate(trainer.policy, trainer.env, found, config=config,
                  validation=validation, log=log)
  stats["search_evaluations"] = int(sum(t.evaluations for t in found))
  stats["targets"] = {t.task: {"method": t.method,
                               "step_time_us": _finite(t.step_time_us),
                               "fastest_us": _finite(t.fastest_us),
                               "evaluations": t.evaluations,
                               "skipped": sorted(t.skipped)}
                      for t in found}
  trainer.save()
  fileio.write_atomically(marker, json.dumps(_json_safe(stats), indent=1))
  return stats


def _labels(env, targets, canonical_labels: bool):
  """int32[T, G_max] target device per group; float32[T, G_max] weights;
  how many targets were relabelled (`canonical_devices`).

  A weight is 1 on each real group of a task with a target whose target
  device the policy may choose (a valid placement always is one).
  """
  relabelled = 0
  count, groups = env.num_tasks, env.padding["max_groups"]
  labels = np.zeros((count, groups), np.int32)
  masks = np.zeros((count, groups), np.float32)
  for i, target in enumerate(targets):
    if target.method is None:
      continue
    observation = env.observation(i)
    devices = np.asarray(target.group_devices, np.int32)
    if canonical_labels:
      task = env.tasks[i]
      devices, changed = canonical_devices.canonical(
          env.inputs(i), task.graph, task.topology, devices,
          target.step_time_us)
      relabelled += int(changed)
    real = len(devices)
    labels[i, :real] = devices
    allowed = (observation["allowed"][np.arange(real), devices] &
               observation["device_mask"][devices])
    masks[i, :real] = (observation["group_mask"][:real] & allowed).astype(
        np.float32)
  return labels, masks, relabelled


def _symmetries(env, matched: bool) -> np.ndarray:
  """int32[T, P, D_max]: each task's device symmetries, padded.

  Without `matched` only the identity. Padding devices map to themselves;
  tasks with fewer symmetries repeat the identity.
  """
  width = env.padding["max_devices"]
  by_topology = {}  # tasks share topologies; 8 devices take ~1 s each
  found = []
  for task in env.tasks:
    topology = task.topology
    key = (topology.name, topology.devices, topology.bandwidth_gbps.tobytes(),
           topology.latency_us.tobytes(), topology.routes)
    if key not in by_topology:
      by_topology[key] = (
          device_symmetries.symmetries(topology) if matched else
          np.arange(topology.num_devices, dtype=np.int32)[None])
    found.append(by_topology[key])
  count = max(len(s) for s in found)
  table = np.tile(np.arange(width, dtype=np.int32), (len(found), count, 1))
  for i, symmetry in enumerate(found):
    table[i, :len(symmetry), :symmetry.shape[1]] = symmetry
  return table


def _matched(logits, labels, mask, symmetries):
  """labels [B, G] renamed by the symmetry [B, P, D] the logits like best.

  A symmetry's score is the summed log-probability of the renamed labels
  over the real groups; the choice is data, not differentiated.
  """
  depth = tf.shape(logits)[-1]
  log_p = tf.stop_gradient(tf.nn.log_softmax(logits))
  log_p = tf.where(tf.math.is_finite(log_p), log_p, -1e9)
  # score[b, a, c]: the groups labelled a, were they labelled c.
  score = tf.einsum("bga,bgc->bac",
                    tf.one_hot(labels, depth) * mask[..., None], log_p)
  per_symmetry = tf.einsum("bpac,bac->bp", tf.one_hot(symmetries, depth),
                           score)
  best = tf.argmax(per_symmetry, axis=1, output_type=tf.int32)
  renaming = tf.gather(symmetries, best, batch_dims=1)  # [B, D]
  return tf.gather(renaming, labels, batch_dims=1)


def _built_variables(policy, env, index: int) -> List[tf.Variable]:
  """The policy's trainable variables, created by one call if need be."""
  actor_network.shared_logits(policy, _stack(env, [index]))
  return list(policy.trainable_variables)


def _stack(env, batch) -> dict:
  """The batch's observations, cut to its own largest graph's sizes."""
  stacked = features.trim_batch(
      {key: np.stack([env.observation(int(i))[key] for i in batch])
       for key in env.observation(int(batch[0]))})
  return {key: tf.convert_to_tensor(value) for key, value in stacked.items()}


def _batch(env, batch, labels, masks, symmetries):
  """(observation, labels, weights, symmetries) of a batch, cut alike."""
  observation = _stack(env, batch)
  groups, devices = observation["allowed"].shape[1:]
  return (observation, labels[batch][:, :groups], masks[batch][:, :groups],
          symmetries[batch][..., :devices])


def _batches(order, size: int):
  for start in range(0, len(order), size):
    yield np.asarray(order[start:start + size])


def _loss_and_hits(logits, labels, mask):
  """Mean over graphs of the masked mean cross-entropy; correct groups."""
  cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits)
  per_graph = tf.reduce_sum(cross_entropy * mask, -1) / tf.maximum(
      tf.reduce_sum(mask, -1), 1.0)
  hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                          labels), tf.float32)
  return tf.reduce_mean(per_graph), tf.reduce_sum(hits * mask)


def _final_pass(policy, env, indices, labels, masks, symmetries, size: int):
  """(loss, accuracy, task index -> greedy group devices) after training."""
  total_loss = total_hits = 0.0
  greedy = {}
  for batch in _batches(indices, size):
    observation, label, mask, symmetry = _batch(env, batch, labels, masks,
                                                symmetries)
    logits = actor_network.shared_logits(policy, observation)
    matched = _matched(logits, label, mask, symmetry)
    loss, hits = _loss_and_hits(logits, matched, mask)
    total_loss += float(loss) * len(batch)
    total_hits += float(hits)
    argmax = tf.argmax(logits, -1, output_type=tf.int32).numpy()
    greedy.update(zip((int(i) for i in batch), argmax))
  groups = float(sum(masks[i].sum() for i in indices))
  return total_loss / len(indices), total_hits / groups, greedy


def _finite(value: float) -> Optional[float]:
  return float(value) if math.isfinite(value) else None


def _json_safe(value):
  """NaN and infinities as null: the statistics file is strict JSON."""
  if isinstance(value, dict):
    return {k: _json_safe(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_json_safe(v) for v in value]
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value
