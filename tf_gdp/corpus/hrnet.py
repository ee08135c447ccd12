"""A pose estimator's training step from tf_keras layers: HRNet.

Sun et al., "Deep High-Resolution Representation Learning for Human Pose
Estimation" (CVPR 2019). Most networks for dense prediction go down to a
coarse map and come back up; HRNet keeps the high resolution all the way
and adds coarser branches beside it. A stem of two 3x3 stride-2
convolutions brings the image to a quarter of its size and stage 1 runs
bottleneck residual blocks there (`stem_width` channels inside, four times
as many out). Stages 2, 3 and 4 run 2, 3 and 4 branches in parallel, at
1/4, 1/8, 1/16 and 1/32 of the image with `width` C, 2C, 4C and 8C
channels; a transition before each stage opens the new coarsest branch by
a 3x3 stride-2 convolution of the previous one. A stage is a sequence of
modules: in each, every branch runs its own basic residual blocks, then an
exchange unit gives every branch the sum of all branches resampled to its
resolution and width (a finer branch through 3x3 stride-2 convolutions,
one per halving; a coarser one through a 1x1 convolution and a
nearest-neighbour upsampling) and a ReLU. The last module fuses into the
finest branch only, which a 1x1 convolution turns into one heatmap per
keypoint at a quarter of the image; the loss is the mean squared error
against target heatmaps, each keypoint weighted by its visibility. Adam.

The branches of a module depend only on the previous exchange unit, so
each module puts up to four independent chains of convolutions side by
side, of very different sizes, and joins them all-to-all: a shape no other
corpus family has.
"""

from tf_gdp.corpus import training_steps

# Stage 1's bottleneck blocks widen their inner channels by this factor.
_EXPANSION = 4
# Branches of stages 2, 3, 4.
_STAGES = (2, 3, 4)


def hrnet(*, width: int, image_size, batch: int, modules=(1, 4, 3),
          blocks: int = 4, stem_width: int = 64, joints: int = 17,
          learning_rate: float = 1e-3, seed: int = 0):
  """The step: images [batch, height, width, 3] -> `joints` heatmaps.

  `image_size` is an int (square) or (height, width), each a multiple of
  32 (the coarsest branch's stride). `modules[k]` modules in stage k + 2
  (HRNet-W32 has (1, 4, 3)), `blocks` residual blocks per branch of a
  module and in stage 1; `width` is HRNet's W (18, 32, 48).
  """
  height, image_width = ((image_size, image_size)
                         if isinstance(image_size, int) else image_size)
  if height % 32 or image_width % 32:
    raise ValueError(f"image sides must be multiples of 32, got "
                     f"{height}x{image_width}")
  if len(modules) != len(_STAGES) or min(modules) < 1:
    raise ValueError(f"modules must be 3 counts of at least 1, got "
                     f"{modules}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.normal([batch, height, image_width, 3]),
                       trainable=False, name="images")
  targets = tf.Variable(
      rng.uniform([batch, height // 4, image_width // 4, joints]),
      trainable=False, name="target_heatmaps")
  visible = tf.Variable(
      tf.cast(rng.uniform([batch, joints]) < 0.8, tf.float32),
      trainable=False, name="visible_joints")

  def conv(x, filters, kernel, name, strides=1, relu=True):
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same",
                      use_bias=False, name=name)(x)
    x = layers.BatchNormalization(name=f"{name}/norm")(x)
    return layers.ReLU(name=f"{name}/relu")(x) if relu else x

  def bottleneck(x, name):
    y = conv(x, stem_width, 1, f"{name}/conv0")
    y = conv(y, stem_width, 3, f"{name}/conv1")
    y = conv(y, _EXPANSION * stem_width, 1, f"{name}/conv2", relu=False)
    if x.shape[-1] != y.shape[-1]:
      x = conv(x, y.shape[-1], 1, f"{name}/project", relu=False)
    return layers.ReLU(name=f"{name}/relu")(
        layers.Add(name=f"{name}/add")([x, y]))

  def basic(x, name):
    y = conv(x, x.shape[-1], 3, f"{name}/conv0")
    y = conv(y, x.shape[-1], 3, f"{name}/conv1", relu=False)
    return layers.ReLU(name=f"{name}/relu")(
        layers.Add(name=f"{name}/add")([x, y]))

  def upsample(factor, name):
    """Nearest-neighbour upsampling to a size fixed at trace time
    (`UpSampling2D` computes it from the run-time shape, which leaves its
    output's height and width unknown, so unpriced)."""
    def resize(t):
      _, h, w, _ = t.shape
      return tf.image.resize(t, [h * factor, w * factor], method="nearest")
    return layers.Lambda(resize, name=name)

  def resampled(x, source, target, name):
    """Branch `source`'s map at branch `target`'s resolution and width."""
    filters = width * 2 ** target
    if source > target:
      x = conv(x, filters, 1, f"{name}/conv", relu=False)
      return upsample(2 ** (source - target), f"{name}/upsample")(x)
    for k in range(target - source):
      last = k == target - source - 1
      x = conv(x, filters if last else x.shape[-1], 3, f"{name}/down{k}",
               strides=2, relu=not last)
    return x

  def exchange(branches, outputs, name):
    """Every output branch gets the sum of all branches resampled to it."""
    fused = []
    for target in range(outputs):
      parts = [x if source == target else
               resampled(x, source, target,
                         f"{name}/to{target}/from{source}")
               for source, x in enumerate(branches)]
      fused.append(layers.ReLU(name=f"{name}/to{target}/relu")(
          layers.Add(name=f"{name}/to{target}/sum")(parts)))
    return fused

  inputs = tf_keras.Input(shape=(height, image_width, 3), batch_size=batch)
  x = conv(inputs, stem_width, 3, "stem/conv0", strides=2)
  x = conv(x, stem_width, 3, "stem/conv1", strides=2)
  for b in range(blocks):
    x = bottleneck(x, f"stage1/block{b}")
  branches = [x]
  for stage, count in zip(_STAGES, modules):
    # The transition: widths to C, 2C, ... and a new coarsest branch.
    coarsest = conv(branches[-1], width * 2 ** (stage - 1), 3,
                    f"stage{stage}/transition/branch{stage - 1}", strides=2)
    branches = [
        conv(x, width * 2 ** i, 3, f"stage{stage}/transition/branch{i}")
        if x.shape[-1] != width * 2 ** i else x
        for i, x in enumerate(branches)] + [coarsest]
    for m in range(count):
      name = f"stage{stage}/module{m}"
      for i in range(stage):
        for b in range(blocks):
          branches[i] = basic(branches[i], f"{name}/branch{i}/block{b}")
      last = stage == _STAGES[-1] and m == count - 1
      branches = exchange(branches, 1 if last else stage, f"{name}/fuse")
  heatmaps = layers.Conv2D(joints, 1, name="heatmaps")(branches[0])
  model = tf_keras.Model(inputs, heatmaps, name="hrnet")

  def loss(heatmaps):
    error = (heatmaps - targets) * visible[:, None, None, :]
    return 0.5 * tf.reduce_mean(tf.square(error))

  variables = model.trainable_variables
  return training_steps.supervised_step(
      tf, lambda: model(images, training=True), variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
