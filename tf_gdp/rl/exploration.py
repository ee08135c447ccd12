"""How sampled placements explore: pipeline pushes and the entropy floor.

Two mechanisms keep a policy's samples from repeating one placement:

* Pushes (`exploration_noise`): every other sample leans, with a random
  gain, towards sending each stage of the graph's main stack of numbered
  blocks to its own device, and one in 16 each towards a balanced cut of
  the graph (one part per device), m-ETF's schedule, the side-branch
  offload, the fewest contiguous stages that fit memory, HEFT's and m-SCT's
  schedules and one GPU that the memory estimate doubts
  (`policy.network` module doc): whole-layer or whole-branch moves
  that sampling group by group almost never finds.
* The entropy floor (`entropy_floor_scale`, `apply_entropy_floor`): a policy
  too certain on a graph has its logits scaled down until it explores again;
  fine-tuning and zero-shot sampling start there, and single-graph training
  re-floors after `REFLOOR_AFTER` iterations of one sampled placement.

Samples are drawn statelessly (`stateless_categorical_sample`): one seed,
one set of placements.
"""

import math
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from tf_gdp.policy import features

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
# Single-graph runs re-floor the policy's entropy after this many iterations
# in a row of one sampled placement (`TrainConfig.refloor_after`).
# Self-imitation concentrates a policy on a small graph's best placement
# within seconds (the inception block of `bench.real_check`: entropy 0.000
# per group after 30 s); after that it would re-price one placement.
REFLOOR_AFTER = 20
# Fine-tuning and zero-shot sampling start from at least this mean entropy
# per group, as a fraction of the uniform distribution's (see
# `entropy_floor_scale`).
ENTROPY_FLOOR = 0.25
# The sample of each PUSH_PERIOD rows that leans towards each placement
# push (`policy.push_placements.PUSHES`) instead of the policy's own draw
# (`policy.network` module doc): rows 2 to 14, every unpushed sample but
# the first.
PUSH_PERIOD = 16
PUSH_ROWS = (2, 4, 6, 8, 10, 12, 14)
# Zero-shot's pushed samples without a shift weigh their push this many times
# over the policy's logits, which then only settle what the push leaves
# open: a policy sure of itself on a topology it never trained on (v3 on
# eight V100s: logits spread up to 44 per group, no entropy floor scaling)
# outvotes a push of gain 24-100 group by group, and the offload's push on a
# LLaMA-style model came out at 175 ms against the offload's own 54.
PUSH_DOMINANCE = 1000.0
# Each sample's random numbers are drawn as a block of this many columns per
# device before the EXPLORATION_SIZE that are kept. The block fixes which
# numbers a seed gives each push, so the published runs' seeds reproduce.
_UNKEPT_COLUMNS = 72


def exploration_noise(shape, seed, pipeline: float) -> tf.Tensor:
  """Random noise of `shape` [S, D, EXPLORATION_SIZE] for S samples.

  The pipeline columns (one per stage rule): `pipeline` times
  0.5 + |N(0, 1)| (a negative gain would push every op away from its
  stage's device, no pipeline at all, and a gain under about half the
  default 48 rarely outweighs the policy's own logits), in odd rows only, so
  that every other sample (with an even number of samples per graph, half
  of each graph's) is drawn as without it: pipeline pushes make most samples
  of a graph that should stay whole a little worse. The pushed rows take the
  stage rules in turn (row 1 the first rule's column, row 3 the second's,
  ...): each push follows one rule. Every other round of the rules (pushed
  rows 2R+1 to 4R-1 of each 4R, R rules) also shifts the device centres by
  uniform(-0.5, 0.5) slots (`features.PIPELINE_SHIFT_COLUMN`), trying a
  neighbouring split of the stages over the devices.

  The placement columns (`features.PLACEMENT_NOISE_COLUMN` + p for push
  p): the same kind of gain, in row PUSH_ROWS[p] of every PUSH_PERIOD (one
  of zero-shot's 16 samples each, unpushed otherwise), never with a shift.
  Each push's numbers come from their own seed, so the other samples' noise
  does not depend on how many pushes there are.
  """
  first = features.PIPELINE_NOISE_COLUMN
  rules = features.NUM_STAGE_RULES
  placed = features.PLACEMENT_NOISE_COLUMN
  shape = tf.convert_to_tensor(shape, tf.int32)
  drawn = tf.concat([shape[:-1], [placed + _UNKEPT_COLUMNS]], 0)
  shift_seed = tf.random.experimental.stateless_fold_in(seed, 1)
  column = tf.range(features.EXPLORATION_SIZE)
  is_shift = column == features.PIPELINE_SHIFT_COLUMN
  is_gain = (column >= first) & (column < features.PIPELINE_SHIFT_COLUMN)
  row = tf.range(shape[0])
  odd = row % 2 == 1
  # The gain column each row pushes along; -1 (none) for even rows.
  pushed = tf.where(odd, first + (row // 2) % rules, -1)
  shifted = odd & ((row // 2) // rules % 2 == 1)
  keep = ((column[None, :] == pushed[:, None]) |
          (is_shift[None, :] & shifted[:, None]))
  is_gain |= column >= placed
  noise = tf.random.stateless_normal(drawn, seed=seed)[..., _UNKEPT_COLUMNS:]
  for p, push_row in enumerate(PUSH_ROWS):
    keep |= ((column[None, :] == placed + p) &
             (row % PUSH_PERIOD == push_row)[:, None])
    # Push p's gains, from seed fold_in(seed, 2 + p).
    gain = tf.random.stateless_normal(
        tf.concat([shape[:-1], [1]], 0),
        seed=tf.random.experimental.stateless_fold_in(seed, 2 + p))
    noise = tf.concat([noise, gain], -1)
  scales = tf.where(is_gain, tf.cast(pipeline, tf.float32),
                    tf.cast(pipeline > 0, tf.float32))
  uniform = tf.random.stateless_uniform(
      drawn, seed=shift_seed)[..., _UNKEPT_COLUMNS:] - 0.5
  uniform = tf.concat(
      [uniform, tf.zeros_like(noise[..., placed:])], -1)
  noise = tf.where(is_gain, 0.5 + tf.abs(noise), uniform)
  return noise * scales * tf.cast(keep, tf.float32)[:, None, :]


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
  logits = policy_logits(policy, batched).numpy()
  factor = entropy_floor_scale(logits, observation["group_mask"], floor)
  if factor < 1.0:
    scale.assign(float(scale.numpy()) * factor)
    if log:
      log(f"policy too certain on this graph: logits scaled by {factor:.3g} "
          f"(entropy floor {floor:.2f} of uniform)")
  return factor


def policy_logits(policy, observation) -> tf.Tensor:
  """[G, D] logits of one observation."""
  return policy(observation, training=False)[0]


def pushed_samples(noise) -> tf.Tensor:
  """bool[S]: which of S samples' noise [S, D, EXPLORATION_SIZE] carries a
  push (a non-zero gain on some stage rule or placement push)."""
  first = features.PIPELINE_NOISE_COLUMN
  gains = tf.concat([
      noise[:, :, first:first + features.NUM_STAGE_RULES],
      noise[:, :, features.PLACEMENT_NOISE_COLUMN:]], -1)
  return tf.reduce_any(tf.not_equal(gains, 0.0), axis=[1, 2])


def shifted_samples(noise) -> tf.Tensor:
  """bool[S]: which of S samples' noise shifts the stages' device centres
  (a pipeline push trying a neighbouring split)."""
  return tf.reduce_any(
      tf.not_equal(noise[:, :, features.PIPELINE_SHIFT_COLUMN], 0.0), axis=1)


def stateless_categorical_sample(logits: tf.Tensor, seed) -> tf.Tensor:
  """One int32 draw per row of logits [..., D] (stateless, `seed` int32[2])."""
  flat = tf.reshape(logits, [-1, tf.shape(logits)[-1]])
  draws = tf.random.stateless_categorical(flat, 1, seed=seed, dtype=tf.int32)
  return tf.reshape(draws, tf.shape(logits)[:-1])
