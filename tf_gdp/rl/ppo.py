"""PPO for placement: tf-agents' `PPOClipAgent`, set up for a one-step bandit.

What differs from tf-agents' defaults, and why:

* `compute_value_and_advantage_in_train=False`: the trainer fills in each
  row's return (= its reward: one step, no bootstrapping) and advantage
  itself, from the B placements it sampled per graph (see `trainer`).
  tf-agents then trains on [rows, 1] trajectories as they are.
* No reward or observation normalization: rewards are already normalized
  per graph (log ratio to a reference placement), and the observation holds
  masks and ids that must not be shifted or scaled.
* Per-group importance ratios (`ratio="per_group"`, the default). The action
  is a joint choice of one device for each of G colocation groups. Clipping
  the joint ratio prod_g p_g / q_g at 1 +- epsilon lets a whole placement's
  probability move by 20% per iteration, i.e. each group's by about 0.2 / G:
  on a graph of thousands of groups PPO would all but stop after its first
  gradient step. Instead every group's ratio is clipped on its own and the
  clipped objectives are averaged over the real groups (all sharing the
  placement's advantage), as multi-discrete PPO does; at ratio 1 its
  gradient is the joint policy gradient divided by G. `ratio="joint"` keeps
  tf-agents' joint ratio.
* The entropy bonus is the mean entropy per real group, not the joint
  entropy (their sum): the policy-gradient signal per group shrinks as the
  graph grows, while a summed bonus would push every group by the same
  amount and drown the reward on a large graph.
* A few epochs (default 4) over the whole batch instead of tf-agents' 25,
  run as repeated `agent.train` calls on the same experience by the trainer
  (the agent itself does one epoch per call). The experience carries the
  collect policy's logits, so this is the same algorithm, but the train step
  is traced once instead of once per epoch: tracing the policy's forward and
  backward pass is what dominates start-up (seconds per copy).
"""

import tensorflow as tf
import tensorflow_probability as tfp
# pylint: disable=g-bad-import-order,unused-import
from tf_gdp.rl import tf_agents_import  # before any tf_agents module
# pylint: enable=g-bad-import-order,unused-import
from tf_agents.agents.ppo import ppo_clip_agent
from tf_agents.trajectories import time_step as ts

from tf_gdp.rl import actor_network
from tf_gdp.rl import train_config

class PlacementPPOAgent(ppo_clip_agent.PPOClipAgent):
  """PPOClipAgent with per-group ratios and entropy (see the module doc)."""

  def __init__(self, *args, ratio: str = "per_group", **kwargs):
    self._ratio = ratio
    self._old_logits = None
    super().__init__(*args, **kwargs)

  def get_loss(self, time_steps, actions, act_log_probs, returns,
               normalized_advantages, action_distribution_parameters,
               weights, train_step, debug_summaries,
               old_value_predictions=None, training=False):
    # The collect policy's logits reach policy_gradient_loss through here
    # (tf-agents passes it only the joint log-probabilities).
    self._old_logits = action_distribution_parameters["logits"]
    try:
      return super().get_loss(
          time_steps, actions, act_log_probs, returns, normalized_advantages,
          action_distribution_parameters, weights, train_step,
          debug_summaries, old_value_predictions=old_value_predictions,
          training=training)
    finally:
      self._old_logits = None

  def policy_gradient_loss(self, time_steps, actions, sample_action_log_probs,
                           advantages, current_policy_distribution, weights,
                           debug_summaries=False):
    if self._ratio == "joint" or self._old_logits is None:
      return super().policy_gradient_loss(
          time_steps, actions, sample_action_log_probs, advantages,
          current_policy_distribution, weights, debug_summaries)
    new = tfp.distributions.Categorical(
        logits=current_policy_distribution.logits).log_prob(actions)
    old = tfp.distributions.Categorical(
        logits=tf.stop_gradient(self._old_logits)).log_prob(actions)
    ratio = tf.exp(new - old)  # [B, T, G]
    epsilon = self._importance_ratio_clipping
    clipped = tf.clip_by_value(ratio, 1.0 - epsilon, 1.0 + epsilon)
    advantage = tf.stop_gradient(advantages)[..., None]
    objective = tf.minimum(ratio * advantage, clipped * advantage)
    mask = tf.cast(time_steps.observation["group_mask"], tf.float32)
    groups = tf.maximum(tf.reduce_sum(mask, -1), 1.0)
    per_row = tf.reduce_sum(objective * mask, -1) / groups
    self._clip_fraction = tf.reduce_sum(
        tf.cast(tf.abs(ratio - 1.0) > epsilon, tf.float32) * mask) / (
            tf.maximum(tf.reduce_sum(mask), 1.0))
    return -tf.reduce_mean(per_row * weights)

  def entropy_regularization_loss(self, time_steps, entropy, weights,
                                  debug_summaries=False):
    # Padding groups allow one device, so the joint entropy is the sum over
    # the real groups.
    groups = tf.cast(tf.maximum(time_steps.observation["num_groups"], 1),
                     entropy.dtype)
    return super().entropy_regularization_loss(
        time_steps, entropy / groups, weights, debug_summaries)


def create_agent(observation_spec, action_spec,
                 actor_net: actor_network.PlacementActorNetwork,
                 value_net: actor_network.PlacementValueNetwork,
                 config: train_config.PpoConfig,
                 optimizer=None,
                 train_step_counter=None) -> PlacementPPOAgent:
  """A PPO agent over the placement networks (see the module doc)."""
  if optimizer is None:
    optimizer = tf.keras.optimizers.Adam(learning_rate=config.learning_rate)
  if train_step_counter is None:
    train_step_counter = tf.Variable(0, dtype=tf.int64, name="train_step")
  agent = PlacementPPOAgent(
      ts.time_step_spec(observation_spec),
      action_spec,
      ratio=config.ratio,
      optimizer=optimizer,
      actor_net=actor_net,
      value_net=value_net,
      greedy_eval=True,
      importance_ratio_clipping=config.importance_ratio_clipping,
      discount_factor=1.0,
      entropy_regularization=config.entropy_regularization,
      value_pred_loss_coef=config.value_pred_loss_coef,
      num_epochs=1,
      use_gae=False,
      use_td_lambda_return=False,
      normalize_rewards=False,
      normalize_observations=False,
      gradient_clipping=config.gradient_clipping or None,
      compute_value_and_advantage_in_train=False,
      update_normalizers_in_train=False,
      train_step_counter=train_step_counter)
  agent.initialize()
  return agent
