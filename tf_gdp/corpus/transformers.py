"""Transformer training steps built from tf_keras layers.

Four shapes of the same block (multi-head attention, residual, layer norm,
a GELU feed-forward): a BERT-style encoder trained as a masked language
model, a GPT-style causal decoder trained on next tokens (output projection
tied to the embedding), a ViT-style image classifier (patches from a
strided convolution), and an encoder-decoder translation model whose
decoder blocks also attend to the encoder's output. All train with Adam,
whose two slots per weight are part of the graph's memory, as in the real
models.
"""

from tf_gdp.corpus import training_steps


class Blocks:
  """`layers` pre-built transformer blocks of width `hidden`."""

  def __init__(self, tf_keras, *, layers: int, hidden: int, heads: int,
               ffn: int, prefix: str = "block", cross: bool = False):
    keras = tf_keras.layers

    def attention(i, what):
      return (keras.MultiHeadAttention(heads, hidden // heads,
                                       name=f"{prefix}{i}/{what}"),
              keras.LayerNormalization(epsilon=1e-6,
                                       name=f"{prefix}{i}/{what}_norm"))

    self.blocks = [
        (attention(i, "attention"),
         attention(i, "cross_attention") if cross else None,
         keras.Dense(ffn, activation="gelu", name=f"{prefix}{i}/ffn_in"),
         keras.Dense(hidden, name=f"{prefix}{i}/ffn_out"),
         keras.LayerNormalization(epsilon=1e-6, name=f"{prefix}{i}/ffn_norm"))
        for i in range(layers)]

  def __call__(self, x, *, causal: bool, memory=None):
    """`memory`: the encoder's output, which cross-attention blocks read."""
    for (attention, norm1), cross, ffn_in, ffn_out, norm2 in self.blocks:
      x = norm1(x + attention(x, x, use_causal_mask=causal, training=True))
      if cross is not None:
        cross_attention, cross_norm = cross
        x = cross_norm(x + cross_attention(x, memory, training=True))
      x = norm2(x + ffn_out(ffn_in(x)))
    return x

  def variables(self):
    layers = []
    for (attention, norm1), cross, ffn_in, ffn_out, norm2 in self.blocks:
      layers += [attention, norm1, ffn_in, ffn_out, norm2, *(cross or ())]
    return [v for layer in layers for v in layer.trainable_variables]


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
  blocks = Blocks(tf_keras, layers=layers, hidden=hidden, heads=heads,
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
  images, labels = training_steps.labelled_images(
      tf, rng, batch, image_size, classes)
  embed = tf_keras.layers.Conv2D(hidden, patch, strides=patch,
                                 name="patch_embedding")
  position = tf_keras.layers.Embedding(patches, hidden,
                                       name="position_embedding")
  blocks = Blocks(tf_keras, layers=layers, hidden=hidden, heads=heads,
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
  return training_steps.adam_softmax_step(tf, forward, variables, labels,
                                          learning_rate)


def translation_model(*, encoder_layers: int, decoder_layers: int,
                      hidden: int, heads: int, source_seq: int,
                      target_seq: int, batch: int, vocab: int = 32000,
                      ffn: int = 0, learning_rate: float = 1e-4,
                      seed: int = 0):
  """An encoder-decoder translation step (teacher forcing, shared vocabulary).

  The encoder reads the source; every decoder block attends causally to
  the target so far, then to the encoder's output. One embedding serves
  source, target and the output projection, as in the original Transformer.
  """
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  ffn = ffn or 4 * hidden
  rng = tf.random.Generator.from_seed(seed)
  source = tf.Variable(rng.uniform([batch, source_seq], 0, vocab,
                                   dtype=tf.int32),
                       trainable=False, name="source_tokens")
  target = tf.Variable(rng.uniform([batch, target_seq + 1], 0, vocab,
                                   dtype=tf.int32),
                       trainable=False, name="target_tokens")
  embed = tf_keras.layers.Embedding(vocab, hidden, name="shared_embedding")
  positions = max(source_seq, target_seq)
  position = tf_keras.layers.Embedding(positions, hidden,
                                       name="position_embedding")
  encoder = Blocks(tf_keras, layers=encoder_layers, hidden=hidden,
                    heads=heads, ffn=ffn, prefix="encoder")
  decoder = Blocks(tf_keras, layers=decoder_layers, hidden=hidden,
                    heads=heads, ffn=ffn, prefix="decoder", cross=True)
  norms = [tf_keras.layers.LayerNormalization(epsilon=1e-6, name=name)
           for name in ("encoder_norm", "decoder_norm")]

  def embedded(tokens, length):
    return embed(tokens) + position(tf.range(length))[tf.newaxis]

  def forward():
    memory = norms[0](encoder(embedded(source, source_seq), causal=False))
    x = embedded(target[:, :-1], target_seq)
    x = norms[1](decoder(x, causal=True, memory=memory))
    return tf.einsum("bsh,vh->bsv", x, embed.embeddings)

  forward()
  variables = (embed.trainable_variables + position.trainable_variables
               + encoder.variables() + decoder.variables()
               + [v for norm in norms for v in norm.trainable_variables])

  def loss(logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        target[:, 1:], logits))

  return training_steps.supervised_step(
      tf, forward, variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
