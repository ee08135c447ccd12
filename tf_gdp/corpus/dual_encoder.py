"""A CLIP-style dual encoder's training step, built from tf_keras layers.

Two towers side by side, a shape no other family has: a ViT-style image
encoder (patches by a strided convolution, transformer blocks, mean pooling)
and a text encoder (token and position embeddings, causal transformer
blocks, the last position's state), each projected into one embedding space
and normalized. The loss is the symmetric contrastive cross-entropy of every
image against every caption of the batch, scaled by a learned temperature.
Adam, whose two slots per weight are part of the graph's memory.
"""

from tf_gdp.corpus import training_steps
from tf_gdp.corpus import transformers


def contrastive_model(*, image_layers: int, text_layers: int, hidden: int,
                      heads: int, image_size: int, patch: int, text_seq: int,
                      batch: int, embedding: int = 512, vocab: int = 49408,
                      learning_rate: float = 1e-4, seed: int = 0):
  """The step: both towers, the contrastive loss, Adam on every weight."""
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  patches = (image_size // patch) ** 2
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                       trainable=False, name="images")
  tokens = tf.Variable(rng.uniform([batch, text_seq], 0, vocab,
                                   dtype=tf.int32),
                       trainable=False, name="tokens")
  patch_embedding = layers.Conv2D(hidden, patch, strides=patch,
                                  name="image_patch_embedding")
  image_position = layers.Embedding(patches, hidden,
                                    name="image_position_embedding")
  image_blocks = transformers.Blocks(tf_keras, layers=image_layers,
                                     hidden=hidden, heads=heads,
                                     ffn=4 * hidden, prefix="image_block")
  image_norm = layers.LayerNormalization(epsilon=1e-6, name="image_norm")
  image_projection = layers.Dense(embedding, use_bias=False,
                                  name="image_projection")
  token_embedding = layers.Embedding(vocab, hidden, name="token_embedding")
  text_position = layers.Embedding(text_seq, hidden,
                                   name="text_position_embedding")
  text_blocks = transformers.Blocks(tf_keras, layers=text_layers,
                                    hidden=hidden, heads=heads,
                                    ffn=4 * hidden, prefix="text_block")
  text_norm = layers.LayerNormalization(epsilon=1e-6, name="text_norm")
  text_projection = layers.Dense(embedding, use_bias=False,
                                 name="text_projection")
  log_temperature = tf.Variable(2.659, name="log_temperature")  # log(1/0.07)

  def forward():
    x = tf.reshape(patch_embedding(images), [batch, patches, hidden])
    x = image_blocks(x + image_position(tf.range(patches))[tf.newaxis],
                     causal=False)
    image = image_projection(tf.reduce_mean(image_norm(x), axis=1))
    t = token_embedding(tokens) + text_position(tf.range(text_seq))[
        tf.newaxis]
    t = text_norm(text_blocks(t, causal=True))
    text = text_projection(t[:, -1])
    image = tf.math.l2_normalize(image, axis=-1)
    text = tf.math.l2_normalize(text, axis=-1)
    return tf.exp(log_temperature) * tf.matmul(image, text, transpose_b=True)

  forward()  # builds every layer's weights before the variables are listed
  variables = [v for layer in (patch_embedding, image_position, image_norm,
                               image_projection, token_embedding,
                               text_position, text_norm, text_projection)
               for v in layer.trainable_variables]
  variables += (image_blocks.variables() + text_blocks.variables()
                + [log_temperature])
  matches = tf.range(batch)

  def loss(logits):
    by_image = tf.nn.sparse_softmax_cross_entropy_with_logits(matches, logits)
    by_text = tf.nn.sparse_softmax_cross_entropy_with_logits(
        matches, tf.transpose(logits))
    return tf.reduce_mean(by_image + by_text) / 2.0

  return training_steps.supervised_step(
      tf, forward, variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
