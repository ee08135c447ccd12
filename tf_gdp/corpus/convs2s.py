"""A convolutional sequence-to-sequence translation model's training step.

Gehring et al., "Convolutional Sequence to Sequence Learning" (ICML 2017).
Source and target tokens get token plus learned position embeddings,
projected to the convolutions' width. Encoder blocks (`encoder/block_{i}`)
convolve to twice the width, gate it (GLU: a * sigmoid(b)) and add their
input, scaled by sqrt(0.5) to keep the sum's variance that of one term.
Decoder blocks (`decoder/block_{j}`) pad on the left only, so no position
reads a later one, then each attends: its output, projected to the
embedding size plus the target embedding, scores the encoder's output, and
the context (that output plus the source embedding: what the encoder found
and which token sat there) is projected back and added. Next-token softmax
cross-entropy; Nesterov momentum on gradients clipped to global norm 0.1,
the paper's recipe. No dropout, no weight norm. Unlike
`transformers.translation_model` there is no self-attention: a block's
convolution reads only 3 neighbouring positions.
"""

import math

from tf_gdp.corpus import training_steps

_SCALE = math.sqrt(0.5)
_KERNEL = 3


def convs2s(*, encoder_blocks: int, decoder_blocks: int, width: int,
            seq: int, batch: int, vocab: int = 32000, embedding: int = 512,
            learning_rate: float = 0.25, momentum: float = 0.99,
            clip_norm: float = 0.1, seed: int = 0):
  """The step: source tokens [batch, seq] and target tokens [batch, seq + 1]
  -> logits [batch * seq, vocab] of each target position's next token."""
  if min(encoder_blocks, decoder_blocks) < 1:
    raise ValueError("the encoder and the decoder need 1 block or more")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers

  def built(layer, channels):
    layer.build((None, None, channels))
    return layer

  def dense(units, channels, name="to_width"):
    return built(keras.Dense(units, name=name), channels)

  def embeddings(side):
    with tf.name_scope(side):
      return (built(keras.Embedding(vocab, embedding, name="tokens"), 1),
              built(keras.Embedding(seq, embedding, name="positions"), 1),
              dense(width, embedding))

  def block(name, padding, attends):
    with tf.name_scope(name):
      layers = dict(conv=built(keras.Conv1D(2 * width, _KERNEL, name="conv",
                                            padding=padding), width))
      if attends:
        with tf.name_scope("attention"):
          layers.update(to_embedding=dense(embedding, width, "to_embedding"),
                        to_width=dense(width, embedding))
      return layers

  with unallocated_variables.scope():
    source_layers, target_layers = embeddings("source"), embeddings("target")
    with tf.name_scope("encoder"):
      encoder = [block(f"block_{i}", "same", False)
                 for i in range(encoder_blocks)]
      to_keys = dense(embedding, width, "to_embedding")
    with tf.name_scope("decoder"):
      decoder = [block(f"block_{j}", "valid", True)
                 for j in range(decoder_blocks)]
      to_output = dense(embedding, width, "to_embedding")
    head = dense(vocab, embedding, "output")
    every = [*source_layers, *target_layers, to_keys, to_output, head]
    every += [l for b in encoder + decoder for l in b.values()]
    variables = [v for l in every for v in l.trainable_variables]
    optimizer = _NesterovSGD(variables, learning_rate, momentum, clip_norm)

  rng = tf.random.Generator.from_seed(seed)
  source, target = (tf.Variable(rng.uniform([batch, n], 0, vocab, tf.int32),
                                trainable=False, name=name)
                    for name, n in (("source", seq), ("target", seq + 1)))

  def embed(side, layers, tokens):
    """(Token + position embedding, it projected to the width)."""
    tokens_layer, positions_layer, to_width = layers
    with tf.name_scope(side):
      e = tf.add(tokens_layer(tokens), positions_layer(tf.range(seq)),
                 name="embedded")
      return e, to_width(e)

  def glu(x):
    with tf.name_scope("glu"):
      a, b = tf.split(x, 2, axis=-1)
      return tf.multiply(a, tf.sigmoid(b), name="gated")

  def attention(layers, y, target_embedded, keys, values):
    """One decoder block's output y attends over the source positions."""
    with tf.name_scope("attention"):
      query = tf.multiply(layers["to_embedding"](y) + target_embedded,
                          _SCALE, name="query")
      scores = tf.matmul(query, keys, transpose_b=True, name="scores")
      weights = tf.nn.softmax(scores, axis=-1, name="weights")
      # Scaled by m * sqrt(1 / m) for m source positions, as the paper.
      context = tf.multiply(tf.matmul(weights, values), math.sqrt(seq),
                            name="context")
      return tf.multiply(layers["to_width"](context) + y, _SCALE,
                         name="attended")

  def forward():
    source_embedded, x = embed("source", source_layers, source)
    target_embedded, h = embed("target", target_layers, target[:, :-1])
    with tf.name_scope("encoder"):
      for i, layers in enumerate(encoder):
        with tf.name_scope(f"block_{i}"):
          y = glu(layers["conv"](x))
          x = tf.multiply(y + x, _SCALE, name="residual")
      keys = to_keys(x)
      values = tf.multiply(keys + source_embedded, _SCALE, name="values")
    with tf.name_scope("decoder"):
      for j, layers in enumerate(decoder):
        with tf.name_scope(f"block_{j}"):
          # Causal: kernel - 1 zeros before the first position, none after.
          padded = tf.concat([tf.zeros([batch, _KERNEL - 1, width]), h],
                             axis=1, name="causal_pad")
          y = glu(layers["conv"](padded))
          y = attention(layers, y, target_embedded, keys, values)
          h = tf.multiply(y + h, _SCALE, name="residual")
      h = to_output(h)
    return head(tf.reshape(h, [batch * seq, embedding]))

  def loss(logits):
    labels = tf.reshape(target[:, 1:], [batch * seq])
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

  return training_steps.supervised_step(tf, forward, variables, loss,
                                        optimizer)


class _NesterovSGD(training_steps.Optimizer):
  """SGD with Nesterov momentum (velocity v = mu v + g, step lr (g + mu v))
  on gradients rescaled together when their global norm exceeds a bound."""

  def __init__(self, variables, learning_rate, momentum, clip_norm):
    super().__init__(variables, "momentum", learning_rate)
    self.momentum, self.clip_norm = momentum, clip_norm

  def apply(self, grads) -> None:
    tf = self._tf
    # The embeddings' gathered rows are summed dense first, so the norm and
    # the clipped gradients have static shapes.
    grads, _ = tf.clip_by_global_norm(self.dense(grads), self.clip_norm)
    with tf.name_scope("nesterov"):
      for variable, velocity, grad in zip(self.variables,
                                          self.slots["velocity"], grads):
        if grad is None:  # unused
          continue
        new = self.momentum * velocity + grad
        velocity.assign(new)
        variable.assign_sub(self.learning_rate * (grad + self.momentum * new))
