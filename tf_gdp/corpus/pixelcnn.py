"""An autoregressive image model's training step: a Gated PixelCNN.

van den Oord et al., "Conditional Image Generation with PixelCNN Decoders"
(NeurIPS 2016). Each pixel's distribution is predicted from the pixels
before it in raster order, so every convolution is masked: a fixed 0/1 mask
multiplies its kernel before the convolution, and the taps the mask zeroes
neither read the input nor get a gradient.

Two stacks run side by side, `layers` layers, each layer under its own
numbered scope `layer_{i}`. The vertical stack's k x k convolution sees the
rows above: the first layer's mask (type A) keeps only the rows strictly
above the centre, the later ones' (type B) the centre row too, whose
features already see only the rows above. The horizontal stack's 1 x k
convolution sees the current row to the left: type A keeps the taps left of
the centre, so the first layer cannot see the pixel it predicts; type B
adds the centre. A 1x1 convolution links the vertical stack's
pre-activations into the horizontal stack's (never the other way, which
would leak the rows below). Each stack's pre-activations, 2 x `filters`
maps, are split in two for the gated activation tanh(a) * sigmoid(b); with
`classes`, an embedding of the image's class label (a one-hot vector times
a learned matrix) is added to both halves inside every gate. The
horizontal stack's gated maps pass a 1x1 convolution and are added to the
layer's input (residual; not in the first layer, whose input is the image
itself and would pass the current pixel on).

After the last layer, ReLU, a 1x1 convolution, ReLU and a 1x1 convolution
give 256 logits per pixel and channel, [batch, side, side, channels, 256]:
a softmax over the pixel's intensity. The loss is the softmax
cross-entropy against the input image's own integer values; Adam. The
colour channels of one pixel are predicted together from the pixels before
it (the paper's masks between red, green and blue are left out).

Next to the other image families the step keeps every map at full
resolution through all layers, two streams per layer, and ends in a
256-way softmax over every sub-pixel, the largest tensor of the step.
"""

import numpy as np

from tf_gdp.corpus import training_steps

_LEVELS = 256


def _mask(rows: int, cols: int, kind: str) -> np.ndarray:
  """The 0/1 kernel mask [rows, cols, 1, 1] of a vertical (rows > 1) or
  horizontal (one row) convolution of type "A" or "B" (module doc)."""
  mask = np.zeros((rows, cols, 1, 1), np.float32)
  if rows > 1:
    mask[:rows // 2] = 1.0
    if kind == "B":
      mask[rows // 2] = 1.0
  else:
    mask[0, :cols // 2] = 1.0
    if kind == "B":
      mask[0, cols // 2] = 1.0
  return mask


def pixelcnn(*, image_size: int, filters: int, layers: int, batch: int,
             channels: int = 3, classes: int = 10, first_kernel: int = 7,
             kernel: int = 3, head: int = 0, learning_rate: float = 1e-3,
             seed: int = 0):
  """The step: integer images [batch, image_size, image_size, channels] in
  [0, 256) -> logits [batch, image_size, image_size, channels, 256] of each
  value given the values before it. `filters` maps per stack after each
  gate; `first_kernel` and `kernel` are the side of the first and later
  layers' masks; `head` is the width of the output's hidden 1x1
  convolution (0: 2 x `filters`); `classes` 0: unconditional."""
  if min(image_size, filters, layers, batch, channels) < 1 or classes < 0:
    raise ValueError("image_size, filters, layers, batch and channels must "
                     "be at least 1, classes at least 0")
  if min(first_kernel, kernel) < 3 or not first_kernel % 2 or not kernel % 2:
    raise ValueError(f"kernel sides must be odd and at least 3, got "
                     f"{first_kernel} and {kernel}")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  head = head or 2 * filters

  class MaskedConv2D(keras.Conv2D):
    """A convolution of the kernel times a fixed mask: the masked taps read
    nothing, and the gradient they get is zero."""

    def __init__(self, width, mask, **kwargs):
      super().__init__(width, mask.shape[:2], padding="same", **kwargs)
      self.mask = mask

    def convolution_op(self, inputs, weights):
      masked = tf.multiply(weights, tf.constant(self.mask, name="mask"),
                           name="masked_kernel")
      return super().convolution_op(inputs, masked)

  def built(layer, width):
    layer.build((None, None, None, width))
    return layer

  def make_layer(i):
    """Layer i's weights; the last layer's vertical gate feeds nothing, so
    it has no class embedding."""
    side, kind = (first_kernel, "A") if i == 0 else (kernel, "B")
    width = channels if i == 0 else filters
    parts = {}
    with tf.name_scope(f"layer_{i}"):
      parts["vertical"] = built(MaskedConv2D(
          2 * filters, _mask(side, side, kind), name="conv"), width)
      parts["link"] = built(keras.Conv2D(2 * filters, 1, name="link"),
                            2 * filters)
      parts["horizontal"] = built(MaskedConv2D(
          2 * filters, _mask(1, side, kind), name="conv"), width)
      parts["out"] = built(keras.Conv2D(filters, 1, name="out"), filters)
      stacks = ("vertical", "horizontal") if i < layers - 1 else (
          "horizontal",)
      for stack in stacks if classes else ():
        embed = keras.Dense(2 * filters, use_bias=False, name="class_bias")
        embed.build((None, classes))
        parts[f"{stack}_class"] = embed
    return parts

  with unallocated_variables.scope():
    stack_layers = [make_layer(i) for i in range(layers)]
    with tf.name_scope("output"):
      hidden = built(keras.Conv2D(head, 1, name="hidden"), filters)
      to_logits = built(keras.Conv2D(channels * _LEVELS, 1, name="logits"),
                        head)
    variables = ([v for parts in stack_layers for layer in parts.values()
                  for v in layer.trainable_variables]
                 + hidden.trainable_variables + to_logits.trainable_variables)
    optimizer = training_steps.Optimizer(variables, "adam", learning_rate)

  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(
      rng.uniform([batch, image_size, image_size, channels], 0, _LEVELS,
                  dtype=tf.int32), trainable=False, name="images")
  labels = (tf.Variable(rng.uniform([batch], 0, classes, dtype=tf.int32),
                        trainable=False, name="labels") if classes else None)

  def gate(pre, parts, stack, one_hot):
    """tanh(a + class bias) * sigmoid(b + class bias) of the two halves."""
    if one_hot is not None:
      bias = tf.reshape(parts[f"{stack}_class"](one_hot),
                        [batch, 1, 1, 2 * filters], name="class_map")
      pre = tf.add(pre, bias, name="conditioned")
    with tf.name_scope("gate"):
      a, b = tf.split(pre, 2, axis=-1, name="halves")
      return tf.multiply(tf.tanh(a, name="tanh"), tf.sigmoid(b, name="sigmoid"),
                         name="gated")

  def layer_step(i, parts, v, h, one_hot):
    """One layer of both stacks: (vertical maps, horizontal maps) -> next."""
    with tf.name_scope("vertical"):
      v_pre = parts["vertical"](v)
      v_next = (gate(v_pre, parts, "vertical", one_hot) if i < layers - 1
                else None)
    # Rows above only, into the horizontal stack.
    link = parts["link"](v_pre)
    with tf.name_scope("horizontal"):
      h_pre = tf.add(parts["horizontal"](h), link, name="linked")
      h_out = parts["out"](gate(h_pre, parts, "horizontal", one_hot))
      h_next = h_out if i == 0 else tf.add(h, h_out, name="residual")
    return v_next, h_next

  def forward():
    with tf.name_scope("inputs"):
      x = tf.subtract(tf.cast(images, tf.float32) * (2.0 / (_LEVELS - 1)),
                      1.0, name="scaled")
      one_hot = (tf.one_hot(labels, classes, name="classes") if classes
                 else None)
    v = h = x
    for i, parts in enumerate(stack_layers):
      with tf.name_scope(f"layer_{i}"):
        v, h = layer_step(i, parts, v, h, one_hot)
    with tf.name_scope("output"):
      y = hidden(tf.nn.relu(h, name="relu_in"))
      y = to_logits(tf.nn.relu(y, name="relu_hidden"))
      return tf.reshape(
          y, [batch, image_size, image_size, channels, _LEVELS],
          name="per_channel")

  def loss(logits):
    with tf.name_scope("loss"):
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          images, logits, name="cross_entropy"), name="mean")

  return training_steps.supervised_step(tf, forward, variables, loss,
                                        optimizer)
