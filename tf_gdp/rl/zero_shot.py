"""Zero-shot placement: one forward pass of a policy on an unseen graph.

    shot = zero_shot.zeroshot(d + "/policy", task, samples=16)

Greedy and sampled placements from one pass, repaired to fit memory and
judged by the simulator in one batch. Needs no tf-agents (training does:
`workflows`).
"""

import dataclasses
import time

import numpy as np
import tensorflow as tf

from tf_gdp.baselines import repair
from tf_gdp.policy import features
from tf_gdp.rl import exploration
from tf_gdp.rl import placement_task
from tf_gdp.rl import policy_io


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
      greedy placement never has noise. A pushed sample is the argmax of
      its pushed logits, not a draw from them; without a shift the push
      outweighs the policy's logits (`exploration.PUSH_DOMINANCE`).
  """
  started = time.perf_counter()
  task = placement_task.as_task(task, topology)
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
    push = sample_logits - logits
    noisy = logits * factor + push
    sampled = exploration.stateless_categorical_sample(noisy, seed_pair)
    # A pushed sample is its pushed logits' argmax: the push names a whole
    # pipeline, and drawing each group around it scatters a few groups.
    # Without a shift the push decides every group it pulls one way
    # (`exploration.PUSH_DOMINANCE`); with one, the policy settles the
    # boundary layers of the neighbouring split.
    pushed = exploration.pushed_samples(noise[1:])
    dominant = pushed & ~exploration.shifted_samples(noise[1:])
    weight = tf.where(dominant, exploration.PUSH_DOMINANCE, 1.0)
    decided = logits * factor + push * weight[:, None, None]
    sampled = tf.where(pushed[:, None],
                       tf.argmax(decided, axis=-1, output_type=tf.int32),
                       sampled)
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
