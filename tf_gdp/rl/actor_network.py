"""tf-agents networks around the placement policy: actor and critic.

Actor. tf-agents' stock `ActorDistributionNetwork` rejects a vector of
discrete actions, so `PlacementActorNetwork` is a legacy
`DistributionNetwork` whose output is `GroupCategorical`: an
`Independent(Categorical)` over the (padded) colocation groups, one device
per group, from the policy's logits [B, G, D] (disallowed devices and padding
come masked to -1e9 by the policy). PPO stores the collect policy's
distribution parameters and rebuilds the old distribution from them, so the
distribution reports its logits in `parameters` (`Independent` itself
reports none).

Rows of a batch that show the same task (equal `graph_id` observation) are
encoded once: PPO trains on B sampled placements of a few graphs, and running
the GNN and the placer B times over identical inputs would cost B times as
much for the same logits. The logits of the distinct graphs are gathered back
to the rows, so gradients flow to every row unchanged.

Critic: not shared. `PlacementValueNetwork` is a small MLP over a masked-mean
summary of the node and device features plus the graph's sizes. In this
one-step bandit the value is only a per-graph baseline of the normalized
reward, which a cheap summary predicts well; sharing the policy's encoder
would couple the value loss into the placer's representation (a known source
of interference in PPO) and would need the policy's internals, which its
contract (`call(observation) -> logits`) does not expose. The trainer's
advantages use the per-graph sample mean anyway (see `trainer`); the
critic is there for tf-agents' value loss and as a diagnostic.
"""

import tensorflow as tf
import tensorflow_probability as tfp
# pylint: disable=g-bad-import-order,unused-import
from tf_gdp.rl import tf_agents_import  # before any tf_agents module
# pylint: enable=g-bad-import-order,unused-import
from tf_agents.distributions import utils as distribution_utils
from tf_agents.networks import network
from tf_agents.networks import utils as network_utils
from tf_agents.specs import distribution_spec
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import nest_utils

from tf_gdp.rl import observations as observations_lib

tfd = tfp.distributions


class GroupCategorical(tfd.Independent):
  """Independent categorical device choices, one per colocation group.

  Batch shape = the logits' leading dims; event shape [G]; int32 samples.
  `parameters` is {"logits": ...}, which PPO stores and rebuilds from.
  """

  def __init__(self, logits, validate_args: bool = False,
               name: str = "GroupCategorical"):
    self._group_logits = tf.convert_to_tensor(logits, tf.float32)
    super().__init__(
        tfd.Categorical(logits=self._group_logits, dtype=tf.int32),
        reinterpreted_batch_ndims=1, validate_args=validate_args, name=name)

  @property
  def logits(self) -> tf.Tensor:
    return self._group_logits

  @property
  def parameters(self) -> dict:
    return {"logits": self._group_logits}


def shared_logits(policy, observations: dict, training: bool = False):
  """policy(observations) -> logits [B, G, D], one pass per distinct graph.

  A policy with `parts` / `finish` (GdpPolicy) runs its network once per
  distinct graph and finishes every row with that row's own exploration
  noise (pipeline pushes); any other policy is called once per distinct graph.
  """
  observations = dict(observations)
  ids = observations.pop(observations_lib.GRAPH_ID, None)
  if ids is None:
    return policy(observations, training=training)
  unique, index = tf.unique(tf.reshape(ids, [-1]))
  rows = tf.range(tf.shape(index)[0])
  first = tf.math.unsorted_segment_min(rows, index, tf.size(unique))
  distinct = {k: tf.gather(v, first) for k, v in observations.items()}
  if not hasattr(policy, "parts"):
    return tf.gather(policy(distinct, training=training), index)
  scores, _ = policy.parts(distinct, training=training)
  return policy.finish(tf.gather(scores, index), observations,
                       observations.get("exploration_noise"))


class _BuiltOnExample:
  """Mixin: build variables on a real observation, not a spec sample.

  tf-agents' `create_variables` calls the network on a random sample of the
  input spec; a random observation is no graph (edges point at padding,
  counts disagree with masks), and the policy may reject it.
  """

  def _set_example(self, example):
    self._example = example

  def create_variables(self, input_tensor_spec=None, **kwargs):
    if self._network_output_spec is not None or self._example is None:
      return super().create_variables(input_tensor_spec, **kwargs)
    batch = tf.nest.map_structure(lambda x: tf.convert_to_tensor(x)[None],
                                  self._example)
    outputs, _ = self.__call__(
        batch, step_type=tf.fill((1,), ts.StepType.FIRST),
        network_state=self.get_initial_state(batch_size=1), **kwargs)
    self._network_output_spec = tf.nest.map_structure(_unbatched_spec,
                                                      outputs)
    return self._network_output_spec


def _unbatched_spec(value):
  """The spec tf-agents' create_variables derives from one batched output."""
  if isinstance(value, tfp.distributions.Distribution):
    params = distribution_utils.get_parameters(value)
    # pylint: disable=protected-access
    params = network._convert_to_spec_and_remove_singleton_batch_dim(
        params, outer_ndim=1)
    return distribution_utils.DistributionSpecV2(
        event_shape=value.event_shape, dtype=value.dtype, parameters=params)
  return tensor_spec.remove_outer_dims_nest(tf.type_spec_from_value(value),
                                            num_outer_dims=1)


class PlacementActorNetwork(_BuiltOnExample, network.DistributionNetwork):
  """Observation dict -> GroupCategorical over devices per group."""

  def __init__(self, observation_spec, action_spec, policy: tf.keras.Model,
               example_observation=None,
               name: str = "PlacementActorNetwork"):
    """Wraps `policy` (call(observation_batch, training) -> logits [B, G, D]).

    Args:
      observation_spec: the environment's observation TensorSpec dict.
      action_spec: BoundedTensorSpec int32 [G] in [0, D - 1].
      policy: the placement policy (e.g. `tf_gdp.policy.network.GdpPolicy`).
      example_observation: one real (unbatched) observation to build the
        variables on (default: a sample of the spec, which only works for
        policies that accept arbitrary inputs).
      name: network name.
    """
    groups = int(action_spec.shape[0])
    devices = int(action_spec.maximum) + 1
    output_spec = distribution_spec.DistributionSpec(
        GroupCategorical,
        {"logits": tf.TensorSpec([groups, devices], tf.float32, name="logits")},
        sample_spec=action_spec)
    super().__init__(input_tensor_spec=observation_spec, state_spec=(),
                     output_spec=output_spec, name=name)
    self._policy = policy
    self._set_example(example_observation)

  @property
  def policy(self) -> tf.keras.Model:
    return self._policy

  def logits(self, observations, training: bool = False) -> tf.Tensor:
    """Logits with the observations' outer dims ([B] or [B, T]) kept."""
    outer_rank = nest_utils.get_outer_rank(observations, self.input_tensor_spec)
    squash = network_utils.BatchSquash(outer_rank)
    flat = tf.nest.map_structure(squash.flatten, observations)
    return squash.unflatten(shared_logits(self._policy, flat, training))

  def call(self, observations, step_type=None, network_state=(),
           training=False):
    del step_type
    return GroupCategorical(self.logits(observations, training)), network_state


class PlacementValueNetwork(_BuiltOnExample, network.Network):
  """Critic: MLP over masked feature means and sizes (not the encoder)."""

  def __init__(self, observation_spec, hidden_units=(64, 64),
               example_observation=None,
               name: str = "PlacementValueNetwork"):
    super().__init__(input_tensor_spec=observation_spec, state_spec=(),
                     name=name)
    self._set_example(example_observation)
    self._hidden = [tf.keras.layers.Dense(units, activation="relu")
                    for units in hidden_units]
    self._value = tf.keras.layers.Dense(1)

  def call(self, observations, step_type=None, network_state=(),
           training=False):
    del step_type, training
    outer_rank = nest_utils.get_outer_rank(observations, self.input_tensor_spec)
    squash = network_utils.BatchSquash(outer_rank)
    obs = tf.nest.map_structure(squash.flatten, observations)
    x = summarize(obs)
    for layer in self._hidden:
      x = layer(x)
    value = tf.squeeze(self._value(x), -1)
    return squash.unflatten(value), network_state


def summarize(obs: dict) -> tf.Tensor:
  """[B, F]: masked means of node and device features, log sizes."""
  node_mask = tf.cast(obs["node_mask"], tf.float32)[..., None]
  device_mask = tf.cast(obs["device_mask"], tf.float32)[..., None]
  node_mean = (tf.reduce_sum(obs["node_features"] * node_mask, -2) /
               tf.maximum(tf.reduce_sum(node_mask, -2), 1.0))
  device_mean = (tf.reduce_sum(obs["device_features"] * device_mask, -2) /
                 tf.maximum(tf.reduce_sum(device_mask, -2), 1.0))
  sizes = tf.stack([
      tf.math.log1p(tf.cast(obs["num_nodes"], tf.float32)) / 10.0,
      tf.math.log1p(tf.cast(obs["num_groups"], tf.float32)) / 10.0,
      tf.math.log(tf.maximum(tf.cast(obs["num_devices"], tf.float32), 1.0))
      / 3.0], axis=-1)
  return tf.concat([node_mean, device_mean, sizes], axis=-1)


def tensor_specs(env) -> tuple:
  """(observation TensorSpec dict, action BoundedTensorSpec) of a PyEnvironment."""
  return (tensor_spec.from_spec(env.observation_spec()),
          tensor_spec.from_spec(env.action_spec()))
