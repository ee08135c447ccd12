"""An image captioner's training step from tf_keras layers.

Show, Attend and Tell (Xu et al., ICML 2015) with a transformer decoder, as
in later transformer captioners. A ResNet of basic residual blocks encodes
the image; its last map (1/32 of the side, in four stages) is flattened
into visual tokens, projected to the model width d with learned positions
and optionally read by transformer encoder layers. A pre-norm transformer
decoder (a layer norm before each sublayer, a residual add after it) embeds
the caption and runs L layers of causal self-attention, cross-attention to
the visual tokens and a GELU MLP; next-token logits over the vocabulary are
scored by softmax cross-entropy against the caption shifted by one (teacher
forcing). Batch norm and ReLU in the ResNet, Adam.

Next to `dual_encoder` (a CLIP-style two-tower contrastive model) and
`translation` (a text encoder-decoder), it feeds a convolutional encoder
into every decoder layer's cross-attention.
"""

from tf_gdp.corpus import training_steps

_MLP_RATIO = 4
# Each stage after the first halves the map; the stem quarters the image.
_STEM_STRIDE = 4


def captioner(*, image_size: int, caption_length: int, batch: int,
              width: int, decoder_layers: int, encoder_layers: int = 0,
              heads: int = 8, blocks=(2, 2, 2, 2), channels: int = 64,
              vocab: int = 10000, learning_rate: float = 1e-4,
              seed: int = 0):
  """The step: images [batch, image_size, image_size, 3] and captions
  [batch, caption_length + 1] -> logits [batch, caption_length, vocab] of
  each caption's next token.

  `blocks` are the residual blocks per stage of the convolutional encoder
  (ResNet-18: 2, 2, 2, 2; ResNet-34: 3, 4, 6, 3), `channels` its stem's and
  first stage's, doubling per stage. `width` is the transformers' d, a
  multiple of `heads`; `encoder_layers` may be 0. `image_size` must be a
  multiple of the encoder's stride, 4 * 2 ** (len(blocks) - 1).
  """
  if not blocks or min(blocks) < 1:
    raise ValueError(f"blocks must be counts of at least 1, got {blocks}")
  stride = _STEM_STRIDE * 2 ** (len(blocks) - 1)
  if image_size % stride:
    raise ValueError(f"image side must be a multiple of {stride}, "
                     f"got {image_size}")
  if width % heads:
    raise ValueError(f"width {width} must be a multiple of {heads} heads")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                       trainable=False, name="images")
  captions = tf.Variable(
      rng.uniform([batch, caption_length + 1], 0, vocab, dtype=tf.int32),
      trainable=False, name="captions")

  class Positions(layers.Layer):
    """Adds a learned embedding per position to [B, N, d]."""

    def build(self, input_shape):
      self.positions = self.add_weight(
          name="positions", shape=input_shape[1:],
          initializer=tf_keras.initializers.RandomNormal(stddev=0.02))

    def call(self, x):
      return x + self.positions

  def conv(x, filters, kernel, name, strides=1, relu=True):
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same",
                      use_bias=False, name=name)(x)
    x = layers.BatchNormalization(name=f"{name}/norm")(x)
    return layers.ReLU(name=f"{name}/relu")(x) if relu else x

  def residual_block(x, filters, strides, name):
    y = conv(x, filters, 3, f"{name}/conv0", strides=strides)
    y = conv(y, filters, 3, f"{name}/conv1", relu=False)
    if strides != 1 or x.shape[-1] != filters:
      x = conv(x, filters, 1, f"{name}/project", strides=strides,
               relu=False)
    return layers.ReLU(name=f"{name}/relu")(
        layers.Add(name=f"{name}/add")([x, y]))

  def norm(x, name):
    return layers.LayerNormalization(epsilon=1e-6, name=name)(x)

  def attention(x, name, memory=None, mask=None):
    """Pre-norm attention of `x` to itself or to `memory`, residual."""
    y = norm(x, f"{name}/norm")
    y = layers.MultiHeadAttention(heads, width // heads, name=name)(
        y, y if memory is None else memory, attention_mask=mask)
    return layers.Add(name=f"{name}/residual")([x, y])

  def mlp(x, name):
    y = norm(x, f"{name}/norm")
    y = layers.Dense(_MLP_RATIO * width, activation="gelu",
                     name=f"{name}/in")(y)
    y = layers.Dense(width, name=f"{name}/out")(y)
    return layers.Add(name=f"{name}/residual")([x, y])

  image = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch,
                         name="image")
  caption = tf_keras.Input(shape=(caption_length,), batch_size=batch,
                           dtype="int32", name="caption")
  x = conv(image, channels, 7, "stem/conv", strides=2)
  x = layers.MaxPooling2D(3, strides=2, padding="same", name="stem/pool")(x)
  for stage, count in enumerate(blocks, start=1):
    for b in range(count):
      x = residual_block(x, channels * 2 ** (stage - 1),
                         2 if stage > 1 and b == 0 else 1,
                         f"stage{stage}/block{b}")
  side = image_size // stride
  x = layers.Reshape((side * side, x.shape[-1]), name="flatten")(x)
  x = layers.Dense(width, name="visual_projection")(x)
  x = Positions(name="visual_positions")(x)
  for i in range(encoder_layers):
    x = attention(x, f"encoder{i}/attention")
    x = mlp(x, f"encoder{i}/mlp")
  visual = norm(x, "visual_norm")
  # Position t attends to positions up to t. The mask is a constant
  # (`use_causal_mask` would build it from run-time shapes, left unpriced).
  causal = layers.Lambda(
      lambda _: tf.linalg.band_part(
          tf.ones([1, caption_length, caption_length]), -1, 0),
      name="causal_mask")(caption)
  y = layers.Embedding(vocab, width, name="token_embedding")(caption)
  y = Positions(name="caption_positions")(y)
  for i in range(decoder_layers):
    y = attention(y, f"decoder{i}/self_attention", mask=causal)
    y = attention(y, f"decoder{i}/cross_attention", memory=visual)
    y = mlp(y, f"decoder{i}/mlp")
  logits = layers.Dense(vocab, name="vocabulary")(norm(y, "decoder_norm"))
  model = tf_keras.Model([image, caption], logits, name="captioner")
  variables = model.trainable_variables

  # The caption split two ways: its first tokens are the decoder's input,
  # its last the targets, so the logits at t are scored against token t + 1.
  def forward():
    inputs, _ = tf.split(captions, [caption_length, 1], axis=1,
                         name="caption_inputs")
    return model([images, inputs], training=True)

  def loss(logits):
    _, targets = tf.split(captions, [1, caption_length], axis=1,
                          name="caption_targets")
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits))

  # The token embedding's gradient is gathered rows, summed to full size.
  return training_steps.supervised_step(
      tf, forward, variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate,
                               static_dense_shape=True))
