"""Training steps of Keras applications, for the real-runtime checks.

Real model code the zoo and the tests do not use: `tf_keras.applications`
networks (random weights, 10 classes) at small images, with a softmax
cross-entropy loss and SGD updates. Images and labels live in variables, so
a step needs no feeds and every placement reads the same data. Each builder
returns a step function for `extract.from_function`; `BUILDERS` maps names to
them. Sizes are chosen so that one step takes tens of milliseconds on one
pinned core: long enough that op costs, not the session's own overhead,
decide the step time, short enough for dozens of timed placements.
"""

import numpy as np

# name -> (application class, keyword arguments, image size, batch)
_APPLICATIONS = {
    "keras_mobilenet_v2": ("MobileNetV2", {"alpha": 0.5}, 96, 4),
    "keras_resnet50": ("ResNet50", {}, 64, 2),
    "keras_densenet121": ("DenseNet121", {}, 64, 2),
}


def _libraries():
  from grappler_bridge import tf_env  # pylint: disable=g-import-not-at-top
  tf_env.prepare_tensorflow_environment()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  return tf, tf_keras


def training_step(application: str, *, image_size: int, batch: int,
                  learning_rate: float = 0.01, seed: int = 0, **kwargs):
  """The SGD training step of `tf_keras.applications.<application>`."""
  tf, tf_keras = _libraries()
  tf_keras.backend.clear_session()
  model = getattr(tf_keras.applications, application)(
      weights=None, input_shape=(image_size, image_size, 3), classes=10,
      classifier_activation=None, **kwargs)
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                       trainable=False, name="images")
  labels = tf.Variable(rng.uniform([batch], 0, 10, dtype=tf.int32),
                       trainable=False, name="labels")
  variables = model.trainable_variables

  def step():
    with tf.GradientTape() as tape:
      logits = model(images, training=True)
      loss = tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, variables)
    for variable, grad in zip(variables, grads):
      variable.assign_sub(learning_rate * grad)
    return loss

  return step


def _builder(name: str):
  application, kwargs, image_size, batch = _APPLICATIONS[name]

  def build():
    return training_step(application, image_size=image_size, batch=batch,
                         **kwargs)

  build.__doc__ = (f"{application} training step, {image_size}x{image_size} "
                   f"images, batch {batch}.")
  return build


BUILDERS = {name: _builder(name) for name in _APPLICATIONS}


def describe(name: str) -> str:
  """One line: which application, at which size."""
  application, kwargs, image_size, batch = _APPLICATIONS[name]
  extra = "".join(f", {k}={v}" for k, v in kwargs.items())
  return (f"tf_keras.applications.{application}(weights=None, classes=10"
          f"{extra}), {image_size}x{image_size}x3 images, batch {batch}, SGD "
          f"(learning rate {np.float32(0.01):g})")
