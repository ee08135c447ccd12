"""A semantic segmenter's training step from tf_keras layers: DeepLabV3+.

Chen et al., "Encoder-Decoder with Atrous Separable Convolution for
Semantic Image Segmentation" (ECCV 2018), on a ResNet backbone. The
backbone is ResNet's: a 7x7 stride-2 convolution and a 3x3 stride-2 max
pool, then four stages of bottleneck residual blocks (1x1, 3x3, 1x1 with
4x as many channels out; a 1x1 projection where the shape changes), the
second and third opening with a stride-2 3x3 convolution. The fourth keeps
the stride at 16 of the image: its 3x3 convolutions are atrous (dilation 2)
instead of strided, so its maps have four times the classifier's pixels.

Atrous spatial pyramid pooling reads the backbone's output five ways in
parallel: a 1x1 convolution, three 3x3 convolutions at dilations 6, 12 and
18, and image-level pooling (a global average, a 1x1 convolution, resized
back bilinearly). The five are concatenated and a 1x1 convolution mixes
them. The decoder resizes that 4x (bilinear), concatenates it with the
first stage's stride-4 output reduced to 48 channels by a 1x1 convolution,
refines the pair with two 3x3 convolutions and maps it to class logits by a
1x1 convolution, resized to the image. Batch norm and ReLU follow every
convolution but the logits; in a residual block, the last convolution's and
the projection's ReLU comes after the add. Per-pixel softmax cross-entropy
against integer labels, Adam.

TF runs a dilated convolution as SpaceToBatchND, a plain convolution and
BatchToSpaceND, the batch multiplied by the dilation squared. Next to the
`detector` family (a pyramid of resolutions, one head per level) it puts
five branches of very different costs side by side, joined by one concat,
and a long skip from the stride-4 feature across the whole deep backbone.
"""

from tf_gdp.corpus import training_steps

_EXPANSION = 4
# The atrous pyramid's dilations at output stride 16.
_RATES = (6, 12, 18)
# Stages 1-4's strides; the last dilates by 2 instead of striding.
_STRIDES = (1, 2, 2, 1)
_LAST_DILATION = 2
_OUTPUT_STRIDE = 16
# The decoder's upsampling of the pyramid, to the low-level feature's stride.
_DECODER_UPSAMPLING = 4


def deeplab(*, image_size: int, batch: int, blocks=(3, 4, 6, 3),
            width: int = 64, aspp: int = 256, low_level: int = 48,
            decoder: int = 256, classes: int = 21,
            learning_rate: float = 1e-3, seed: int = 0):
  """The step: images [batch, image_size, image_size, 3] -> per-pixel
  logits of `classes`, against integer labels [batch, image_size,
  image_size].

  `blocks` are the bottleneck blocks per stage (ResNet-50: 3, 4, 6, 3;
  ResNet-101: 3, 4, 23, 3); `width` the stem's and first stage's inner
  channels, doubling per stage. `aspp`, `low_level` and `decoder` are the
  pyramid's, the low-level projection's and the decoder's channels (256, 48,
  256 in the paper). `image_size` must be a multiple of 16.
  """
  if len(blocks) != len(_STRIDES) or min(blocks) < 1:
    raise ValueError(f"blocks must be 4 counts of at least 1, got {blocks}")
  if image_size % _OUTPUT_STRIDE:
    raise ValueError(f"image side must be a multiple of {_OUTPUT_STRIDE}, "
                     f"got {image_size}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  images, labels = training_steps.labelled_images(
      tf, rng, batch, image_size, classes, per_pixel=True)

  def conv(x, filters, kernel, name, strides=1, dilation=1, relu=True):
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same",
                      dilation_rate=dilation, use_bias=False, name=name)(x)
    x = layers.BatchNormalization(name=f"{name}/norm")(x)
    return layers.ReLU(name=f"{name}/relu")(x) if relu else x

  def resize(x, side, name):
    """Bilinear resizing to a size fixed at trace time, so priced."""
    return layers.Lambda(
        lambda t: tf.image.resize(t, [side, side], method="bilinear"),
        name=name)(x)

  def bottleneck(x, inner, strides, dilation, name):
    y = conv(x, inner, 1, f"{name}/conv0")
    y = conv(y, inner, 3, f"{name}/conv1", strides=strides,
             dilation=dilation)
    y = conv(y, _EXPANSION * inner, 1, f"{name}/conv2", relu=False)
    if strides != 1 or x.shape[-1] != y.shape[-1]:
      x = conv(x, y.shape[-1], 1, f"{name}/project", strides=strides,
               relu=False)
    return layers.ReLU(name=f"{name}/relu")(
        layers.Add(name=f"{name}/add")([x, y]))

  def pyramid(x):
    """Atrous spatial pyramid pooling: five branches, one concat."""
    side = x.shape[1]
    branches = [conv(x, aspp, 1, "aspp/conv1x1")]
    branches += [conv(x, aspp, 3, f"aspp/atrous{rate}", dilation=rate)
                 for rate in _RATES]
    pooled = layers.GlobalAveragePooling2D(keepdims=True,
                                           name="aspp/pool/mean")(x)
    pooled = conv(pooled, aspp, 1, "aspp/pool/conv")
    branches.append(resize(pooled, side, "aspp/pool/resize"))
    x = layers.Concatenate(name="aspp/concat")(branches)
    return conv(x, aspp, 1, "aspp/project")

  inputs = tf_keras.Input(shape=(image_size, image_size, 3), batch_size=batch)
  x = conv(inputs, width, 7, "stem/conv", strides=2)
  x = layers.MaxPooling2D(3, strides=2, padding="same", name="stem/pool")(x)
  features = []
  for stage, (count, strides) in enumerate(zip(blocks, _STRIDES), start=1):
    dilation = _LAST_DILATION if stage == len(_STRIDES) else 1
    for b in range(count):
      x = bottleneck(x, width * 2 ** (stage - 1), strides if b == 0 else 1,
                     dilation, f"stage{stage}/block{b}")
    features.append(x)
  x = pyramid(features[-1])
  x = resize(x, _DECODER_UPSAMPLING * x.shape[1], "decoder/upsample")
  skip = conv(features[0], low_level, 1, "decoder/low_level")
  x = layers.Concatenate(name="decoder/concat")([x, skip])
  x = conv(x, decoder, 3, "decoder/conv0")
  x = conv(x, decoder, 3, "decoder/conv1")
  x = layers.Conv2D(classes, 1, name="logits")(x)
  logits = resize(x, image_size, "resize")
  model = tf_keras.Model(inputs, logits, name="deeplab")
  return training_steps.adam_classifier_step(tf, model, images, labels,
                                             learning_rate)
