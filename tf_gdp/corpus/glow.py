"""A normalizing flow's training step: Glow.

Kingma and Dhariwal, "Glow: Generative Flow with Invertible 1x1
Convolutions" (NeurIPS 2018). The model is an invertible map from images to
latents of the same size whose log-likelihood is exact: the latents' log
density under their priors plus the log-determinants of every layer's
Jacobian. A step maximises it on a batch of 8-bit images [batch, side,
side, 3], stored as integer variables.

The images are dequantised: uniform noise in [0, 1) is added to the
integer values and the sum scaled to x / 256 - 0.5, so the loss carries
the constant -D log 256 per image (D = side x side x 3) that turns the
density of x into a likelihood of the discrete values.

`levels` levels, each under its own numbered scope `level_{i}`:

* a squeeze (space to depth by 2x2: half the side, 4x the channels);
* `steps` flow steps, each under `level_{i}/step_{j}`:
  - actnorm: y = x s + b per channel (s and b learned, from 1 and 0),
    log-det H W sum(log |s|);
  - an invertible 1x1 convolution by a c x c matrix in the paper's LU
    form, W = P L (U + diag(sign(s) exp(log |s|))): P a fixed permutation,
    L unit lower-triangular and U strictly upper-triangular by fixed masks,
    sign(s) fixed, so the log-det is H W sum(log |s|) and no determinant is
    computed; P, L, U and s start from the LU decomposition of a random
    rotation;
  - an affine coupling: the channels split in halves (a, b); a network
    (3x3 convolution to `width`, ReLU, 1x1 convolution to `width`, ReLU,
    a zero-initialised 3x3 convolution to c channels) reads a and gives a
    shift and a raw scale, scale = sigmoid(raw + 2) as in the paper's code;
    b becomes (b + shift) x scale, log-det sum(log scale);
* all levels but the last end with a split: half the channels leave the
  flow and are scored under a diagonal Gaussian whose mean and log-std a
  zero-initialised 3x3 convolution of the kept half gives; the kept half
  goes on to the next level. The last level's output is scored under a
  Gaussian of learned per-channel mean and log-std, both from zero.

The loss is the negative log-likelihood in bits per dimension, -(the log
Jacobian terms + the priors' log-probabilities - D log 256) / (D log 2),
averaged over the batch; Adam over every weight but the fixed P and
sign(s).

Next to the corpus's other image models, every layer keeps the image's
full size (only rearranged by the squeezes and halved by the splits), the
weights are small next to the activations, and the loss reads a term of
every layer, so the gradient enters every flow step directly.
"""

import functools

import numpy as np

from tf_gdp.corpus import training_steps

_BINS = 256  # 8-bit images
# The coupling's scale is sigmoid(raw + _SCALE_SHIFT): 0.88 at the start,
# when the network's last convolution gives zeros.
_SCALE_SHIFT = 2.0


@functools.lru_cache(maxsize=64)
def _rotation_lu(channels: int, seed: int):
  """(P, L, U strictly upper, sign(s), log |s|) of a random rotation's LU
  decomposition, the 1x1 convolution's starting point."""
  import scipy.linalg  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  rotation, _ = np.linalg.qr(rng.normal(size=(channels, channels)))
  p, lower, upper = scipy.linalg.lu(rotation)
  s = np.diag(upper)
  return tuple(a.astype(np.float32) for a in (
      p, lower, np.triu(upper, 1), np.sign(s), np.log(np.abs(s))))


def _actnorm(tf, x, scale, bias):
  """(x s + b, log-det H W sum(log |s|))."""
  _, height, width, _ = x.shape
  y = tf.add(tf.multiply(x, scale, name="scaled"), bias, name="y")
  log_abs = tf.math.log(tf.abs(scale, name="abs_scale"), name="log_abs_scale")
  log_det = tf.multiply(float(height * width), tf.reduce_sum(log_abs),
                        name="log_det")
  return y, log_det


def _lu_weight(tf, weights):
  """W = P L (U + diag(sign(s) exp(log |s|))) from the masked factors."""
  channels = weights["log_scale"].shape[0]
  below = np.tril(np.ones((channels, channels), np.float32), -1)
  lower = tf.add(tf.multiply(weights["lower"], tf.constant(
      below, name="lower_mask"), name="masked_lower"), tf.eye(channels),
                 name="unit_lower")
  s = tf.multiply(weights["sign"],
                  tf.exp(weights["log_scale"], name="abs_s"), name="s")
  upper = tf.add(tf.multiply(weights["upper"], tf.constant(
      below.T, name="upper_mask"), name="masked_upper"),
                 tf.linalg.diag(s, name="diagonal"), name="upper")
  return tf.matmul(weights["permutation"], tf.matmul(lower, upper),
                   name="weight")


def _invertible_conv(tf, x, weights):
  """(x convolved by the 1x1 kernel W, log-det H W sum(log |s|))."""
  _, height, width, channels = x.shape
  kernel = tf.reshape(_lu_weight(tf, weights), [1, 1, channels, channels],
                      name="kernel")
  y = tf.nn.conv2d(x, kernel, 1, "VALID", name="conv")
  log_det = tf.multiply(float(height * width), tf.reduce_sum(
      weights["log_scale"], name="sum_log_abs_s"), name="log_det")
  return y, log_det


def _coupling(tf, x, network):
  """(a and (b + shift) x scale, log-det sum(log scale) per image)."""
  kept, changed = tf.split(x, 2, axis=-1, name="halves")
  h = kept
  for layer in network:
    h = layer(h)
  shift, raw = tf.split(h, 2, axis=-1, name="shift_and_scale")
  scale = tf.sigmoid(tf.add(raw, _SCALE_SHIFT, name="raised"), name="scale")
  coupled = tf.multiply(tf.add(changed, shift, name="shifted"), scale,
                        name="coupled")
  log_det = tf.reduce_sum(tf.math.log(scale), [1, 2, 3], name="log_det")
  return tf.concat([kept, coupled], -1, name="y"), log_det


def _log_normal(tf, x, mean, log_std):
  """Each image's log-density of x [batch, h, w, c] under the diagonal
  Gaussian N(mean, exp(log_std)^2)."""
  inverse_std = tf.exp(tf.negative(log_std, name="negative_log_std"),
                       name="inverse_std")
  z = tf.multiply(tf.subtract(x, mean, name="centred"), inverse_std,
                  name="standardised")
  normaliser = tf.add(float(0.5 * np.log(2 * np.pi)), log_std,
                      name="normaliser")
  density = tf.add(normaliser, 0.5 * tf.square(z),
                   name="negative_log_density")
  return tf.negative(tf.reduce_sum(density, [1, 2, 3]), name="log_prob")


def glow(*, image_size: int, levels: int, steps: int, width: int,
         batch: int, learning_rate: float = 1e-3, seed: int = 0):
  """The step: 8-bit images [batch, image_size, image_size, 3] -> the
  negative log-likelihood in bits per dimension (module doc). `steps` flow
  steps per level, `width` channels inside each coupling's network; the
  image side must be a multiple of 2^`levels`."""
  if min(levels, steps, width, batch) < 1:
    raise ValueError("levels, steps, width and batch must be at least 1")
  if image_size < 2 ** levels or image_size % 2 ** levels:
    raise ValueError(f"image side must be a positive multiple of "
                     f"{2 ** levels} for {levels} levels, got {image_size}")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  dimensions = image_size * image_size * 3

  def weight(name, shape, initial, trainable=True):
    return tf.Variable(initial, shape=shape, dtype=tf.float32,
                       trainable=trainable, name=name)

  def conv(filters, kernel, channels, name, activation=None, zeros=False):
    init = "zeros" if zeros else "glorot_uniform"
    layer = keras.Conv2D(filters, kernel, padding="same", name=name,
                         activation=activation, kernel_initializer=init)
    layer.build((None, None, None, channels))
    return layer

  def lu_factors(channels, lu_seed):
    """The 1x1 convolution's P, L, U, sign(s) and log |s| (P and sign(s)
    fixed), from the LU decomposition of a random rotation."""
    def initial(k):
      return lambda: tf.constant(_rotation_lu(channels, lu_seed)[k])

    square, vector = [channels, channels], [channels]
    return {name: weight(name, shape, initial(k), trainable)
            for k, (name, shape, trainable) in enumerate((
                ("permutation", square, False), ("lower", square, True),
                ("upper", square, True), ("sign", vector, False),
                ("log_scale", vector, True)))}

  class FlowStep:
    """Actnorm, invertible 1x1 convolution and affine coupling on c
    channels (module doc)."""

    def __init__(self, channels, lu_seed):
      with tf.name_scope("actnorm"):
        self.actnorm = (weight("scale", [channels], lambda: tf.ones(channels)),
                        weight("bias", [channels], lambda: tf.zeros(channels)))
      with tf.name_scope("invertible_conv"):
        self.lu = lu_factors(channels, lu_seed)
      with tf.name_scope("coupling"):
        self.network = (conv(width, 3, channels // 2, "conv_in", "relu"),
                        conv(width, 1, width, "conv_hidden", "relu"),
                        conv(channels, 3, width, "conv_out", zeros=True))

    def variables(self):
      return [*self.actnorm, *(v for v in self.lu.values() if v.trainable),
              *(v for layer in self.network for v in layer.trainable_variables)]

    def __call__(self, x):
      """(y, [actnorm's and the 1x1 convolution's log-dets], the
      coupling's log-det per image)."""
      with tf.name_scope("actnorm"):
        x, actnorm_log_det = _actnorm(tf, x, *self.actnorm)
      with tf.name_scope("invertible_conv"):
        x, conv_log_det = _invertible_conv(tf, x, self.lu)
      with tf.name_scope("coupling"):
        x, coupling_log_det = _coupling(tf, x, self.network)
      return x, [actnorm_log_det, conv_log_det], coupling_log_det

  with unallocated_variables.scope():
    flow, priors, variables = [], [], []
    for i in range(levels):
      channels = 12 * 2 ** i  # 3 x 4 after the squeeze, halved by splits
      with tf.name_scope(f"level_{i}"):
        flow.append([])
        for j in range(steps):
          with tf.name_scope(f"step_{j}"):
            flow[-1].append(FlowStep(channels, seed + 1 + i * steps + j))
          variables += flow[-1][-1].variables()
        if i < levels - 1:
          with tf.name_scope("split"):
            prior = conv(channels, 3, channels // 2, "conv_prior", zeros=True)
          variables += prior.trainable_variables
        else:
          with tf.name_scope("prior"):
            prior = (weight("mean", [channels], lambda: tf.zeros(channels)),
                     weight("log_std", [channels], lambda: tf.zeros(channels)))
          variables += prior
        priors.append(prior)
    optimizer = training_steps.Optimizer(variables, "adam", learning_rate)

  rng = tf.random.Generator.from_seed(seed)
  images = tf.Variable(rng.uniform([batch, image_size, image_size, 3], 0,
                                   _BINS, dtype=tf.int32),
                       trainable=False, name="images")

  def forward():
    """(the weights' log-dets, the couplings' log-dets per image, the
    priors' log-probabilities per image)."""
    with tf.name_scope("inputs"):
      noise = tf.random.uniform(images.shape, seed=seed, name="noise")
      x = tf.subtract((tf.cast(images, tf.float32) + noise) / _BINS, 0.5,
                      name="x")
    weight_terms, coupling_terms, prior_terms = [], [], []
    for i, (level, prior) in enumerate(zip(flow, priors)):
      with tf.name_scope(f"level_{i}"):
        x = tf.nn.space_to_depth(x, 2, name="squeeze")
        for j, flow_step in enumerate(level):
          with tf.name_scope(f"step_{j}"):
            x, weight_log_dets, coupling_log_det = flow_step(x)
          weight_terms += weight_log_dets
          coupling_terms.append(coupling_log_det)
        if i < levels - 1:
          with tf.name_scope("split"):
            x, factored = tf.split(x, 2, axis=-1, name="halves")
            mean, log_std = tf.split(prior(x), 2, axis=-1, name="gaussian")
            prior_terms.append(_log_normal(tf, factored, mean, log_std))
        else:
          with tf.name_scope("prior"):
            prior_terms.append(_log_normal(tf, x, *prior))
    return weight_terms, coupling_terms, prior_terms

  def loss(terms):
    weight_terms, coupling_terms, prior_terms = terms
    with tf.name_scope("loss"):
      # The same for every image: the weights' log-dets and the constant.
      shared = tf.add(tf.add_n(weight_terms, name="weight_log_dets"),
                      float(-dimensions * np.log(_BINS)), name="shared")
      per_image = tf.add(tf.add_n(coupling_terms, name="coupling_log_dets"),
                         tf.add_n(prior_terms, name="prior_log_probs"),
                         name="per_image")
      log_likelihood = tf.add(per_image, shared, name="log_likelihood")
      bits = tf.multiply(log_likelihood,
                         float(-1.0 / (dimensions * np.log(2.0))),
                         name="bits_per_dim")
      return tf.reduce_mean(bits, name="mean")

  return training_steps.supervised_step(tf, forward, variables, loss,
                                        optimizer)
