"""Optimizer updates written as the raw ops a TF training graph really holds.

The zoo's graphs are inputs to placement, so their update ops should be the
kernels the cost model and the runtime know (`ResourceApplyGradientDescent`,
`ResourceApplyAdam`, `ResourceScatterSub`), one per variable, in a name
scope next to the variable's, and nothing else (no Keras optimizer
bookkeeping, no conditionals).
"""

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top

OPTIMIZERS = ("sgd", "adam")


class Optimizer:
  """Applies one update op per variable, after optional gradient clipping.

  Slot variables are made eagerly: they must exist before the step is
  traced, so that tracing twice (e.g. `get_concrete_function`, then a call)
  never creates variables. Every per-variable op (norm term, clipping,
  update) sits under the variable's own name scope, so a placer that goes
  by name scope keeps a layer's update with the layer.
  """

  def __init__(self, name: str, learning_rate: float, variables,
               clip_norm: float = 0.0):
    if name not in OPTIMIZERS:
      raise errors.InputError(
          f"unknown optimizer {name!r} (known: {', '.join(OPTIMIZERS)})")
    if not learning_rate > 0:
      raise errors.InputError(
          f"learning_rate must be > 0, got {learning_rate}")
    if clip_norm < 0:
      raise errors.InputError(f"clip_norm must be >= 0, got {clip_norm}")
    self.name = name
    self.learning_rate = float(learning_rate)
    self.clip_norm = float(clip_norm)
    self.variables = list(variables)
    self._slots = [None] * len(self.variables)
    self._step = None
    if name == "adam":
      self._step = tf.Variable(0.0, trainable=False, name="adam/step")
      self._slots = [
          (tf.Variable(tf.zeros_like(v), trainable=False,
                       name=_base_name(v) + "/adam_m"),
           tf.Variable(tf.zeros_like(v), trainable=False,
                       name=_base_name(v) + "/adam_v"))
          for v in self.variables]

  def apply(self, gradients):
    """Adds the update ops for `gradients` (parallel to `variables`)."""
    if len(gradients) != len(self.variables):
      raise ValueError("one gradient per variable expected")
    pairs = [(v, g, slots) for v, g, slots
             in zip(self.variables, gradients, self._slots) if g is not None]
    if self.clip_norm > 0:
      pairs = self._clip(pairs)
    if self.name == "sgd":
      return [_sgd(v, g, self.learning_rate) for v, g, _ in pairs]
    with tf.name_scope("adam/"):
      step = self._step.assign_add(1.0)
      beta1_power = tf.pow(_BETA1, step)
      beta2_power = tf.pow(_BETA2, step)
    return [_adam(v, slots, g, self.learning_rate, beta1_power, beta2_power)
            for v, g, slots in pairs]

  def _clip(self, pairs):
    """Scales all gradients so that their global L2 norm is <= clip_norm."""
    squares = []
    for v, g, _ in pairs:
      with tf.name_scope(_update_scope(v, "clip")):
        squares.append(tf.reduce_sum(tf.square(_values(g))))
    with tf.name_scope("clip_gradients/"):
      norm = tf.sqrt(tf.add_n(squares))
      scale = self.clip_norm / tf.maximum(norm, self.clip_norm)
    clipped = []
    for v, g, slots in pairs:
      with tf.name_scope(_update_scope(v, "clip")):
        if isinstance(g, tf.IndexedSlices):
          g = tf.IndexedSlices(g.values * scale, g.indices, g.dense_shape)
        else:
          g = g * scale
      clipped.append((v, g, slots))
    return clipped


_BETA1 = 0.9
_BETA2 = 0.999
_EPSILON = 1e-8


def _base_name(variable) -> str:
  return variable.name.split(":")[0]


def _values(gradient):
  return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


def _update_scope(variable, optimizer: str) -> str:
  # An absolute scope ("a/b/") re-enters the variable's own scope.
  return f"{_base_name(variable)}/{optimizer}/"


def _sgd(variable, gradient, learning_rate):
  with tf.name_scope(_update_scope(variable, "sgd")):
    if isinstance(gradient, tf.IndexedSlices):
      # Sparse rows (embeddings): update only the rows that were looked up.
      return tf.raw_ops.ResourceScatterSub(
          resource=variable.handle, indices=gradient.indices,
          updates=gradient.values * learning_rate)
    return tf.raw_ops.ResourceApplyGradientDescent(
        var=variable.handle,
        alpha=tf.constant(learning_rate, variable.dtype),
        delta=gradient)


def _adam(variable, slots, gradient, learning_rate, beta1_power,
          beta2_power):
  with tf.name_scope(_update_scope(variable, "adam")):
    dtype = variable.dtype
    m, v = slots
    return tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=m.handle, v=v.handle,
        beta1_power=tf.cast(beta1_power, dtype),
        beta2_power=tf.cast(beta2_power, dtype),
        lr=tf.constant(learning_rate, dtype),
        beta1=tf.constant(_BETA1, dtype),
        beta2=tf.constant(_BETA2, dtype),
        epsilon=tf.constant(_EPSILON, dtype),
        grad=tf.convert_to_tensor(gradient))


def make_train_step(loss_fn, optimizer: Optimizer):
  """Wraps `loss_fn(*inputs) -> scalar` into a tf.function training step.

  The step returns the loss computed before the update, so two calls on the
  same batch show whether training moves the model.
  """

  def train_step(*inputs):
    with tf.GradientTape() as tape:
      loss = loss_fn(*inputs)
    gradients = tape.gradient(loss, optimizer.variables)
    optimizer.apply(gradients)
    return loss

  return tf.function(train_step)
