"""Training steps of real model code: Keras applications and their updates.

A corpus graph is one training step: forward, loss, backward and the
optimizer's update of every weight, as a user's `tf.function` would run it.
Inputs and labels live in non-trainable variables, so a step needs no feeds
and the graph's shapes (which price every op) are fixed. Each builder
returns the step function for `extract.from_function`.
"""

import functools

import numpy as np


def libraries():
  """TensorFlow and tf_keras, with the environment the bridge needs."""
  from grappler_bridge import tf_env  # pylint: disable=g-import-not-at-top
  tf_env.prepare_tensorflow_environment()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  return tf, tf_keras


class Optimizer:
  """SGD, momentum or Adam written as plain variable updates.

  Keras optimizers create their slots lazily, inside the first trace, which
  a traced step cannot do; here the slots are variables made up front, so
  the graph holds them (their memory counts) and updates them as TF would.
  A slot is made from a callable initial value, with its weight's dtype and
  shape, so made inside `unallocated_variables.scope()` it holds no memory
  either.

  A gradient of looked-up rows (`IndexedSlices`) is made dense before the
  update. `tf.convert_to_tensor` gives it an unknown shape (its dense shape
  is a tensor), so its update is priced as if it were one element; with
  `static_dense_shape` it is summed into the variable's static shape.
  """

  def __init__(self, variables, kind: str = "sgd",
               learning_rate: float = 0.01, *,
               static_dense_shape: bool = False):
    tf, _ = libraries()
    if kind not in ("sgd", "momentum", "adam"):
      raise ValueError(f"unknown optimizer {kind!r}")
    self._tf = tf  # not looked up inside the traced step
    self.variables, self.kind, self.learning_rate = (
        list(variables), kind, learning_rate)
    self.static_dense_shape = static_dense_shape
    slots = {"sgd": (), "momentum": ("velocity",), "adam": ("m", "v")}[kind]
    self.slots = {
        slot: [tf.Variable(functools.partial(tf.zeros_like, v),
                           shape=v.shape, dtype=v.dtype, trainable=False,
                           name=f"{v.name.split(':')[0]}/{slot}")
               for v in self.variables]
        for slot in slots}

  def summed_rows(self, grad, variable):
    """A gradient of looked-up rows summed into `variable`'s static shape."""
    tf = self._tf
    rows = tf.reshape(grad.values, [-1] + variable.shape[1:].as_list())
    return tf.math.unsorted_segment_sum(rows, grad.indices, variable.shape[0])

  def dense(self, grads) -> list:
    """`grads` with every gradient of looked-up rows `summed_rows`, so that
    a global norm and clipping see static shapes."""
    return [self.summed_rows(g, v) if isinstance(g, self._tf.IndexedSlices)
            else g for v, g in zip(self.variables, grads)]

  def apply(self, grads) -> None:
    """One update of every variable with its gradient (None: unused)."""
    tf = self._tf
    rate = self.learning_rate
    for i, (variable, grad) in enumerate(zip(self.variables, grads)):
      if grad is None:
        continue
      if isinstance(grad, tf.IndexedSlices) and self.static_dense_shape:
        grad = self.summed_rows(grad, variable)
      elif isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)
      if self.kind == "sgd":
        variable.assign_sub(rate * grad)
      elif self.kind == "momentum":
        velocity = self.slots["velocity"][i]
        velocity.assign(0.9 * velocity + grad)
        variable.assign_sub(rate * velocity)
      else:
        m, v = self.slots["m"][i], self.slots["v"][i]
        m.assign(0.9 * m + 0.1 * grad)
        v.assign(0.999 * v + 0.001 * tf.square(grad))
        variable.assign_sub(rate * m / (tf.sqrt(v) + 1e-7))


class ClippedAdam(Optimizer):
  """Adam on gradients rescaled together when their global norm exceeds a
  bound. Gathered rows (embedding or codebook lookups) are summed dense
  first, so the norm and the clipped gradients have static shapes."""

  def __init__(self, variables, learning_rate, clip_norm):
    super().__init__(variables, "adam", learning_rate)
    self.clip_norm = clip_norm

  def apply(self, grads) -> None:
    tf = self._tf
    grads, _ = tf.clip_by_global_norm(self.dense(grads), self.clip_norm)
    with tf.name_scope("adam"):
      super().apply(grads)


def supervised_step(tf, model_fn, variables, loss_fn, optimizer: Optimizer):
  """The step: loss of `model_fn()`, gradients, the optimizer's update."""

  def step():
    with tf.GradientTape() as tape:
      loss = loss_fn(model_fn())
    optimizer.apply(tape.gradient(loss, variables))
    return loss

  return step


def summed_terms_step(tf, model_fn, variables, optimizer: Optimizer):
  """The step of a model whose `model_fn()` gives loss terms (one per
  stage of a model supervised at every stage): their sum, `loss/total`."""

  def loss(terms):
    with tf.name_scope("loss"):
      return tf.add_n(terms, name="total")

  return supervised_step(tf, model_fn, variables, loss, optimizer)


def adam_softmax_step(tf, model_fn, variables, labels, learning_rate: float):
  """The step of `variables` trained by softmax cross-entropy of the logits
  `model_fn()` against integer `labels` (any leading shape), Adam."""

  def loss(logits):
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

  return supervised_step(tf, model_fn, variables, loss,
                         Optimizer(variables, "adam", learning_rate))


def next_token_loss(tf, tokens):
  """The loss of a language model's logits [batch x seq, vocabulary] that
  read `tokens` [batch, seq + 1] up to the last one: mean cross-entropy
  against each position's next token."""
  count = int(tokens.shape[0]) * (int(tokens.shape[1]) - 1)

  def loss(logits):
    targets = tf.reshape(tokens[:, 1:], [count])
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits))

  return loss


def adam_classifier_step(tf, model, inputs, labels, learning_rate: float):
  """`adam_softmax_step` of a tf_keras `model` on `inputs`."""
  return adam_softmax_step(tf, lambda: model(inputs, training=True),
                           model.trainable_variables, labels, learning_rate)


def labelled_images(tf, rng, batch: int, image_size: int, classes: int, *,
                    per_pixel: bool = False, labels_name: str = "labels"):
  """Random square RGB images and integer labels, as variables (module doc).

  Labels are one class per image, or per pixel (`per_pixel`, segmenters);
  `rng` is a `tf.random.Generator`, drawn images first.
  """
  images = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                       trainable=False, name="images")
  shape = [batch, image_size, image_size] if per_pixel else [batch]
  labels = tf.Variable(rng.uniform(shape, 0, classes, dtype=tf.int32),
                       trainable=False, name=labels_name)
  return images, labels


def keras_application(application: str, *, image_size: int, batch: int,
                      classes: int = 10, optimizer: str = "sgd",
                      learning_rate: float = 0.01, seed: int = 0, **kwargs):
  """The training step of `tf_keras.applications.<application>`.

  Random weights, `classes` outputs, softmax cross-entropy; `kwargs` go to
  the application (e.g. `alpha=0.5`).
  """
  tf, tf_keras = libraries()
  tf_keras.backend.clear_session()
  model = getattr(tf_keras.applications, application)(
      weights=None, input_shape=(image_size, image_size, 3), classes=classes,
      classifier_activation=None, **kwargs)
  rng = tf.random.Generator.from_seed(seed)
  images, labels = labelled_images(
      tf, rng, batch, image_size, classes)
  variables = model.trainable_variables

  def loss(logits):
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

  return supervised_step(tf, lambda: model(images, training=True), variables,
                         loss, Optimizer(variables, optimizer, learning_rate))


def describe_application(application: str, *, image_size: int, batch: int,
                         classes: int = 10, optimizer: str = "sgd",
                         learning_rate: float = 0.01, **kwargs) -> str:
  """One line: which application, at which size, with which update."""
  extra = "".join(f", {k}={v}" for k, v in kwargs.items())
  return (f"tf_keras.applications.{application}(weights=None, "
          f"classes={classes}{extra}), {image_size}x{image_size}x3 images, "
          f"batch {batch}, {optimizer} (learning rate "
          f"{np.float32(learning_rate):g})")
