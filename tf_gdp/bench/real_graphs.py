"""Small real TF graphs, built by functions, for the real-runtime checks.

Two parallel matmul chains (inference), an Inception-style block and an
unrolled 2-layer LSTM (training steps with SGD updates), and a Keras LSTM
step whose time loop stays a loop. Each builder returns
a step function for `extract.from_function`; `BUILDERS` maps their names to
them. `agreement_check` times placements of them against the simulator and
`real_check` fine-tunes GDP on their measured step times.
"""

import numpy as np

from grappler_bridge import tf_env


_tf = tf_env.import_tensorflow


def matmul_chains(size: int = 512, length: int = 6):
  """Two independent chains of `length` [size, size] matmuls (inference).

  Chain a is traced before chain b, so the topological order has all of a
  first: a split near the middle puts one chain on each worker.
  """
  tf = _tf()
  rng = tf.random.Generator.from_seed(1)
  chains = []
  for name in ("a", "b"):
    x = tf.Variable(rng.uniform([size, size], -1.0, 1.0), name=f"{name}_x")
    ws = [tf.Variable(rng.uniform([size, size], -0.08, 0.08),
                      name=f"{name}_w{i}") for i in range(length)]
    chains.append((x, ws))

  def step():
    outputs = []
    for x, ws in chains:
      h = x
      for w in ws:
        h = tf.tanh(tf.matmul(h, w))
      outputs.append(tf.reduce_sum(h))
    return tf.add_n(outputs)

  return step


def inception_block(batch: int = 8, size: int = 28, channels: int = 64):
  """A GoogLeNet-style block (1x1, 3x3, 5x5, pool branches; concat) + head,
  forward and backward with SGD updates."""
  tf = _tf()
  rng = tf.random.Generator.from_seed(2)

  def kernel(name, shape):
    fan_in = float(np.prod(shape[:-1]))
    scale = (1.0 / fan_in) ** 0.5
    return tf.Variable(rng.uniform(shape, -scale, scale), name=name)

  images = tf.Variable(rng.uniform([batch, size, size, channels], -1.0, 1.0),
                       name="images")
  k = {
      "b1": kernel("b1_1x1", [1, 1, channels, 32]),
      "b2a": kernel("b2_1x1", [1, 1, channels, 48]),
      "b2b": kernel("b2_3x3", [3, 3, 48, 64]),
      "b3a": kernel("b3_1x1", [1, 1, channels, 16]),
      "b3b": kernel("b3_5x5", [5, 5, 16, 32]),
      "b4": kernel("b4_1x1", [1, 1, channels, 32]),
      "head": kernel("head_1x1", [1, 1, 160, 64]),
  }
  variables = list(k.values())

  def conv(x, w):
    return tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))

  def step():
    with tf.GradientTape() as tape:
      b1 = conv(images, k["b1"])
      b2 = conv(conv(images, k["b2a"]), k["b2b"])
      b3 = conv(conv(images, k["b3a"]), k["b3b"])
      b4 = conv(tf.nn.max_pool2d(images, 3, 1, "SAME"), k["b4"])
      mixed = tf.concat([b1, b2, b3, b4], axis=3)
      out = conv(mixed, k["head"])
      loss = tf.reduce_mean(tf.square(out))
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads):
      v.assign_sub(0.01 * g)
    return loss

  return step


def lstm(steps: int = 8, batch: int = 32, hidden: int = 256, layers: int = 2):
  """A statically unrolled `layers`-layer LSTM training step (SGD)."""
  tf = _tf()
  rng = tf.random.Generator.from_seed(3)
  inputs = tf.Variable(rng.uniform([steps, batch, hidden], -1.0, 1.0),
                       name="inputs")
  kernels = [tf.Variable(rng.uniform([2 * hidden, 4 * hidden], -0.1, 0.1),
                         name=f"layer{i}/kernel") for i in range(layers)]
  biases = [tf.Variable(tf.zeros([4 * hidden]), name=f"layer{i}/bias")
            for i in range(layers)]
  variables = kernels + biases

  def step():
    with tf.GradientTape() as tape:
      sequence = tf.unstack(inputs)
      for layer in range(layers):
        with tf.name_scope(f"layer{layer}"):
          c = h = tf.zeros([batch, hidden])
          outputs = []
          for t, x in enumerate(sequence):
            with tf.name_scope(f"t{t}"):
              gates = tf.matmul(tf.concat([x, h], 1), kernels[layer])
              gates = tf.nn.bias_add(gates, biases[layer])
              i, j, f, o = tf.split(gates, 4, axis=1)
              c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
              h = tf.sigmoid(o) * tf.tanh(c)
              outputs.append(h)
          sequence = outputs
      loss = tf.reduce_mean(tf.square(tf.stack(sequence)))
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads):
      v.assign_sub(0.01 * g)
    return loss

  return step


def keras_lstm_loop(steps: int = 12, batch: int = 8, hidden: int = 64):
  """A Keras LSTM classifier's training step with its time loop kept (Adam).

  `tf_keras.layers.LSTM` without `unroll=True`: one `tf.while_loop` over the
  time steps and one for its gradient, as most Keras recurrent models run.
  """
  tf = _tf()
  import tf_keras  # pylint: disable=g-import-not-at-top
  tf_keras.utils.set_random_seed(4)
  model = tf_keras.Sequential([tf_keras.layers.Embedding(1000, 32),
                               tf_keras.layers.LSTM(hidden),
                               tf_keras.layers.Dense(3)])
  rng = tf.random.Generator.from_seed(4)
  tokens = tf.Variable(rng.uniform([batch, steps], 0, 1000, tf.int32),
                       name="tokens")
  labels = tf.Variable(rng.uniform([batch], 0, 3, tf.int32), name="labels")
  model(tokens)
  optimizer = tf_keras.optimizers.Adam()
  optimizer.build(model.trainable_variables)

  def step():
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(
          labels, model(tokens), from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  return step


BUILDERS = {"matmul_chains": matmul_chains,
            "inception_block": inception_block, "lstm": lstm,
            "keras_lstm_loop": keras_lstm_loop}
