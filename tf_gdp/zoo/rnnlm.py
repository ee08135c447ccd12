"""RNN language model training step: stacked LSTMs, statically unrolled.

The RNNLM of the device-placement papers (Mirhoseini et al., 2017; HDP,
2018; GDP, 2019 with 2 and 4 layers), after the large LSTM language models
of Zaremba et al. (2014) and Jozefowicz et al. (2016): a word embedding,
`num_layers` LSTM layers of `hidden_size` units unrolled over `num_steps`
words, dropout on the non-recurrent connections, a full softmax over the
vocabulary at every step, and the mean per-word cross-entropy, then
backward, gradient clipping and an SGD (or Adam) update. Batches are
fixed-length windows of running text (no padding) starting from a zero state.

Name scopes: `embedding/`, `lstm/layer_<i>/t<k>/`, `softmax/t<k>/`, `loss/`;
backward ops under `gradient_tape/<same>`, each variable's clipping and
update under the variable's own scope (e.g. `lstm/layer_1/kernel/sgd/`).
As in the zoo's GNMT, the tape's sums of the gradients of weights used at
every step are top-level `AddN_<n>` ops.
"""

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import knobs  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import lstm  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import training  # pylint: disable=g-import-not-at-top


class Rnnlm(tf.Module):
  """Embedding, LSTM stack and softmax weights; `loss` is the forward pass."""

  def __init__(self, num_layers: int, hidden_size: int, vocab_size: int,
               dropout: float = 0.0, seed: int = 0):
    super().__init__()
    rng = tf.random.Generator.from_seed(seed)
    h = hidden_size
    self.dropout = dropout
    self.embedding = _uniform(rng, [vocab_size, h], "embedding/table")
    self.cells = [lstm.LstmCell(h, h, rng, f"lstm/layer_{i}/")
                  for i in range(num_layers)]
    self.softmax_kernel = _uniform(rng, [h, vocab_size], "softmax/kernel")
    self.softmax_bias = tf.Variable(tf.zeros([vocab_size]),
                                    name="softmax/bias")

  def loss(self, input_ids, target_ids):
    """Mean cross-entropy per word of predicting `target_ids` ([batch, steps])."""
    batch, num_steps = input_ids.shape
    with tf.name_scope("embedding/"):
      inputs = tf.unstack(tf.nn.embedding_lookup(self.embedding, input_ids),
                          axis=1)
    for i, cell in enumerate(self.cells):
      inputs = self._run_layer(cell, inputs, lstm.scope("lstm", f"layer_{i}"))
    with tf.name_scope("softmax/"):
      kernel = tf.identity(self.softmax_kernel)
      bias = tf.identity(self.softmax_bias)
      labels = tf.unstack(target_ids, axis=1)
    step_losses = []
    for t, output in enumerate(inputs):
      with tf.name_scope(lstm.scope("softmax", f"t{t}")):
        if self.dropout > 0:
          output = tf.nn.dropout(output, rate=self.dropout)
        logits = tf.nn.bias_add(tf.matmul(output, kernel), bias)
        step_losses.append(tf.reduce_sum(
            tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels[t], logits=logits)))
    with tf.name_scope("loss/"):
      return tf.add_n(step_losses) / float(batch * num_steps)

  def _run_layer(self, cell, inputs, layer_scope):
    """Unrolls one layer from a zero state; all sequences are full length."""
    with tf.name_scope(layer_scope):
      weights = cell.read()
      state = cell.zero_state(inputs[0].shape[0])
    outputs = []
    for t, x in enumerate(inputs):
      with tf.name_scope(f"{layer_scope}t{t}/"):
        h, state = lstm.lstm_step(x, state, weights, self.dropout)
        outputs.append(h)
    return outputs


def build_train_step(num_layers: int = 2, hidden_size: int = 2048,
                     vocab_size: int = 32000, batch: int = 64,
                     num_steps: int = 20, dropout: float = 0.1,
                     learning_rate: float = 1.0, optimizer: str = "sgd",
                     clip_norm: float = 5.0, seed: int = 0):
  """Returns (train_step, (input_ids, target_ids)) for one RNNLM step.

  Both example args are int32 [batch, num_steps]; the targets are the inputs
  shifted by one word, as in a language model's data pipeline.

  Args:
    num_layers: stacked LSTM layers (the GDP paper's RNNLMs: 2 and 4).
    hidden_size: LSTM and embedding width (2048 as in the big LSTMs of
      Jozefowicz et al., 2016, without their 512-wide projection).
    vocab_size: words in the vocabulary. The papers' One Billion Word
      vocabulary (793k) needs a sampled softmax; a full softmax over 32k
      words (the zoo's GNMT vocabulary) keeps the step exact and the
      softmax a large, but not dominant, part of it.
    batch: text windows per step (64 as in Mirhoseini et al., 2017).
    num_steps: unrolled words per window (20 as in Jozefowicz et al.).
    dropout: drop rate on the non-recurrent connections (every cell's
      input and the softmax input, as in Zaremba et al.).
    learning_rate: step size (1.0 with SGD, as in Zaremba et al.).
    optimizer: "sgd" or "adam".
    clip_norm: global gradient norm clip (5.0 as in Zaremba et al.'s medium
      model); 0 = off.
    seed: seed of the random weights and of the example batch.
  """
  knobs.require_positive(
      num_layers=num_layers, hidden_size=hidden_size, vocab_size=vocab_size,
      batch=batch, num_steps=num_steps)
  if not 0 <= dropout < 1:
    raise errors.InputError(f"dropout must be in [0, 1), got {dropout}")
  model = Rnnlm(num_layers, hidden_size, vocab_size, dropout, seed)
  step = training.make_train_step(
      model.loss, training.Optimizer(optimizer, learning_rate,
                                     model.trainable_variables, clip_norm))
  rng = tf.random.Generator.from_seed(seed + 1)
  words = rng.uniform([batch, num_steps + 1], 0, vocab_size, dtype=tf.int32)
  return step, (words[:, :-1], words[:, 1:])


def _uniform(rng, shape, name):
  return tf.Variable(
      rng.uniform(shape, -lstm.INIT_SCALE, lstm.INIT_SCALE), name=name)
