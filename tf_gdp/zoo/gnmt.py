"""GNMT training step (Wu et al., 2016), statically unrolled over time.

The benchmark graph of the GDP paper: its 8-layer version has 50k+ nodes.
Encoder: a bidirectional bottom LSTM layer, then unidirectional layers with
residual connections from the third layer on. Decoder: LSTM layers; the
bottom layer's output queries normalized Bahdanau attention over the top
encoder outputs, and the context is fed to every other decoder layer and,
at the next step, to the bottom one (input feeding). A softmax projection
per step, cross-entropy, backward pass, gradient clipping and an SGD (or
Adam) update. As in tensorflow-nmt's GNMT recipe, batches are padded:
encoder layers carry their state through past each sentence's length,
attention ignores padding, the loss weights padding 0, and every cell's
input gets dropout.

Name scopes say where an op belongs, so a placer can put one layer per
device: `embedding/{encoder,decoder}/`, `encoder/layer_<i>/[fw|bw/]t<k>/`,
`decoder/layer_<i>/t<k>/`, `attention/[t<k>/]`, `softmax/[t<k>/]`, `loss/`.
Backward ops carry the same path after `gradient_tape/`; each variable's
clipping and update ops sit under the variable's own scope (e.g.
`encoder/layer_1/kernel/sgd/`). The tape's sums of gradients of tensors
used more than once (e.g. a layer's weights, used at every step) are the
exception: TF names them `AddN_<n>` at top level.
"""

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import knobs  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import lstm  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import training  # pylint: disable=g-import-not-at-top

# Encoder and decoder layers from this index on add their input to their
# output ("residual connections start from the third layer", GNMT).
FIRST_RESIDUAL_LAYER = 2


class Gnmt(tf.Module):
  """GNMT weights plus the forward pass that turns a batch into a loss."""

  def __init__(self, num_layers: int, hidden_size: int, vocab_size: int,
               dropout: float = 0.0, seed: int = 0):
    super().__init__()
    rng = tf.random.Generator.from_seed(seed)
    h = hidden_size
    self.num_layers = num_layers
    self.dropout = dropout
    self.source_embedding = _uniform(rng, [vocab_size, h],
                                     "embedding/encoder/table")
    self.target_embedding = _uniform(rng, [vocab_size, h],
                                     "embedding/decoder/table")
    # Bottom encoder layer: forward and backward cells over the embeddings.
    self.encoder_fw = lstm.LstmCell(h, h, rng, "encoder/layer_0/fw/")
    self.encoder_bw = lstm.LstmCell(h, h, rng, "encoder/layer_0/bw/")
    self.encoder_cells = [
        lstm.LstmCell(2 * h if i == 1 else h, h, rng, f"encoder/layer_{i}/")
        for i in range(1, num_layers)]
    # Every decoder layer sees [its input; attention context].
    self.decoder_cells = [lstm.LstmCell(2 * h, h, rng, f"decoder/layer_{i}/")
                          for i in range(num_layers)]
    self.attention = NormalizedBahdanau(h, rng)
    self.softmax_kernel = _uniform(rng, [h, vocab_size], "softmax/kernel")
    self.softmax_bias = tf.Variable(tf.zeros([vocab_size]),
                                    name="softmax/bias")

  def loss(self, source_ids, source_lengths, target_input_ids,
           target_output_ids, target_lengths):
    """Cross-entropy summed over real target tokens, averaged over sentences."""
    batch, target_length = target_output_ids.shape
    sources = _embed(self.source_embedding, source_ids, "embedding/encoder/")
    targets = _embed(self.target_embedding, target_input_ids,
                     "embedding/decoder/")
    memory, final_states = self._encode(sources, source_lengths)
    outputs = self._decode(targets, memory, source_lengths, final_states)
    with tf.name_scope("softmax/"):
      kernel = tf.identity(self.softmax_kernel)
      bias = tf.identity(self.softmax_bias)
      labels = tf.unstack(target_output_ids, axis=1)
      weights = tf.unstack(tf.sequence_mask(
          target_lengths, target_length, dtype=tf.float32), axis=1)
    step_losses = []
    for t, output in enumerate(outputs):
      with tf.name_scope(lstm.scope("softmax", f"t{t}")):
        logits = tf.nn.bias_add(tf.matmul(output, kernel), bias)
        step_losses.append(tf.reduce_sum(
            weights[t] * tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels[t], logits=logits)))
    with tf.name_scope("loss/"):
      return tf.add_n(step_losses) / float(batch)

  def _encode(self, inputs, lengths):
    """Returns the top layer's outputs and each layer's final state."""
    forward, _ = lstm.run_layer(self.encoder_fw, inputs, lengths,
                                "encoder/layer_0/fw/", dropout=self.dropout)
    backward, bw_state = lstm.run_layer(
        self.encoder_bw, inputs, lengths, "encoder/layer_0/bw/",
        reverse=True, dropout=self.dropout)
    # As in tensorflow-nmt, the bidirectional layer hands on its bw state.
    final_states = [bw_state]
    with tf.name_scope("encoder/layer_0/"):
      outputs = [tf.concat([f, b], 1, name=f"concat_t{t}")
                 for t, (f, b) in enumerate(zip(forward, backward))]
    for i, cell in enumerate(self.encoder_cells, start=1):
      layer_scope = lstm.scope("encoder", f"layer_{i}")
      new_outputs, state = lstm.run_layer(cell, outputs, lengths, layer_scope,
                                          dropout=self.dropout)
      if i >= FIRST_RESIDUAL_LAYER:
        with tf.name_scope(layer_scope):
          new_outputs = [tf.add(y, x, name=f"residual_t{t}")
                         for t, (y, x) in enumerate(zip(new_outputs, outputs))]
      outputs = new_outputs
      final_states.append(state)
    return outputs, final_states

  def _decode(self, inputs, memory, memory_lengths, initial_states):
    """Runs the decoder step by step; returns the top layer's outputs."""
    with tf.name_scope("attention/"):
      attend = self.attention.prepare(memory, memory_lengths)
      context = tf.zeros_like(inputs[0])
    weights = []
    for i, cell in enumerate(self.decoder_cells):
      with tf.name_scope(lstm.scope("decoder", f"layer_{i}")):
        weights.append(cell.read())
    states = list(initial_states)
    outputs = []
    for t, step_input in enumerate(inputs):
      # Bottom layer: input feeding of the previous step's context.
      with tf.name_scope(lstm.scope("decoder", "layer_0", f"t{t}")):
        x, states[0] = lstm.lstm_step(
            tf.concat([step_input, context], 1), states[0], weights[0],
            self.dropout)
      with tf.name_scope(lstm.scope("attention", f"t{t}")):
        context = attend(x)
      for i in range(1, self.num_layers):
        with tf.name_scope(lstm.scope("decoder", f"layer_{i}", f"t{t}")):
          y, states[i] = lstm.lstm_step(
              tf.concat([x, context], 1), states[i], weights[i], self.dropout)
          x = y + x if i >= FIRST_RESIDUAL_LAYER else y
      outputs.append(x)
    return outputs


class NormalizedBahdanau(tf.Module):
  """Additive attention with a weight-normalized score vector (as in GNMT)."""

  def __init__(self, size: int, rng):
    super().__init__()
    self.memory_kernel = _uniform(rng, [size, size], "attention/memory_kernel")
    self.query_kernel = _uniform(rng, [size, size], "attention/query_kernel")
    self.score_vector = _uniform(rng, [size], "attention/score_vector")
    self.score_bias = tf.Variable(tf.zeros([size]), name="attention/bias")
    self.score_gain = tf.Variable(tf.sqrt(1.0 / size), name="attention/gain")

  def prepare(self, memory_steps, lengths):
    """Projects the memory once; returns attend(query) -> context."""
    memory = tf.stack(memory_steps, axis=1)  # [batch, source, size]
    batch, length, size = memory.shape
    keys = tf.reshape(
        tf.matmul(tf.reshape(memory, [-1, size]), self.memory_kernel),
        [batch, length, size])
    valid = tf.sequence_mask(lengths, length)
    padding_score = tf.fill([batch, length], memory.dtype.min)
    query_kernel = tf.identity(self.query_kernel)
    bias = tf.identity(self.score_bias)
    v = self.score_gain * self.score_vector * tf.math.rsqrt(
        tf.reduce_sum(tf.square(self.score_vector)))

    def attend(query):
      processed = tf.expand_dims(tf.matmul(query, query_kernel), 1)
      scores = tf.reduce_sum(v * tf.tanh(keys + processed + bias), 2)
      scores = tf.where(valid, scores, padding_score)
      alignments = tf.expand_dims(tf.nn.softmax(scores), 1)
      return tf.squeeze(tf.matmul(alignments, memory), 1)

    return attend


def build_train_step(num_layers: int = 2, hidden_size: int = 1024,
                     vocab_size: int = 32000, batch: int = 128,
                     source_length: int = 40, target_length: int = 40,
                     dropout: float = 0.2, learning_rate: float = 1.0,
                     optimizer: str = "sgd", clip_norm: float = 5.0,
                     seed: int = 0):
  """Returns (train_step, example_args) for one GNMT step.

  The example args are (source_ids, source_lengths, target_input_ids,
  target_output_ids, target_lengths): ids are [batch, length] int32, lengths
  [batch] int32 drawn between half the length and the full length.

  Args:
    num_layers: LSTM layers in the encoder (the bottom one bidirectional)
      and in the decoder, >= 2; GNMT used 8.
    hidden_size: LSTM, embedding and attention width (GNMT: 1024).
    vocab_size: source and target vocabulary (32k wordpieces as in GNMT);
      the two embeddings and the softmax hold 3*vocab*hidden floats (384 MB
      at the defaults), and each step's logits batch*vocab floats.
    batch: sentence pairs per step.
    source_length: padded source length, i.e. encoder steps.
    target_length: padded target length, i.e. decoder steps.
    dropout: drop rate of every LSTM cell's input (0.2 as in nmt's GNMT).
    learning_rate: step size of the update (1.0 as in nmt's SGD recipe;
      use ~1e-3 with adam).
    optimizer: "sgd" (plain gradient descent) or "adam".
    clip_norm: global gradient norm clip (5.0 as in nmt); 0 = off.
    seed: seed of the random weights and of the example batch.
  """
  knobs.require_positive(
      num_layers=num_layers, hidden_size=hidden_size, vocab_size=vocab_size,
      batch=batch, source_length=source_length, target_length=target_length)
  if num_layers < 2:
    raise errors.InputError(
        f"num_layers must be >= 2 (a bidirectional layer, then "
        f"unidirectional ones), got {num_layers}")
  if not 0 <= dropout < 1:
    raise errors.InputError(f"dropout must be in [0, 1), got {dropout}")
  model = Gnmt(num_layers, hidden_size, vocab_size, dropout, seed)
  step = training.make_train_step(
      model.loss, training.Optimizer(optimizer, learning_rate,
                                     model.trainable_variables, clip_norm))
  rng = tf.random.Generator.from_seed(seed + 1)

  def ids(length):
    return rng.uniform([batch, length], 0, vocab_size, dtype=tf.int32)

  def lengths(length):
    return rng.uniform([batch], (length + 1) // 2, length + 1, dtype=tf.int32)

  return step, (ids(source_length), lengths(source_length),
                ids(target_length), ids(target_length), lengths(target_length))


def _uniform(rng, shape, name):
  return tf.Variable(
      rng.uniform(shape, -lstm.INIT_SCALE, lstm.INIT_SCALE), name=name)


def _embed(table, ids, embed_scope):
  """Looks up a [batch, time] id matrix; returns one tensor per time step."""
  with tf.name_scope(embed_scope):
    return tf.unstack(tf.nn.embedding_lookup(table, ids), axis=1)
