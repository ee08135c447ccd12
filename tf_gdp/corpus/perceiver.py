"""A Perceiver-style image classifier's training step, from tf_keras layers.

A small learned array of latents reads the input through cross-attention
(queries from the latents, keys and values from every input position), then
a stack of self-attention blocks works on the latents alone, so the cost of
depth does not grow with the input. The cross-attention and the stack are
applied again with the same weights (`repeats` times in all): one weight
feeds several layers of the step and its gradient is summed over them, a
shape no other family has. The input is image patches by a strided
convolution with learned positions; the mean latent is classified; Adam.
"""

from tf_gdp.corpus import training_steps
from tf_gdp.corpus import transformers


def classifier(*, latents: int, hidden: int, layers: int, repeats: int,
               image_size: int, patch: int, batch: int, heads: int = 8,
               input_width: int = 256, classes: int = 1000,
               learning_rate: float = 1e-4, seed: int = 0):
  """The step: `repeats` x (cross-attention, `layers` latent blocks)."""
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  positions = (image_size // patch) ** 2
  rng = tf.random.Generator.from_seed(seed)
  images, labels = training_steps.labelled_images(
      tf, rng, batch, image_size, classes)
  patch_embedding = keras.Conv2D(input_width, patch, strides=patch,
                                 name="patch_embedding")
  position = keras.Embedding(positions, input_width,
                             name="position_embedding")
  input_norm = keras.LayerNormalization(epsilon=1e-6, name="input_norm")
  latent_array = tf.Variable(rng.normal([latents, hidden]) * 0.02,
                             name="latent_array")
  cross = keras.MultiHeadAttention(1, hidden, name="cross_attention")
  cross_norm = keras.LayerNormalization(epsilon=1e-6, name="cross_norm")
  cross_ffn_in = keras.Dense(hidden, activation="gelu", name="cross_ffn_in")
  cross_ffn_out = keras.Dense(hidden, name="cross_ffn_out")
  cross_ffn_norm = keras.LayerNormalization(epsilon=1e-6,
                                            name="cross_ffn_norm")
  stack = transformers.Blocks(tf_keras, layers=layers, hidden=hidden,
                              heads=heads, ffn=4 * hidden,
                              prefix="latent_block")
  head_norm = keras.LayerNormalization(epsilon=1e-6, name="head_norm")
  head = keras.Dense(classes, name="classifier")

  def forward():
    x = tf.reshape(patch_embedding(images), [batch, positions, input_width])
    x = input_norm(x + position(tf.range(positions))[tf.newaxis])
    z = tf.tile(latent_array[tf.newaxis], [batch, 1, 1])
    for _ in range(repeats):
      z = cross_norm(z + cross(z, x, training=True))
      z = cross_ffn_norm(z + cross_ffn_out(cross_ffn_in(z)))
      z = stack(z, causal=False)
    return head(head_norm(tf.reduce_mean(z, axis=1)))

  forward()  # builds every layer's weights before the variables are listed
  variables = [v for layer in (patch_embedding, position, input_norm, cross,
                               cross_norm, cross_ffn_in, cross_ffn_out,
                               cross_ffn_norm, head_norm, head)
               for v in layer.trainable_variables]
  variables += stack.variables() + [latent_array]
  return training_steps.adam_softmax_step(tf, forward, variables, labels,
                                          learning_rate)
