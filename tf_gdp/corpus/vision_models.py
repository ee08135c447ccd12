"""Vision training steps built from tf_keras layers: U-Net and MLP-Mixer.

Two designs the Keras applications do not have. A U-Net segments images:
its decoder concatenates the encoder's output of the same scale, so long
skip edges join the first layers to the last, and its activations at full
resolution, not its weights, fill memory. An MLP-Mixer classifies images
with no convolution past the patch embedding and no attention: each block
mixes across patches (a transpose, then dense layers over the patch axis)
and then across channels. Both train with Adam.
"""

from tf_gdp.corpus import training_steps


def unet(*, depth: int, filters: int, image_size: int, batch: int,
         classes: int = 8, learning_rate: float = 1e-3, seed: int = 0):
  """A U-Net segmentation step: per-pixel softmax over `classes`.

  `depth` 2x2 max-pool steps down, each after a pair of 3x3 Conv2D +
  BatchNorm + ReLU with `filters * 2**level` channels; a pair at the
  bottom; then per level a 2x2 stride-2 Conv2DTranspose up, the skip
  connection of that scale concatenated, and a pair; a 1x1 Conv2D to the
  class logits. `image_size` must be a multiple of `2**depth`.
  """
  if image_size % (2 ** depth):
    raise ValueError(f"image size {image_size} is not a multiple of "
                     f"2**{depth}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers

  def conv_pair(x, width, name):
    for j in (1, 2):
      x = layers.Conv2D(width, 3, padding="same", use_bias=False,
                        name=f"{name}/conv{j}")(x)
      x = layers.BatchNormalization(name=f"{name}/norm{j}")(x)
      x = layers.ReLU(name=f"{name}/relu{j}")(x)
    return x

  inputs = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch)
  x, skips = inputs, []
  for level in range(depth):
    x = conv_pair(x, filters * 2 ** level, f"down{level}")
    skips.append(x)
    x = layers.MaxPooling2D(2, name=f"down{level}/pool")(x)
  x = conv_pair(x, filters * 2 ** depth, "bottom")
  for level in reversed(range(depth)):
    x = layers.Conv2DTranspose(filters * 2 ** level, 2, strides=2,
                               name=f"up{level}/upsample")(x)
    x = layers.Concatenate(name=f"up{level}/skip")([x, skips[level]])
    x = conv_pair(x, filters * 2 ** level, f"up{level}")
  logits = layers.Conv2D(classes, 1, name="logits")(x)
  model = tf_keras.Model(inputs, logits, name="unet")

  rng = tf.random.Generator.from_seed(seed)
  images, masks = training_steps.labelled_images(
      tf, rng, batch, image_size, classes, per_pixel=True,
      labels_name="masks")
  return training_steps.adam_classifier_step(tf, model, images, masks,
                                            learning_rate)


def mlp_mixer(*, layers: int, hidden: int, token_mlp: int, channel_mlp: int,
              patch: int, image_size: int, batch: int, classes: int = 10,
              learning_rate: float = 1e-3, seed: int = 0):
  """An MLP-Mixer classifier step.

  A `patch` x `patch` stride-`patch` Conv2D embeds the patches; each of
  `layers` blocks is LayerNorm, a GELU MLP of width `token_mlp` across the
  patches (between two transposes), a residual add, LayerNorm, a GELU MLP
  of width `channel_mlp` across the channels and a residual add; then
  LayerNorm, the mean over patches and a Dense head.
  """
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  patches = (image_size // patch) ** 2

  inputs = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch)
  x = keras.Conv2D(hidden, patch, strides=patch,
                   name="patch_embedding")(inputs)
  x = keras.Reshape((patches, hidden), name="patches")(x)
  for i in range(layers):
    y = keras.LayerNormalization(epsilon=1e-6, name=f"block{i}/token_norm")(x)
    y = keras.Permute((2, 1), name=f"block{i}/to_tokens")(y)
    y = keras.Dense(token_mlp, activation="gelu",
                    name=f"block{i}/token_mlp_in")(y)
    y = keras.Dense(patches, name=f"block{i}/token_mlp_out")(y)
    y = keras.Permute((2, 1), name=f"block{i}/to_channels")(y)
    x = keras.Add(name=f"block{i}/token_residual")([x, y])
    y = keras.LayerNormalization(epsilon=1e-6,
                                 name=f"block{i}/channel_norm")(x)
    y = keras.Dense(channel_mlp, activation="gelu",
                    name=f"block{i}/channel_mlp_in")(y)
    y = keras.Dense(hidden, name=f"block{i}/channel_mlp_out")(y)
    x = keras.Add(name=f"block{i}/channel_residual")([x, y])
  x = keras.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
  x = keras.GlobalAveragePooling1D(name="pool")(x)
  logits = keras.Dense(classes, name="head")(x)
  model = tf_keras.Model(inputs, logits, name="mlp_mixer")

  rng = tf.random.Generator.from_seed(seed)
  images, labels = training_steps.labelled_images(
      tf, rng, batch, image_size, classes)
  return training_steps.adam_classifier_step(tf, model, images, labels,
                                            learning_rate)
