"""WaveNet training step (van den Oord et al., 2016): dilated causal convolutions.

The audio model of the GDP paper's benchmark set ("2-stack" and "4-stack"
WaveNet). Input: mu-law quantized audio as one-hot vectors; a causal
convolution lifts them to `residual_channels`, then `num_stacks` stacks of
`layers_per_stack` residual layers whose dilations double within a stack
(1, 2, 4, ..., 512 for 10 layers, as in the paper), each with the gated
activation tanh(W_f * x) * sigmoid(W_g * x), a 1x1 convolution back to the
residual stream (residual connection) and a 1x1 convolution to the skip
channels (skip connection). The skips are summed, then ReLU, 1x1 conv, ReLU,
1x1 conv give per-sample logits over the quantization levels; the loss is
the cross-entropy of predicting every next sample.

The sum of the skips is kept as a running total inside each layer (the same
sum as adding all skips at the end), so a placement that splits the stacks
hands one residual and one skip tensor from device to device.

Name scopes: `input/`, `stack_<s>/layer_<l>/{filter,gate,skip,residual}/`,
`output/`, `loss/`; backward ops under `gradient_tape/<same>`, each
variable's update under the variable's own scope (e.g.
`stack_1/layer_3/gate/kernel/sgd/`).
"""

import math

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import knobs  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import lstm  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import training  # pylint: disable=g-import-not-at-top


class WaveNet(tf.Module):
  """WaveNet weights plus the forward pass from quantized audio to a loss."""

  def __init__(self, num_stacks: int, layers_per_stack: int,
               residual_channels: int, dilation_channels: int,
               skip_channels: int, quantization_levels: int,
               filter_width: int, seed: int = 0):
    super().__init__()
    rng = tf.random.Generator.from_seed(seed)
    self.num_stacks = num_stacks
    self.layers_per_stack = layers_per_stack
    self.filter_width = filter_width
    self.quantization_levels = quantization_levels
    self.skip_channels = skip_channels
    self.input_conv = _Conv(rng, filter_width, quantization_levels,
                            residual_channels, "input/")
    self.layers = []
    for s in range(num_stacks):
      for l in range(layers_per_stack):
        prefix = lstm.scope(f"stack_{s}", f"layer_{l}")
        last = s == num_stacks - 1 and l == layers_per_stack - 1
        self.layers.append(_ResidualLayer(
            rng, prefix, 2 ** l, filter_width, residual_channels,
            dilation_channels, skip_channels, residual_out=not last))
    self.output_hidden = _Conv(rng, 1, skip_channels, skip_channels,
                               "output/hidden/")
    self.output_logits = _Conv(rng, 1, skip_channels, quantization_levels,
                               "output/logits/")

  @property
  def receptive_field(self) -> int:
    """Samples one output sees: the input conv plus every dilated layer."""
    dilated = sum(layer.dilation for layer in self.layers)
    return (self.filter_width - 1) * (dilated + 1) + 1

  def logits(self, samples):
    """[batch, length] levels -> [batch, length, levels] next-sample logits.

    Output t depends on samples 0..t only (causality).
    """
    batch, length = samples.shape
    with tf.name_scope("input/"):
      one_hot = tf.one_hot(samples, self.quantization_levels)
      x = self.input_conv(one_hot, dilation=1)
      skips = tf.zeros([batch, length, self.skip_channels])
    for layer in self.layers:
      x, skips = layer(x, skips)
    with tf.name_scope("output/"):
      hidden = tf.nn.relu(self.output_hidden(tf.nn.relu(skips)))
      return self.output_logits(hidden)

  def loss(self, audio):
    """Mean cross-entropy of predicting sample t+1 from samples <= t."""
    with tf.name_scope("input/"):
      samples = audio[:, :-1]
    logits = self.logits(samples)
    with tf.name_scope("loss/"):
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=audio[:, 1:], logits=logits))


class _Conv(tf.Module):
  """A causal 1-D convolution with bias: output t sees inputs <= t only."""

  def __init__(self, rng, width: int, in_channels: int, out_channels: int,
               var_scope: str):
    super().__init__()
    self.width = width
    scale = math.sqrt(1.0 / (width * in_channels))
    self.kernel = tf.Variable(
        rng.uniform([width, in_channels, out_channels], -scale, scale),
        name=var_scope + "kernel")
    self.bias = tf.Variable(tf.zeros([out_channels]), name=var_scope + "bias")

  def __call__(self, x, dilation: int = 1):
    pad = (self.width - 1) * dilation
    if pad:
      x = tf.pad(x, [[0, 0], [pad, 0], [0, 0]])
    y = tf.nn.conv1d(x, self.kernel, stride=1, padding="VALID",
                     dilations=dilation)
    return tf.nn.bias_add(y, self.bias)


class _ResidualLayer(tf.Module):
  """One dilated layer: gated activation, residual and skip 1x1 convs.

  The last layer has no residual conv: only its skip output is used.
  """

  def __init__(self, rng, prefix: str, dilation: int, width: int,
               residual: int, dilated: int, skip: int,
               residual_out: bool = True):
    super().__init__()
    self.prefix = prefix
    self.dilation = dilation
    self.filter = _Conv(rng, width, residual, dilated, prefix + "filter/")
    self.gate = _Conv(rng, width, residual, dilated, prefix + "gate/")
    self.skip = _Conv(rng, 1, dilated, skip, prefix + "skip/")
    self.residual = (_Conv(rng, 1, dilated, residual, prefix + "residual/")
                     if residual_out else None)

  def __call__(self, x, skips):
    """Returns the residual stream and the running sum of skips."""
    with tf.name_scope(self.prefix + "filter/"):
      f = tf.tanh(self.filter(x, self.dilation))
    with tf.name_scope(self.prefix + "gate/"):
      g = tf.sigmoid(self.gate(x, self.dilation))
    with tf.name_scope(self.prefix):
      z = tf.multiply(f, g, name="gated")
    with tf.name_scope(self.prefix + "skip/"):
      skips = skips + self.skip(z)
    if self.residual is not None:
      with tf.name_scope(self.prefix + "residual/"):
        x = x + self.residual(z)
    return x, skips


def build_train_step(num_stacks: int = 2, layers_per_stack: int = 10,
                     residual_channels: int = 32, dilation_channels: int = 32,
                     skip_channels: int = 512, quantization_levels: int = 256,
                     filter_width: int = 2, batch: int = 4,
                     audio_length: int = 16000, learning_rate: float = 0.01,
                     optimizer: str = "sgd", clip_norm: float = 0.0,
                     seed: int = 0):
  """Returns (train_step, (audio,)) for one WaveNet step.

  `audio` is int32 [batch, audio_length + 1] of quantization levels; the
  model reads samples 0..L-1 and predicts samples 1..L.

  The paper publishes the layer structure, not the widths; the widths here
  are those of the widely used TensorFlow reimplementation
  (ibab/tensorflow-wavenet): 32 residual and dilation channels, 512 skip
  channels, 256 mu-law levels, filter width 2.

  Args:
    num_stacks: stacks of dilated layers (the GDP paper used 2 and 4).
    layers_per_stack: dilations 1, 2, ..., 2**(layers_per_stack - 1) per
      stack (10 as in the paper: 1..512).
    residual_channels: width of the residual stream.
    dilation_channels: width of the gated activation.
    skip_channels: width of the skip connections and the output layers.
    quantization_levels: mu-law levels, the softmax size (256, 8-bit).
    filter_width: taps of every causal convolution (2 in the paper).
    batch: audio clips per step.
    audio_length: samples per clip (16000: one second at 16 kHz).
    learning_rate: step size of the update.
    optimizer: "sgd" or "adam" (the paper does not say; Adam is common).
    clip_norm: global gradient norm clip; 0 = off.
    seed: seed of the random weights and of the example clip.
  """
  knobs.require_positive(
      num_stacks=num_stacks, layers_per_stack=layers_per_stack,
      residual_channels=residual_channels,
      dilation_channels=dilation_channels, skip_channels=skip_channels,
      batch=batch, audio_length=audio_length)
  if quantization_levels < 2:
    raise errors.InputError(
        f"quantization_levels must be >= 2, got {quantization_levels}")
  if filter_width < 2:
    raise errors.InputError(
        f"filter_width must be >= 2 (a causal conv sees the past), got "
        f"{filter_width}")
  model = WaveNet(num_stacks, layers_per_stack, residual_channels,
                  dilation_channels, skip_channels, quantization_levels,
                  filter_width, seed)
  step = training.make_train_step(
      model.loss, training.Optimizer(optimizer, learning_rate,
                                     model.trainable_variables, clip_norm))
  rng = tf.random.Generator.from_seed(seed + 1)
  audio = rng.uniform([batch, audio_length + 1], 0, quantization_levels,
                      dtype=tf.int32)
  return step, (audio,)
