"""Recurrent training steps from tf_keras layers.

`language_model`: stacked `tf_keras.layers.LSTM` or `GRU` layers with
`unroll=True`, so the step is a static graph of per-timestep cells (the
shape GNMT and RNNLM have, written with the layers a user would pick), an
embedding and a softmax over the vocabulary; SGD with momentum.

`sequence_tagger`: the same cells wrapped in `Bidirectional`, a tag per
token (named-entity or part-of-speech tagging); Adam. Its two directions
are independent chains that meet only between layers: work that splits
side by side rather than layer after layer.
"""

from tf_gdp.corpus import training_steps


def _cell_layer(tf_keras, cell: str):
  """The tf_keras recurrent layer class of `cell` ('lstm' or 'gru')."""
  return {"lstm": tf_keras.layers.LSTM, "gru": tf_keras.layers.GRU}[cell]


def language_model(*, cell: str = "lstm", layers: int, hidden: int, seq: int,
                   batch: int, vocab: int = 10000, learning_rate: float = 0.1,
                   seed: int = 0):
  """The step of an unrolled `cell` ('lstm' or 'gru') language model."""
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layer_class = _cell_layer(tf_keras, cell)
  rng = tf.random.Generator.from_seed(seed)
  tokens = tf.Variable(rng.uniform([batch, seq + 1], 0, vocab, dtype=tf.int32),
                       trainable=False, name="tokens")
  model = tf_keras.Sequential(
      [tf_keras.Input(shape=(seq,), batch_size=batch, dtype="int32"),
       tf_keras.layers.Embedding(vocab, hidden, name="embedding")]
      + [layer_class(hidden, return_sequences=True, unroll=True,
                     name=f"{cell}{i}") for i in range(layers)]
      + [tf_keras.layers.Dense(vocab, name="softmax")])
  variables = model.trainable_variables

  def loss(logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        tokens[:, 1:], logits))

  return training_steps.supervised_step(
      tf, lambda: model(tokens[:, :-1], training=True), variables, loss,
      training_steps.Optimizer(variables, "momentum", learning_rate))


def sequence_tagger(*, cell: str = "lstm", layers: int, hidden: int, seq: int,
                    batch: int, vocab: int = 20000, tags: int = 17,
                    learning_rate: float = 1e-3, seed: int = 0):
  """The step of an unrolled bidirectional `cell` tagger ('lstm' or 'gru')."""
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layer_class = _cell_layer(tf_keras, cell)
  rng = tf.random.Generator.from_seed(seed)
  tokens = tf.Variable(rng.uniform([batch, seq], 0, vocab, dtype=tf.int32),
                       trainable=False, name="tokens")
  labels = tf.Variable(rng.uniform([batch, seq], 0, tags, dtype=tf.int32),
                       trainable=False, name="tags")
  model = tf_keras.Sequential(
      [tf_keras.Input(shape=(seq,), batch_size=batch, dtype="int32"),
       tf_keras.layers.Embedding(vocab, hidden, name="embedding")]
      + [tf_keras.layers.Bidirectional(
          layer_class(hidden, return_sequences=True, unroll=True),
          name=f"bi{cell}{i}") for i in range(layers)]
      + [tf_keras.layers.Dense(tags, name="tag_logits")])
  return training_steps.adam_classifier_step(tf, model, tokens, labels,
                                             learning_rate)
