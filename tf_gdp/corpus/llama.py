"""A LLaMA-style decoder-only language model's training step.

LLaMA (Touvron et al., 2023) with grouped-query attention (Ainslie et al.,
2023), as in the larger LLaMA 2 models: a token embedding, then `layers`
pre-norm decoder blocks, each under its own numbered scope `layer_{i}`
(RMSNorm, causal self-attention, residual add, RMSNorm, SwiGLU MLP,
residual add), a final RMSNorm and an output projection of its own (not
tied to the embedding). Attention rotates queries and keys by their
position (rotary embeddings, one sin and one cos table shared by every
layer) and lets each group of query heads share one key and value head.
Next-token softmax cross-entropy, AdamW: Adam plus decoupled weight decay
of the matrices.

Next to `transformers.language_model`'s GPT-style decoder (learned
positions, layer norm, GELU, tied embedding), its key and value
projections are narrower than its queries and its MLP is gated. The
weights and slots are made by `unallocated_variables.scope()`: the step is
traced, never run, so building it needs no host memory for them.
"""

import numpy as np

from tf_gdp.corpus import training_steps

_EPSILON = 1e-6
_ROTARY_BASE = 10000.0
# SwiGLU's width: 2/3 of a 4x MLP (the same parameters for three matrices
# as for two), rounded up to a multiple of this.
_MLP_MULTIPLE = 256


def _mlp_width(hidden: int) -> int:
  """LLaMA's SwiGLU width for a model width `hidden`."""
  width = 8 * hidden // 3
  return -(-width // _MLP_MULTIPLE) * _MLP_MULTIPLE


def llama(*, layers: int, hidden: int, heads: int, kv_heads: int, seq: int,
          batch: int, vocab: int = 32000, ffn: int = 0,
          learning_rate: float = 3e-4, weight_decay: float = 0.1,
          seed: int = 0):
  """The step: tokens [batch, seq + 1] -> logits [batch * seq, vocab] of
  each position's next token.

  `hidden` is a multiple of `heads`, with an even width per head (rotary
  embeddings turn pairs of channels); `heads` a multiple of `kv_heads`.
  `ffn` is the SwiGLU width; 0: LLaMA's, 8/3 x `hidden` rounded up to a
  multiple of 256.
  """
  if hidden % heads or (hidden // heads) % 2:
    raise ValueError(f"hidden {hidden} must be {heads} heads of an even "
                     "width")
  if heads % kv_heads:
    raise ValueError(f"{heads} query heads must be a multiple of "
                     f"{kv_heads} key/value heads")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  ffn = ffn or _mlp_width(hidden)
  width = hidden // heads
  groups = heads // kv_heads

  class RMSNorm(keras.Layer):
    """Scales each vector to unit root mean square, then by a learned gain
    per channel (no centring, no bias)."""

    def build(self, input_shape):
      self.gain = self.add_weight(name="gain", shape=input_shape[-1:],
                                  initializer="ones")
      super().build(input_shape)

    def call(self, x):
      mean_square = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
      return x * tf.math.rsqrt(mean_square + _EPSILON) * self.gain

  def dense(units, name):
    return keras.Dense(units, use_bias=False, name=name)

  # Each block's layers, by name; called on [batch * seq, hidden].
  blocks = [dict(attention_norm=RMSNorm(name="attention_norm"),
                 query=dense(heads * width, "query"),
                 key=dense(kv_heads * width, "key"),
                 value=dense(kv_heads * width, "value"),
                 out=dense(hidden, "out"),
                 mlp_norm=RMSNorm(name="mlp_norm"),
                 gate=dense(ffn, "gate"), up=dense(ffn, "up"),
                 down=dense(hidden, "down"))
            for _ in range(layers)]
  embed = keras.Embedding(vocab, hidden, name="token_embedding")
  final_norm = RMSNorm(name="final_norm")
  head = dense(vocab, "output")
  with unallocated_variables.scope():
    embed.build((None,))
    for i, block in enumerate(blocks):
      with tf.name_scope(f"layer_{i}"):
        for name, layer in block.items():
          layer.build((None, ffn if name == "down" else hidden))
    final_norm.build((None, hidden))
    head.build((None, hidden))
    variables = (embed.trainable_variables
                 + [v for block in blocks for layer in block.values()
                    for v in layer.trainable_variables]
                 + final_norm.trainable_variables + head.trainable_variables)
    optimizer = _AdamW(variables, learning_rate, weight_decay)

  rng = tf.random.Generator.from_seed(seed)
  tokens = tf.Variable(rng.uniform([batch, seq + 1], 0, vocab,
                                   dtype=tf.int32),
                       trainable=False, name="tokens")
  # Channels j and j + width / 2 of a head turn together, at j's frequency.
  frequencies = _ROTARY_BASE ** (-np.arange(0, width, 2) / width)
  frequencies = np.concatenate([frequencies, frequencies]).astype(np.float32)

  def rotate(x, cos, sin):
    """x [..., width] turned by its position: channels j and j + width / 2
    as a pair, by cos and sin of the angle of j (rotary)."""
    first, second = tf.split(x, 2, axis=-1)
    return tf.add(x * cos, tf.concat([-second, first], axis=-1) * sin,
                  name="rotated")

  def attention(block, x, rotary, causal):
    with tf.name_scope("attention"):
      q = tf.reshape(block["query"](x), [batch, seq, kv_heads, groups, width])
      k = tf.reshape(block["key"](x), [batch, seq, kv_heads, width])
      v = tf.reshape(block["value"](x), [batch, seq, kv_heads, width])
      with tf.name_scope("rotary_query"):
        q = rotate(q, *rotary["query"])
      with tf.name_scope("rotary_key"):
        k = rotate(k, *rotary["key"])
      # Grouped-query: the `groups` query heads of a key/value head read it.
      scores = tf.einsum("bskgd,btkd->bkgst", q, k) * (width ** -0.5)
      weights = tf.nn.softmax(scores + causal, axis=-1)
      y = tf.einsum("bkgst,btkd->bskgd", weights, v)
      return block["out"](tf.reshape(y, [batch * seq, hidden]))

  def mlp(block, x):
    with tf.name_scope("mlp"):
      gate = block["gate"](x)
      # SiLU written out, so that its gradient stays in this block's scope.
      silu = tf.multiply(gate, tf.sigmoid(gate), name="silu")
      gated = tf.multiply(silu, block["up"](x), name="swiglu")
      return block["down"](gated)

  def forward():
    with tf.name_scope("rotary"):
      # One angle per position and channel, [seq, 1, width] for the keys'
      # [batch, seq, kv_heads, width] and [seq, 1, 1, width] for the
      # queries' [batch, seq, kv_heads, groups, width].
      angles = (tf.range(seq, dtype=tf.float32)[:, tf.newaxis, tf.newaxis]
                * frequencies)
      cos, sin = tf.cos(angles, name="cos"), tf.sin(angles, name="sin")
      rotary = {"key": (cos, sin),
                "query": (tf.expand_dims(cos, 1, name="query_cos"),
                          tf.expand_dims(sin, 1, name="query_sin"))}
    with tf.name_scope("causal_mask"):
      # Position t reads positions up to t: 0 there, a large negative above.
      causal = (tf.linalg.band_part(tf.ones([seq, seq]), -1, 0) - 1.0) * 1e9
    x = embed(tf.reshape(tokens[:, :-1], [batch * seq]))
    for i, block in enumerate(blocks):
      with tf.name_scope(f"layer_{i}"):
        y = attention(block, block["attention_norm"](x), rotary, causal)
        x = tf.add(x, y, name="attention_residual")
        y = mlp(block, block["mlp_norm"](x))
        x = tf.add(x, y, name="mlp_residual")
    return head(final_norm(x))

  return training_steps.supervised_step(
      tf, forward, variables, training_steps.next_token_loss(tf, tokens),
      optimizer)


class _AdamW(training_steps.Optimizer):
  """Adam with decoupled weight decay (Loshchilov and Hutter, 2019): each
  matrix shrinks by learning rate x decay before Adam's update; the norms'
  gains do not decay."""

  def __init__(self, variables, learning_rate: float, weight_decay: float):
    # The embedding's gradient is gathered rows, summed to full size.
    super().__init__(variables, "adam", learning_rate,
                     static_dense_shape=True)
    self.weight_decay = weight_decay

  def apply(self, grads) -> None:
    grads = list(grads)
    shrink = self.learning_rate * self.weight_decay
    for variable, grad in zip(self.variables, grads):
      if grad is not None and variable.shape.rank >= 2:
        variable.assign_sub(shrink * variable)
    super().apply(grads)
