"""Training steps written with Keras 3, a library the other families do not use.

Every other corpus family is built from `tf_keras` (Keras 2) layers or plain
TensorFlow. Keras 3 (the `keras` package on its TensorFlow backend) has its
own layers, applications, losses and optimizers, and they trace to other op
graphs: a Keras 3 DenseNet-121 step has several times the ops of the
`tf_keras` one. So this family checks what a placer learned on one library's
graphs against another's.

Each step is the user's code as Keras 3 documents it: a model, a Keras loss,
`keras.optimizers.Adam` built on the trainable weights up front (its slots
are then variables of the graph) and `apply_gradients` inside a GradientTape
step. Inputs and labels are held in non-trainable variables, as in the other
families, so the step needs no feeds.
"""

from tf_gdp.corpus import training_steps


def _keras3():
  tf, _ = training_steps.libraries()
  import keras  # pylint: disable=g-import-not-at-top
  if not keras.__version__.startswith("3."):
    raise ImportError(f"the keras3 family needs Keras 3, not {keras.__version__}")
  keras.utils.clear_session()
  return tf, keras


def _adam_step(tf, keras, model, inputs, labels, loss, learning_rate):
  """The step: `loss` of `model(inputs)`, Keras 3 Adam on its weights."""
  optimizer = keras.optimizers.Adam(learning_rate)
  weights = model.trainable_variables
  optimizer.build(weights)

  def step():
    with tf.GradientTape() as tape:
      value = loss(labels, model(inputs, training=True))
    optimizer.apply_gradients(zip(tape.gradient(value, weights), weights))
    return value

  return step


def application(application: str, *, image_size: int, batch: int,
                classes: int = 10, learning_rate: float = 1e-3,
                seed: int = 0):
  """The training step of `keras.applications.<application>` (Keras 3).

  Random weights, `classes` logits, sparse categorical cross-entropy, Adam.
  """
  tf, keras = _keras3()
  keras.utils.set_random_seed(seed)
  model = getattr(keras.applications, application)(
      weights=None, input_shape=(image_size, image_size, 3), classes=classes,
      classifier_activation=None)
  rng = tf.random.Generator.from_seed(seed)
  images, labels = training_steps.labelled_images(
      tf, rng, batch, image_size, classes)
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  return _adam_step(tf, keras, model, images, labels, loss, learning_rate)


def language_model(*, layers: int, hidden: int, heads: int, seq: int,
                   batch: int, vocab: int = 8000, learning_rate: float = 1e-3,
                   seed: int = 0):
  """A decoder-only language model of Keras 3 layers, next-token loss.

  Token and position embeddings; per layer, causal `MultiHeadAttention` and
  a GELU feed-forward of width 4 x `hidden`, each with a residual and
  post-`LayerNormalization`; Adam. Layers keep Keras's own names, as most
  user code leaves them.
  """
  tf, keras = _keras3()
  keras.utils.set_random_seed(seed)

  class Decoder(keras.Model):
    """Embeddings, `layers` post-norm decoder blocks, vocabulary logits."""

    def __init__(self):
      super().__init__(name="decoder")
      self.token_embedding = keras.layers.Embedding(vocab, hidden)
      self.position_embedding = keras.layers.Embedding(seq, hidden)
      self.blocks = [(
          keras.layers.MultiHeadAttention(heads, hidden // heads),
          keras.layers.LayerNormalization(),
          keras.layers.Dense(4 * hidden, activation="gelu"),
          keras.layers.Dense(hidden),
          keras.layers.LayerNormalization())
                     for _ in range(layers)]
      self.logits = keras.layers.Dense(vocab)

    def call(self, tokens, training=False):
      h = (self.token_embedding(tokens) +
           self.position_embedding(keras.ops.arange(seq)))
      for attention, attention_norm, ffn_in, ffn_out, ffn_norm in self.blocks:
        h = attention_norm(h + attention(h, h, use_causal_mask=True,
                                         training=training))
        h = ffn_norm(h + ffn_out(ffn_in(h)))
      return self.logits(h)

  model = Decoder()
  model(keras.ops.zeros((1, seq), "int32"))  # builds the weights
  rng = tf.random.Generator.from_seed(seed)
  tokens = tf.Variable(rng.uniform([batch, seq], 0, vocab, dtype=tf.int32),
                       trainable=False, name="tokens")
  targets = tf.Variable(rng.uniform([batch, seq], 0, vocab, dtype=tf.int32),
                        trainable=False, name="targets")
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  return _adam_step(tf, keras, model, tokens, targets, loss, learning_rate)
