"""`GdpPolicy`: observation dict -> masked device logits per colocation group.

The pieces, each in its own module:

  encoder.GraphEncoder          TF-GNN GraphSAGE -> node + graph embeddings
  placer.TransformerXLPlacer    segments + memory over the topological order
   (or placer.FeedForwardPlacer, the no-attention ablation)
  superposition.FeatureWiseGate graph embedding gates every placer layer
  devices.DeviceEncoder         devices are inputs, not output units
  devices.PairScorer            node x device scores
  devices.StageAffinity         learned gain on the pipeline direction

Node scores are averaged over each colocation group's members (a group is
placed once, as one decision) and masked: devices a group may not use and
padding devices get NEG_LOGIT, padding groups put all mass on device 0.
NEG_LOGIT is finite so that PPO's entropy and KL terms stay finite.

Pipeline exploration. Sampling each group's device independently explores
one op at a time, and some of the best placements are only reachable by
moving many ops together: pipelining an unrolled RNN means moving a whole
layer (thousands of ops) to another GPU, and moving a few of its ops first
only adds transfers, so a policy that explores op by op never sees the
reward of the move. A sampler may therefore give each sampled placement
noise (observation `exploration_noise`, zeros for the greedy policy): per
stage rule (`scopes.STAGE_RULES`) a random gain towards that rule's
pipeline (`devices.stage_target`: each op's stage sends it to one device,
boundary layers included); in some samples, per device a shift of the
stages' device centres, and then the gain is along the soft pull of the
shifted centres (`devices.stage_direction`: a neighbouring split whose
boundary layers the policy settles); and per placement push (`policy.push_placements`:
a balanced cut of the graph, m-ETF's schedule, the side-branch offload,
the fewest contiguous stages that fit memory, HEFT's schedule) a
gain on the direction of that placement (`features.PLACEMENT_NOISE_COLUMN`).
`finish` adds the pushes, averaged over each group, to the logits after the logit scale: the
sample leans, with that strength, towards sending each stage of the
graph's main stack of blocks to its own device, or each op to the device
that placement gives it. With `StageAffinity` (on the first rule's stages), PPO turns the
pushes that paid off into its learned gain. The noise is part of the
observation, so PPO's probabilities are exact given it. It has no weights:
any policy, including ones saved before it existed, explores this way.
"""

import dataclasses
import math
from typing import Optional

import tensorflow as tf

from tf_gdp.policy import devices
from tf_gdp.policy import encoder as encoder_lib
from tf_gdp.policy import features
from tf_gdp.policy import placer as placer_lib

NEG_LOGIT = -1e9
PLACERS = ("transformer_xl", "feedforward")


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
  """Sizes and switches of `GdpPolicy`.

  Attributes:
    hidden_size: width of node, device and placer states.
    op_embedding_size: width of the hashed op-type embedding.
    gnn_rounds: GraphSAGE message-passing rounds (each both directions).
    placer_layers: Transformer-XL (or feed-forward) layers.
    num_heads: attention heads (must divide hidden_size).
    ffn_size: inner width of the placer's feed-forward blocks.
    segment_length: nodes per Transformer-XL segment.
    memory_length: previous positions each segment attends to (0: none).
    placer: "transformer_xl" or "feedforward" (ablation).
    superposition: graph embedding gates every placer layer (False: ablation).
    seed: initializer seed; the same seed gives the same initial weights.
    scope_features: the encoder reads the numbered-scope coordinates
      (`scopes`). Policies saved without this field predate them and load
      with False (`compat`).
    stage_affinity: scores also get `devices.StageAffinity`, a learned
      gain on the pipeline direction of the first stage rule
      (`devices.stage_direction`). Policies saved without the field load
      with False (`compat`).
  """
  hidden_size: int = 64
  op_embedding_size: int = 16
  gnn_rounds: int = 3
  placer_layers: int = 2
  num_heads: int = 4
  ffn_size: int = 128
  segment_length: int = 128
  memory_length: int = 128
  placer: str = "transformer_xl"
  superposition: bool = True
  seed: int = 0
  scope_features: bool = True
  stage_affinity: bool = True

  def __post_init__(self):
    if self.placer not in PLACERS:
      raise ValueError(f"placer must be one of {PLACERS}, got {self.placer!r}")
    if self.hidden_size % self.num_heads:
      raise ValueError(f"num_heads={self.num_heads} must divide "
                       f"hidden_size={self.hidden_size}")
    if self.hidden_size % 2:
      raise ValueError("hidden_size must be even (sinusoidal positions)")
    if self.segment_length < 1 or self.memory_length < 0:
      raise ValueError("segment_length must be >= 1, memory_length >= 0")

  def to_dict(self) -> dict:
    """JSON-able fields, e.g. to store next to a checkpoint."""
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: dict) -> "PolicyConfig":
    """Inverse of `to_dict`; unknown keys are an error, not silently lost."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"unknown PolicyConfig fields: {unknown}")
    return cls(**values)


class GdpPolicy(tf.keras.Model):
  """The GDP policy network (TF / Keras 2).

  Call args:
    observation: dict of batched observation arrays (keys
      `features.OBSERVATION_KEYS`, as from `features.as_tensors`, with any
      number of leading batch dimensions, including none).
    training: Keras training flag.

  Returns:
    float32[..., G, D] logits per colocation group and device.
  """

  def __init__(self, config: Optional[PolicyConfig] = None, **kwargs):
    super().__init__(**kwargs)
    self.config = config or PolicyConfig()
    c = self.config
    self.encoder = encoder_lib.GraphEncoder(
        c.hidden_size, c.gnn_rounds, c.op_embedding_size, seed=c.seed,
        scope_features=c.scope_features, name="encoder")
    if c.placer == "transformer_xl":
      self.placer = placer_lib.TransformerXLPlacer(
          c.placer_layers, c.num_heads, c.ffn_size, c.segment_length,
          c.memory_length, c.superposition, seed=c.seed + 10_000,
          name="placer")
    else:
      self.placer = placer_lib.FeedForwardPlacer(
          c.placer_layers, c.ffn_size, c.superposition, seed=c.seed + 10_000,
          name="placer")
    self.device_encoder = devices.DeviceEncoder(
        c.hidden_size, seed=c.seed + 20_000, name="device_encoder")
    self.scorer = devices.PairScorer(c.hidden_size, seed=c.seed + 30_000,
                                     name="scorer")
    self.affinity = (devices.StageAffinity(name="affinity")
                     if c.stage_affinity else None)
    # Multiplies the logits; not trained. Fine-tuning lowers it when the
    # pre-trained policy is too sure of itself on a new graph to explore
    # (`rl.exploration.apply_entropy_floor`); it is saved with the weights, so
    # sampling and PPO's ratios always see the same distribution.
    self.logit_scale = tf.Variable(1.0, trainable=False, name="logit_scale")

  # The network has no data-dependent Python control flow, so AutoGraph
  # conversion (which Keras applies to every layer's `call`) is pure
  # overhead: it was ~75% of the tracing time. Switching it off here switches
  # it off for all layers below.
  @tf.autograph.experimental.do_not_convert
  def call(self, observation, training=False):
    flat, outer = _flatten_outer(observation)
    scores, _ = self.parts(flat, training)
    logits = self.finish(scores, flat, flat.get("exploration_noise"))
    return tf.reshape(logits, tf.concat([outer, tf.shape(logits)[1:]], 0))

  @tf.autograph.experimental.do_not_convert
  def noisy_logits(self, observation, noise) -> tf.Tensor:
    """[S, G, D]: the logits of one observation under S noise draws.

    The network runs once; only the exploration term differs per draw.
    `noise` is float[S, D, features.EXPLORATION_SIZE].
    """
    flat, _ = _flatten_outer(observation)
    scores, _ = self.parts(flat)
    draws = tf.shape(noise)[0]
    tile = lambda x: tf.repeat(x[:1], draws, axis=0)
    needed = {k: tile(flat[k]) for k in _FINISH_KEYS}
    return self.finish(tile(scores), needed, noise)

  @tf.autograph.experimental.do_not_convert
  def graph_embedding(self, observation, training=False) -> tf.Tensor:
    """float32[..., 2H]: the pooled encoder embedding of each graph."""
    flat, outer = _flatten_outer(observation)
    _, embedding = self.encoder(flat, training=training)
    return tf.reshape(embedding,
                      tf.concat([outer, tf.shape(embedding)[1:]], 0))

  @tf.autograph.experimental.do_not_convert
  def parts(self, observation, training=False):
    """The graph-level pieces of the logits (flat [B] observation).

    Returns (group scores float[B, G, D] before scaling, noise and masking;
    the graph embedding). `finish` turns scores into logits: rows showing
    the same graph can share one `parts` and differ in their noise.
    """
    node_mask = tf.cast(observation["node_mask"], tf.bool)
    node_states, graph_embedding = self.encoder(observation, training=training)
    states = self.placer((node_states, node_mask, graph_embedding),
                         training=training)
    device_mask = tf.cast(observation["device_mask"], tf.bool)
    device_embeddings = self.device_encoder(
        (observation["device_features"], device_mask), training=training)
    contrast = _with_contrast(states, node_mask)
    node_logits = self.scorer((contrast, device_embeddings), training=training)
    if self.affinity is not None:
      node_logits += self.affinity((contrast, devices.stage_direction(
          observation["stage_features"][..., :2],
          observation["device_features"], device_mask)))
    num_groups = tf.shape(observation["group_mask"])[1]
    group_logits = _group_mean(node_logits, observation["group_ids"],
                               node_mask, num_groups)
    return group_logits, graph_embedding

  @tf.autograph.experimental.do_not_convert
  def finish(self, scores, observation, noise=None):
    """Masked logits [B, G, D]: scaled scores plus pipeline pushes.

    `noise` is float[B, D, features.EXPLORATION_SIZE] or None; the
    observation needs the keys in `_FINISH_KEYS`.
    """
    logits = scores * self.logit_scale
    if noise is not None:
      # Observations carry zeros unless a sampler explores: skip the gathers
      # then (training and greedy passes run this for every row).
      noise = tf.cast(noise, tf.float32)
      logits += tf.cond(
          tf.reduce_any(tf.not_equal(noise, 0.0)),
          lambda: _pipeline_noise(noise, observation, tf.shape(scores)[1]),
          lambda: tf.zeros_like(logits))
    return _mask_logits(logits, observation)


# Observation entries `finish` reads (per row, when rows share `parts`).
_FINISH_KEYS = ("allowed", "device_mask", "group_mask", "group_ids",
                "node_mask", "stage_features", "placement_features",
                "device_features")


def _pipeline_noise(noise, observation, num_groups):
  """[B, G, D]: the sample's random gains times each push's direction.

  A stage rule's direction is its pipeline (`devices.stage_target`), or,
  in a sample whose device centres are shifted, the soft pull of the
  shifted centres (`devices.stage_direction`); a placement push's
  direction is the device it gives each op (`devices.placement_direction`),
  never shifted.
  """
  device_mask = tf.cast(observation["device_mask"], tf.bool)
  shift = noise[:, :, features.PIPELINE_SHIFT_COLUMN]  # [B, D]
  push = 0.0
  shifted = tf.reduce_any(tf.not_equal(shift, 0.0), axis=-1)  # [B]
  for r in range(features.NUM_STAGE_RULES):
    gain = noise[:, 0, features.PIPELINE_NOISE_COLUMN + r]
    # Unshifted rows have zero shifts: their pull is the unshifted one.
    pull = devices.stage_direction(
        observation["stage_features"][..., 2 * r:2 * r + 2],
        observation["device_features"], device_mask, centre_shift=shift)
    direction = tf.where(shifted[:, None, None], pull, devices.crisp(pull))
    push += gain[:, None, None] * direction
  for p in range(features.NUM_PLACEMENT_PUSHES):
    gain = noise[:, 0, features.PLACEMENT_NOISE_COLUMN + p]
    push += gain[:, None, None] * devices.placement_direction(
        observation["placement_features"][..., 2 * p:2 * p + 2], device_mask)
  node_mask = tf.cast(observation["node_mask"], tf.bool)
  return _group_mean(push, observation["group_ids"], node_mask, num_groups)


def _with_contrast(states, node_mask):
  """[B, N, H] -> [B, N, 2H]: states and their deviation from the graph mean.

  After the placer, most of a node's state is shared by its whole graph
  (graph-level context); scored alone, that shared part pushes every op
  towards the same device. The deviation from the mean over real nodes,
  scaled to unit RMS, is what tells ops apart, and so what lets one op go
  left and another right (see `devices.DeviceEncoder` on symmetry).
  """
  weights = tf.cast(node_mask, tf.float32)[..., None]
  count = tf.maximum(tf.reduce_sum(weights, axis=1, keepdims=True), 1.0)
  mean = tf.reduce_sum(states * weights, axis=1, keepdims=True) / count
  deviation = (states - mean) * weights
  rms = tf.sqrt(tf.reduce_sum(tf.square(deviation), axis=[1, 2],
                              keepdims=True) /
                (count * tf.cast(tf.shape(states)[2], tf.float32)) + 1e-6)
  return tf.concat([states, deviation / rms], axis=-1)


def _group_mean(node_logits, group_ids, node_mask, num_groups):
  """[B, N, D] -> [B, G, D]: mean over each group's real member nodes."""
  batch = tf.shape(node_logits)[0]
  num_devices = tf.shape(node_logits)[2]
  ids = tf.cast(group_ids, tf.int32) + num_groups * tf.range(batch)[:, None]
  ids = tf.where(node_mask, ids, -1)  # negative ids are dropped
  flat_logits = tf.reshape(node_logits, [-1, num_devices])
  flat_ids = tf.reshape(ids, [-1])
  total = tf.math.unsorted_segment_sum(flat_logits, flat_ids,
                                       batch * num_groups)
  count = tf.math.unsorted_segment_sum(
      tf.ones_like(flat_ids, tf.float32), flat_ids, batch * num_groups)
  mean = total / tf.maximum(count, 1.0)[:, None]
  return tf.reshape(mean, [batch, num_groups, num_devices])


def _mask_logits(group_logits, observation):
  allowed = tf.cast(observation["allowed"], tf.bool)
  device_mask = tf.cast(observation["device_mask"], tf.bool)
  group_mask = tf.cast(observation["group_mask"], tf.bool)
  real = tf.where(allowed & device_mask[:, None, :], group_logits, NEG_LOGIT)
  padding = tf.where(allowed, 0.0, NEG_LOGIT)
  return tf.where(group_mask[:, :, None], real, padding)


# Observation entries and their rank without batch dimensions.
_UNBATCHED_RANK = {name: len(shape) for name, (shape, _) in
                   features.observation_spec(1, 1, 1, 1).items()}


def _flatten_outer(observation):
  """Flattens any leading batch dims of every entry to one; returns them too.

  tf-agents calls networks with [B] and [B, T] outer dims; the layers only
  handle one.
  """
  mask = tf.convert_to_tensor(observation["node_mask"])
  outer = tf.shape(mask)[:-1]
  flat = {}
  for name, value in observation.items():
    inner = _UNBATCHED_RANK.get(name)
    if inner is None:
      continue
    value = tf.convert_to_tensor(value)
    rank = value.shape.rank
    static = value.shape[rank - inner:]
    if static.is_fully_defined():
      new_shape = [-1] + static.as_list()
    else:
      new_shape = tf.concat([[-1], tf.shape(value)[rank - inner:]], 0)
    flat[name] = tf.reshape(value, new_shape)
  return flat, outer
