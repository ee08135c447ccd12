"""A GAN's training step from tf_keras layers: DCGAN's two networks at once.

Radford et al., "Unsupervised Representation Learning with Deep Convolutional
Generative Adversarial Networks" (ICLR 2016): a generator of strided
transposed convolutions (batch norm, ReLU, tanh out) from a noise vector, and
a discriminator of strided convolutions (batch norm, leaky ReLU) down to one
logit. One step trains both, each with its own Adam and its own gradient
tape, as a user's `tf.function` would: the discriminator judges real images
and the generator's images with the same weights, its loss is sigmoid
cross-entropy on both, and the generator's loss is the discriminator's
verdict on its images, its gradient flowing back through the discriminator.
Two networks, two losses, two backward passes and a subgraph run twice: a
shape no other corpus family has.
"""

import math

from tf_gdp.corpus import training_steps


def dcgan(*, image_size: int, base_filters: int, batch: int,
          noise_dim: int = 100, learning_rate: float = 2e-4,
          seed: int = 0):
  """The step: both networks updated once on `batch` real and fake images.

  The generator starts at 4x4 and doubles to `image_size` (a power of two,
  at least 8); the discriminator halves it back, `base_filters` wide at
  full resolution and twice as wide at each halving.
  """
  doublings = int(round(math.log2(image_size))) - 2
  if image_size < 8 or 2 ** (doublings + 2) != image_size:
    raise ValueError(f"image_size must be a power of two >= 8, got "
                     f"{image_size}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  real = tf.Variable(rng.uniform([batch, image_size, image_size, 3], -1, 1),
                     trainable=False, name="real_images")
  noise = tf.Variable(rng.normal([batch, noise_dim]), trainable=False,
                      name="noise")

  width = [base_filters * 2 ** i for i in range(doublings)]  # per halving
  z = tf_keras.Input(shape=(noise_dim,), batch_size=batch)
  x = layers.Dense(4 * 4 * width[-1], use_bias=False, name="project")(z)
  x = layers.BatchNormalization(name="project/norm")(x)
  x = layers.ReLU(name="project/relu")(x)
  x = layers.Reshape((4, 4, width[-1]), name="to_map")(x)
  for i, filters in enumerate(reversed(width[:-1])):
    x = layers.Conv2DTranspose(filters, 4, strides=2, padding="same",
                               use_bias=False, name=f"up{i}")(x)
    x = layers.BatchNormalization(name=f"up{i}/norm")(x)
    x = layers.ReLU(name=f"up{i}/relu")(x)
  x = layers.Conv2DTranspose(3, 4, strides=2, padding="same",
                             activation="tanh", name="to_image")(x)
  generator = tf_keras.Model(z, x, name="generator")

  image = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch)
  y = image
  for i, filters in enumerate(width):
    y = layers.Conv2D(filters, 4, strides=2, padding="same",
                      use_bias=i == 0, name=f"down{i}")(y)
    if i:
      y = layers.BatchNormalization(name=f"down{i}/norm")(y)
    y = layers.LeakyReLU(0.2, name=f"down{i}/leaky_relu")(y)
  y = layers.Flatten(name="flatten")(y)
  y = layers.Dense(1, name="real_logit")(y)
  discriminator = tf_keras.Model(image, y, name="discriminator")

  generator_weights = generator.trainable_variables
  discriminator_weights = discriminator.trainable_variables
  generator_update = training_steps.Optimizer(generator_weights, "adam",
                                              learning_rate)
  discriminator_update = training_steps.Optimizer(discriminator_weights,
                                                  "adam", learning_rate)

  def cross_entropy(labels_value, logits):
    labels = tf.fill(tf.shape(logits), labels_value)
    return tf.reduce_mean(
        tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))

  def step():
    with tf.GradientTape() as generator_tape, \
        tf.GradientTape() as discriminator_tape:
      fake = generator(noise, training=True)
      real_logits = discriminator(real, training=True)
      fake_logits = discriminator(fake, training=True)
      discriminator_loss = (cross_entropy(1.0, real_logits) +
                            cross_entropy(0.0, fake_logits))
      generator_loss = cross_entropy(1.0, fake_logits)
    generator_update.apply(
        generator_tape.gradient(generator_loss, generator_weights))
    discriminator_update.apply(
        discriminator_tape.gradient(discriminator_loss,
                                    discriminator_weights))
    return discriminator_loss + generator_loss

  return step
