"""HDP-style baseline: a learned grouper and placer trained by REINFORCE.

This module holds the search (its knobs, result and training loop); the
graph side in numpy (unit features, group embeddings, masks, repair) is in
`hdp_problem`, and the TensorFlow networks are in `hdp_model`, imported on
first use so that importing the baseline does not import TensorFlow.

After Mirhoseini et al., "A Hierarchical Model for Device Placement" (ICLR
2018), the prior art GDP compares against. Two policies are trained jointly
on the simulated step time of the placements they sample:

* **Grouper**: a two-layer feed-forward network over per-op features gives
  each op a softmax over G groups, and a group is sampled per op. Ops of one
  colocation group (`graph.group_ids`, a "unit" here) must share a device, so
  the grouper samples once per unit, from the unit's averaged features. Unit
  features: one-hot of the graph's most frequent op types (the rest share an
  "other" column), log output / persistent / scratch bytes, log compute cost
  on the cheapest and dearest device kind, log in/out degree and in/out edge
  bytes, topological position (raw and as sines/cosines at 6 frequencies, so
  the grouper can cut the graph into contiguous stretches), which devices
  the op may use, and log unit size; columns standardised over units.
* **Placer**: a sequence-to-sequence network over the G groups, as in the
  paper: each group's embedding (log-scaled op-type counts, node count,
  output / persistent / scratch bytes and compute cost summed over its ops,
  mean topological position, its allowed devices, and its adjacency rows:
  log bytes sent to and received from every other group) is projected and
  read by an LSTM encoder; an LSTM decoder with attention emits one device per
  group, fed the previous group's device. Devices a group may not use are
  masked: a group may use a device only if every op in it may (device kinds
  and pins, from `common.group_view`, i.e. the simulator's own tables). If
  no device suits all of a group's ops the group is left unmasked and each
  unit that lands on a device it may not use is moved to its own fallback
  (its allowed device with the least compute time), as TF's soft placement
  would; the repair is part of the environment, so every placement sampled
  satisfies the constraints (a unit no device may take is an InputError).
* **Training**: REINFORCE on the papers' reward, -sqrt(step time)
  (normalised by the median step time of the first batch, so learning rates
  do not depend on the graph's time scale). Placements the simulator marks
  invalid (out of memory) count as `invalid_penalty` times their simulated
  step time. The policy gradient flows through both samples: loss =
  -mean_b A_b (log p(grouping_b) + log p(placement_b | grouping_b)) -
  entropy_weight * entropy, with Adam. Each step samples `batch_size`
  (grouping, placement) pairs and evaluates them in one `simulate_batch`
  call. The best valid placement seen is kept.
  Baseline: the paper subtracts an exponential moving average of the reward
  (`baseline="ema"`, decay `baseline_decay`). Here, while the policy improves
  quickly (e.g. while it learns to keep ops off a slow CPU) that average lags
  behind, almost every sample gets a positive advantage, and the resulting
  noise sharpens the policy onto whatever it sampled. On a layered 5k-node
  graph on p100x4 (seed 0, 200 evaluations) it reached 83.3 ms against
  72.3 ms with the batch mean, and with a placer step of 1e-3 it collapsed
  onto a single device (251.8 ms). The default is therefore the
  leave-one-out mean of the batch (`baseline="batch"`, unbiased), and
  advantages are divided by a moving RMS (`normalize_advantages`) so the
  entropy weight means the same on every graph.

Budget: `budget` is the number of simulator evaluations (placements
simulated), the same unit as our own RL's budget; the default is
`DEFAULT_BUDGET` (2000), i.e. 250 policy updates at the default batch of 8
(the final batch is not followed by an update: it could not change the
result). `max_seconds` optionally stops earlier on wall-clock time.

Defaults (see `HdpConfig`): G = 256 groups (capped by the number of units),
grouper hidden 64 and placer LSTM 256 (the paper's sizes), batch 8, Adam
step 5e-4 for the placer and 3e-3 for the grouper, entropy weight 1e-3,
gradient norm clip 10, invalid penalty 10. Learning rates were picked on a
layered 5k-node graph and on two chains; higher placer rates (>= 3e-3)
collapse onto one device on the two chains.

Scale: the grouper is a dense layer over [units, features] and the placer sees
only G groups, so a 60k-node graph needs tens of MB; a step's numpy side
(group embeddings, masks, repair) is O(units + edges) per sample.

Determinism: the networks are initialised and sampled from stateless TF
random ops keyed by seeds drawn from `np.random.default_rng(seed)`, so a
search on CPU is reproducible for a fixed seed and budget (but not when
`max_seconds` cuts it short).
"""

import dataclasses
import logging
import math
import time
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.baselines import hdp_problem
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

DEFAULT_BUDGET = 2000
METHOD = "hdp"
_SEED_RANGE = 2**31 - 1

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class HdpConfig:
  """Knobs of the search (pass any of them to `place` / `search`).

  Attributes:
    num_groups: G, groups the grouper chooses from (capped by the number of
      colocation units of the graph).
    batch_size: placements sampled and simulated per policy update.
    grouper_hidden: hidden units of the grouper's feed-forward layer.
    placer_hidden: LSTM size of the placer's encoder and decoder.
    device_embedding: size of the decoder's previous-device embedding.
    learning_rate: Adam step size of the placer.
    grouper_learning_rate: Adam step size of the grouper.
    baseline: "batch" (leave-one-out batch mean, the default) or "ema" (the
      paper's exponential moving average); see the module doc.
    baseline_decay: decay of the "ema" baseline and of the advantage RMS.
    entropy_weight: weight of the (grouper + placer) entropy bonus.
    grad_clip: global gradient norm clip (0 = none).
    invalid_penalty: an invalid placement's step time is multiplied by this.
    normalize_advantages: divide advantages by their moving RMS.
    num_op_types: most frequent op types given their own feature column.
    max_seconds: stop after this much wall-clock time (None = budget only).
    log_every: log a progress line every this many updates (0 = never).
  """
  num_groups: int = 256
  batch_size: int = 8
  grouper_hidden: int = 64
  placer_hidden: int = 256
  device_embedding: int = 16
  learning_rate: float = 5e-4
  grouper_learning_rate: float = 3e-3
  baseline: str = "batch"
  baseline_decay: float = 0.9
  entropy_weight: float = 1e-3
  grad_clip: float = 10.0
  invalid_penalty: float = 10.0
  normalize_advantages: bool = True
  num_op_types: int = 24
  max_seconds: Optional[float] = None
  log_every: int = 0

  def __post_init__(self):
    for name in ("num_groups", "batch_size", "grouper_hidden",
                 "placer_hidden", "device_embedding", "num_op_types"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise errors.InputError(f"hdp: {name} must be a positive integer, "
                                f"got {value!r}")
    for name in ("learning_rate", "grouper_learning_rate"):
      if not getattr(self, name) > 0:
        raise errors.InputError(f"hdp: {name} must be > 0")
    if self.baseline not in ("batch", "ema"):
      raise errors.InputError(
          f"hdp: baseline must be 'batch' or 'ema', got {self.baseline!r}")
    if not 0.0 <= self.baseline_decay < 1.0:
      raise errors.InputError("hdp: baseline_decay must be in [0, 1)")
    if self.entropy_weight < 0 or self.grad_clip < 0:
      raise errors.InputError("hdp: entropy_weight and grad_clip must be >= 0")
    if not self.invalid_penalty >= 1.0:
      raise errors.InputError("hdp: invalid_penalty must be >= 1")
    if self.max_seconds is not None and not self.max_seconds > 0:
      raise errors.InputError("hdp: max_seconds must be > 0")


@dataclasses.dataclass(frozen=True)
class HdpResult:
  """Outcome of one search.

  Attributes:
    placement: int32[num_nodes] device index per node: the best valid
      placement seen (the least penalised one if none was valid).
    best_step_time_us: its simulated step time (inf if none was valid).
    evaluations: simulator evaluations spent.
    history: [(evaluations so far, best valid step time so far)] after each
      batch; the time is inf until a valid placement has been seen.
    seconds: wall-clock time of the whole search (setup included).
    valid: whether `placement` is valid (constraints and memory).
    num_groups: G actually used.
    batch_mean_us: mean penalised step time of each batch's samples (the
      policy's own progress, not just the best-so-far).
  """
  placement: np.ndarray
  best_step_time_us: float
  evaluations: int
  history: list
  seconds: float
  valid: bool = True
  num_groups: int = 0
  batch_mean_us: list = dataclasses.field(default_factory=list)


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, budget: int = DEFAULT_BUDGET,
          **options) -> np.ndarray:
  """int32[num_nodes]: the best placement an HDP search finds; see `search`."""
  return search(graph, topology, seed=seed, budget=budget,
                **options).placement


def search(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
           seed: int = 0, budget: int = DEFAULT_BUDGET,
           **options) -> HdpResult:
  """Trains grouper + placer on `graph` for `budget` simulator evaluations.

  Args:
    graph: the op graph.
    topology: the devices.
    seed: seeds initialisation and sampling (same seed -> same result).
    budget: number of placements simulated (>= 1).
    **options: fields of `HdpConfig`.

  Returns:
    An `HdpResult`.

  Raises:
    InputError: an unknown option or a bad value.
  """
  start = time.perf_counter()
  known = {field.name for field in dataclasses.fields(HdpConfig)}
  unknown = sorted(set(options) - known)
  if unknown:
    raise errors.InputError(
        f"hdp: unknown option(s) {', '.join(unknown)}; known: "
        f"{', '.join(sorted(known))}")
  config = HdpConfig(**options)
  if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) \
      or budget < 1:
    raise errors.InputError(f"hdp: budget must be a positive integer, got "
                            f"{budget!r}")
  budget = int(budget)
  if graph.num_nodes == 0:
    return HdpResult(np.zeros(0, np.int32), 0.0, 0, [], 0.0, True, 0)
  problem = hdp_problem.Problem(graph, topology,
                                num_groups=config.num_groups,
                                num_op_types=config.num_op_types)
  if topology.num_devices == 1 or problem.num_units == 1:
    result = _single_unit(graph, topology, problem, budget, start)
  else:
    result = _Search(graph, topology, config, problem, seed, budget,
                     start).run()
  # JSON-safe notes for the benchmark tables (None = no valid placement yet).
  common.note("hdp_best_step_time_us",
              _finite_or_none(result.best_step_time_us))
  common.note("hdp_num_groups", result.num_groups)
  common.note("hdp_budget", budget)
  common.note("hdp_history",
              [[e, _finite_or_none(t)] for e, t in result.history])
  return result


def _finite_or_none(value: float):
  return float(value) if math.isfinite(value) else None


def _single_unit(graph, topology, problem: hdp_problem.Problem, budget: int,
                 start: float) -> HdpResult:
  """One device or one unit: nothing to learn; try each allowed device."""
  options = np.flatnonzero(problem.unit_allowed[0]) if problem.num_units == 1 \
      else np.zeros(1, np.int64)
  candidates = np.repeat(options[:budget, None], problem.num_nodes, axis=1)
  result = common.simulate_batch(graph, candidates, topology)
  times = np.where(result.valid, result.step_time_us, np.inf)
  best = int(np.argmin(times))
  history = [(i + 1, float(np.min(times[:i + 1])))
             for i in range(len(candidates))]
  return HdpResult(candidates[best].astype(np.int32), float(times[best]),
                   len(candidates), history, time.perf_counter() - start,
                   bool(result.valid[best]), problem.num_groups)


# ---- the training loop -----------------------------------------------------


class _Search:
  """REINFORCE over (grouping, placement) samples; keeps the best valid one."""

  def __init__(self, graph, topology, config: HdpConfig,
               problem: hdp_problem.Problem,
               seed: int, budget: int, start: float):
    self.graph, self.topology = graph, topology
    self.config, self.problem = config, problem
    self.rng = np.random.default_rng(seed)
    self.budget, self.start = budget, start

  def _seed_pair(self):
    return self.rng.integers(0, _SEED_RANGE, size=2).astype(np.int32)

  def run(self) -> HdpResult:
    # pylint: disable=g-import-not-at-top
    from tf_gdp.baselines import hdp_model
    import tensorflow as tf

    config, problem = self.config, self.problem
    policy = hdp_model.HdpPolicy(
        num_unit_features=problem.num_unit_features,
        num_group_features=problem.num_group_features,
        num_groups=problem.num_groups, num_devices=problem.num_devices,
        grouper_hidden=config.grouper_hidden,
        placer_hidden=config.placer_hidden,
        device_embedding=config.device_embedding,
        seed=int(self.rng.integers(0, _SEED_RANGE)),
        learning_rate=config.learning_rate,
        grouper_learning_rate=config.grouper_learning_rate,
        entropy_weight=config.entropy_weight, grad_clip=config.grad_clip)
    unit_x = tf.constant(problem.unit_features)

    evaluations, updates = 0, 0
    best_time, best_penalised = math.inf, math.inf
    best_placement, best_valid = None, False
    history, batch_means = [], []
    reference, baseline, spread = None, None, None
    while evaluations < self.budget:
      count = min(config.batch_size, self.budget - evaluations)
      groups = policy.sample_groups(unit_x, tf.constant(count, tf.int32),
                                    self._seed_pair()).numpy()
      mask = problem.group_mask(groups)
      group_x = problem.group_features(groups, mask)
      devices = policy.sample_devices(group_x, mask,
                                      self._seed_pair())[0].numpy()
      placements = problem.placements(groups, devices)
      result = common.simulate_batch(self.graph, placements, self.topology)
      evaluations += count

      times = result.step_time_us
      penalised = np.where(result.valid, times,
                           times * config.invalid_penalty)
      valid_times = np.where(result.valid, times, np.inf)
      i = int(np.argmin(valid_times))
      if valid_times[i] < best_time:
        best_time, best_valid = float(valid_times[i]), True
        best_placement = placements[i].copy()
      j = int(np.argmin(penalised))
      if not best_valid and penalised[j] < best_penalised:
        best_penalised = float(penalised[j])
        best_placement = placements[j].copy()
      history.append((evaluations, best_time))
      batch_means.append(float(penalised.mean()))

      if reference is None:
        reference = max(float(np.median(penalised)), 1e-9)
      rewards = -np.sqrt(penalised / reference)
      if baseline is None:
        baseline = float(rewards.mean())
      advantages = rewards - baseline
      if config.baseline == "batch" and count > 1:
        advantages = (rewards - rewards.mean()) * count / (count - 1)
      decay = config.baseline_decay
      baseline = decay * baseline + (1.0 - decay) * float(rewards.mean())
      if config.normalize_advantages:
        square = float(np.mean(advantages ** 2))
        spread = square if spread is None else (decay * spread +
                                                (1.0 - decay) * square)
        advantages = advantages / (math.sqrt(spread) + 1e-8)
      if evaluations >= self.budget or (
          config.max_seconds is not None and
          time.perf_counter() - self.start > config.max_seconds):
        break  # an update now could not change anything we return
      loss, entropy = policy.train_step(
          unit_x, tf.constant(groups, tf.int32), tf.constant(group_x),
          tf.constant(mask), tf.constant(devices, tf.int32),
          tf.constant(advantages, tf.float32))
      updates += 1
      if config.log_every and updates % config.log_every == 0:
        _LOG.info("hdp %s: %d/%d evaluations, best %.1f us, batch mean %.1f "
                  "us, loss %.4f, entropy %.3f, %.1f s", self.graph.name,
                  evaluations, self.budget, best_time, float(penalised.mean()),
                  float(loss), float(entropy),
                  time.perf_counter() - self.start)

    return HdpResult(
        placement=best_placement.astype(np.int32),
        best_step_time_us=best_time, evaluations=evaluations,
        history=history, seconds=time.perf_counter() - self.start,
        valid=best_valid, num_groups=problem.num_groups,
        batch_mean_us=batch_means)
