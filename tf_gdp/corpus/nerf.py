"""A view-synthesis model's training step: a Neural Radiance Field (NeRF).

Mildenhall et al., "NeRF: Representing Scenes as Neural Radiance Fields for
View Synthesis" (ECCV 2020). A step renders a batch of `rays` camera rays
(origins and directions [rays, 3]) between fixed near and far bounds and
regresses the rendered colours on the rays' target colours [rays, 3].

`levels` sampling levels, each under its own numbered scope `level_{i}`
and each with its own MLP (the paper: 2, a coarse and a fine network):

* level 0 samples `coarse_samples` depths per ray, stratified: the interval
  is cut into as many equal bins and each depth is drawn uniformly inside
  its bin, so every step sees other depths;
* a later level samples `fine_samples` more depths from the previous
  level's compositing weights: a piecewise-constant PDF over the
  mid-points between the previous depths, from the weights of the inner
  samples plus 1e-5 under stop_gradient (the sampling is not
  differentiated), inverted by `searchsorted` of uniform draws in its CDF;
  the new depths are merged with the previous level's and sorted, so a
  level evaluates the previous level's depths and its own.

At every sample, the position is encoded by sin and cos at frequencies
2^0 .. 2^9 with the position itself (63 features), the ray's unit view
direction likewise at 2^0 .. 2^3 (27). The MLP: `depth` dense ReLU layers
of `width` units (`layer_{j}`), the encoded position concatenated again to
the activations of `layer_{depth / 2}`, as the next layer's input (the
paper's skip: into the sixth layer of eight); a density head of one unit
and a `width` feature layer without activation; the features with the
encoded direction through a dense ReLU layer of width / 2 to a sigmoid
RGB head. So density depends on the position only, colour on the
direction too.

Volume rendering: the distances between a ray's consecutive samples (the
last one 1e10, open to infinity) times the direction's norm; alpha = 1 -
exp(-ReLU(density) x distance); the transmittance before each sample, the
exclusive cumulative product of (1 - alpha + 1e-10); the weights, alpha
times transmittance; the ray's colour, the weighted sum of the samples'
colours. Each level's loss term is the mean squared error of its colours
against the targets, in its own scope; the loss is their sum. Adam over
every level's MLP.

Next to the corpus's other families, nearly all the work is dense layers
and element-wise ops on [rays x samples, features] matrices, and the
levels are chained not by features but by where the next level samples:
no gradient passes from one level to another.
"""

import numpy as np

from tf_gdp.corpus import training_steps

_POSITION_FREQUENCIES = 10
_DIRECTION_FREQUENCIES = 4
# The distance past a ray's last sample: the ray runs on to infinity.
_LAST_DISTANCE = 1e10


def _encode(tf, x, frequencies: int):
  """[n, 3] -> [n, 3 + 6 x frequencies]: x, then per frequency 2^k its
  sin and cos (the paper's order)."""
  scales = tf.constant((2.0 ** np.arange(frequencies)).astype(np.float32)
                       .reshape(frequencies, 1), name="frequencies")
  scaled = tf.multiply(x[:, None, :], scales, name="scaled")
  waves = tf.concat([tf.sin(scaled, name="sin"), tf.cos(scaled, name="cos")],
                    axis=-1, name="waves")
  flat = tf.reshape(waves, [-1, 6 * frequencies], name="flat")
  return tf.concat([x, flat], axis=-1, name="features")


def _stratified(tf, rays: int, samples: int, near: float, far: float,
                seed: int):
  """Depths [rays, samples], one drawn uniformly in each of `samples` equal
  bins of [near, far]."""
  step = (far - near) / samples
  lower = tf.constant(near + step * np.arange(samples, dtype=np.float32),
                      name="bin_starts")
  offsets = tf.random.uniform([rays, samples], seed=seed, name="offsets")
  return tf.add(lower, step * offsets, name="depths")


def _inverse_transform(tf, depths, weights, count: int, seed: int):
  """`count` new depths per ray [rays, count] drawn from the PDF of the
  previous level's `weights` over the mid-points of its `depths`."""
  rays, samples = depths.shape
  bins = tf.multiply(0.5, depths[:, 1:] + depths[:, :-1], name="bins")
  inner = tf.stop_gradient(weights[:, 1:-1], name="frozen_weights") + 1e-5
  pdf = tf.divide(inner, tf.reduce_sum(inner, -1, keepdims=True), name="pdf")
  cdf = tf.concat([tf.zeros([rays, 1]), tf.cumsum(pdf, axis=-1)], axis=-1,
                  name="cdf")
  u = tf.random.uniform([rays, count], seed=seed, name="uniform")
  # `tf.searchsorted(cdf, u, side="right")`'s kernel: both are already
  # [rays, n], and its reshapes to 2-D would lose the static shapes.
  index = tf.raw_ops.UpperBound(sorted_inputs=cdf, values=u,
                                out_type=tf.int32, name="index")
  below = tf.maximum(index - 1, 0, name="below")
  above = tf.minimum(index, samples - 2, name="above")
  cdf_below, cdf_above, bin_below, bin_above = (
      tf.gather(values, where, batch_dims=1, name=name)
      for values, where, name in ((cdf, below, "cdf_below"),
                                  (cdf, above, "cdf_above"),
                                  (bins, below, "bin_below"),
                                  (bins, above, "bin_above")))
  # A bin of (almost) no mass: a draw in it lands at its start.
  span = tf.subtract(cdf_above, cdf_below, name="mass")
  span = tf.where(span < 1e-5, tf.ones_like(span), span, name="span")
  fraction = tf.divide(u - cdf_below, span, name="fraction")
  return tf.add(bin_below, fraction * (bin_above - bin_below), name="depths")


def _sorted(tf, depths):
  """Each ray's depths in ascending order: what `tf.sort` builds (the top k
  of the negated values, negated), with a static k so shapes stay known."""
  count = depths.shape[-1]
  with tf.name_scope("sort"):
    top = tf.math.top_k(tf.negative(depths, name="negated"), k=count,
                        sorted=True, name="top_k")
    return tf.negative(top.values, name="sorted")


def _render(tf, depths, density, colour, norms):
  """(the rays' colours [rays, 3], the samples' weights [rays, samples])
  from each sample's raw density [rays, samples] and colour [rays, samples,
  3] (module doc)."""
  rays = depths.shape[0]
  gaps = tf.subtract(depths[:, 1:], depths[:, :-1], name="gaps")
  last = tf.fill([rays, 1], _LAST_DISTANCE, name="last")
  distances = tf.multiply(tf.concat([gaps, last], -1), norms,
                          name="distances")
  opacity = tf.nn.relu(density, name="nonnegative") * distances
  alpha = tf.subtract(1.0, tf.exp(-opacity), name="alpha")
  transmittance = tf.math.cumprod(1.0 - alpha + 1e-10, axis=-1,
                                  exclusive=True, name="transmittance")
  weights = tf.multiply(alpha, transmittance, name="weights")
  rgb = tf.reduce_sum(weights[..., None] * colour, axis=-2, name="rgb")
  return rgb, weights


def nerf(*, rays: int, coarse_samples: int, fine_samples: int,
         width: int = 256, depth: int = 8, levels: int = 2,
         near: float = 2.0, far: float = 6.0, learning_rate: float = 5e-4,
         seed: int = 0):
  """The step: rays (origins, directions [rays, 3]) -> each level's
  rendered colours [rays, 3] against target colours. Level 0 evaluates
  `coarse_samples` depths per ray, level i > 0 those of level i - 1 and
  `fine_samples` more (module doc); `depth` layers of `width` units per
  MLP."""
  if min(rays, fine_samples, levels) < 1 or width < 2 or depth < 3:
    raise ValueError("rays, fine_samples and levels must be at least 1, "
                     "width at least 2 and depth at least 3")
  if coarse_samples < 3:
    raise ValueError(f"coarse_samples must be at least 3 (the PDF reads the "
                     f"inner samples' weights), got {coarse_samples}")
  if not 0 <= near < far:
    raise ValueError(f"need 0 <= near < far, got {near} and {far}")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  position_width = 3 + 6 * _POSITION_FREQUENCIES
  direction_width = 3 + 6 * _DIRECTION_FREQUENCIES
  skip = depth // 2 + 1  # layer_{skip} reads the position again

  def dense(units, inputs, name, activation=None):
    layer = keras.Dense(units, activation=activation, name=name)
    layer.build((None, inputs))
    return layer

  class Field:
    """One level's MLP: encoded position and direction -> raw density and
    RGB (module doc)."""

    def __init__(self):
      self.trunk = [dense(width, position_width if j == 0 else
                          width + position_width if j == skip else width,
                          f"layer_{j}", "relu") for j in range(depth)]
      self.density = dense(1, width, "density")
      self.feature = dense(width, width, "feature")
      self.directional = dense(width // 2, width + direction_width,
                               "directional", "relu")
      self.rgb = dense(3, width // 2, "rgb", "sigmoid")
      self.layers = [*self.trunk, self.density, self.feature,
                     self.directional, self.rgb]

    def __call__(self, position, direction):
      h = position
      for j, layer in enumerate(self.trunk):
        if j == skip:
          h = tf.concat([position, h], -1, name="skip")
        h = layer(h)
      density = self.density(h)
      h = tf.concat([self.feature(h), direction], -1, name="with_direction")
      return density, self.rgb(self.directional(h))

  with unallocated_variables.scope():
    fields = []
    for i in range(levels):
      with tf.name_scope(f"level_{i}"):
        fields.append(Field())
    variables = [v for field in fields for layer in field.layers
                 for v in layer.trainable_variables]
    optimizer = training_steps.Optimizer(variables, "adam", learning_rate)

  rng = tf.random.Generator.from_seed(seed)
  origins = tf.Variable(rng.normal([rays, 3]), trainable=False,
                        name="origins")
  directions = tf.Variable(rng.normal([rays, 3]), trainable=False,
                           name="directions")
  targets = tf.Variable(rng.uniform([rays, 3]), trainable=False,
                        name="target_rgb")

  def level_step(field, depths, norms, views):
    """A level's MLP on its depths [rays, samples] -> (its loss term, the
    weights [rays, samples])."""
    samples = depths.shape[1]
    points = tf.add(origins[:, None, :],
                    directions[:, None, :] * depths[..., None], name="points")
    with tf.name_scope("encode_position"):
      position = _encode(tf, tf.reshape(points, [rays * samples, 3]),
                         _POSITION_FREQUENCIES)
    with tf.name_scope("encode_direction"):
      view = tf.broadcast_to(views[:, None, :], [rays, samples, 3])
      direction = _encode(tf, tf.reshape(view, [rays * samples, 3]),
                          _DIRECTION_FREQUENCIES)
    density, colour = field(position, direction)
    with tf.name_scope("render"):
      rgb, weights = _render(
          tf, depths, tf.reshape(density, [rays, samples], name="density"),
          tf.reshape(colour, [rays, samples, 3], name="colour"), norms)
    with tf.name_scope("loss"):
      error = tf.subtract(rgb, targets, name="error")
      return tf.reduce_mean(tf.square(error), name="mean"), weights

  def forward():
    """Every level's loss term (module doc)."""
    with tf.name_scope("rays"):
      norms = tf.sqrt(tf.reduce_sum(tf.square(directions), -1,
                                    keepdims=True), name="norms")
      views = tf.divide(directions, norms, name="views")
    terms, depths, weights = [], None, None
    for i, field in enumerate(fields):
      with tf.name_scope(f"level_{i}"):
        with tf.name_scope("sample"):
          if i == 0:
            depths = _stratified(tf, rays, coarse_samples, near, far, seed)
          else:
            new = _inverse_transform(tf, depths, weights, fine_samples,
                                     seed + i)
            depths = _sorted(tf, tf.concat([depths, new], -1,
                                           name="merged"))
        term, weights = level_step(field, depths, norms, views)
      terms.append(term)
    return terms

  return training_steps.summed_terms_step(tf, forward, variables, optimizer)
