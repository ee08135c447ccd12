"""Device generalization: devices are inputs, logits score (node, device) pairs.

GDP's placer ends in a softmax over a fixed number of devices, so a policy
trained for 4 GPUs cannot place on 8. Here the device count is not in the
weights: each device is embedded from its features (kind, speed, memory,
links, its index among devices of its kind) and every node state is scored
against every device embedding, so one policy serves 2, 4 or 8 devices and
different topologies.
"""

import math

import tensorflow as tf

from tf_gdp.policy import features

# Columns of the device features that say which device of its kind it is.
_IDENTITY_COLUMNS = tuple(
    i for i, name in enumerate(features.DEVICE_FEATURE_NAMES)
    if name.startswith("index_") or name == "relative_index")


def _seeded(seed):
  return tf.keras.initializers.GlorotUniform(seed)


class DeviceEncoder(tf.keras.layers.Layer):
  """Device features -> embeddings that also know the rest of the cluster.

  A per-device MLP, then one DeepSets step (add a projection of the mean over
  the real devices): whether a GPU is "the fast one" or "one of eight equal
  ones" depends on the others.

  Plus an identity term: a linear map of the device's index code (sinusoids
  of its index among devices of its kind), added after the normalization
  with unit-scale weights. Identical devices are a symmetric saddle for
  policy gradients (swapping two GPUs never changes the reward, so the
  expected gradient that would split work between them is zero at a policy
  that treats them alike); distinct, O(1)-apart embeddings from the start
  give the policy a direction to break the tie. Measured on two independent
  8-op chains over two identical GPUs (REINFORCE, 16 samples, Adam 1e-3):
  without this term and the node contrast of `network` the policy stayed
  uniform for 80 iterations; with both, 3 seeds reached the optimal split
  (or one op off it) in 20-50 iterations. Initial scale 0.5 instead of 1.0
  was worse (one seed of three stuck). The code is a smooth function of the
  index, not a per-slot table, so device counts never seen in training
  still get sensible, distinct embeddings.

  Call args:
    device_features: float[B, D, F].
    device_mask: bool[B, D].

  Returns:
    float[B, D, H].
  """

  def __init__(self, hidden_size: int = 64, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self._own = tf.keras.Sequential([
        tf.keras.layers.Dense(hidden_size, "relu",
                              kernel_initializer=_seeded(seed)),
        tf.keras.layers.Dense(hidden_size,
                              kernel_initializer=_seeded(seed + 1)),
    ], name="own")
    self._context = tf.keras.layers.Dense(
        hidden_size, kernel_initializer=_seeded(seed + 2), name="context")
    self._norm = tf.keras.layers.LayerNormalization(name="norm")
    self._identity = tf.keras.layers.Dense(
        hidden_size, use_bias=False, name="identity",
        kernel_initializer=tf.keras.initializers.RandomNormal(
            stddev=1.0, seed=seed + 3))

  def call(self, inputs):
    device_features, device_mask = inputs
    device_features = tf.cast(device_features, tf.float32)
    own = self._own(device_features)
    weights = tf.cast(device_mask, tf.float32)[..., None]
    mean = (tf.reduce_sum(own * weights, axis=1, keepdims=True) /
            tf.maximum(tf.reduce_sum(weights, axis=1, keepdims=True), 1.0))
    identity = self._identity(
        tf.gather(device_features, _IDENTITY_COLUMNS, axis=-1))
    return self._norm(tf.nn.relu(own) + self._context(mean)) + identity


class PairScorer(tf.keras.layers.Layer):
  """score[b, n, d] = w.relu(A h[b,n] + C e[b,d] + c) + <P h, Q e> / sqrt(H).

  The bilinear term lets a node prefer a device by similarity; the small MLP
  over the pair captures interactions a dot product cannot (an expensive op
  and a fast device). Both are linear in the device count.

  Call args:
    node_states: float[B, N, H].
    device_embeddings: float[B, D, H'].

  Returns:
    float[B, N, D].
  """

  def __init__(self, hidden_size: int = 64, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self._node_hidden = tf.keras.layers.Dense(
        hidden_size, kernel_initializer=_seeded(seed), name="node_hidden")
    self._device_hidden = tf.keras.layers.Dense(
        hidden_size, use_bias=False, kernel_initializer=_seeded(seed + 1),
        name="device_hidden")
    self._out = tf.keras.layers.Dense(
        1, use_bias=False, kernel_initializer=_seeded(seed + 2), name="out")
    self._node_key = tf.keras.layers.Dense(
        hidden_size, use_bias=False, kernel_initializer=_seeded(seed + 3),
        name="node_key")
    self._device_key = tf.keras.layers.Dense(
        hidden_size, use_bias=False, kernel_initializer=_seeded(seed + 4),
        name="device_key")

  def call(self, inputs):
    node_states, device_embeddings = inputs
    pair = tf.nn.relu(self._node_hidden(node_states)[:, :, None, :] +
                      self._device_hidden(device_embeddings)[:, None, :, :])
    mlp = self._out(pair)[..., 0]
    bilinear = tf.einsum("bnh,bdh->bnd", self._node_key(node_states),
                         self._device_key(device_embeddings))
    return mlp + bilinear / math.sqrt(self.hidden_size)


# Device feature columns the stage direction reads.
_KIND_COLUMNS = tuple(features.DEVICE_FEATURE_NAMES.index(name)
                      for name in ("kind_gpu", "kind_cpu", "kind_other"))
_RELATIVE_INDEX = features.DEVICE_FEATURE_NAMES.index("relative_index")


def stage_direction(stage_features, device_features, device_mask,
                    centre_shift=None):
  """float[B, N, D]: how much an op's stage points at each device, in [0, 1].

  `stage_features` [B, N, 2] is one rule's (stage, has one) pair of the
  observation's `stage_features`. The stage s in [0, 1] of an op
  (`scopes.stage_coordinates`) is laid over the K devices of a kind, first
  stage on the first device's centre and last on the last's:
  x = (0.5 + s (K - 1)) / K. The j-th device, its slot centred at
  (j + 0.5) / K, gets max(0, 1 - K |x - centre|): 1 on the centre, 0 one
  device away. Adding g times this to the logits is a
  pipeline of strength g, the human expert's layer i on GPU i (4 layers,
  stages 0, 1/3, 2/3, 1, sit on the centres of 4 GPUs; 8 layers lean two
  per GPU). A pull, never a push: devices outside the op's slot, kinds
  with a single device (the CPU next to GPUs) and ops without a stage get
  0, so a strong pipeline never sends ops to a device just because the
  others were pushed away.

  `centre_shift` float[B, D] (optional) moves each device's centre by that
  many slots (|shift| <= 0.5 keeps the centres in order): the boundaries
  between devices move, so the same stages split differently over them
  (6 layers on 4 GPUs: (1, 2, 2, 1) layers per GPU unshifted, (2, 1, 2, 1)
  or (2, 2, 1, 1) shifted).
  """
  stage_features = tf.cast(stage_features, tf.float32)
  device_features = tf.cast(device_features, tf.float32)
  kinds = tf.gather(device_features, _KIND_COLUMNS, axis=-1)  # [B, D, 3]
  real = tf.cast(device_mask, tf.float32)
  count = tf.reduce_sum(
      tf.einsum("bdk,bek->bde", kinds, kinds) * real[:, None, :], axis=-1)
  centre = device_features[..., _RELATIVE_INDEX] + 0.5 / tf.maximum(count, 1.0)
  if centre_shift is not None:
    centre += tf.cast(centre_shift, tf.float32) / tf.maximum(count, 1.0)
  slots = count[:, None, :]
  position = (0.5 + stage_features[..., :1] * (slots - 1.0)) / tf.maximum(
      slots, 1.0)
  distance = tf.abs(position - centre[:, None, :])  # [B, N, D]
  pull = tf.nn.relu(1.0 - distance * slots)
  shared = tf.cast(count > 1, tf.float32) * real
  return pull * shared[:, None, :] * stage_features[..., 1:2]


def stage_target(stage_features, device_features, device_mask,
                 centre_shift=None):
  """float[B, N, D]: 1 on the device an op's stage pulls hardest, else 0.

  An unshifted pipeline push's direction: `stage_direction` made crisp, so
  that the push is the stage rule's pipeline. With the soft pull, an op at
  the boundary between two devices' slots is pulled almost equally by
  both, the policy's own logits decide where the boundary layers go, and
  the push comes out unbalanced (Transformer-XL 4 on three GPUs: 172 ms
  pushed against the rule's 151). Ties go to the first device, as in
  `baselines.stage_pipeline`; ops nothing pulls get zeros.
  """
  return crisp(stage_direction(stage_features, device_features, device_mask,
                               centre_shift))


def placement_direction(placement_features, device_mask):
  """float[B, N, D]: 1 on the device a placement push gives an op, else 0.

  `placement_features` [B, N, 2] is one push's (device index, has one) pair
  of the observation's `placement_features`. Unlike a stage, a placement
  names its device outright, so the pull goes to exactly that device
  whatever its kind: with one GPU beside the host, or two GPU models side
  by side, a pull laid over the devices of a kind would reach no device or
  two.
  """
  placement_features = tf.cast(placement_features, tf.float32)
  real = tf.cast(device_mask, tf.float32)  # [B, D]
  pull = tf.one_hot(tf.cast(placement_features[..., 0], tf.int32),
                    tf.shape(real)[-1])
  return pull * real[:, None, :] * placement_features[..., 1:2]


def crisp(pull):
  """float[..., D]: 1 on each row's largest pull (the first of ties), 0
  elsewhere; rows that pull nothing stay zero."""
  pulled = tf.reduce_max(pull, axis=-1, keepdims=True) > 0
  return tf.one_hot(tf.argmax(pull, axis=-1), tf.shape(pull)[-1]) * tf.cast(
      pulled, tf.float32)


class StageAffinity(tf.keras.layers.Layer):
  """score[b, n, d] += gain(h[b, n]) * stage_direction[b, n, d].

  The expert pipelines an unrolled RNN (layer i on GPU i); v3's placer
  could express that only through a product of learned embeddings, and
  split every layer the same way instead. Here a pipeline is one learned
  gain, a function of the op's state (so the policy can pipeline an RNN
  and keep a CNN whole), initially zero so that a policy starts without
  it. Exploration can push along the same direction (`network`). The gain
  is GAIN_SCALE times a dense layer's output: Adam moves a weight by about
  its learning rate per step whatever the gradient, and a clean pipeline
  needs a gain of tens (it must outvote the other scores).

  Call args:
    node_states: float[B, N, H].
    direction: float[B, N, D] from `stage_direction`.

  Returns:
    float[B, N, D].
  """

  GAIN_SCALE = 10.0

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self._gain = tf.keras.layers.Dense(1, kernel_initializer="zeros",
                                       name="gain")

  def call(self, inputs):
    node_states, direction = inputs
    return self.GAIN_SCALE * self._gain(node_states) * direction
