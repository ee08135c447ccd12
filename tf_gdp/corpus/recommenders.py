"""A DLRM-style click model's training step from tf_keras layers.

Recommenders are a shape the rest of the corpus lacks: the memory is in
embedding tables (one per categorical feature, millions of rows), not in
activations or dense weights, and the tables are independent of each other
until the feature interaction, so where they go decides what fits.

A table's gradient is the `IndexedSlices` of the looked-up rows; the
corpus's Adam sums it into a dense table-sized tensor (`UnsortedSegmentSum`,
with the table's static row count so every op of the update has a known
shape) and updates every row and both slots, as a dense-gradient Adam does.
The weights and slots are made by `unallocated_variables.scope()`: the step
is traced, never run, so building it needs no memory for the tables.
"""

import itertools

from tf_gdp.corpus import training_steps


def dlrm(*, vocabularies, embedding_dim: int, dense_features: int,
         bottom, top, batch: int, learning_rate: float = 1e-3,
         seed: int = 0):
  """The click model's step.

  One `tf_keras.layers.Embedding(vocabulary, embedding_dim)` per entry of
  `vocabularies` looks up one id per example; the `dense_features` go
  through the ReLU `bottom` MLP and a layer of width `embedding_dim`; the
  dot products of every pair of those vectors (the upper triangle of their
  Gram matrix), beside the bottom MLP's output, go through the ReLU `top`
  MLP to one logit; sigmoid cross-entropy against a click label; Adam.
  """
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  vectors = len(vocabularies) + 1
  pairs = [i * vectors + j
           for i, j in itertools.combinations(range(vectors), 2)]

  with unallocated_variables.scope():
    tables = [keras.Embedding(size, embedding_dim, name=f"table{i}")
              for i, size in enumerate(vocabularies)]
    for table in tables:
      table.build((None,))
    bottom_mlp = _mlp(keras, "bottom", dense_features,
                      list(bottom) + [embedding_dim], "relu")
    top_mlp = _mlp(keras, "top", embedding_dim + len(pairs), list(top) + [1],
                   None)
    variables = [v for layer in tables + bottom_mlp + top_mlp
                 for v in layer.trainable_variables]
    optimizer = training_steps.Optimizer(variables, "adam", learning_rate,
                                         static_dense_shape=True)

  rng = tf.random.Generator.from_seed(seed)
  dense = tf.Variable(rng.normal([batch, dense_features]), trainable=False,
                      name="dense_features")
  ids = tf.Variable(
      tf.stack([rng.uniform([batch], 0, size, dtype=tf.int32)
                for size in vocabularies], axis=1),
      trainable=False, name="categorical_ids")
  clicks = tf.Variable(
      tf.cast(rng.uniform([batch, 1], 0, 2, dtype=tf.int32), tf.float32),
      trainable=False, name="clicks")

  def forward():
    x = dense
    for layer in bottom_mlp:
      x = layer(x)
    stacked = tf.stack([x] + [table(ids[:, i])
                              for i, table in enumerate(tables)], axis=1)
    gram = tf.matmul(stacked, stacked, transpose_b=True)
    interactions = tf.gather(tf.reshape(gram, [batch, vectors * vectors]),
                             pairs, axis=1)
    y = tf.concat([x, interactions], axis=1)
    for layer in top_mlp:
      y = layer(y)
    return y

  def loss(logits):
    return tf.reduce_mean(
        tf.nn.sigmoid_cross_entropy_with_logits(clicks, logits))

  return training_steps.supervised_step(tf, forward, variables, loss,
                                        optimizer)


def _mlp(keras, name, inputs, widths, last_activation):
  """Dense layers of `widths`, built for `inputs` features, ReLU between."""
  layers = []
  for i, width in enumerate(widths):
    activation = "relu" if i < len(widths) - 1 else last_activation
    layer = keras.Dense(width, activation=activation, name=f"{name}{i}")
    layer.build((None, inputs))
    layers.append(layer)
    inputs = width
  return layers
