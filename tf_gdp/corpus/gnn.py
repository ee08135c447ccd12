"""A graph neural network's training step from tf_keras layers: GIN.

Xu, Hu, Leskovec and Jegelka, "How Powerful are Graph Neural Networks?"
(ICLR 2019): each layer sums every node's neighbours' features with its own
(GIN-0, no learned epsilon) and passes the sum through a two-layer MLP with
batch normalization; the graph's prediction adds a linear readout of the
summed node features of every layer, the input embedding's included. Graphs
come in batches of equal node count with a dense adjacency matrix, as
molecule and social-graph benchmarks are often padded, so the aggregation
is one batched matrix product. The data are random graphs (each edge with
`edge_probability`, symmetric), random node features and random labels,
held in variables; cross-entropy, Adam.

A ladder no other corpus family has: a chain of message-passing layers with a
readout branching off each one into one sum.
"""

from tf_gdp.corpus import training_steps


def graph_classifier(*, layers: int, hidden: int, nodes: int, batch: int,
                     features: int = 32, classes: int = 10,
                     edge_probability: float = 0.1,
                     learning_rate: float = 1e-3, seed: int = 0):
  """The step: `layers` GIN layers of width `hidden` on `batch` graphs."""
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  upper = tf.linalg.band_part(
      tf.cast(rng.uniform([batch, nodes, nodes]) < edge_probability,
              tf.float32), 0, -1) * (1.0 - tf.eye(nodes))
  adjacency = tf.Variable(upper + tf.linalg.matrix_transpose(upper),
                          trainable=False, name="adjacency")
  node_features = tf.Variable(rng.normal([batch, nodes, features]),
                              trainable=False, name="node_features")
  labels = tf.Variable(rng.uniform([batch], 0, classes, dtype=tf.int32),
                       trainable=False, name="labels")

  embed = keras.Dense(hidden, name="embed")
  gin = [(keras.Dense(hidden, name=f"gin{i}/mlp_in"),
          keras.BatchNormalization(name=f"gin{i}/mlp_norm"),
          keras.ReLU(name=f"gin{i}/mlp_relu"),
          keras.Dense(hidden, name=f"gin{i}/mlp_out"),
          keras.BatchNormalization(name=f"gin{i}/norm"),
          keras.ReLU(name=f"gin{i}/relu"))
         for i in range(layers)]
  readouts = [keras.Dense(classes, name=f"readout{i}")
              for i in range(layers + 1)]

  def forward():
    h = embed(node_features)
    with tf.name_scope("embed/pool"):
      pooled = [tf.reduce_sum(h, axis=1)]
    for i, (mlp_in, mlp_norm, mlp_relu, mlp_out, norm, relu) in enumerate(gin):
      with tf.name_scope(f"gin{i}/aggregate"):
        h = h + tf.einsum("bij,bjh->bih", adjacency, h)
      h = mlp_relu(mlp_norm(mlp_in(h), training=True))
      h = relu(norm(mlp_out(h), training=True))
      with tf.name_scope(f"gin{i}/pool"):
        pooled.append(tf.reduce_sum(h, axis=1))
    return tf.add_n([readout(p) for readout, p in zip(readouts, pooled)])

  forward()  # builds every layer's weights before the variables are listed
  built = [embed] + [layer for block in gin for layer in block] + readouts
  variables = [v for layer in built for v in layer.trainable_variables]
  return training_steps.adam_softmax_step(tf, forward, variables, labels,
                                          learning_rate)
