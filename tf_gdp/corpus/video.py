"""A video classifier's training step from tf_keras layers: R(2+1)D.

Tran et al., "A Closer Look at Spatiotemporal Convolutions for Action
Recognition" (CVPR 2018): every 3-D convolution of a residual network is
factorised into a 2-D spatial convolution over each frame and a 1-D temporal
convolution over each pixel's frames, with batch norm and ReLU between them.
Here the factorisation is written the way it is often run on 2-D kernels:
the spatial half folds time into the batch (`[B*T, H, W, C]`), the temporal
half folds the pixels into the batch (`[B*H*W, T, C]`), so every convolution
is a Conv2D and the step is a long chain of reshapes between the two
layouts. Softmax over clip labels, Adam.
"""

from tf_gdp.corpus import training_steps

# Filters of the four residual stages (each after the first halves the
# frames and the image).
_STAGE_FILTERS = (64, 128, 256, 512)


def r2plus1d(*, blocks: int, frames: int, image_size: int, batch: int,
             classes: int = 400, learning_rate: float = 1e-3, seed: int = 0):
  """The step: clips [batch, frames, image, image, 3] -> `classes` logits.

  `blocks` residual blocks per stage (R(2+1)D-18 has 2). `frames` must be a
  multiple of 8 and `image_size` of 16, so that every halving is even.
  """
  if frames % 8 or image_size % 16:
    raise ValueError(f"frames must be a multiple of 8 and image_size of 16, "
                     f"got {frames} and {image_size}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  clips = tf.Variable(rng.normal([batch, frames, image_size, image_size, 3]),
                      trainable=False, name="clips")
  labels = tf.Variable(rng.uniform([batch], 0, classes, dtype=tf.int32),
                       trainable=False, name="clip_labels")

  def factorised(x, filters, name, *, kernel=3, space_stride=1,
                 time_stride=1):
    """(2+1)-D convolution: per-frame 2-D, then per-pixel 1-D over time."""
    x = layers.TimeDistributed(
        layers.Conv2D(filters, kernel, strides=space_stride, padding="same",
                      use_bias=False), name=f"{name}/spatial")(x)
    x = layers.BatchNormalization(name=f"{name}/spatial_norm")(x)
    x = layers.ReLU(name=f"{name}/spatial_relu")(x)
    _, t, h, w, c = x.shape
    x = layers.Permute((2, 3, 1, 4), name=f"{name}/to_pixels")(x)
    x = layers.Reshape((h * w, t, c), name=f"{name}/pixel_series")(x)
    x = layers.TimeDistributed(
        layers.Conv1D(filters, 3, strides=time_stride, padding="same",
                      use_bias=False), name=f"{name}/temporal")(x)
    t = x.shape[2]
    x = layers.Reshape((h, w, t, filters), name=f"{name}/pixel_grid")(x)
    return layers.Permute((3, 1, 2, 4), name=f"{name}/to_frames")(x)

  inputs = tf_keras.Input(shape=(frames, image_size, image_size, 3),
                          batch_size=batch)
  x = factorised(inputs, 64, "stem", kernel=7, space_stride=2)
  x = layers.ReLU(name="stem/relu")(layers.BatchNormalization(
      name="stem/norm")(x))
  for stage, filters in enumerate(_STAGE_FILTERS):
    for block in range(blocks):
      name = f"stage{stage}/block{block}"
      stride = 2 if stage > 0 and block == 0 else 1
      shortcut = x
      y = factorised(x, filters, f"{name}/conv0", space_stride=stride,
                     time_stride=stride)
      y = layers.ReLU(name=f"{name}/relu0")(layers.BatchNormalization(
          name=f"{name}/norm0")(y))
      y = factorised(y, filters, f"{name}/conv1")
      y = layers.BatchNormalization(name=f"{name}/norm1")(y)
      if stride > 1 or shortcut.shape[-1] != filters:
        if stride > 1:
          shortcut = layers.Lambda(lambda clip: clip[:, ::2],
                                   name=f"{name}/every_other_frame")(shortcut)
        shortcut = layers.TimeDistributed(
            layers.Conv2D(filters, 1, strides=stride, use_bias=False),
            name=f"{name}/project")(shortcut)
        shortcut = layers.BatchNormalization(
            name=f"{name}/project_norm")(shortcut)
      x = layers.ReLU(name=f"{name}/relu1")(layers.Add(
          name=f"{name}/add")([shortcut, y]))
  x = layers.GlobalAveragePooling3D(name="pool")(x)
  outputs = layers.Dense(classes, name="logits")(x)
  model = tf_keras.Model(inputs, outputs, name="r2plus1d")
  return training_steps.adam_classifier_step(tf, model, clips, labels,
                                             learning_rate)
