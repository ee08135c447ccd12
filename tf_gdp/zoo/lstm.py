"""A statically unrolled LSTM: one set of graph nodes per time step.

Placement needs every time step's ops as separate nodes (a `tf.while_loop`
would hide them in one loop body), so layers here are Python loops over
explicit cell math. They do what TF1's `static_rnn` /
`static_bidirectional_rnn` did for padded batches: past a sequence's length
the state is carried through and the output is zero, and the backward
direction reverses each sequence within its own length. Weights are read
once per layer, so every step of a layer depends on the same read.
"""

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

# Uniform init range of the GNMT / tensorflow-nmt recipe.
INIT_SCALE = 0.1
# Added to the forget gate so a fresh cell remembers by default.
FORGET_BIAS = 1.0


def scope(*parts) -> str:
  """An absolute name scope "a/b/c/": re-entered, not uniquified, on reuse."""
  return "/".join(str(p) for p in parts) + "/"


class LstmCell(tf.Module):
  """Weights of one LSTM cell: a fused [input+hidden, 4*hidden] kernel."""

  def __init__(self, input_size: int, hidden_size: int, rng, var_scope: str):
    super().__init__()
    self.hidden_size = hidden_size
    self.kernel = tf.Variable(
        rng.uniform([input_size + hidden_size, 4 * hidden_size],
                    -INIT_SCALE, INIT_SCALE),
        name=var_scope + "kernel")
    self.bias = tf.Variable(tf.zeros([4 * hidden_size]),
                            name=var_scope + "bias")

  def read(self):
    """Reads the weights once; call inside the layer's name scope."""
    return tf.identity(self.kernel), tf.identity(self.bias)

  def zero_state(self, batch: int):
    """All-zero (c, h); call inside the layer's name scope."""
    zeros = tf.zeros([batch, self.hidden_size])
    return zeros, zeros


def lstm_step(inputs, state, weights, dropout: float = 0.0):
  """One LSTM step; state is (c, h); returns (h, new_state).

  `dropout` is the drop rate of the cell's input, as nmt's DropoutWrapper.
  """
  kernel, bias = weights
  c, h = state
  if dropout > 0:
    inputs = tf.nn.dropout(inputs, rate=dropout)
  gates = tf.nn.bias_add(tf.matmul(tf.concat([inputs, h], 1), kernel), bias)
  i, j, f, o = tf.split(gates, 4, axis=1)
  new_c = tf.sigmoid(f + FORGET_BIAS) * c + tf.sigmoid(i) * tf.tanh(j)
  new_h = tf.sigmoid(o) * tf.tanh(new_c)
  return new_h, (new_c, new_h)


def mask_step(t: int, lengths, output, state, new_output, new_state):
  """Keeps `state` and emits `output` (zeros) where step t is past the end."""
  done = tf.expand_dims(tf.greater_equal(t, lengths), 1)
  return (tf.where(done, output, new_output),
          tuple(tf.where(done, old, new) for old, new in zip(state, new_state)))


def run_layer(cell: LstmCell, inputs, lengths, layer_scope: str,
              reverse: bool = False, dropout: float = 0.0):
  """Unrolls `cell` from a zero state over the list `inputs` ([batch, n]).

  Sequence b is `lengths[b]` steps long. Step k's ops live in
  `layer_scope`t<k>/ (for `reverse`, k counts steps of the reversed
  sequences). Returns the per-step outputs in input order and the state
  after each sequence's last step.
  """
  with tf.name_scope(layer_scope):
    weights = cell.read()
    state = cell.zero_state(inputs[0].shape[0])
    zero_output = state[1]
    if reverse:
      inputs = _reverse_within_lengths(inputs, lengths)
  outputs = []
  for t, x in enumerate(inputs):
    with tf.name_scope(f"{layer_scope}t{t}/"):
      h, new_state = lstm_step(x, state, weights, dropout)
      h, state = mask_step(t, lengths, zero_output, state, h, new_state)
      outputs.append(h)
  if reverse:
    with tf.name_scope(layer_scope):
      outputs = _reverse_within_lengths(outputs, lengths)
  return outputs, state


def _reverse_within_lengths(steps, lengths):
  """Reverses sequence b's first lengths[b] steps (static_bidirectional_rnn)."""
  stacked = tf.stack(steps, axis=0)  # [time, batch, n]
  return tf.unstack(tf.reverse_sequence(stacked, lengths, seq_axis=0,
                                        batch_axis=1))
