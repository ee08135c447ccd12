"""Transformer-XL training step (Dai et al., 2019) over consecutive segments.

The language model GDP benchmarks with 2, 4 and 8 layers. What makes it
Transformer-XL rather than a plain Transformer decoder:

* Segment-level recurrence: each layer attends over [memory; segment],
  where the memory is the previous segment's input to that layer, held
  under `tf.stop_gradient` (no backpropagation into the past). One step
  trains on `num_segments` consecutive segments; the memory the first one
  sees, and the one the last one leaves, live in non-trainable variables
  `layer_<i>/memory`, so training continues across steps as in the paper.
* Relative positional attention: the score of query i and key j is
  (q_i + u)^T k_j + (q_i + v)^T W_R r_{i-j}, with r a sinusoid of the
  relative distance and u, v learned per layer (the paper's eq. in sec.
  3.3); the per-distance term is computed once per distance and moved into
  place with the "relative shift" (pad, reshape, slice).

Post-layer-norm blocks (attention, then a ReLU feed-forward), dropout on
embeddings, attention output and feed-forward, an untied softmax, and the
mean per-token cross-entropy over all segments.

Name scopes: `embedding/segment_<k>/`, `positions/`,
`layer_<i>/segment_<k>/{attention,ffn}/`, `layer_<i>/memory/`,
`softmax/segment_<k>/`, `loss/`; backward ops under `gradient_tape/<same>`,
each variable's update under the variable's own scope.
"""

import math

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import knobs  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import lstm  # pylint: disable=g-import-not-at-top
from tf_gdp.zoo import training  # pylint: disable=g-import-not-at-top

# Scale of the normal init of weights (the reference code's init_std).
INIT_STD = 0.02
LAYER_NORM_EPSILON = 1e-5


def relative_shift(scores):
  """Aligns per-distance scores to keys: [..., q, k] -> [..., q, k].

  Column p of `scores` holds distance k - 1 - p (distances descending);
  query i of a segment of q queries that follows k - q memory positions
  sits at absolute position k - q + i, so key j needs distance
  k - q + i - j, i.e. column q - 1 - i + j. The pad/reshape/slice moves
  every row i left by q - 1 - i; entries for keys after the query (masked
  anyway) get values from the next row or zero.
  """
  *outer, q, k = scores.shape
  padded = tf.pad(scores, [[0, 0]] * len(outer) + [[0, 0], [1, 0]])
  padded = tf.reshape(padded, outer + [k + 1, q])
  return tf.reshape(padded[..., 1:, :], outer + [q, k])


class TransformerXl(tf.Module):
  """Weights plus the forward pass over consecutive segments."""

  def __init__(self, num_layers: int, model_size: int, num_heads: int,
               head_size: int, inner_size: int, vocab_size: int,
               batch: int, segment_length: int, memory_length: int,
               dropout: float, seed: int):
    super().__init__()
    rng = tf.random.Generator.from_seed(seed)
    self.model_size = model_size
    self.segment_length = segment_length
    self.dropout = dropout
    self.embedding = _normal(rng, [vocab_size, model_size], "embedding/table")
    self.layers = [
        _Layer(rng, f"layer_{i}/", model_size, num_heads, head_size,
               inner_size, batch, memory_length, dropout)
        for i in range(num_layers)]
    self.softmax_kernel = _normal(rng, [model_size, vocab_size],
                                  "softmax/kernel")
    self.softmax_bias = tf.Variable(tf.zeros([vocab_size]),
                                    name="softmax/bias")

  def loss(self, input_ids, target_ids):
    """Mean cross-entropy over [batch, num_segments * segment_length] tokens."""
    batch, total = input_ids.shape
    segments = total // self.segment_length
    memories = []
    for layer in self.layers:
      with tf.name_scope(layer.prefix + "memory/"):
        memories.append(tf.stop_gradient(layer.memory.read_value()))
    memory_length = memories[0].shape[1]
    with tf.name_scope("positions/"):
      positions = _sinusoids(memory_length + self.segment_length,
                             self.model_size)
      future = _future_mask(self.segment_length, memory_length)
    losses = []
    for k in range(segments):
      window = slice(k * self.segment_length, (k + 1) * self.segment_length)
      with tf.name_scope(lstm.scope("embedding", f"segment_{k}")):
        x = tf.nn.embedding_lookup(self.embedding, input_ids[:, window])
        x = _dropout(x * math.sqrt(self.model_size), self.dropout)
      new_memories = []
      for layer, memory in zip(self.layers, memories):
        # The next segment remembers this layer's input, without gradient.
        with tf.name_scope(lstm.scope(layer.prefix + "memory", f"segment_{k}")):
          new_memories.append(tf.stop_gradient(
              tf.concat([memory, x], 1)[:, -memory_length:]))
        x = layer(x, memory, positions, future, f"segment_{k}/")
      memories = new_memories
      with tf.name_scope(lstm.scope("softmax", f"segment_{k}")):
        logits = tf.nn.bias_add(
            tf.matmul(tf.reshape(x, [-1, self.model_size]),
                      self.softmax_kernel), self.softmax_bias)
        losses.append(tf.reduce_sum(
            tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.reshape(target_ids[:, window], [-1]),
                logits=logits)))
    for layer, memory in zip(self.layers, memories):
      with tf.name_scope(layer.prefix + "memory/"):
        layer.memory.assign(memory)
    with tf.name_scope("loss/"):
      return tf.add_n(losses) / float(batch * total)


class _Layer(tf.Module):
  """Relative multi-head attention plus feed-forward, each post-normed."""

  def __init__(self, rng, prefix: str, d: int, heads: int, head_size: int,
               inner: int, batch: int, memory_length: int, dropout: float):
    super().__init__()
    self.prefix = prefix
    self.heads = heads
    self.head_size = head_size
    self.dropout = dropout
    width = heads * head_size
    self.query = _normal(rng, [d, width], prefix + "attention/query")
    self.key_value = _normal(rng, [d, 2 * width],
                             prefix + "attention/key_value")
    self.position = _normal(rng, [d, width], prefix + "attention/position")
    self.content_bias = _normal(rng, [heads, head_size],
                                prefix + "attention/content_bias")
    self.position_bias = _normal(rng, [heads, head_size],
                                 prefix + "attention/position_bias")
    self.output = _normal(rng, [width, d], prefix + "attention/output")
    self.attention_norm = _LayerNorm(d, prefix + "attention/norm/")
    self.ffn_in = _normal(rng, [d, inner], prefix + "ffn/in_kernel")
    self.ffn_in_bias = tf.Variable(tf.zeros([inner]),
                                   name=prefix + "ffn/in_bias")
    self.ffn_out = _normal(rng, [inner, d], prefix + "ffn/out_kernel")
    self.ffn_out_bias = tf.Variable(tf.zeros([d]),
                                    name=prefix + "ffn/out_bias")
    self.ffn_norm = _LayerNorm(d, prefix + "ffn/norm/")
    self.memory = tf.Variable(tf.zeros([batch, memory_length, d]),
                              trainable=False, name=prefix + "memory")

  def __call__(self, x, memory, positions, future, segment_scope: str):
    with tf.name_scope(self.prefix + segment_scope + "attention/"):
      x = self.attention_norm(x + _dropout(
          self._attend(x, memory, positions, future), self.dropout))
    with tf.name_scope(self.prefix + segment_scope + "ffn/"):
      batch, length, d = x.shape
      flat = tf.reshape(x, [-1, d])
      hidden = tf.nn.relu(tf.nn.bias_add(tf.matmul(flat, self.ffn_in),
                                         self.ffn_in_bias))
      hidden = _dropout(hidden, self.dropout)
      out = tf.nn.bias_add(tf.matmul(hidden, self.ffn_out), self.ffn_out_bias)
      out = tf.reshape(_dropout(out, self.dropout), [batch, length, d])
      return self.ffn_norm(x + out)

  def _attend(self, x, memory, positions, future):
    """Relative attention of the segment over [memory; segment].

    `future` is [q, k]: a large negative number where key j comes after
    query i, else 0.
    """
    batch, q_len, d = x.shape
    k_len = memory.shape[1] + q_len
    heads, size = self.heads, self.head_size
    context = tf.concat([memory, x], 1)
    q = tf.reshape(tf.matmul(tf.reshape(x, [-1, d]), self.query),
                   [batch, q_len, heads, size])
    kv = tf.reshape(tf.matmul(tf.reshape(context, [-1, d]), self.key_value),
                    [batch, k_len, 2, heads, size])
    k, v = kv[:, :, 0], kv[:, :, 1]
    r = tf.reshape(tf.matmul(positions, self.position), [k_len, heads, size])
    # [batch, heads, q, size] x [batch, heads, size, k] -> [batch, heads, q, k]
    content = tf.matmul(_heads_first(q + self.content_bias),
                        _heads_first(k), transpose_b=True)
    # [batch, heads, q, size] x [heads, size, k]: one row per distance.
    by_distance = tf.matmul(_heads_first(q + self.position_bias),
                            tf.transpose(r, [1, 2, 0]))
    scores = (content + relative_shift(by_distance)) / math.sqrt(size)
    weights = tf.nn.softmax(scores + future)
    attended = tf.matmul(weights, _heads_first(v))  # [batch, heads, q, size]
    attended = tf.reshape(tf.transpose(attended, [0, 2, 1, 3]),
                          [-1, heads * size])
    return tf.reshape(tf.matmul(attended, self.output), [batch, q_len, d])


class _LayerNorm(tf.Module):

  def __init__(self, size: int, var_scope: str):
    super().__init__()
    self.gain = tf.Variable(tf.ones([size]), name=var_scope + "gain")
    self.bias = tf.Variable(tf.zeros([size]), name=var_scope + "bias")

  def __call__(self, x):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return ((x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON)
            * self.gain + self.bias)


def build_train_step(num_layers: int = 4, model_size: int = 512,
                     num_heads: int = 8, head_size: int = 64,
                     inner_size: int = 2048, vocab_size: int = 204,
                     batch: int = 16, segment_length: int = 256,
                     memory_length: int = 256, num_segments: int = 2,
                     dropout: float = 0.1, learning_rate: float = 0.00025,
                     optimizer: str = "adam", clip_norm: float = 0.25,
                     seed: int = 0):
  """Returns (train_step, (input_ids, target_ids)) for one Transformer-XL step.

  Both example args are int32 [batch, num_segments * segment_length]; the
  targets are the inputs shifted by one token.

  Widths follow the paper's enwik8 base model (d_model 512, 8 heads of 64,
  inner 2048, a byte-level vocabulary of 204 symbols, Adam at 2.5e-4 with
  clipping at 0.25). The paper trains on segments and memories of 512 with
  batch 22 spread over several GPUs; the defaults halve the lengths and use
  batch 16 so that the attention activations of the 8-layer step (~[16, 8,
  256, 512] floats per score tensor) fit one 16 GB GPU, keeping a
  single-device placement valid as a baseline.

  Args:
    num_layers: Transformer-XL layers (GDP: 2, 4 and 8).
    model_size: width of the residual stream (d_model).
    num_heads: attention heads.
    head_size: width of one head.
    inner_size: width of the feed-forward layer.
    vocab_size: softmax size.
    batch: text streams per step.
    segment_length: tokens per segment (the paper's tgt_len).
    memory_length: cached positions per layer (the paper's mem_len).
    num_segments: consecutive segments trained in one step, >= 2 so that
      the memory of one segment feeds the next inside the graph.
    dropout: drop rate of embeddings, attention output and feed-forward.
    learning_rate: step size.
    optimizer: "adam" (as the paper) or "sgd".
    clip_norm: global gradient norm clip; 0 = off.
    seed: seed of the random weights and of the example batch.
  """
  knobs.require_positive(
      num_layers=num_layers, model_size=model_size, num_heads=num_heads,
      head_size=head_size, inner_size=inner_size, vocab_size=vocab_size,
      batch=batch, segment_length=segment_length,
      memory_length=memory_length)
  if num_segments < 2:
    raise errors.InputError(
        f"num_segments must be >= 2 (the memory of one segment feeds the "
        f"next), got {num_segments}")
  if not 0 <= dropout < 1:
    raise errors.InputError(f"dropout must be in [0, 1), got {dropout}")
  model = TransformerXl(num_layers, model_size, num_heads, head_size,
                        inner_size, vocab_size, batch, segment_length,
                        memory_length, dropout, seed)
  step = training.make_train_step(
      model.loss, training.Optimizer(optimizer, learning_rate,
                                     model.trainable_variables, clip_norm))
  rng = tf.random.Generator.from_seed(seed + 1)
  tokens = rng.uniform([batch, num_segments * segment_length + 1], 0,
                       vocab_size, dtype=tf.int32)
  return step, (tokens[:, :-1], tokens[:, 1:])


def _heads_first(x):
  """[batch, time, heads, size] -> [batch, heads, time, size]."""
  return tf.transpose(x, [0, 2, 1, 3])


def _sinusoids(length: int, size: int):
  """Embeddings of distances length-1, ..., 0: [length, size] sin | cos."""
  distances = tf.range(length - 1, -1, -1, dtype=tf.float32)
  inverse = 1.0 / tf.pow(10000.0, tf.range(0, size, 2, dtype=tf.float32) / size)
  angles = tf.expand_dims(distances, 1) * tf.expand_dims(inverse, 0)
  return tf.concat([tf.sin(angles), tf.cos(angles)], 1)[:, :size]


def _future_mask(q_len: int, memory_length: int):
  """[q, memory + q]: -1e30 where key j is after query i (at memory + i)."""
  queries = tf.expand_dims(tf.range(q_len), 1)
  keys = tf.expand_dims(tf.range(memory_length + q_len), 0)
  return tf.cast(keys > queries + memory_length, tf.float32) * -1e30


def _dropout(x, rate):
  return tf.nn.dropout(x, rate=rate) if rate > 0 else x


def _normal(rng, shape, name):
  return tf.Variable(rng.normal(shape, stddev=INIT_STD), name=name)
