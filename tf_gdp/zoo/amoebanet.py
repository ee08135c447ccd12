"""AmoebaNet-A training step, built from its published cell spec.

AmoebaNet-A is the image classifier found by regularized evolution (Real,
Aggarwal, Huang and Le, "Regularized Evolution for Image Classifier
Architecture Search", AAAI 2019). Its normal and reduction cells are drawn
in the paper's Figure 4; `NORMAL_CELL` and `REDUCTION_CELL` below write them
down as data, in the encoding of the authors' reference implementation
(tensorflow/tpu, models/official/amoeba_net/model_specs.py, "amoeba_net_a"):
hidden state 0 is the previous cell's output, 1 the one before it; each of
the five rows applies an op to each of two existing states and adds the
results, giving states 2..6; the cell's output concatenates the states
listed in `outputs`. In a reduction cell, ops that read state 0 or 1 use
stride 2.

The network (the paper's ImageNet model, after NASNet's, with the ops as
the reference implements them): a 3x3/2 stem convolution with 32 filters,
two reduction "stem cells" with F/4 and F/2 filters, then three stacks of N
normal cells with F, 2F and 4F filters, separated by reduction cells that
double the filters; ReLU, global average pooling, dropout and a linear
classifier. Convolutions are ReLU -> conv -> batch norm (training mode,
offset but no scale, moving-average updates); "sep_conv_KxK" is two such
depthwise-separable convolutions; "conv_1x7_7x1" runs inside a 1x1
bottleneck to a quarter of the filters. With N=6, F=190 this gives 86.6M
parameters (the paper: 86.7M) and with F=448 467.9M (the paper: 469M).
Cross-entropy with label smoothing, L2 weight decay, optional gradient
clipping and an SGD (or Adam) update. Left out: the auxiliary head and
drop-path (a per-example random scale of each path).

Name scopes: `stem/`, `stem_cell_<j>/`, `stack_<s>/cell_<c>/`,
`reduction_<j>/`, inside a cell `prepare/{input,previous}/` and
`comb_<k>/{left,right}_<op>/`, then `head/`, `loss/`, `weight_decay/`;
backward ops under `gradient_tape/<same>`, each variable's update under the
variable's own scope.
"""

import collections
import math
from typing import Optional

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import knobs  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import training  # pylint: disable=g-import-not-at-top

CellSpec = collections.namedtuple("CellSpec", ["combinations", "outputs"])

# AmoebaNet-A (Real et al. 2019, Figure 4). Each row: ((op, input state),
# (op, input state)); the row's sum is the next hidden state (2, 3, ...).
NORMAL_CELL = CellSpec(
    combinations=(
        (("avg_pool_3x3", 0), ("max_pool_3x3", 0)),  # -> 2
        (("sep_conv_3x3", 1), ("identity", 1)),      # -> 3
        (("identity", 0), ("avg_pool_3x3", 1)),      # -> 4
        (("sep_conv_3x3", 0), ("sep_conv_5x5", 2)),  # -> 5
        (("avg_pool_3x3", 5), ("sep_conv_3x3", 0)),  # -> 6
    ),
    outputs=(1, 3, 4, 6))
REDUCTION_CELL = CellSpec(
    combinations=(
        (("sep_conv_3x3", 1), ("avg_pool_3x3", 0)),  # -> 2
        (("max_pool_3x3", 0), ("sep_conv_7x7", 2)),  # -> 3
        (("max_pool_3x3", 1), ("max_pool_3x3", 0)),  # -> 4
        (("sep_conv_3x3", 4), ("conv_1x7_7x1", 0)),  # -> 5
        (("avg_pool_3x3", 1), ("sep_conv_7x7", 0)),  # -> 6
    ),
    outputs=(2, 3, 4, 5, 6))

# Filters of the stride-2 3x3 stem convolution ("149 x 149 x 32").
STEM_FILTERS = 32
BATCH_NORM_DECAY = 0.999
BATCH_NORM_EPSILON = 1e-3
# Two stride-2 stem cells and two reductions between the stacks, after the
# stride-2 stem conv: the last stack sees image_size / 32.
MIN_IMAGE_SIZE = 32


class AmoebaNet(tf.Module):
  """Weights of every cell plus the forward pass from images to logits."""

  def __init__(self, num_cells: int, filters: int, num_classes: int,
               dropout: float, seed: int):
    super().__init__()
    rng = tf.random.Generator.from_seed(seed)
    self.dropout = dropout
    self.stem = _ConvBn(rng, "stem/", (3, 3), 3, STEM_FILTERS, stride=2,
                        relu=False, padding="VALID")
    # Per output so far: (channels, halved relative to the output before).
    # The first stem cell has no "previous" input: None.
    outputs = [None, (STEM_FILTERS, False)]
    self.cells = []

    def add(prefix, spec, cell_filters, reduction):
      previous, (channels, after_reduction) = outputs[-2:]
      self.cells.append(_Cell(
          rng, prefix, spec, cell_filters, channels,
          None if previous is None else previous[0], after_reduction,
          reduction))
      outputs.append((cell_filters * len(spec.outputs), reduction))

    for j, scale in enumerate((4, 2)):
      add(f"stem_cell_{j}/", REDUCTION_CELL, filters // scale, True)
    for s in range(3):
      if s:
        add(f"reduction_{s - 1}/", REDUCTION_CELL, filters * 2 ** s, True)
      for c in range(num_cells):
        add(f"stack_{s}/cell_{c}/", NORMAL_CELL, filters * 2 ** s, False)
    final_channels = outputs[-1][0]
    self.classifier = tf.Variable(
        rng.normal([final_channels, num_classes],
                   stddev=math.sqrt(1.0 / final_channels)),
        name="head/kernel")
    self.classifier_bias = tf.Variable(tf.zeros([num_classes]),
                                       name="head/bias")

  def logits(self, images):
    with tf.name_scope("stem/"):
      x = self.stem(images)
    previous, current = None, x
    for cell in self.cells:
      previous, current = current, cell(current, previous)
    with tf.name_scope("head/"):
      x = tf.reduce_mean(tf.nn.relu(current), axis=[1, 2])
      if self.dropout > 0:
        x = tf.nn.dropout(x, rate=self.dropout)
      return tf.nn.bias_add(tf.matmul(x, self.classifier),
                            self.classifier_bias)

  @property
  def kernels(self):
    """Weights under L2 decay: convolution and classifier kernels."""
    return [v for v in self.trainable_variables
            if v.name.split("/")[-1].startswith(("kernel", "depthwise",
                                                 "pointwise"))]


class _BatchNorm(tf.Module):
  """Batch norm in training mode, with moving-average updates.

  As in the reference, a learned offset but no learned scale (the next op
  is a ReLU or a linear conv, which can absorb it).
  """

  def __init__(self, channels: int, var_scope: str):
    super().__init__()
    self.channels = channels
    self.offset = tf.Variable(tf.zeros([channels]), name=var_scope + "beta")
    self.moving_mean = tf.Variable(tf.zeros([channels]), trainable=False,
                                   name=var_scope + "moving_mean")
    self.moving_variance = tf.Variable(tf.ones([channels]), trainable=False,
                                       name=var_scope + "moving_variance")

  def __call__(self, x):
    y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
        x, tf.ones([self.channels]), self.offset,
        epsilon=BATCH_NORM_EPSILON, is_training=True)
    rate = 1.0 - BATCH_NORM_DECAY
    self.moving_mean.assign_sub((self.moving_mean - mean) * rate)
    self.moving_variance.assign_sub((self.moving_variance - variance) * rate)
    return y


class _ConvBn(tf.Module):
  """[ReLU ->] a convolution -> batch norm."""

  def __init__(self, rng, var_scope: str, size, in_channels: int,
               out_channels: int, stride=1, relu: bool = True,
               padding: str = "SAME"):
    super().__init__()
    self.relu = relu
    self.padding = padding
    self.strides = (1,) + _pair(stride) + (1,)
    self.kernel = _he_normal(rng, list(size) + [in_channels, out_channels],
                             var_scope + "kernel")
    self.norm = _BatchNorm(out_channels, var_scope + "bn/")

  def __call__(self, x):
    if self.relu:
      x = tf.nn.relu(x)
    return self.norm(tf.nn.conv2d(x, self.kernel, self.strides, self.padding))


class _SepConv(tf.Module):
  """'separable_KxK_2': (ReLU -> depthwise + pointwise -> BN) twice."""

  def __init__(self, rng, var_scope: str, size: int, in_channels: int,
               channels: int, stride: int):
    super().__init__()
    self.stride = stride
    widths = [in_channels, channels]
    self.depthwise = [
        _he_normal(rng, [size, size, widths[r], 1],
                   f"{var_scope}rep_{r}/depthwise", fan_in=size * size)
        for r in range(2)]
    self.pointwise = [
        _he_normal(rng, [1, 1, widths[r], channels],
                   f"{var_scope}rep_{r}/pointwise")
        for r in range(2)]
    self.norms = [_BatchNorm(channels, f"{var_scope}rep_{r}/bn/")
                  for r in range(2)]

  def __call__(self, x):
    for r in range(2):
      with tf.name_scope(f"rep_{r}"):
        stride = self.stride if r == 0 else 1
        x = tf.nn.separable_conv2d(
            tf.nn.relu(x), self.depthwise[r], self.pointwise[r],
            (1, stride, stride, 1), "SAME")
        x = self.norms[r](x)
    return x


class _SpatialSeparable(tf.Module):
  """'1x7_7x1': a 1x7 then a 7x1 conv, inside a 1x1 bottleneck to 1/4 width.

  Without the bottleneck when a quarter of the filters would be < 1.
  """

  def __init__(self, rng, var_scope: str, in_channels: int, channels: int,
               stride: int):
    super().__init__()
    inner = channels // 4
    self.parts = []
    if inner >= 1:
      self.parts.append(("pre_1x1", _ConvBn(
          rng, var_scope + "pre_1x1/", (1, 1), in_channels, inner)))
    else:
      inner = channels
    self.parts.append(("1x7", _ConvBn(
        rng, var_scope + "1x7/", (1, 7),
        inner if self.parts else in_channels, inner, stride=(1, stride))))
    self.parts.append(("7x1", _ConvBn(
        rng, var_scope + "7x1/", (7, 1), inner, inner, stride=(stride, 1))))
    if inner != channels:
      self.parts.append(("post_1x1", _ConvBn(
          rng, var_scope + "post_1x1/", (1, 1), inner, channels)))

  def __call__(self, x):
    for name, part in self.parts:
      with tf.name_scope(name):
        x = part(x)
    return x


class _Pool(tf.Module):
  """3x3 average or max pooling (SAME), then a 1x1 conv if widths differ."""

  def __init__(self, rng, var_scope: str, kind: str, in_channels: int,
               channels: int, stride: int):
    super().__init__()
    self.pool = tf.nn.avg_pool2d if kind == "avg" else tf.nn.max_pool2d
    self.stride = stride
    self.project = (_ConvBn(rng, var_scope + "1x1/", (1, 1), in_channels,
                            channels, relu=False)
                    if in_channels != channels else None)

  def __call__(self, x):
    x = self.pool(x, 3, self.stride, "SAME")
    if self.project is not None:
      with tf.name_scope("1x1"):
        x = self.project(x)
    return x


class _FactorizedReduction(tf.Module):
  """Halves height and width with two offset 1x1/2 convs (NASNet), then BN."""

  def __init__(self, rng, var_scope: str, in_channels: int, channels: int):
    super().__init__()
    half = channels // 2
    self.path_kernels = [
        _he_normal(rng, [1, 1, in_channels, half], var_scope + "path_0/kernel"),
        _he_normal(rng, [1, 1, in_channels, channels - half],
                   var_scope + "path_1/kernel")]
    self.norm = _BatchNorm(channels, var_scope + "bn/")

  def __call__(self, x):
    x = tf.nn.relu(x)
    with tf.name_scope("path_0"):
      a = tf.nn.conv2d(x, self.path_kernels[0], (1, 2, 2, 1), "VALID")
    with tf.name_scope("path_1"):
      # Shift by one pixel so the two paths sample interleaved positions.
      shifted = tf.pad(x, [[0, 0], [0, 1], [0, 1], [0, 0]])[:, 1:, 1:, :]
      b = tf.nn.conv2d(shifted, self.path_kernels[1], (1, 2, 2, 1), "VALID")
    return self.norm(tf.concat([a, b], 3))


class _Cell(tf.Module):
  """One normal or reduction cell of `spec` with `filters` per state.

  State 0 is the current input after ReLU -> 1x1 conv -> BN; state 1 is
  the previous input, halved by a factorized reduction if a reduction came
  in between, else projected by a 1x1 conv if its width differs (or, for
  the first stem cell, which has no previous input, the current input as
  it is). Ops adapt any other width themselves, as in the reference.
  """

  def __init__(self, rng, prefix: str, spec: CellSpec, filters: int,
               in_channels: int, prev_channels: Optional[int],
               prev_is_larger: bool, reduction: bool):
    super().__init__()
    self.prefix = prefix
    self.spec = spec
    self.input_op = _ConvBn(rng, prefix + "prepare/input/", (1, 1),
                            in_channels, filters)
    if prev_channels is None:
      self.previous_op = None  # no previous input: reuse the current one
      widths = [filters, in_channels]
    elif prev_is_larger:
      self.previous_op = _FactorizedReduction(
          rng, prefix + "prepare/previous/", prev_channels, filters)
      widths = [filters, filters]
    elif prev_channels != filters:
      self.previous_op = _ConvBn(rng, prefix + "prepare/previous/", (1, 1),
                                 prev_channels, filters)
      widths = [filters, filters]
    else:
      self.previous_op = _Identity()
      widths = [filters, filters]
    self.ops = []
    for k, pair in enumerate(spec.combinations):
      for side, (name, source) in zip(("left", "right"), pair):
        stride = 2 if reduction and source < 2 else 1
        scope = f"{prefix}comb_{k}/{side}_{name}/"
        self.ops.append(_make_op(rng, name, scope, widths[source], filters,
                                 stride))
      widths.append(filters)
    for i in spec.outputs:
      if i < 2 and (reduction or widths[i] != filters):
        raise ValueError(f"{prefix}: output state {i} needs reshaping")

  def __call__(self, current, previous):
    with tf.name_scope(self.prefix + "prepare/input/"):
      states = [self.input_op(current)]
    with tf.name_scope(self.prefix + "prepare/previous/"):
      states.append(current if self.previous_op is None
                    else self.previous_op(previous))
    for k, pair in enumerate(self.spec.combinations):
      terms = []
      for side, (name, source) in zip(("left", "right"), pair):
        with tf.name_scope(f"{self.prefix}comb_{k}/{side}_{name}/"):
          terms.append(self.ops[2 * k + len(terms)](states[source]))
      with tf.name_scope(f"{self.prefix}comb_{k}/"):
        states.append(tf.add(terms[0], terms[1], name="sum"))
    with tf.name_scope(self.prefix):
      return tf.concat([states[i] for i in self.spec.outputs], 3,
                       name="output")


class _Identity(tf.Module):

  def __call__(self, x):
    return x


def _make_op(rng, name: str, var_scope: str, in_channels: int, channels: int,
             stride: int):
  """The module for one op of a cell spec, `in_channels` -> `channels`."""
  if name.startswith("sep_conv_"):
    size = int(name[-1])
    return _SepConv(rng, var_scope, size, in_channels, channels, stride)
  if name == "conv_1x7_7x1":
    return _SpatialSeparable(rng, var_scope, in_channels, channels, stride)
  if name in ("avg_pool_3x3", "max_pool_3x3"):
    return _Pool(rng, var_scope, name[:3], in_channels, channels, stride)
  if name == "identity":
    if stride == 1 and in_channels == channels:
      return _Identity()
    return _ConvBn(rng, var_scope + "1x1/", (1, 1), in_channels, channels,
                   stride=stride)
  raise ValueError(f"unknown cell op {name!r}")


def build_train_step(num_cells: int = 6, filters: int = 190,
                     image_size: int = 299, batch: int = 16,
                     num_classes: int = 1000, dropout: float = 0.5,
                     label_smoothing: float = 0.1, weight_decay: float = 4e-5,
                     learning_rate: float = 0.01, optimizer: str = "sgd",
                     clip_norm: float = 0.0, seed: int = 0):
  """Returns (train_step, (images, labels)) for one AmoebaNet-A step.

  The default is the paper's AmoebaNet-A (N=6, F=190) at 299x299, its
  ImageNet model of Inception-v3-like cost (GDP does not give its size).
  Batch 16 keeps a training step on one 16 GB GPU (the simulated peak on
  one P100 is ~13 GB), so the expert's single-GPU placement stays valid;
  the flat graph has ~13.5k ops and extracts in ~30 s here.

  Args:
    num_cells: normal cells per stack (the paper's N).
    filters: filters of the first stack's cells (the paper's F); doubled at
      each reduction.
    image_size: height and width of the square RGB input, >= 32.
    batch: images per step.
    num_classes: classifier outputs (ImageNet: 1000).
    dropout: drop rate before the classifier.
    label_smoothing: mass spread uniformly over all classes in the targets.
    weight_decay: L2 penalty on convolution and classifier kernels.
    learning_rate: step size.
    optimizer: "sgd" or "adam".
    clip_norm: global gradient norm clip; 0 = off.
    seed: seed of the random weights and of the example batch.
  """
  knobs.require_positive(num_cells=num_cells, filters=filters, batch=batch,
                         num_classes=num_classes)
  if filters < 4:
    raise errors.InputError(
        f"filters must be >= 4 (the stem cells use filters / 4), got "
        f"{filters}")
  if image_size < MIN_IMAGE_SIZE:
    raise errors.InputError(
        f"image_size must be >= {MIN_IMAGE_SIZE}, got {image_size}")
  if not 0 <= dropout < 1:
    raise errors.InputError(f"dropout must be in [0, 1), got {dropout}")
  if not 0 <= label_smoothing < 1:
    raise errors.InputError(
        f"label_smoothing must be in [0, 1), got {label_smoothing}")
  if weight_decay < 0:
    raise errors.InputError(f"weight_decay must be >= 0, got {weight_decay}")
  model = AmoebaNet(num_cells, filters, num_classes, dropout, seed)
  kernels = model.kernels

  def loss_fn(images, labels):
    logits = model.logits(images)
    with tf.name_scope("loss/"):
      targets = tf.one_hot(labels, num_classes) * (1.0 - label_smoothing)
      targets += label_smoothing / num_classes
      total = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
          labels=targets, logits=logits))
    if weight_decay > 0:
      with tf.name_scope("weight_decay/"):
        total += weight_decay * tf.add_n([tf.nn.l2_loss(k) for k in kernels])
    return total

  step = training.make_train_step(
      loss_fn, training.Optimizer(optimizer, learning_rate,
                                  model.trainable_variables, clip_norm))
  rng = tf.random.Generator.from_seed(seed + 1)
  images = rng.normal([batch, image_size, image_size, 3])
  labels = rng.uniform([batch], 0, num_classes, dtype=tf.int32)
  return step, (images, labels)


def _pair(value):
  return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _he_normal(rng, shape, name, fan_in=None):
  fan_in = fan_in or math.prod(shape[:-1])
  return tf.Variable(rng.normal(shape, stddev=math.sqrt(2.0 / fan_in)),
                     name=name)
