"""Inception-v3 training step: the conv-net benchmark of placement papers.

Keras' own InceptionV3 with random weights, trained as in the Inception-v3
paper (Szegedy et al., 2016) apart from the optimizer: batch norm in
training mode (its moving-average updates are part of the step), an
auxiliary classifier on `mixed7` weighted 0.4, label smoothing 0.1, weight
decay 4e-5 on kernels (TF-slim's value), gradient clipping at global norm
2.0, and a momentum-free SGD update per variable. Each extra can be turned
off by its knob.
"""

import contextlib

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tf_keras  # pylint: disable=g-import-not-at-top
from tf_keras.src import backend as keras_backend  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import knobs  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import training  # pylint: disable=g-import-not-at-top

# Keras refuses smaller inputs: the stem and reductions need 75x75 at least.
MIN_IMAGE_SIZE = 75
# Weight of the auxiliary classifier's loss (TF-slim's training script).
AUX_LOSS_WEIGHT = 0.4
# The auxiliary head branches off this block (17x17 at 299x299 input).
AUX_INPUT_LAYER = "mixed7"


def build_train_step(batch: int = 32, image_size: int = 299,
                     num_classes: int = 1000, learning_rate: float = 0.01,
                     optimizer: str = "sgd", aux_logits: bool = True,
                     label_smoothing: float = 0.1, weight_decay: float = 4e-5,
                     clip_norm: float = 2.0):
  """Returns (train_step, (images, labels)) for one Inception-v3 step.

  Args:
    batch: images per step (32 as in the Inception-v3 paper).
    image_size: height and width of the square RGB input, >= 75.
    num_classes: size of the classifier output.
    learning_rate: step size of the update.
    optimizer: "sgd" (momentum-free) or "adam".
    aux_logits: add the auxiliary classifier and its loss.
    label_smoothing: mass spread uniformly over all classes in the targets.
    weight_decay: L2 penalty on convolution and dense kernels; 0 = off.
    clip_norm: global gradient norm clip; 0 = off.
  """
  knobs.require_positive(batch=batch, num_classes=num_classes)
  if image_size < MIN_IMAGE_SIZE:
    raise errors.InputError(
        f"image_size must be >= {MIN_IMAGE_SIZE}, got {image_size}")
  if not 0 <= label_smoothing < 1:
    raise errors.InputError(
        f"label_smoothing must be in [0, 1), got {label_smoothing}")
  if weight_decay < 0:
    raise errors.InputError(f"weight_decay must be >= 0, got {weight_decay}")
  with _fresh_layer_names():
    model = _inception_v3(image_size, num_classes, aux_logits)
  kernels = [v for v in model.trainable_variables if "kernel" in v.name]

  def loss_fn(images, labels):
    outputs = model(images, training=True)
    if not aux_logits:
      outputs = [outputs]
    with tf.name_scope("loss"):
      targets = tf.one_hot(labels, num_classes) * (1.0 - label_smoothing)
      targets += label_smoothing / num_classes
      losses = [tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
          labels=targets, logits=logits)) for logits in outputs]
      total = losses[0]
      if aux_logits:
        total += AUX_LOSS_WEIGHT * losses[1]
    if weight_decay > 0:
      with tf.name_scope("weight_decay"):
        total += weight_decay * tf.add_n([tf.nn.l2_loss(k) for k in kernels])
    return total

  step = training.make_train_step(
      loss_fn, training.Optimizer(optimizer, learning_rate,
                                  model.trainable_variables, clip_norm))
  rng = tf.random.Generator.from_seed(0)
  images = rng.normal([batch, image_size, image_size, 3])
  labels = rng.uniform([batch], 0, num_classes, dtype=tf.int32)
  return step, (images, labels)


def _inception_v3(image_size, num_classes, aux_logits):
  """Keras' InceptionV3 emitting logits, plus the paper's auxiliary head."""
  base = tf_keras.applications.InceptionV3(
      weights=None, input_shape=(image_size, image_size, 3),
      classes=num_classes, classifier_activation=None)
  if not aux_logits:
    return base
  features = base.get_layer(AUX_INPUT_LAYER).output
  # TF-slim's head, with kernels shrunk to fit small inputs: 5x5/3 average
  # pool, 1x1 conv to 128, conv over the whole remaining map to 768, 1x1
  # conv to the classes; convolutions batch-normalized as in Keras' blocks.
  pool_size = min(5, features.shape[1])
  x = tf_keras.layers.AveragePooling2D(pool_size, strides=3,
                                       name="aux_pool")(features)
  x = _conv_bn_relu(x, 128, 1, "aux_0")
  x = _conv_bn_relu(x, 768, x.shape[1], "aux_1")
  x = tf_keras.layers.Conv2D(num_classes, 1, name="aux_logits_conv")(x)
  aux = tf_keras.layers.Flatten(name="aux_logits")(x)
  return tf_keras.Model(base.input, [base.output, aux], name=base.name)


def _conv_bn_relu(x, filters, kernel_size, name):
  x = tf_keras.layers.Conv2D(filters, kernel_size, use_bias=False,
                             name=name + "_conv")(x)
  x = tf_keras.layers.BatchNormalization(scale=False, name=name + "_bn")(x)
  return tf_keras.layers.Activation("relu", name=name + "_relu")(x)


@contextlib.contextmanager
def _fresh_layer_names():
  """Builds layers named as in a fresh process, then restores the counters.

  Keras numbers layers per process ("conv2d_93"); without this a second build
  would name every op differently and change the graph's fingerprint.
  """
  uids = keras_backend.get_default_graph_uid_map()
  saved = dict(uids)
  uids.clear()
  try:
    yield
  finally:
    uids.clear()
    uids.update(saved)
