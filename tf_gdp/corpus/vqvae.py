"""A discrete image autoencoder's training step: a VQ-VAE.

van den Oord et al., "Neural Discrete Representation Learning" (NeurIPS
2017). The encoder halves the image twice by 4x4 convolutions of stride 2
(ReLU), then a 3x3 convolution and `blocks` residual blocks, each under its
own numbered scope `encoder/block_{i}`: ReLU, a 3x3 convolution, ReLU, a
1x1 convolution, added to the block's input; ReLU and a 1x1 convolution
give one `code_dim`-wide vector per position of the quarter-size map.

The bottleneck quantises each vector to its nearest code of a learned
codebook [codes, code_dim]: the squared distance to every code (|z|^2 -
2 z.e + |e|^2, one matrix product), the argmin, and a gather of that code's
row. The argmin has no gradient, so the encoder is trained through the
straight-through estimator z + stop_gradient(q - z), which passes the
decoder's gradient to z unchanged; the codebook moves by the codebook loss
|stop_gradient(z) - q|^2, and the commitment loss beta |z -
stop_gradient(q)|^2 (beta 0.25) keeps the encoder near its codes.

The decoder mirrors the encoder: a 3x3 convolution from the codes,
`blocks` residual blocks under `decoder/block_{j}`, ReLU, and two 4x4
transposed convolutions of stride 2 back to RGB (ReLU between). The loss is
the reconstruction's mean squared error against the input image plus the
two codebook terms; Adam on gradients clipped to a global norm.

Next to the other image families the step holds a nearest-neighbour search:
a [positions, codes] distance matrix that no gradient flows back through,
and one gathered codebook that every position of the batch reads.
"""

from tf_gdp.corpus import training_steps

_RESAMPLE_KERNEL = 4
# Scope names of the two resolution steps, without numbers so the stage
# rules read only the residual blocks' numbers.
_STEPS = ("first", "second")


def vqvae(*, image_size: int, hidden: int, blocks: int, codes: int,
          batch: int, code_dim: int = 64, beta: float = 0.25,
          learning_rate: float = 2e-4, clip_norm: float = 1.0,
          seed: int = 0):
  """The step: images [batch, image_size, image_size, 3] -> their
  reconstructions, same shape, through codes on a map a quarter of the
  side. `hidden` is the width of the residual stacks (the first
  downsampling and last upsampling have half of it); `blocks` residual
  blocks in each of encoder and decoder; `codes` rows of `code_dim` in the
  codebook."""
  if min(blocks, hidden, codes, code_dim, batch) < 1:
    raise ValueError("blocks, hidden, codes, code_dim and batch must be at "
                     "least 1")
  if image_size < 4 or image_size % 4:
    raise ValueError(f"image side must be a positive multiple of 4, got "
                     f"{image_size}")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  half = max(hidden // 2, 1)

  def conv(filters, kernel, name, channels, strides=1, transpose=False):
    make = keras.Conv2DTranspose if transpose else keras.Conv2D
    layer = make(filters, kernel, strides=strides, padding="same", name=name)
    layer.build((None, None, None, channels))
    return layer

  def residual_stack():
    """`blocks` pairs of (3x3, 1x1) convolutions, each in its scope."""
    stack = []
    for i in range(blocks):
      with tf.name_scope(f"block_{i}"):
        stack.append((conv(hidden, 3, "conv", hidden),
                      conv(hidden, 1, "project", hidden)))
    return stack

  class Codebook(keras.Layer):
    """The codes, one row each, so that a lookup gathers rows."""

    def build(self, input_shape):
      self.codes = self.add_weight(
          name="codes", shape=(codes, code_dim),
          initializer=tf_keras.initializers.VarianceScaling(
              distribution="uniform"))
      super().build(input_shape)

  with unallocated_variables.scope():
    with tf.name_scope("encoder"):
      down = []
      with tf.name_scope("down"):
        for step, (filters, channels) in zip(
            _STEPS, ((half, 3), (hidden, half))):
          with tf.name_scope(step):
            down.append(conv(filters, _RESAMPLE_KERNEL, "conv", channels,
                             strides=2))
      encoder_in = conv(hidden, 3, "conv", hidden)
      encoder_blocks = residual_stack()
      to_codes = conv(code_dim, 1, "to_codes", hidden)
    codebook = Codebook(name="codebook")
    codebook.build((None, code_dim))
    with tf.name_scope("decoder"):
      decoder_in = conv(hidden, 3, "conv", code_dim)
      decoder_blocks = residual_stack()
      up = []
      with tf.name_scope("up"):
        for step, (filters, channels) in zip(
            _STEPS, ((half, hidden), (3, half))):
          with tf.name_scope(step):
            up.append(conv(filters, _RESAMPLE_KERNEL, "conv", channels,
                           strides=2, transpose=True))
    convs = (down + [encoder_in] + [c for pair in encoder_blocks for c in pair]
             + [to_codes, decoder_in]
             + [c for pair in decoder_blocks for c in pair] + up)
    variables = ([v for c in convs for v in c.trainable_variables]
                 + codebook.trainable_variables)
    optimizer = training_steps.ClippedAdam(variables, learning_rate, clip_norm)

  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.uniform([batch, image_size, image_size, 3]),
                       trainable=False, name="images")

  def residual(stack, x):
    for i, (wide, project) in enumerate(stack):
      with tf.name_scope(f"block_{i}"):
        y = wide(tf.nn.relu(x, name="relu_in"))
        y = project(tf.nn.relu(y, name="relu_out"))
        x = tf.add(x, y, name="residual")
    return tf.nn.relu(x, name="relu")

  def quantize(z):
    """z [batch, side, side, code_dim] -> (straight-through codes, codebook
    loss, commitment loss)."""
    with tf.name_scope("quantizer"):
      flat = tf.reshape(z, [-1, code_dim], name="flat")
      table = codebook.codes
      distances = tf.add(
          tf.reduce_sum(tf.square(flat), axis=1, keepdims=True)
          - 2.0 * tf.matmul(flat, table, transpose_b=True),
          tf.reduce_sum(tf.square(table), axis=1), name="distances")
      nearest = tf.argmin(distances, axis=1, name="nearest")
      chosen = tf.nn.embedding_lookup(table, nearest, name="lookup")
      q = tf.reshape(chosen, z.shape, name="quantized")
      # The codebook loss moves the codes only, the commitment loss the
      # encoder only.
      codebook_loss = tf.reduce_mean(tf.square(tf.subtract(
          tf.stop_gradient(z, name="fixed_z"), q, name="codebook_error")),
                                     name="codebook_loss")
      commitment = tf.reduce_mean(tf.square(tf.subtract(
          z, tf.stop_gradient(q, name="fixed_q"), name="commitment_error")),
                                  name="commitment_loss")
      # Forward: the codes; backward: the decoder's gradient goes to z.
      shift = tf.stop_gradient(tf.subtract(q, z, name="offset"),
                               name="fixed_offset")
      straight = tf.add(z, shift, name="straight_through")
    return straight, codebook_loss, commitment

  def forward():
    with tf.name_scope("encoder"):
      x = images
      with tf.name_scope("down"):
        for step, layer in zip(_STEPS, down):
          with tf.name_scope(step):
            x = tf.nn.relu(layer(x), name="relu")
      x = residual(encoder_blocks, encoder_in(x))
      z = to_codes(x)
    q, codebook_loss, commitment = quantize(z)
    with tf.name_scope("decoder"):
      x = residual(decoder_blocks, decoder_in(q))
      with tf.name_scope("up"):
        first, second = up
        with tf.name_scope(_STEPS[0]):
          x = tf.nn.relu(first(x), name="relu")
        with tf.name_scope(_STEPS[1]):
          x = second(x)
    return x, codebook_loss, commitment

  def loss(outputs):
    restored, codebook_loss, commitment = outputs
    with tf.name_scope("loss"):
      error = tf.subtract(restored, images, name="error")
      reconstruction = tf.reduce_mean(tf.square(error),
                                      name="reconstruction")
      return tf.add_n([reconstruction, codebook_loss,
                       tf.multiply(beta, commitment, name="commitment")],
                      name="total")

  return training_steps.supervised_step(tf, forward, variables, loss,
                                        optimizer)
