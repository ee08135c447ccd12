"""Superposition: the graph embedding conditions every placer layer.

GDP trains one policy on a batch of very different graphs at once. Without
conditioning, the placer's weights must serve all of them with the same
per-node computation; with it, each graph's pooled embedding modulates the
hidden features of every layer (feature-wise linear modulation, FiLM), so the
same weights can behave like a different placer per graph.
"""

import tensorflow as tf


class FeatureWiseGate(tf.keras.layers.Layer):
  """h -> h * 2 sigmoid(W g + b) + U g, with g a per-example embedding.

  The gate is `2 sigmoid(.)` rather than `sigmoid(.)` so that a zero
  pre-activation leaves h unchanged in scale; layers downstream were tuned
  for unit-scale inputs and should not see them halved at initialization.
  The gate lies in (0, 2): it can mute a feature for one graph and amplify
  it for another, but never flip its sign (the shift U g can).

  Call args:
    states: float[B, ..., H] per-node (or per-anything) features.
    embedding: float[B, C] the graph embedding of each batch element.

  Returns:
    float[B, ..., H] the modulated states.
  """

  def __init__(self, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self._seed = seed
    self._scale = None
    self._shift = None

  def build(self, input_shape):
    states_shape, _ = input_shape
    units = int(states_shape[-1])
    self._scale = tf.keras.layers.Dense(
        units, name="scale",
        kernel_initializer=tf.keras.initializers.GlorotUniform(self._seed))
    self._shift = tf.keras.layers.Dense(
        units, use_bias=False, name="shift",
        kernel_initializer=tf.keras.initializers.GlorotUniform(self._seed + 1))
    super().build(input_shape)

  def call(self, inputs):
    states, embedding = inputs
    scale = 2.0 * tf.sigmoid(self._scale(embedding))
    shift = self._shift(embedding)
    extra_dims = tf.rank(states) - 2
    new_shape = tf.concat([tf.shape(scale)[:1],
                           tf.ones([extra_dims], tf.int32),
                           tf.shape(scale)[1:]], axis=0)
    return (states * tf.reshape(scale, new_shape) +
            tf.reshape(shift, new_shape))


class NoGate(tf.keras.layers.Layer):
  """Identity in place of `FeatureWiseGate`: superposition switched off."""

  def call(self, inputs):
    states, _ = inputs
    return states


def make_gate(enabled: bool, seed: int = 0, name=None) -> tf.keras.layers.Layer:
  """A `FeatureWiseGate` if superposition is enabled, else `NoGate`."""
  if enabled:
    return FeatureWiseGate(seed=seed, name=name)
  return NoGate(name=name)
