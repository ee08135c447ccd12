"""The placer: node embeddings in topological order -> placement-ready states.

`TransformerXLPlacer` follows GDP: the nodes, in topological order, are cut
into segments of fixed length L; each segment attends to itself and to a
memory holding the previous M positions' hidden states (no gradient through
the memory), with Transformer-XL relative position encodings (Dai et al.
2019: sinusoidal embeddings of the query-key distance plus the learned
global biases u and v). Attention cost is O(N (M + L)), so a 60k-op graph
fits.

Because the memory of layer l at segment s is the layer-(l-1) output of the
positions just before s (the same forward pass), all segments of a layer
can be computed at once: the segment recurrence of Transformer-XL is
evaluated exactly, but as one batched tensor program per layer instead of a
sequential loop over hundreds of segments.

Attention is full (not causal) inside a segment: the policy samples every
node's device independently given the hidden states, so there is no
autoregressive order to protect, and letting an op see its successors in
the same segment helps. Across segments information flows forward only,
through the memory, as in GDP.

`FeedForwardPlacer` is the paper's no-attention ablation: the same residual
feed-forward blocks (and superposition gates) applied per node.
"""

import math

import tensorflow as tf

from tf_gdp.policy import superposition

NEG_INF = -1e9


def relative_position_embedding(distances: tf.Tensor, size: int) -> tf.Tensor:
  """Sinusoidal embedding float32[len(distances), size] (size even)."""
  inverse_frequency = 1.0 / (10000.0 ** (tf.range(0, size, 2, tf.float32) /
                                         float(size)))
  angles = tf.cast(distances, tf.float32)[:, None] * inverse_frequency[None, :]
  return tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)


def _seeded(seed):
  return tf.keras.initializers.GlorotUniform(seed)


class RelativeSegmentAttention(tf.keras.layers.Layer):
  """Multi-head attention of each segment over [memory; segment].

  Call args:
    segments: float[B, S, L, H] current segment states (gradients flow).
    memory: float[B, S, M, H] the M states before each segment (stopped).
    key_mask: bool[B, S, M + L] which keys are real nodes.

  Returns:
    float[B, S, L, H].
  """

  def __init__(self, num_heads: int, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self._seed = seed

  def build(self, input_shape):
    hidden = int(input_shape[0][-1])
    if hidden % self.num_heads:
      raise ValueError(f"hidden size {hidden} is not a multiple of "
                       f"{self.num_heads} heads")
    self._head_size = hidden // self.num_heads
    self._hidden = hidden
    shape = (hidden, self.num_heads, self._head_size)
    self._query = self.add_weight("query", shape,
                                  initializer=_seeded(self._seed))
    self._key = self.add_weight("key", shape,
                                initializer=_seeded(self._seed + 1))
    self._value = self.add_weight("value", shape,
                                  initializer=_seeded(self._seed + 2))
    self._relative = self.add_weight("relative", shape,
                                     initializer=_seeded(self._seed + 3))
    self._output = self.add_weight("output",
                                   (self.num_heads, self._head_size, hidden),
                                   initializer=_seeded(self._seed + 4))
    # Dai et al.'s global content (u) and position (v) biases.
    self._content_bias = self.add_weight(
        "content_bias", (self.num_heads, self._head_size), initializer="zeros")
    self._position_bias = self.add_weight(
        "position_bias", (self.num_heads, self._head_size), initializer="zeros")
    super().build(input_shape)

  def call(self, inputs):
    segments, memory, key_mask = inputs
    seg_len = tf.shape(segments)[2]
    mem_len = tf.shape(memory)[2]
    scale = 1.0 / math.sqrt(self._head_size)
    keys_in = tf.concat([memory, segments], axis=2)  # [B, S, K, H]
    q = tf.einsum("bsih,hnd->bsind", segments, self._query) * scale
    k = tf.einsum("bsjh,hnd->bsjnd", keys_in, self._key)
    v = tf.einsum("bsjh,hnd->bsjnd", keys_in, self._value)

    # Query i sits at window position M + i and key j at j; their distance
    # M + i - j runs from M + L - 1 (oldest memory) down to -(L - 1) (last
    # key after the first query). Embed each distance once, then lay the
    # projections out per (i, j): [L, K, heads, d] is independent of the
    # batch and segment, so the position term is one batched matmul and no
    # [L, M + 2L - 1] score tensor per segment is ever built.
    distances = tf.range(mem_len + seg_len - 1, -seg_len, -1)
    rel = relative_position_embedding(distances, self._hidden)  # [R, H]
    r = tf.einsum("rh,hnd->rnd", rel, self._relative)
    rows = tf.range(seg_len)[:, None]
    cols = tf.range(mem_len + seg_len)[None, :]
    r_pairs = tf.gather(r, seg_len - 1 - rows + cols)  # [L, K, n, d]

    content = tf.einsum("bsind,bsjnd->bsnij",
                        q + self._content_bias * scale, k)
    position = tf.einsum("bsind,ijnd->bsnij",
                         q + self._position_bias * scale, r_pairs)
    bias = tf.where(key_mask, 0.0, NEG_INF)[:, :, None, None, :]
    weights = tf.nn.softmax(content + position + bias, axis=-1)
    attended = tf.einsum("bsnij,bsjnd->bsind", weights, v)
    return tf.einsum("bsind,ndh->bsih", attended, self._output)


class TransformerXLBlock(tf.keras.layers.Layer):
  """Gate -> relative attention -> feed-forward, pre-norm residual."""

  def __init__(self, num_heads: int, ffn_size: int, segment_length: int,
               memory_length: int, superposition_on: bool, seed: int = 0,
               **kwargs):
    super().__init__(**kwargs)
    self._segment_length = segment_length
    self._memory_length = memory_length
    self.gate = superposition.make_gate(superposition_on, seed, name="gate")
    self.attention = RelativeSegmentAttention(num_heads, seed + 10,
                                              name="attention")
    self._ffn_size = ffn_size
    self._seed = seed
    self._attention_norm = tf.keras.layers.LayerNormalization(
        name="attention_norm")
    self._ffn_norm = tf.keras.layers.LayerNormalization(name="ffn_norm")

  def build(self, input_shape):
    hidden = int(input_shape[0][-1])
    self._ffn = tf.keras.Sequential([
        tf.keras.layers.Dense(self._ffn_size, "relu",
                              kernel_initializer=_seeded(self._seed + 20)),
        tf.keras.layers.Dense(hidden,
                              kernel_initializer=_seeded(self._seed + 21)),
    ], name="ffn")
    super().build(input_shape)

  def call(self, inputs):
    """states [B, P, H] (P = S * L), graph embedding, key masks -> [B, P, H]."""
    states, graph_embedding, key_mask = inputs
    segment_length, memory_length = self._segment_length, self._memory_length
    states = self.gate((states, graph_embedding))
    batch = tf.shape(states)[0]
    hidden = states.shape[-1]
    normed = self._attention_norm(states)
    segments = tf.reshape(normed, [batch, -1, segment_length, hidden])
    if memory_length:
      memory = _memory_windows(tf.stop_gradient(normed), segment_length,
                               memory_length)
    else:
      memory = segments[:, :, :0]
    attended = self.attention((segments, memory, key_mask))
    states += tf.reshape(attended, tf.shape(states))
    return states + self._ffn(self._ffn_norm(states))


def _memory_windows(states: tf.Tensor, segment_length: int,
                    memory_length: int) -> tf.Tensor:
  """[B, S * L, C] -> [B, S, M, C]: the M positions before each segment.

  Positions before the start are zeros (and masked by the caller).
  """
  padded = tf.pad(states, [[0, 0], [memory_length, 0], [0, 0]])
  frames = tf.signal.frame(padded, memory_length, segment_length, axis=1)
  num_segments = tf.shape(states)[1] // segment_length
  return frames[:, :num_segments]


class TransformerXLPlacer(tf.keras.layers.Layer):
  """Transformer-XL over nodes in topological order, segment by segment.

  Call args:
    states: float[B, N, H] node embeddings in topological order.
    node_mask: bool[B, N].
    graph_embedding: float[B, C], for superposition.

  Returns:
    float[B, N, H] the final layer's (normalized) states.
  """

  def __init__(self, num_layers: int = 2, num_heads: int = 4,
               ffn_size: int = 128, segment_length: int = 128,
               memory_length: int = 128, superposition_on: bool = True,
               seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    if segment_length < 1 or memory_length < 0:
      raise ValueError("segment_length must be >= 1 and memory_length >= 0")
    self.segment_length = segment_length
    self.memory_length = memory_length
    self.blocks = [
        TransformerXLBlock(num_heads, ffn_size, segment_length, memory_length,
                           superposition_on, seed + 100 * i, name=f"block_{i}")
        for i in range(num_layers)]
    self._final_norm = tf.keras.layers.LayerNormalization(name="final_norm")

  def call(self, inputs):
    states, node_mask, graph_embedding = inputs
    seg_len, mem_len = self.segment_length, self.memory_length
    num_nodes = tf.shape(states)[1]
    padded_len = (num_nodes + seg_len - 1) // seg_len * seg_len
    pad = padded_len - num_nodes
    states = tf.pad(states, [[0, 0], [0, pad], [0, 0]])
    mask = tf.pad(tf.cast(node_mask, tf.bool), [[0, 0], [0, pad]])
    batch = tf.shape(mask)[0]
    segment_mask = tf.reshape(mask, [batch, -1, seg_len])
    if mem_len:
      memory_mask = _memory_windows(mask[:, :, None], seg_len, mem_len)[..., 0]
    else:
      memory_mask = tf.zeros([batch, tf.shape(segment_mask)[1], 0], tf.bool)
    key_mask = tf.concat([memory_mask, segment_mask], axis=2)
    for block in self.blocks:
      states = block((states, graph_embedding, key_mask))
    return self._final_norm(states[:, :num_nodes])


class FeedForwardPlacer(tf.keras.layers.Layer):
  """No-attention ablation: gated residual MLP blocks applied per node."""

  def __init__(self, num_layers: int = 2, ffn_size: int = 128,
               superposition_on: bool = True, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self._num_layers = num_layers
    self._ffn_size = ffn_size
    self._seed = seed
    self.gates = [superposition.make_gate(superposition_on, seed + 100 * i,
                                          name=f"gate_{i}")
                  for i in range(num_layers)]
    self._norms = [tf.keras.layers.LayerNormalization(name=f"norm_{i}")
                   for i in range(num_layers)]
    self._final_norm = tf.keras.layers.LayerNormalization(name="final_norm")

  def build(self, input_shape):
    hidden = int(input_shape[0][-1])
    self._blocks = [tf.keras.Sequential([
        tf.keras.layers.Dense(self._ffn_size, "relu",
                              kernel_initializer=_seeded(self._seed + 100 * i)),
        tf.keras.layers.Dense(hidden,
                              kernel_initializer=_seeded(self._seed + 100 * i
                                                         + 1)),
    ], name=f"ffn_{i}") for i in range(self._num_layers)]
    super().build(input_shape)

  def call(self, inputs):
    states, _, graph_embedding = inputs
    for gate, norm, block in zip(self.gates, self._norms, self._blocks):
      states = gate((states, graph_embedding))
      states += block(norm(states))
    return self._final_norm(states)
