"""A pose estimator's training step: a Stacked Hourglass network.

Newell, Yang and Deng, "Stacked Hourglass Networks for Human Pose
Estimation" (ECCV 2016). Every residual module is the paper's pre-activation
bottleneck: batch norm, ReLU and a convolution three times (1x1 to half the
output width, 3x3, 1x1 to the output width), added to the module's input,
through a 1x1 projection where the width changes. No convolution but the
heatmaps' has a bias: every other one reaches the loss only through a
batch norm, which removes it.

A stem brings the image to a quarter of its side: a 7x7 stride-2
convolution (batch norm, ReLU), a residual module, a 2x2 max pool and two
residual modules, the last to `features` channels. Then `stacks`
hourglasses, each under its own numbered scope `stack_{i}`. An hourglass
is recursive, `depth` levels under `stack_{i}/level_{d}`: at each level an
upper branch, a residual module at the level's resolution, and a lower
branch, a 2x2 max pool, a residual module, the next level (the deepest
level has one more residual module instead), a residual module and a
nearest-neighbour upsampling back to the level's resolution; the two
branches are added. So a stack pools `depth` times and upsamples as often,
and every resolution's features skip across the stack's bottom.

After each hourglass a residual module and a 1x1 convolution (batch norm,
ReLU) give the stack's features, and a 1x1 convolution gives `keypoints`
heatmaps at a quarter of the image. Every stack is supervised: its loss
term, the mean squared error of its heatmaps against the target heatmaps,
is computed in its own scope, and the step's loss is their sum. Between
stacks, 1x1 convolutions of the features and of the heatmaps are added to
the stack's input to give the next stack's input. Adam (the paper trains
with RMSProp).

Next to HRNet, the corpus's other pose estimator, which keeps a
high-resolution branch beside coarser ones, each stack here is one long
encoder-decoder whose skips span every level, repeated end to end.
"""

from tf_gdp.corpus import training_steps

# The stem's residual modules, without numbers so the stage rules read
# only the stacks' numbers.
_STEM_BLOCKS = ("first", "second", "third")


def hourglass(*, image_size: int, stacks: int, features: int,
              keypoints: int, batch: int, depth: int = 4,
              stem_width: int = 64, learning_rate: float = 2.5e-4,
              seed: int = 0):
  """The step: images [batch, image_size, image_size, 3] -> `keypoints`
  heatmaps [batch, image_size / 4, image_size / 4, keypoints] from every
  stack, against target heatmaps of that shape. `features` channels through
  the hourglasses (their bottlenecks have half inside); the stem's first
  convolution has `stem_width`, its first residual module twice that. The
  image side must be a multiple of 4 x 2^`depth`."""
  if min(stacks, keypoints, batch, depth, stem_width) < 1 or features < 2:
    raise ValueError("stacks, keypoints, batch, depth and stem_width must "
                     "be at least 1, features at least 2")
  side = 4 * 2 ** depth
  if image_size < side or image_size % side:
    raise ValueError(f"image side must be a positive multiple of {side} "
                     f"for depth {depth}, got {image_size}")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  made = []

  def built(layer, channels):
    layer.build((None, None, None, channels))
    made.append(layer)
    return layer

  def conv(width, kernel, channels, name="conv", strides=1, bias=False):
    return built(keras.Conv2D(width, kernel, strides=strides,
                              padding="same", use_bias=bias, name=name),
                 channels)

  def norm(channels):
    return built(keras.BatchNormalization(name="norm"), channels)

  class Residual:
    """The pre-activation bottleneck module (module doc), channels ->
    width."""

    def __init__(self, channels, width):
      inner = width // 2
      self.units = [(name, norm(c), conv(w, k, c)) for name, c, w, k in (
          ("reduce", channels, inner, 1), ("spatial", inner, inner, 3),
          ("expand", inner, width, 1))]
      self.project = (conv(width, 1, channels, name="project")
                      if channels != width else None)

    def __call__(self, x):
      y = x
      for name, batch_norm, convolution in self.units:
        with tf.name_scope(name):
          y = convolution(tf.nn.relu(batch_norm(y, training=True),
                                     name="relu"))
      skip = self.project(x) if self.project else x
      return tf.add(skip, y, name="residual")

  class Level:
    """One level of an hourglass and, below it, the deeper ones."""

    def __init__(self, level):
      self.level = level
      self.deepest = level == depth - 1
      self.upper = Residual(features, features)
      self.before = Residual(features, features)
      self.inner = (Residual(features, features) if self.deepest
                    else Level(level + 1))
      self.after = Residual(features, features)

    def __call__(self, x):
      # The level's scope is entered twice, around the deeper levels, so
      # they are its siblings under the stack and every level's number is
      # read at the same depth of the name.
      with tf.name_scope(f"level_{self.level}") as scope:
        with tf.name_scope("upper"):
          upper = self.upper(x)
        low = tf.nn.max_pool2d(x, 2, 2, "VALID", name="pool")
        with tf.name_scope("before"):
          low = self.before(low)
        if self.deepest:
          with tf.name_scope("bottom"):
            low = self.inner(low)
      if not self.deepest:
        low = self.inner(low)
      with tf.name_scope(scope):
        with tf.name_scope("after"):
          low = self.after(low)
        _, height, width, _ = x.shape
        up = tf.image.resize(low, [height, width], method="nearest",
                             name="upsample")
        return tf.add(upper, up, name="merge")

  class Stack:
    """An hourglass, its heads and (not the last) the re-injection."""

    def __init__(self, last):
      self.hourglass = Level(0)
      self.refine = Residual(features, features)
      self.linear = (conv(features, 1, features), norm(features))
      self.heatmaps = conv(keypoints, 1, features, name="heatmaps",
                           bias=True)
      self.remap = None if last else (
          conv(features, 1, features, name="remap_features"),
          conv(features, 1, keypoints, name="remap_heatmaps"))

  with unallocated_variables.scope():
    with tf.name_scope("stem"):
      stem_conv = conv(stem_width, 7, 3, strides=2)
      stem_norm = norm(stem_width)
      stem_blocks = [Residual(c, w) for c, w in (
          (stem_width, 2 * stem_width), (2 * stem_width, 2 * stem_width),
          (2 * stem_width, features))]
    hourglasses = []
    for i in range(stacks):
      with tf.name_scope(f"stack_{i}"):
        hourglasses.append(Stack(last=i == stacks - 1))
    variables = [v for layer in made for v in layer.trainable_variables]
    optimizer = training_steps.Optimizer(variables, "adam", learning_rate)

  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                       trainable=False, name="images")
  quarter = image_size // 4
  targets = tf.Variable(rng.uniform([batch, quarter, quarter, keypoints]),
                        trainable=False, name="target_heatmaps")

  def stack_step(stack, x):
    """The stack's input -> (its loss term, the next stack's input)."""
    y = stack.hourglass(x)
    with tf.name_scope("refine"):
      y = stack.refine(y)
    linear, linear_norm = stack.linear
    with tf.name_scope("linear"):
      y = linear_norm(linear(y), training=True)
    y = tf.nn.relu(y, name="features")
    heatmaps = stack.heatmaps(y)
    with tf.name_scope("loss"):
      error = tf.subtract(heatmaps, targets, name="error")
      term = tf.reduce_mean(tf.square(error), name="mean")
    if stack.remap is None:
      return term, None
    remap_features, remap_heatmaps = stack.remap
    return term, tf.add_n([x, remap_features(y), remap_heatmaps(heatmaps)],
                          name="reinjected")

  def forward():
    """Every stack's loss term (module doc)."""
    with tf.name_scope("stem"):
      x = tf.nn.relu(stem_norm(stem_conv(images), training=True),
                     name="relu")
      for name, block in zip(_STEM_BLOCKS, stem_blocks):
        with tf.name_scope(name):
          x = block(x)
        if name == _STEM_BLOCKS[0]:
          x = tf.nn.max_pool2d(x, 2, 2, "VALID", name="pool")
    terms = []
    for i, stack in enumerate(hourglasses):
      with tf.name_scope(f"stack_{i}"):
        term, x = stack_step(stack, x)
      terms.append(term)
    return terms

  return training_steps.summed_terms_step(tf, forward, variables, optimizer)
