"""A Mamba-style selective state-space language model's training step.

Gu and Dao, "Mamba: Linear-Time Sequence Modeling with Selective State
Spaces" (2023). A token embedding, then `layers` residual blocks, each
under its own numbered scope `layer_{i}`: RMSNorm; an input projection to
twice the inner width, split into the stream x and a gate z; a causal
depthwise convolution of width 4 over x (zeros before the first position,
none after) and SiLU; the selective state space, whose parameters depend
on the input: x projected to a low-rank step size delta (widened by the dt
projection, softplus), B and C; A = -exp(A_log), one row of `d_state` decay
rates per channel, discretised per position as A_bar = exp(delta A) and
B_bar x = delta B x; the recurrence h_t = A_bar_t h_{t-1} + B_bar_t x_t run
over the sequence as a parallel associative scan
(`tfp.math.scan_associative`: log-depth odd-even combines of
(a1, b1), (a2, b2) -> (a1 a2, a2 b1 + b2)); the readout y_t = C_t . h_t +
D x_t, gated by SiLU(z), projected back to the model width and added to
the block's input. A final RMSNorm and an output projection tied to the
embedding, as in the authors' model; next-token softmax cross-entropy;
AdamW (weight decay 0.1) on gradients clipped to global norm 1, as the
paper trains. No dropout: the paper uses none.

The scan materialises every position's state, [batch, seq, inner width,
d_state], where the paper's fused kernel keeps it in on-chip memory: as TF
code runs it, that tensor and the scan's partial products dominate the
step's memory. Next to `llama` there is no attention and no position
embedding: order comes from the convolution and the scan.
"""

import math

from tf_gdp.corpus import training_steps

_EPSILON = 1e-5
_CONV_WIDTH = 4


def mamba(*, layers: int, d_model: int, seq: int, batch: int,
          vocab: int = 50280, d_state: int = 16, expand: int = 2,
          dt_rank: int = 0, learning_rate: float = 6e-4,
          weight_decay: float = 0.1, clip_norm: float = 1.0, seed: int = 0):
  """The step: tokens [batch, seq + 1] -> logits [batch * seq, vocab] of
  each position's next token. The inner width is `expand` x `d_model`;
  `dt_rank` 0: the paper's d_model / 16, rounded up."""
  if min(layers, d_model, seq, batch) < 1:
    raise ValueError("layers, d_model, seq and batch must be at least 1")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  import tensorflow_probability as tfp  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  inner = expand * d_model
  dt_rank = dt_rank or math.ceil(d_model / 16)

  class RMSNorm(keras.Layer):
    """Scales each vector to unit root mean square, then by a learned gain
    per channel."""

    def build(self, input_shape):
      self.gain = self.add_weight(name="gain", shape=input_shape[-1:],
                                  initializer="ones")
      super().build(input_shape)

    def call(self, x):
      mean_square = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
      return x * tf.math.rsqrt(mean_square + _EPSILON) * self.gain

  class StateSpace(keras.Layer):
    """A_log [inner, d_state], A_log[:, n] = log(n + 1) as the paper's
    S4D-real start, and the skip D [inner]; neither decays."""

    def build(self, input_shape):
      self.a_log = self.add_weight(
          name="A_log", shape=(inner, d_state), initializer=lambda shape, dtype:
          tf.math.log(tf.ones(shape, dtype) * tf.range(
              1, d_state + 1, dtype=dtype)))
      self.d = self.add_weight(name="D", shape=(inner,), initializer="ones")
      super().build(input_shape)

  def dense(units, name, bias=False):
    return keras.Dense(units, use_bias=bias, name=name)

  blocks = [dict(norm=RMSNorm(name="norm"),
                 in_proj=dense(2 * inner, "in_proj"),
                 conv=keras.DepthwiseConv1D(_CONV_WIDTH, padding="valid",
                                            name="conv"),
                 x_proj=dense(dt_rank + 2 * d_state, "x_proj"),
                 dt_proj=dense(inner, "dt_proj", bias=True),
                 ssm=StateSpace(name="ssm"),
                 out_proj=dense(d_model, "out_proj"))
            for _ in range(layers)]
  embed = keras.Embedding(vocab, d_model, name="token_embedding")
  final_norm = RMSNorm(name="final_norm")
  widths = dict(norm=d_model, in_proj=d_model, conv=inner, x_proj=inner,
                dt_proj=dt_rank, ssm=inner, out_proj=inner)
  with unallocated_variables.scope():
    embed.build((None,))
    for i, block in enumerate(blocks):
      with tf.name_scope(f"layer_{i}"):
        for name, layer in block.items():
          layer.build((None, None, widths[name]))
    final_norm.build((None, d_model))
    variables = (embed.trainable_variables
                 + [v for block in blocks for layer in block.values()
                    for v in layer.trainable_variables]
                 + final_norm.trainable_variables)
    no_decay = {id(block["ssm"].a_log) for block in blocks}
    optimizer = _ClippedAdamW(variables, learning_rate, weight_decay,
                              clip_norm, no_decay)

  rng = tf.random.Generator.from_seed(seed)
  tokens = tf.Variable(rng.uniform([batch, seq + 1], 0, vocab,
                                   dtype=tf.int32),
                       trainable=False, name="tokens")

  def combine(earlier, later):
    """Two spans of the recurrence as one: h -> a2 (a1 h + b1) + b2."""
    a1, b1 = earlier
    a2, b2 = later
    return tf.multiply(a1, a2, name="decay"), tf.add(a2 * b1, b2,
                                                     name="state")

  def selective_scan(block, x):
    """x [batch, seq, inner] -> y [batch, seq, inner]."""
    ssm = block["ssm"]
    with tf.name_scope("ssm"):
      delta, b, c = tf.split(block["x_proj"](x), [dt_rank, d_state, d_state],
                             axis=-1, name="delta_b_c")
      delta = tf.nn.softplus(block["dt_proj"](delta), name="delta")
      a = tf.negative(tf.exp(ssm.a_log), name="A")
      delta = tf.expand_dims(delta, -1)  # [batch, seq, inner, 1]
      a_bar = tf.exp(delta * a, name="A_bar")
      bx = tf.multiply(delta * tf.expand_dims(b, 2), tf.expand_dims(x, -1),
                       name="B_bar_x")  # [batch, seq, inner, d_state]
      with tf.name_scope("scan"):
        _, h = tfp.math.scan_associative(combine, (a_bar, bx), axis=1)
      h = tf.identity(h, name="h")
      y = tf.reduce_sum(h * tf.expand_dims(c, 2), axis=-1, name="C_h")
      return tf.add(y, x * ssm.d, name="y")

  def block_step(block, x):
    x, z = tf.split(block["in_proj"](block["norm"](x)), 2, axis=-1,
                    name="x_z")
    # Causal: width - 1 zero positions before the first, none after.
    padded = tf.concat([tf.zeros([batch, _CONV_WIDTH - 1, inner]), x],
                       axis=1, name="causal_pad")
    conv = block["conv"](padded)
    x = tf.multiply(conv, tf.sigmoid(conv), name="conv_silu")
    y = selective_scan(block, x)
    gated = tf.multiply(y, tf.multiply(z, tf.sigmoid(z), name="z_silu"),
                        name="gated")
    return block["out_proj"](gated)

  def forward():
    x = embed(tokens[:, :-1])
    for i, block in enumerate(blocks):
      with tf.name_scope(f"layer_{i}"):
        x = tf.add(x, block_step(block, x), name="residual")
    x = tf.reshape(final_norm(x), [batch * seq, d_model])
    # Tied: the logits read the embedding table itself.
    return tf.matmul(x, embed.embeddings, transpose_b=True, name="logits")

  return training_steps.supervised_step(
      tf, forward, variables, training_steps.next_token_loss(tf, tokens),
      optimizer)


class _ClippedAdamW(training_steps.Optimizer):
  """AdamW (Loshchilov and Hutter, 2019) on gradients rescaled together when
  their global norm exceeds a bound: every weight of rank 2 or more but
  A_log shrinks by learning rate x decay before Adam's step. The tied
  embedding's gradient (looked-up rows plus the head's dense product) is
  summed dense first, so the norm has static shapes."""

  def __init__(self, variables, learning_rate, weight_decay, clip_norm,
               no_decay):
    super().__init__(variables, "adam", learning_rate)
    self.weight_decay, self.clip_norm = weight_decay, clip_norm
    self.no_decay = no_decay

  def apply(self, grads) -> None:
    tf = self._tf
    grads, _ = tf.clip_by_global_norm(self.dense(grads), self.clip_norm)
    shrink = self.learning_rate * self.weight_decay
    with tf.name_scope("adamw"):
      for variable, grad in zip(self.variables, grads):
        if (grad is not None and variable.shape.rank >= 2
            and id(variable) not in self.no_decay):
          variable.assign_sub(shrink * variable)
      super().apply(grads)
