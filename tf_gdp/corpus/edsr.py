"""A single-image super-resolution network's training step: EDSR.

Lim et al., "Enhanced Deep Residual Networks for Single Image
Super-Resolution" (CVPRW 2017). A 3x3 convolution maps the low-resolution
RGB image to F feature maps; `blocks` residual blocks, each under its own
numbered scope `block_{i}`, run a 3x3 convolution, ReLU and a second 3x3
convolution, scale that by a constant (0.1 in wide models, which keeps
their training stable, else 1) and add the block's input. There is no batch
norm: it costs memory and, the paper finds, hurts super-resolution. A 3x3
convolution closes the stack and a global skip adds the head's output back.
The upsampler is sub-pixel convolution (Shi et al., 2016): a convolution to
r^2 F channels rearranged by depth-to-space into an r times larger map,
once by 3 for x3, once or twice by 2 for x2 and x4; a last 3x3 convolution
gives RGB. L1 loss against the high-resolution image, Adam.

Next to the other image families it never downsamples: every block's maps
have the input's full resolution, and the largest maps, the upsampler's,
come last, next to the loss.
"""

from tf_gdp.corpus import training_steps

_KERNEL = 3
# From this many feature maps on, a block scales its residual by
# `_WIDE_RESIDUAL_SCALE`, as the paper's 256-map model does.
_WIDE = 256
_WIDE_RESIDUAL_SCALE = 0.1
# The upsampler's depth-to-space factors per scale.
_SHUFFLES = {2: (2,), 3: (3,), 4: (2, 2)}
# Scope names of the upsampler's steps, without numbers so the stage rules
# read only the blocks' numbers.
_STEPS = ("first", "second")


def edsr(*, blocks: int, features: int, scale: int, patch: int, batch: int,
         residual_scale: float = 0.0, learning_rate: float = 1e-4,
         seed: int = 0):
  """The step: low-resolution images [batch, patch, patch, 3] -> images
  [batch, scale * patch, scale * patch, 3], against high-resolution targets
  of that shape.

  `scale` is 2, 3 or 4; `residual_scale` 0: 0.1 from 256 feature maps on,
  else 1.
  """
  if scale not in _SHUFFLES:
    raise ValueError(f"scale must be one of {sorted(_SHUFFLES)}, got {scale}")
  if blocks < 1:
    raise ValueError(f"blocks must be at least 1, got {blocks}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  residual_scale = residual_scale or (
      _WIDE_RESIDUAL_SCALE if features >= _WIDE else 1.0)
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.uniform([batch, patch, patch, 3]),
                       trainable=False, name="images")
  side = scale * patch
  targets = tf.Variable(rng.uniform([batch, side, side, 3]),
                        trainable=False, name="targets")

  def conv(filters, name, channels):
    layer = layers.Conv2D(filters, _KERNEL, padding="same", name=name)
    layer.build((None, None, None, channels))
    return layer

  head = conv(features, "head", 3)
  body = []
  for i in range(blocks):
    with tf.name_scope(f"block_{i}"):
      body.append((conv(features, "conv_in", features),
                   conv(features, "conv_out", features)))
  with tf.name_scope("body"):
    body_end = conv(features, "conv", features)
  upsampler = []
  with tf.name_scope("upsample"):
    for step, factor in zip(_STEPS, _SHUFFLES[scale]):
      with tf.name_scope(step):
        upsampler.append((conv(factor * factor * features, "conv", features),
                          factor))
  output = conv(3, "output", features)
  convs = ([head] + [c for pair in body for c in pair] + [body_end]
           + [c for c, _ in upsampler] + [output])
  variables = [v for c in convs for v in c.trainable_variables]

  def forward():
    x = skip = head(images)
    for i, (first, second) in enumerate(body):
      with tf.name_scope(f"block_{i}"):
        y = second(tf.nn.relu(first(x), name="relu"))
        y = tf.multiply(y, residual_scale, name="scaled")
        x = tf.add(x, y, name="residual")
    with tf.name_scope("body"):
      x = tf.add(body_end(x), skip, name="global_skip")
    with tf.name_scope("upsample"):
      for step, (layer, factor) in zip(_STEPS, upsampler):
        with tf.name_scope(step):
          x = tf.nn.depth_to_space(layer(x), factor, name="depth_to_space")
    return output(x)

  def loss(restored):
    with tf.name_scope("loss"):
      error = tf.subtract(restored, targets, name="error")
      return tf.reduce_mean(tf.abs(error, name="absolute_error"))

  return training_steps.supervised_step(
      tf, forward, variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
