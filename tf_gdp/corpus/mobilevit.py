"""An image classifier's training step from tf_keras layers: MobileViT.

Mehta and Rastegari, "MobileViT: Light-weight, General-purpose, and
Mobile-friendly Vision Transformer" (ICLR 2022). A mobile convolutional
network with transformers as convolutions: a 3x3 stride-2 convolution, then
five stages of MobileNetV2 inverted residual blocks (a 1x1 expansion, a 3x3
depthwise convolution, a 1x1 projection; a residual add when stride and
width allow), all but the first opening with a stride-2 block, the last
three ending in a MobileViT block at 1/8, 1/16 and 1/32 of the image.

A MobileViT block keeps its input aside, encodes locally (a 3x3
convolution, a 1x1 projection to the transformer width d), then unfolds
the map into non-overlapping 2x2 patches: a reshape and a transpose group
the pixels by their position inside a patch, so that each of the four
groups is a sequence of all the patches and attention runs across the whole
map at a quarter of the cost of attending every pixel. L pre-norm
transformer layers (multi-head self-attention, a swish MLP of 2d) and a
layer norm follow; the map is folded back, projected to its C channels,
concatenated with the kept input and fused by a 3x3 convolution. A 1x1
convolution to 4x the last width, global average pooling and a dense layer
classify. Batch norm and swish follow every convolution but two kinds: the
inverted residual blocks' projections (batch norm only) and the 1x1 maps
to the transformer width (neither). Softmax cross-entropy, Adam.

Next to the `swin` family (window attention in a pure transformer) it
interleaves depthwise convolutions with attention whose batch is the batch
times the four patch positions, joined to a parallel skip by a concat.
"""

import numpy as np

from tf_gdp.corpus import training_steps

# Side of the non-overlapping patches a MobileViT block unfolds.
_PATCH = 2
_MLP_RATIO = 2
# The stages' strides; MobileViT blocks close the last three.
_STRIDES = (1, 2, 2, 2, 2)
_STAGE2_BLOCKS = 3
# The image side must halve five times and still cut into 2x2 patches.
_SIDE_MULTIPLE = 2 ** 5 * _PATCH


def mobilevit(*, image_size: int, batch: int, channels, dims,
              depths=(2, 4, 3), expansion: int = 4, heads: int = 4,
              classes: int = 1000, learning_rate: float = 2e-3,
              seed: int = 0):
  """The step: images [batch, image_size, image_size, 3] -> `classes` logits.

  `channels` are 7 widths: the stem's, the five stages' outputs and the
  last 1x1 convolution's (MobileViT-S: 16, 32, 64, 96, 128, 160, 640);
  `dims` and `depths` the transformer width and layers of the MobileViT
  blocks of stages 3, 4, 5 (S: 144, 192, 240 and 2, 4, 3); `expansion` the
  inverted residual blocks' (S: 4, XXS: 2). `image_size` must be a
  multiple of 64.
  """
  if len(channels) != 7 or len(dims) != 3 or len(depths) != 3:
    raise ValueError(f"need 7 channels, 3 dims and 3 depths, got "
                     f"{channels}, {dims}, {depths}")
  if image_size % _SIDE_MULTIPLE:
    raise ValueError(f"image side must be a multiple of {_SIDE_MULTIPLE}, "
                     f"got {image_size}")
  if any(d % heads for d in dims):
    raise ValueError(f"dims {dims} must be multiples of {heads} heads")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  images, labels = training_steps.labelled_images(
      tf, rng, batch, image_size, classes)

  def permute(x, perm):
    """`tf.transpose`, whose gradient transposes back by a constant
    permutation (TF's own computes the inverse at run time, which leaves the
    gradient's shape unknown, so unpriced), in the scope TF gives gradients.
    """
    inverse = [int(i) for i in np.argsort(perm)]
    scope = tf.compat.v1.get_default_graph().get_name_scope()

    def backward(dy):
      with tf.name_scope(f"gradient_tape/{scope}/"):
        return tf.transpose(dy, inverse)

    @tf.custom_gradient
    def forward(t):
      return tf.transpose(t, perm), backward

    return forward(x)

  class SelfAttention(layers.Layer):
    """Multi-head self-attention over [B', N, d]: one dense layer gives the
    queries, keys and values, one projects the heads back."""

    def __init__(self, dim, **kwargs):
      super().__init__(**kwargs)
      self.head_dim = dim // heads
      self.qkv = layers.Dense(3 * dim, name="qkv")
      self.projection = layers.Dense(dim, name="projection")

    def call(self, x):
      n, d = x.shape[1], self.head_dim
      qkv = permute(tf.reshape(self.qkv(x), [-1, n, 3, heads, d]),
                    [2, 0, 3, 1, 4])  # [3, B', heads, N, d]
      query, key, value = qkv[0], qkv[1], qkv[2]
      weights = tf.nn.softmax(
          tf.matmul(query, key, transpose_b=True) * d ** -0.5, axis=-1)
      out = permute(tf.matmul(weights, value), [0, 2, 1, 3])
      return self.projection(tf.reshape(out, [-1, n, heads * d]))

  def norm(x, name, swish=True):
    x = layers.BatchNormalization(name=f"{name}/norm")(x)
    return layers.Activation("swish", name=f"{name}/swish")(x) if swish else x

  def conv(x, filters, kernel, name, strides=1, swish=True):
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same",
                      use_bias=False, name=name)(x)
    return norm(x, name, swish)

  def inverted_residual(x, filters, strides, name):
    y = conv(x, expansion * x.shape[-1], 1, f"{name}/expand")
    y = layers.DepthwiseConv2D(3, strides=strides, padding="same",
                               use_bias=False, name=f"{name}/depthwise")(y)
    y = conv(norm(y, f"{name}/depthwise"), filters, 1, f"{name}/project",
             swish=False)
    if strides == 1 and x.shape[-1] == filters:
      y = layers.Add(name=f"{name}/add")([x, y])
    return y

  def unfold(x, name):
    """[B, H, W, d] -> [B * 4, H*W / 4, d]: per position inside a 2x2
    patch, the sequence of all patches."""
    _, height, width, dim = x.shape
    rows, cols = height // _PATCH, width // _PATCH
    return layers.Lambda(
        lambda t: tf.reshape(permute(
            tf.reshape(t, [-1, rows, _PATCH, cols, _PATCH, dim]),
            [0, 2, 4, 1, 3, 5]), [-1, rows * cols, dim]),
        name=name)(x)

  def fold(x, height, width, name):
    """The inverse of `unfold`."""
    dim = x.shape[-1]
    rows, cols = height // _PATCH, width // _PATCH
    return layers.Lambda(
        lambda t: tf.reshape(permute(
            tf.reshape(t, [-1, _PATCH, _PATCH, rows, cols, dim]),
            [0, 3, 1, 4, 2, 5]), [-1, height, width, dim]),
        name=name)(x)

  def transformer(x, name):
    dim = x.shape[-1]
    y = layers.LayerNormalization(epsilon=1e-5, name=f"{name}/norm1")(x)
    y = SelfAttention(dim, name=f"{name}/attention")(y)
    x = layers.Add(name=f"{name}/attention_residual")([x, y])
    y = layers.LayerNormalization(epsilon=1e-5, name=f"{name}/norm2")(x)
    y = layers.Dense(_MLP_RATIO * dim, activation="swish",
                     name=f"{name}/mlp_in")(y)
    y = layers.Dense(dim, name=f"{name}/mlp_out")(y)
    return layers.Add(name=f"{name}/mlp_residual")([x, y])

  def mobilevit_block(x, dim, depth, name):
    _, height, width, filters = x.shape
    y = conv(x, filters, 3, f"{name}/local")
    y = layers.Conv2D(dim, 1, use_bias=False, name=f"{name}/to_tokens")(y)
    y = unfold(y, f"{name}/unfold")
    for i in range(depth):
      y = transformer(y, f"{name}/layer{i}")
    y = layers.LayerNormalization(epsilon=1e-5, name=f"{name}/norm")(y)
    y = fold(y, height, width, f"{name}/fold")
    y = conv(y, filters, 1, f"{name}/to_channels")
    y = layers.Concatenate(name=f"{name}/concat")([x, y])
    return conv(y, filters, 3, f"{name}/fuse")

  inputs = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch)
  x = conv(inputs, channels[0], 3, "stem", strides=2)
  for stage, (filters, strides) in enumerate(zip(channels[1:6], _STRIDES),
                                             start=1):
    blocks = _STAGE2_BLOCKS if stage == 2 else 1
    for b in range(blocks):
      x = inverted_residual(x, filters, strides if b == 0 else 1,
                            f"stage{stage}/mv2_{b}")
    if stage >= 3:
      x = mobilevit_block(x, dims[stage - 3], depths[stage - 3],
                          f"stage{stage}/mobilevit")
  x = conv(x, channels[6], 1, "last")
  x = layers.GlobalAveragePooling2D(name="pool")(x)
  logits = layers.Dense(classes, name="logits")(x)
  model = tf_keras.Model(inputs, logits, name="mobilevit")
  return training_steps.adam_classifier_step(tf, model, images, labels,
                                             learning_rate)
