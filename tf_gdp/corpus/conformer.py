"""A speech recognizer's training step from tf_keras layers: Conformer.

Gulati et al., "Conformer: Convolution-augmented Transformer for Speech
Recognition" (Interspeech 2020). Log-mel frames pass a convolutional front
end (two 3x3 stride-2 convolutions with ReLU: a quarter of the frames, a
quarter of the mel bins) and a linear map to the model width, then a stack
of Conformer blocks. A block puts self-attention and a convolution module
between two half-step feed-forward modules (each adds half its output to
the residual stream) and ends in a layer norm:

* feed-forward: layer norm, a 4x-wide swish layer, dropout, back to the
  width, dropout;
* self-attention: layer norm, multi-head attention with Transformer-XL
  relative positions (not Keras's MultiHeadAttention, which has none): a
  sinusoid per query-key offset, projected per head, with learned content
  and position biases; the offset logits are moved to key positions by the
  pad-and-reshape shift; dropout;
* convolution: layer norm, a pointwise convolution to twice the width gated
  back to it (GLU), a depthwise convolution along time, batch norm, swish,
  a pointwise convolution, dropout.

Unlike the `speech` family (frame-aligned labels), it is trained end to end
with CTC: per-frame logits over subword units and a blank, scored against
unaligned label sequences by `tf.nn.ctc_loss` with dense labels (its
forward-backward recursions are scans over the frames: while loops in the
graph, as on a GPU). Adam.
"""

import numpy as np

from tf_gdp.corpus import training_steps

_FFN_RATIO = 4
# Two stride-2 convolutions in the front end.
_SUBSAMPLING = 4
_DROPOUT = 0.1


def _offset_sinusoids(steps: int, dim: int) -> np.ndarray:
  """[2*steps - 1, dim]: the sinusoidal encoding of each offset query - key,
  from steps - 1 down to -(steps - 1)."""
  offsets = np.arange(steps - 1, -steps, -1, dtype=np.float64)[:, None]
  angles = offsets / 10000.0 ** (np.arange(0, dim, 2) / dim)[None]
  table = np.zeros((2 * steps - 1, dim))
  table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
  return table.astype(np.float32)


def _offsets_to_keys(tf, logits):
  """[B, H, n, 2n-1] logits by (query i, offset row r = n-1-(i-j)) ->
  [B, H, n, n] by (query i, key j): a zero column on the left, rows of
  n, the first row dropped, rows of 2n-1 again, the first n columns."""
  _, heads, n, _ = logits.shape
  padded = tf.pad(logits, [[0, 0], [0, 0], [0, 0], [1, 0]])
  rows = tf.reshape(padded, [-1, heads, 2 * n, n])[:, :, 1:]
  return tf.reshape(rows, [-1, heads, n, 2 * n - 1])[:, :, :, :n]


def conformer(*, d_model: int, blocks: int, heads: int, frames: int,
              batch: int, features: int = 80, kernel: int = 31,
              vocab: int = 256, label_length: int = 0,
              learning_rate: float = 1e-3, seed: int = 0):
  """The step: log-mel features [batch, frames, features] -> CTC loss.

  The blocks run `frames // 4` steps (`frames` must be a multiple of 4);
  each utterance has `label_length` subword labels (0: a quarter of the
  blocks' steps) out of `vocab`, and the logits add a blank, the last
  class. `d_model` must split evenly into `heads`.
  """
  if frames % _SUBSAMPLING:
    raise ValueError(f"frames must be a multiple of {_SUBSAMPLING}, "
                     f"got {frames}")
  if d_model % heads or d_model % 2:
    raise ValueError(f"d_model {d_model} must be even and split into "
                     f"{heads} heads")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  steps = frames // _SUBSAMPLING
  label_length = label_length or max(1, steps // 4)
  rng = tf.random.Generator.from_seed(seed)
  log_mels = tf.Variable(rng.normal([batch, frames, features]),
                         trainable=False, name="log_mels")
  labels = tf.Variable(
      rng.uniform([batch, label_length], 0, vocab, dtype=tf.int32),
      trainable=False, name="labels")

  class RelativeSelfAttention(layers.Layer):
    """Multi-head self-attention, [B, n, C] -> same, whose logits add a
    term for the query's offset to each key (Transformer-XL's)."""

    def __init__(self, dim, num_heads, **kwargs):
      super().__init__(**kwargs)
      self.num_heads, self.head_dim = num_heads, dim // num_heads
      self.qkv = layers.Dense(3 * dim, name="qkv")
      self.offsets = layers.Dense(dim, use_bias=False, name="offsets")
      self.projection = layers.Dense(dim, name="projection")
      self.dropout = layers.Dropout(_DROPOUT, name="weights_dropout")

    def build(self, input_shape):
      shape = (self.num_heads, 1, self.head_dim)
      self.content_bias = self.add_weight(name="content_bias", shape=shape,
                                          initializer="zeros")
      self.position_bias = self.add_weight(name="position_bias",
                                           shape=shape, initializer="zeros")
      super().build(input_shape)

    def call(self, x, training=None):
      n, d, h = x.shape[1], self.head_dim, self.num_heads
      qkv = tf.reshape(self.qkv(x), [-1, n, 3, h, d])
      q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]), axis=0)
      offsets = self.offsets(tf.constant(_offset_sinusoids(n, h * d)))
      offsets = tf.transpose(tf.reshape(offsets, [2 * n - 1, h, d]),
                             [1, 2, 0])  # [h, d, 2n-1]
      content = tf.matmul(q + self.content_bias, k, transpose_b=True)
      position = _offsets_to_keys(
          tf, tf.matmul(q + self.position_bias, offsets))
      weights = self.dropout(tf.nn.softmax((content + position) * d ** -0.5),
                             training=training)
      out = tf.matmul(weights, v)  # [B, h, n, d]
      out = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [-1, n, h * d])
      return self.projection(out)

  def norm(x, name):
    return layers.LayerNormalization(epsilon=1e-5, name=name)(x)

  def dropout(x, name):
    return layers.Dropout(_DROPOUT, name=name)(x)

  def feed_forward(x, name):
    """Half a step: the residual adds half the module's output."""
    y = norm(x, f"{name}/norm")
    y = layers.Dense(_FFN_RATIO * d_model, activation="swish",
                     name=f"{name}/expand")(y)
    y = dropout(y, f"{name}/inner_dropout")
    y = layers.Dense(d_model, name=f"{name}/project")(y)
    y = dropout(y, f"{name}/dropout")
    y = layers.Lambda(lambda t: 0.5 * t, name=f"{name}/half_step")(y)
    return layers.Add(name=f"{name}/residual")([x, y])

  def self_attention(x, name):
    y = norm(x, f"{name}/norm")
    y = RelativeSelfAttention(d_model, heads, name=f"{name}/attention")(y)
    y = dropout(y, f"{name}/dropout")
    return layers.Add(name=f"{name}/residual")([x, y])

  def convolution(x, name):
    y = norm(x, f"{name}/norm")
    y = layers.Conv1D(2 * d_model, 1, name=f"{name}/pointwise_in")(y)
    y = layers.Lambda(lambda t: (lambda a, b: a * tf.sigmoid(b))(
        *tf.split(t, 2, axis=-1)), name=f"{name}/glu")(y)
    y = layers.DepthwiseConv1D(kernel, padding="same",
                               name=f"{name}/depthwise")(y)
    y = layers.BatchNormalization(name=f"{name}/batch_norm")(y)
    y = layers.Activation("swish", name=f"{name}/swish")(y)
    y = layers.Conv1D(d_model, 1, name=f"{name}/pointwise_out")(y)
    y = dropout(y, f"{name}/dropout")
    return layers.Add(name=f"{name}/residual")([x, y])

  def block(x, name):
    x = feed_forward(x, f"{name}/first_feed_forward")
    x = self_attention(x, f"{name}/self_attention")
    x = convolution(x, f"{name}/convolution")
    x = feed_forward(x, f"{name}/second_feed_forward")
    return norm(x, f"{name}/final_norm")

  inputs = tf_keras.Input(shape=(frames, features), batch_size=batch)
  x = layers.Reshape((frames, features, 1), name="subsampling/to_image")(
      inputs)
  for i in range(2):
    x = layers.Conv2D(d_model, 3, strides=2, padding="same",
                      activation="relu", name=f"subsampling/conv{i}")(x)
  x = layers.Reshape((steps, x.shape[2] * d_model),
                     name="subsampling/to_frames")(x)
  x = layers.Dense(d_model, name="subsampling/projection")(x)
  x = dropout(x, "subsampling/dropout")
  for i in range(blocks):
    x = block(x, f"conformer_block_{i}")
  logits = layers.Dense(vocab + 1, name="ctc_logits")(x)
  model = tf_keras.Model(inputs, logits, name="conformer")

  def loss(logits):
    return tf.reduce_mean(tf.nn.ctc_loss(
        labels, logits, label_length=tf.fill([batch], label_length),
        logit_length=tf.fill([batch], steps), logits_time_major=False,
        blank_index=-1))

  variables = model.trainable_variables
  return training_steps.supervised_step(
      tf, lambda: model(log_mels, training=True), variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
