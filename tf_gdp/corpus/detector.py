"""A single-stage object detector's training step from tf_keras layers.

The shape of RetinaNet and the YOLO family: a strided convolutional backbone
of residual stages, a feature pyramid (a top-down path of upsampling plus
1x1 lateral convolutions from the last three stages, each level smoothed by
a 3x3 convolution), and on every level two heads of 3x3 convolutions, one
for class logits and one for box offsets per anchor and grid cell. The loss
is sigmoid cross-entropy on the class maps plus a Huber loss on the boxes,
summed over the levels; Adam updates every weight. Three heads read three
resolutions of one backbone and their gradients meet again in it: a shape no
other corpus family has.
"""

from tf_gdp.corpus import training_steps

LEVELS = (3, 4, 5)  # pyramid levels: strides 8, 16, 32


def single_stage_detector(*, image_size: int, width: int, batch: int,
                          blocks: int = 2, pyramid: int = 128,
                          classes: int = 20, anchors: int = 3,
                          learning_rate: float = 1e-3, seed: int = 0):
  """The step: `batch` images of `image_size` pixels, targets on every level.

  The backbone's stem halves the image and each of its four stages halves
  it again, `width` channels after the stem and twice as many per stage;
  `image_size` must be a multiple of 32, the coarsest level's stride.
  """
  if image_size % 32 or image_size < 64:
    raise ValueError(f"image_size must be a multiple of 32 and at least 64, "
                     f"got {image_size}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.normal([batch, image_size, image_size, 3]),
                       trainable=False, name="images")
  class_targets, box_targets = [], []
  for level in LEVELS:
    cells = image_size // 2 ** level
    class_targets.append(tf.Variable(
        tf.cast(rng.uniform([batch, cells, cells, anchors * classes]) < 0.02,
                tf.float32), trainable=False, name=f"class_targets_p{level}"))
    box_targets.append(tf.Variable(
        rng.normal([batch, cells, cells, anchors * 4]), trainable=False,
        name=f"box_targets_p{level}"))

  def conv(x, filters, kernel, name, strides=1):
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same",
                      use_bias=False, name=name)(x)
    x = layers.BatchNormalization(name=f"{name}/norm")(x)
    return layers.ReLU(name=f"{name}/relu")(x)

  inputs = tf_keras.Input(shape=(image_size, image_size, 3),
                          batch_size=batch)
  x = conv(inputs, width, 3, "stem", strides=2)
  features = []
  for stage in range(4):
    filters = width * 2 ** (stage + 1)
    x = conv(x, filters, 3, f"stage{stage}/down", strides=2)
    for block in range(blocks):
      name = f"stage{stage}/block{block}"
      y = conv(x, filters // 2, 1, f"{name}/reduce")
      y = conv(y, filters, 3, f"{name}/conv")
      x = layers.Add(name=f"{name}/add")([x, y])
    features.append(x)
  lateral = {level: layers.Conv2D(pyramid, 1, name=f"p{level}/lateral")(f)
             for level, f in zip(LEVELS, features[1:])}
  def upsample(t):
    """Nearest-neighbour x2 by tiling, with static shapes throughout
    (`UpSampling2D` resizes to a size computed at run time, which would
    leave its output unpriced)."""
    b, h, w, c = t.shape
    t = tf.tile(tf.reshape(t, [b, h, 1, w, 1, c]), [1, 1, 2, 1, 2, 1])
    return tf.reshape(t, [b, 2 * h, 2 * w, c])

  merged = {LEVELS[-1]: lateral[LEVELS[-1]]}
  for level in reversed(LEVELS[:-1]):
    up = layers.Lambda(upsample, name=f"p{level}/upsample")(merged[level + 1])
    merged[level] = layers.Add(name=f"p{level}/merge")([lateral[level], up])
  outputs = []
  for level in LEVELS:
    p = conv(merged[level], pyramid, 3, f"p{level}/smooth")
    for head, channels in (("class", anchors * classes), ("box", anchors * 4)):
      h = conv(p, pyramid, 3, f"p{level}/{head}_head0")
      h = conv(h, pyramid, 3, f"p{level}/{head}_head1")
      outputs.append(layers.Conv2D(channels, 3, padding="same",
                                   name=f"p{level}/{head}_out")(h))
  model = tf_keras.Model(inputs, outputs, name="detector")
  variables = model.trainable_variables

  def loss(predictions):
    total = 0.0
    for i, (classes_target, boxes_target) in enumerate(
        zip(class_targets, box_targets)):
      class_logits, boxes = predictions[2 * i], predictions[2 * i + 1]
      total += tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
          labels=classes_target, logits=class_logits))
      error = tf.abs(boxes - boxes_target)
      total += tf.reduce_mean(tf.where(error < 1.0, 0.5 * tf.square(error),
                                       error - 0.5))
    return total

  return training_steps.supervised_step(
      tf, lambda: model(images, training=True), variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
