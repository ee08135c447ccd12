"""An image classifier's training step from tf_keras layers: Swin Transformer.

Liu et al., "Swin Transformer: Hierarchical Vision Transformer using Shifted
Windows" (ICCV 2021). A strided convolution cuts the image into 4x4 patches
(with layer norm); four stages of transformer blocks follow, each stage
after the first opening with a patch merging (every 2x2 neighbourhood
concatenated, layer norm, a linear map to twice the channels), so the
resolution halves and the width doubles from stage to stage. A block
attends only within non-overlapping windows of `window` x `window` patches:
the feature map is cut into windows by reshapes and transposes, each window
runs multi-head self-attention with a learned relative position bias (a
table gathered by a fixed index), and the windows are put back. Every other
block first rolls the map by half a window (`tf.roll`), so windows straddle
the previous block's borders, masks attention between patches that the roll
brought together from opposite edges, and rolls back. Pre-norm residuals, a
GELU MLP of 4x the width; the final map is normalised, averaged and
classified. Softmax cross-entropy, Adam.
"""

import numpy as np

from tf_gdp.corpus import training_steps

_MLP_RATIO = 4
_PATCH = 4
# Added to the attention logits of patch pairs the shift brought together.
_MASKED = -100.0


def _relative_index(window: int) -> np.ndarray:
  """[window^2 * window^2] row of the bias table for each (query, key) pair:
  their offset (dy, dx), each in [-(window-1), window-1], as one index."""
  ys, xs = np.meshgrid(np.arange(window), np.arange(window), indexing="ij")
  coords = np.stack([ys.ravel(), xs.ravel()])  # [2, N]
  offsets = coords[:, :, None] - coords[:, None, :] + window - 1  # [2, N, N]
  return (offsets[0] * (2 * window - 1) + offsets[1]).ravel().astype(np.int32)


def _shift_mask(height: int, width: int, window: int,
                shift: int) -> np.ndarray:
  """[windows, N, N]: 0 between patches of the same region of the rolled
  map, `_MASKED` between patches that came from different regions."""
  regions = np.zeros((height, width), np.int32)
  bands = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
  label = 0
  for rows in bands:
    for cols in bands:
      regions[rows, cols] = label
      label += 1
  per_window = regions.reshape(height // window, window, width // window,
                               window).transpose(0, 2, 1, 3).reshape(
                                   -1, window * window)
  different = per_window[:, :, None] != per_window[:, None, :]
  return np.where(different, _MASKED, 0.0).astype(np.float32)


def swin(*, image_size: int, embed_dim: int, depths, heads, window: int,
         batch: int, classes: int = 1000, learning_rate: float = 1e-3,
         seed: int = 0):
  """The step: images [batch, image_size, image_size, 3] -> `classes` logits.

  Stage `s` (1-based, as in the paper) has `depths[s-1]` blocks of width
  `embed_dim * 2**(s-1)` and `heads[s-1]` heads. `image_size / 4` halved
  once per stage after the first must stay a multiple of `window` (or, as
  in the paper's last stage, be no larger than it: the window is then the
  whole map and there is no shift).
  """
  if len(depths) != len(heads):
    raise ValueError(f"depths {depths} and heads {heads} differ in length")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  images, labels = training_steps.labelled_images(
      tf, rng, batch, image_size, classes)

  class WindowAttention(layers.Layer):
    """Multi-head self-attention within each window, [windows*batch, N, C]
    -> same, with the relative position bias and (shifted) the mask."""

    def __init__(self, dim, num_heads, size, mask, **kwargs):
      super().__init__(**kwargs)
      self.num_heads, self.head_dim = num_heads, dim // num_heads
      self.size = size
      self.index = _relative_index(size)
      self.mask = mask  # [windows, N, N] or None
      self.qkv = layers.Dense(3 * dim, name="qkv")
      self.projection = layers.Dense(dim, name="projection")

    def build(self, input_shape):
      self.bias_table = self.add_weight(
          name="relative_position_bias",
          shape=((2 * self.size - 1) ** 2, self.num_heads),
          initializer=tf_keras.initializers.TruncatedNormal(stddev=0.02))
      super().build(input_shape)

    def call(self, x):
      n, d, h = x.shape[1], self.head_dim, self.num_heads
      qkv = tf.reshape(self.qkv(x), [-1, n, 3, h, d])
      q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]), axis=0)
      logits = tf.matmul(q * d ** -0.5, k, transpose_b=True)  # [B', h, N, N]
      bias = tf.gather(self.bias_table, self.index)  # [N*N, h]
      logits += tf.transpose(tf.reshape(bias, [n, n, h]), [2, 0, 1])[None]
      if self.mask is not None:
        windows = self.mask.shape[0]
        logits = tf.reshape(logits, [-1, windows, h, n, n])
        logits += tf.constant(self.mask)[None, :, None]
        logits = tf.reshape(logits, [-1, h, n, n])
      out = tf.matmul(tf.nn.softmax(logits, axis=-1), v)  # [B', h, N, d]
      out = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [-1, n, h * d])
      return self.projection(out)

  def partition(x, size, name):
    """[B, H, W, C] -> [B * windows, size*size, C]."""
    _, height, width, dim = x.shape
    return layers.Lambda(
        lambda t: tf.reshape(tf.transpose(
            tf.reshape(t, [-1, height // size, size, width // size, size,
                           dim]),
            [0, 1, 3, 2, 4, 5]), [-1, size * size, dim]),
        name=name)(x)

  def reverse(x, height, width, size, name):
    """[B * windows, size*size, C] -> [B, H, W, C]."""
    dim = x.shape[-1]
    return layers.Lambda(
        lambda t: tf.reshape(tf.transpose(
            tf.reshape(t, [-1, height // size, width // size, size, size,
                           dim]),
            [0, 1, 3, 2, 4, 5]), [-1, height, width, dim]),
        name=name)(x)

  def roll(x, by, name):
    return layers.Lambda(lambda t: tf.roll(t, [by, by], axis=[1, 2]),
                         name=name)(x)

  def block(x, num_heads, shifted, name):
    _, height, width, dim = x.shape
    size = min(window, height, width)
    shift = size // 2 if shifted and size < min(height, width) else 0
    if height % size or width % size:
      raise ValueError(f"{name}: a {height}x{width} map is not a whole "
                       f"number of {size}x{size} windows")
    y = layers.LayerNormalization(epsilon=1e-5, name=f"{name}/norm1")(x)
    if shift:
      y = roll(y, -shift, f"{name}/shift")
    y = partition(y, size, f"{name}/partition")
    mask = _shift_mask(height, width, size, shift) if shift else None
    y = WindowAttention(dim, num_heads, size, mask,
                        name=f"{name}/attention")(y)
    y = reverse(y, height, width, size, f"{name}/reverse")
    if shift:
      y = roll(y, shift, f"{name}/unshift")
    x = layers.Add(name=f"{name}/attention_residual")([x, y])
    y = layers.LayerNormalization(epsilon=1e-5, name=f"{name}/norm2")(x)
    y = layers.Dense(_MLP_RATIO * dim, activation="gelu",
                     name=f"{name}/mlp_in")(y)
    y = layers.Dense(dim, name=f"{name}/mlp_out")(y)
    return layers.Add(name=f"{name}/mlp_residual")([x, y])

  def merge(x, name):
    """Patch merging: each 2x2 neighbourhood's four patches side by side,
    layer norm, a linear map to twice the channels."""
    x = layers.Lambda(
        lambda t: tf.concat([t[:, 0::2, 0::2], t[:, 1::2, 0::2],
                             t[:, 0::2, 1::2], t[:, 1::2, 1::2]], axis=-1),
        name=f"{name}/neighbours")(x)
    x = layers.LayerNormalization(epsilon=1e-5, name=f"{name}/norm")(x)
    return layers.Dense(x.shape[-1] // 2, use_bias=False,
                        name=f"{name}/reduce")(x)

  inputs = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch)
  x = layers.Conv2D(embed_dim, _PATCH, strides=_PATCH,
                    name="patch_embedding/projection")(inputs)
  x = layers.LayerNormalization(epsilon=1e-5, name="patch_embedding/norm")(x)
  for stage, (depth, num_heads) in enumerate(zip(depths, heads), start=1):
    if stage > 1:
      x = merge(x, f"stage{stage}/merge")
    for i in range(depth):
      x = block(x, num_heads, i % 2 == 1, f"stage{stage}/block{i}")
  x = layers.LayerNormalization(epsilon=1e-5, name="final_norm")(x)
  x = layers.GlobalAveragePooling2D(name="pool")(x)
  logits = layers.Dense(classes, name="logits")(x)
  model = tf_keras.Model(inputs, logits, name="swin")

  def loss(logits):
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

  variables = model.trainable_variables
  # The bias tables' gradients are gathered rows, summed back to full size.
  return training_steps.supervised_step(
      tf, lambda: model(images, training=True), variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate,
                               static_dense_shape=True))
