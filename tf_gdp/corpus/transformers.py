"""Transformer training steps built from tf_keras layers.

Three shapes of the same block (multi-head attention, residual, layer norm,
a GELU feed-forward): a BERT-style encoder trained as a masked language
model, a GPT-style causal decoder trained on next tokens (output projection
tied to the embedding), and a ViT-style image classifier (patches from a
strided convolution). All train with Adam, whose two slots per weight are
part of the graph's memory, as in the real models.
"""

from tf_gdp.corpus import training_steps


class _Blocks:
  """`layers` pre-built transformer blocks of width `hidden`."""

  def __init__(self, tf_keras, *, layers: int, hidden: int, heads: int,
               ffn: int):
    keras = tf_keras.layers
    self.blocks = [
        (keras.MultiHeadAttention(heads, hidden // heads, name=f"block{i}/attention"),
         keras.LayerNormalization(epsilon=1e-6, name=f"block{i}/attention_norm"),
         keras.Dense(ffn, activation="gelu", name=f"block{i}/ffn_in"),
         keras.Dense(hidden, name=f"block{i}/ffn_out"),
         keras.LayerNormalization(epsilon=1e-6, name=f"block{i}/ffn_norm"))
        for i in range(layers)]

  def __call__(self, x, *, causal: bool):
    for attention, norm1, ffn_in, ffn_out, norm2 in self.blocks:
      x = norm1(x + attention(x, x, use_causal_mask=causal, training=True))
      x = norm2(x + ffn_out(ffn_in(x)))
    return x

  def variables(self):
    return [v for block in self.blocks for layer in block
            for v in layer.trainable_variables]


def language_model(*, layers: int, hidden: int, heads: int, seq: int,
                   batch: int, vocab: int = 30522, ffn: int = 0,
                   causal: bool = False, learning_rate: float = 1e-4,
                   seed: int = 0):
  """An encoder (masked LM, `causal=False`) or decoder (causal LM) step.

  Token and position embeddings, `layers` blocks, then logits over the
  vocabulary by the transposed token embedding. The encoder predicts every
  position's own token (a masked LM with every position scored), the
  decoder the next one.
  """
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  ffn = ffn or 4 * hidden
  rng = tf.random.Generator.from_seed(seed)
  tokens = tf.Variable(rng.uniform([batch, seq], 0, vocab, dtype=tf.int32),
                       trainable=False, name="tokens")
  embed = tf_keras.layers.Embedding(vocab, hidden, name="token_embedding")
  position = tf_keras.layers.Embedding(seq, hidden, name="position_embedding")
  blocks = _Blocks(tf_keras, layers=layers, hidden=hidden, heads=heads,
                   ffn=ffn)
  final_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6,
                                                  name="final_norm")

  def forward():
    x = embed(tokens) + position(tf.range(seq))[tf.newaxis]
    x = final_norm(blocks(x, causal=causal))
    return tf.einsum("bsh,vh->bsv", x, embed.embeddings)

  forward()  # builds every layer's weights before the variables are listed
  variables = (embed.trainable_variables + position.trainable_variables
               + blocks.variables() + final_norm.trainable_variables)
  targets = tokens[:, 1:] if causal else tokens

  def loss(logits):
    if causal:
      logits = logits[:, :-1]
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits))

  return training_steps.supervised_step(
      tf, forward, variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))


def vision_transformer(*, layers: int, hidden: int, heads: int,
                       image_size: int, patch: int, batch: int,
                       classes: int = 10, ffn: int = 0,
                       learning_rate: float = 1e-4, seed: int = 0):
  """A ViT-style classifier step: patch embedding, blocks, mean pooling."""
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  ffn = ffn or 4 * hidden
  patches = (image_size // patch) ** 2
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                       trainable=False, name="images")
  labels = tf.Variable(rng.uniform([batch], 0, classes, dtype=tf.int32),
                       trainable=False, name="labels")
  embed = tf_keras.layers.Conv2D(hidden, patch, strides=patch,
                                 name="patch_embedding")
  position = tf_keras.layers.Embedding(patches, hidden,
                                       name="position_embedding")
  blocks = _Blocks(tf_keras, layers=layers, hidden=hidden, heads=heads,
                   ffn=ffn)
  final_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6,
                                                  name="final_norm")
  head = tf_keras.layers.Dense(classes, name="head")

  def forward():
    x = tf.reshape(embed(images), [batch, patches, hidden])
    x = x + position(tf.range(patches))[tf.newaxis]
    x = final_norm(blocks(x, causal=False))
    return head(tf.reduce_mean(x, axis=1))

  forward()
  variables = [v for layer in (embed, position, final_norm, head)
               for v in layer.trainable_variables] + blocks.variables()

  def loss(logits):
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

  return training_steps.supervised_step(
      tf, forward, variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
