"""What one training iteration samples, and the rows PPO trains on.

`sample` draws K placements per graph from one policy pass (every other one
under a pipeline push, `exploration.exploration_noise`); `experience` turns
sampled rows and their advantages into the [rows, 1] trajectories of
tf-agents' PPO; `imitation_experience` adds each graph's best placement so
far as one more row (self-imitation).
"""

import numpy as np
import tensorflow as tf
# pylint: disable=g-bad-import-order,unused-import
from tf_gdp.rl import tf_agents_import  # before any tf_agents module
# pylint: enable=g-bad-import-order,unused-import
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from tf_gdp.rl import exploration


def sample(actor_net, value_net, observations, seed, num_samples: int,
           pipeline_scale=None):
  """Base logits' greedy actions and entropy; K sampled placements per graph.

  With a `pipeline_scale` (pipeline exploration, `policy.network` module
  doc) every sample has its own noise, so its own logits: rows [T*K] (row
  t*K + j is sample j of graph t) plus the T noise-free rows, in one call
  that runs the network once per graph. Returns (logits: [T, G, D], or
  [T*K, G, D] per sample with exploration; actions [K, T, G]; greedy
  [T, G]; values [T]; entropy [T]; noise [T*K, D, k] or an empty tensor;
  base: the noise-free logits [T, G, D]).
  """
  if pipeline_scale is None:
    distribution, _ = actor_net(observations, training=False)
    logits = base = distribution.logits
    actions = distribution.sample(num_samples, seed=seed)
    noise = tf.zeros([0])
  else:
    noise_seed, sample_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 2))
    rows = {k: tf.repeat(v, num_samples, axis=0)
            for k, v in observations.items()}
    noise = exploration.exploration_noise(
        tf.shape(rows["exploration_noise"]), noise_seed, pipeline_scale)
    rows["exploration_noise"] = noise
    both = {k: tf.concat([rows[k], v], axis=0)
            for k, v in observations.items()}
    distribution, _ = actor_net(both, training=False)
    count = tf.shape(noise)[0]
    logits, base = distribution.logits[:count], distribution.logits[count:]
    # [T*K, G]
    sampled = exploration.stateless_categorical_sample(logits, sample_seed)
    graphs = tf.shape(observations["node_mask"])[0]
    actions = tf.transpose(tf.reshape(
        sampled, [graphs, num_samples, -1]), [1, 0, 2])
  greedy = tf.argmax(base, axis=-1, output_type=tf.int32)
  values, _ = value_net(observations, training=False)
  entropy = tfp_categorical_entropy(base)
  mask = tf.cast(observations["group_mask"], tf.float32)
  entropy = tf.reduce_sum(entropy * mask, -1) / tf.maximum(
      tf.reduce_sum(mask, -1), 1.0)
  return logits, actions, greedy, values, entropy, noise, base


def imitation_experience(env, stacked, tasks, base, greedy, values, rewards,
                         pushed, noise, *, weight: float,
                         scale_floor: float) -> trajectory.Trajectory:
  """[T, 1] trajectories: each graph's best placement so far, as a sample.

  Self-imitation (Oh et al., 2018): the best placement is trained on as if
  the noise-free policy had drawn it, with advantage `weight` x
  max(0, its reward - the mean reward of the graph's unpushed samples),
  scaled like the samples' advantages (`scale_floor`). Without it
  fine-tuning forgets a pipeline found by a push (which is then not in the
  policy's logits): the policy stays near uniform and re-draws instead of
  refining (RNNLM-4 fine-tuned 120 s: within 1.1% of the expert in 4 of 4
  runs without it, 18.6% below it in the median of 7 with it). A graph
  with no valid placement yet gets its greedy placement with advantage 0.
  """
  count = len(tasks)
  actions = np.array(greedy, np.int32)  # [T, G]
  returns = np.zeros((count, 1), np.float32)
  advantages = np.zeros((count, 1), np.float32)
  for t, index in enumerate(tasks):
    best = env.best(int(index))
    if best is None:
      continue
    reward = env.best_reward(int(index))
    own = rewards[t][~pushed[t]] if (~pushed[t]).any() else rewards[t]
    scale = max(float(rewards[t].std()), scale_floor)
    actions[t, :len(best.group_devices)] = best.group_devices
    returns[t, 0] = reward
    advantages[t, 0] = weight * max(0.0, float(reward - own.mean())) / scale
  if noise is not None:
    noise = np.zeros((count,) + tuple(np.shape(noise)[1:]), np.float32)
  return experience(stacked, tasks, base, actions[None], values, returns,
                    advantages, noise)


def experience(stacked, tasks, logits, actions, values, returns, advantages,
               noise=None) -> trajectory.Trajectory:
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


def tfp_categorical_entropy(logits: tf.Tensor) -> tf.Tensor:
  """Entropy per group of softmax(logits) over the last axis (nats)."""
  log_p = tf.nn.log_softmax(logits, axis=-1)
  return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)
