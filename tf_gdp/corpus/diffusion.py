"""An image generator's training step from tf_keras layers: a DDPM U-Net.

Ho et al., "Denoising Diffusion Probabilistic Models" (NeurIPS 2020). One
step of diffusion training: each image gets a random timestep t of a
1000-step linear noise schedule and is mixed with Gaussian noise to x_t; the
network sees x_t and t and predicts the noise, and the loss is the mean
squared error against it. Adam.

The network is a U-Net of residual blocks. The timestep enters as a
sinusoidal embedding and two dense layers (4C wide, swish); every residual
block (group norm, swish, 3x3 convolution, plus a dense projection of the
embedding broadcast over the map, group norm, swish, 3x3 convolution, a
residual add through a 1x1 convolution when the width changes) reads it.
Level l runs `blocks` residual blocks at C * multipliers[l] channels, with
self-attention (group norm, tf_keras `MultiHeadAttention` over every pixel
of the map) after each block at the map sides listed in `attention`, and
halves the map by a stride-2 convolution. The middle runs a block,
attention and a block. The decoder mirrors it with one block more per
level, each concatenating an encoder output of the same scale (the output
of the first convolution, of every encoder block and of every
downsampling), and doubles the map by nearest-neighbour resizing and a 3x3
convolution. Group norm, swish and a 3x3 convolution give the noise.

Unlike the `unet` family it is conditioned everywhere: one small subgraph
(the timestep embedding) feeds every block of the network, and attention
over whole feature maps sits between its convolutions.
"""

import math

import numpy as np

from tf_gdp.corpus import training_steps

# The noise schedule: linear betas over this many steps.
_STEPS = 1000
_BETAS = (1e-4, 0.02)
# Group norm's groups (fewer when a width is not a multiple of it).
_GROUPS = 32
_TIME_WIDTH = 4


def _signal_rates() -> np.ndarray:
  """[_STEPS]: the cumulative product of 1 - beta, the share of the image
  that is left in x_t."""
  betas = np.linspace(*_BETAS, _STEPS, dtype=np.float64)
  return np.cumprod(1.0 - betas).astype(np.float32)


def _check_sizes(channels, image_size, multipliers, attention):
  if channels < 4 or channels % 2:
    raise ValueError(f"channels must be even and at least 4, got {channels}")
  levels = len(multipliers)
  if levels < 1 or image_size % 2 ** (levels - 1):
    raise ValueError(f"image side must be a multiple of 2**{levels - 1} for "
                     f"{levels} levels, got {image_size}")
  sides = {image_size // 2 ** level for level in range(levels)}
  if not set(attention) <= sides:
    raise ValueError(f"attention sides {tuple(attention)} must be map sides "
                     f"of the levels, {tuple(sorted(sides, reverse=True))}")


def diffusion(*, channels: int, image_size: int, batch: int,
              multipliers=(1, 2, 2, 2), blocks: int = 2, attention=(16,),
              heads: int = 1, learning_rate: float = 2e-4, seed: int = 0):
  """The step: noisy images [batch, image_size, image_size, 3] and their
  timesteps [batch] -> the predicted noise, same shape as the images.

  `channels` is the base width C; `multipliers` one per level (DDPM's
  CIFAR-10 model has (1, 2, 2, 2)); `blocks` residual blocks per encoder
  level; `attention` the map sides (e.g. (16,)) whose blocks are followed
  by self-attention with `heads` heads. `image_size` must be a multiple of
  2**(levels - 1).
  """
  _check_sizes(channels, image_size, multipliers, attention)
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.uniform([batch, image_size, image_size, 3], -1, 1),
                       trainable=False, name="images")
  noise = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                      trainable=False, name="noise")
  timesteps = tf.Variable(rng.uniform([batch], 0, _STEPS, dtype=tf.int32),
                          trainable=False, name="timesteps")

  class GroupNorm(layers.Layer):
    """Group normalization over [B, H, W, C] with the groups' shape fixed at
    trace time (tf_keras's `GroupNormalization` reshapes by the run-time
    shape, which leaves its height and width unknown, so unpriced, and
    weights every pixel by a mask of ones)."""

    def build(self, input_shape):
      width = input_shape[-1]
      self.groups = math.gcd(_GROUPS, width)
      self.gamma = self.add_weight(name="gamma", shape=(width,),
                                   initializer="ones")
      self.beta = self.add_weight(name="beta", shape=(width,),
                                  initializer="zeros")
      super().build(input_shape)

    def call(self, x):
      _, height, width, channels = x.shape
      grouped = tf.reshape(x, [-1, height, width, self.groups,
                               channels // self.groups])
      mean, variance = tf.nn.moments(grouped, axes=[1, 2, 4], keepdims=True)
      grouped = (grouped - mean) * tf.math.rsqrt(variance + 1e-6)
      return (tf.reshape(grouped, [-1, height, width, channels]) * self.gamma
              + self.beta)

  def norm(x, name):
    return GroupNorm(name=name)(x)

  def swish(x, name):
    return layers.Activation("swish", name=name)(x)

  def conv(x, filters, name, kernel=3, strides=1):
    return layers.Conv2D(filters, kernel, strides=strides, padding="same",
                         name=name)(x)

  def embed_time(t):
    """Sinusoids of t at C/2 frequencies, then two dense layers."""
    half = channels // 2
    frequencies = np.exp(-math.log(10000.0) * np.arange(half) /
                         (half - 1)).astype(np.float32)

    def sinusoids(t):
      angles = tf.cast(t, tf.float32)[:, None] * frequencies
      return tf.concat([tf.sin(angles), tf.cos(angles)], axis=1)

    x = layers.Lambda(sinusoids, name="time/sinusoids")(t)
    x = layers.Dense(_TIME_WIDTH * channels, activation="swish",
                     name="time/dense0")(x)
    x = layers.Dense(_TIME_WIDTH * channels, name="time/dense1")(x)
    return swish(x, "time/swish")

  def residual(x, time, filters, name):
    y = conv(swish(norm(x, f"{name}/norm0"), f"{name}/swish0"), filters,
             f"{name}/conv0")
    shift = layers.Dense(filters, name=f"{name}/time")(time)
    y = layers.Add(name=f"{name}/add_time")(
        [y, layers.Reshape((1, 1, filters), name=f"{name}/broadcast")(shift)])
    y = conv(swish(norm(y, f"{name}/norm1"), f"{name}/swish1"), filters,
             f"{name}/conv1")
    if x.shape[-1] != filters:
      x = conv(x, filters, f"{name}/project", kernel=1)
    return layers.Add(name=f"{name}/add")([x, y])

  def attend(x, name):
    """Self-attention among all pixels of the map, residual."""
    _, side, _, width = x.shape
    y = layers.Reshape((side * side, width), name=f"{name}/pixels")(
        norm(x, f"{name}/norm"))
    y = layers.MultiHeadAttention(heads, width // heads,
                                  name=f"{name}/attention")(y, y)
    y = layers.Reshape((side, side, width), name=f"{name}/map")(y)
    return layers.Add(name=f"{name}/add")([x, y])

  def upsample(x, name):
    """Nearest-neighbour doubling to a size fixed at trace time
    (`UpSampling2D` leaves the output's height and width unknown)."""
    side = x.shape[1]
    x = layers.Lambda(
        lambda t: tf.image.resize(t, [2 * side, 2 * side], method="nearest"),
        name=f"{name}/resize")(x)
    return conv(x, x.shape[-1], f"{name}/conv")

  noisy = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch)
  t = tf_keras.Input(shape=(), batch_size=batch, dtype="int32")
  time = embed_time(t)
  x = conv(noisy, channels, "conv_in")
  skips = [x]
  last = len(multipliers) - 1
  for level, multiplier in enumerate(multipliers):
    for b in range(blocks):
      x = residual(x, time, channels * multiplier, f"down{level}/res{b}")
      if x.shape[1] in attention:
        x = attend(x, f"down{level}/attn{b}")
      skips.append(x)
    if level < last:
      x = conv(x, x.shape[-1], f"down{level}/downsample", strides=2)
      skips.append(x)
  x = residual(x, time, x.shape[-1], "mid/res0")
  x = attend(x, "mid/attn")
  x = residual(x, time, x.shape[-1], "mid/res1")
  for level in reversed(range(len(multipliers))):
    for b in range(blocks + 1):
      x = layers.Concatenate(name=f"up{level}/skip{b}")([x, skips.pop()])
      x = residual(x, time, channels * multipliers[level],
                   f"up{level}/res{b}")
      if x.shape[1] in attention:
        x = attend(x, f"up{level}/attn{b}")
    if level > 0:
      x = upsample(x, f"up{level}/upsample")
  x = swish(norm(x, "out/norm"), "out/swish")
  predicted = conv(x, 3, "out/conv")
  model = tf_keras.Model([noisy, t], predicted, name="diffusion")

  def noised():
    """x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) noise, and t."""
    rate = tf.gather(_signal_rates(), timesteps)[:, None, None, None]
    return tf.sqrt(rate) * images + tf.sqrt(1.0 - rate) * noise, timesteps

  def loss(predicted):
    return tf.reduce_mean(tf.square(predicted - noise))

  variables = model.trainable_variables
  return training_steps.supervised_step(
      tf, lambda: model(list(noised()), training=True), variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
