"""A mixture-of-experts transformer's training step from tf_keras layers.

Fedus, Zoph and Shazeer, "Switch Transformers: Scaling to Trillion Parameter
Models with Simple and Efficient Sparsity" (JMLR 2022): in every other block
the feed-forward layer is replaced by `experts` feed-forward layers, each with
its own weights, and a router that sends each token to its top-1 expert. An
expert takes at most capacity_factor x tokens / experts tokens (the rest skip
the layer through the residual); its output is scaled by the router's
probability, and a load-balancing loss (experts x the sum over experts of the
share of tokens sent there times the mean router probability) keeps the
router from favouring a few. Dispatch and combine are dense einsums over a
one-hot [tokens, experts, capacity] tensor, as in the paper's Mesh TensorFlow
code, so every shape is static. The model is a masked language model (every
position scored, output tied to the token embedding) trained with Adam.

Each expert's two matrix products are independent of the other experts',
side by side between one dispatch and one combine: a wide, parallel shape
no other corpus family has.
"""

import math

from tf_gdp.corpus import training_steps


class _SwitchLayer:
  """One routed feed-forward layer: router, `experts` experts, dispatch."""

  def __init__(self, tf_keras, *, name: str, hidden: int, ffn: int,
               experts: int, capacity_factor: float):
    keras = tf_keras.layers
    self.name = name
    self.experts = experts
    self.capacity_factor = capacity_factor
    self.router = keras.Dense(experts, name=f"{name}/router")
    self.ffn = [(keras.Dense(ffn, activation="gelu",
                             name=f"{name}/expert{e}/ffn_in"),
                 keras.Dense(hidden, name=f"{name}/expert{e}/ffn_out"))
                for e in range(experts)]
    self.norm = keras.LayerNormalization(epsilon=1e-6, name=f"{name}/norm")

  def __call__(self, tf, x):
    """(x after the layer and its residual, the load-balancing loss)."""
    batch, seq, hidden = x.shape
    tokens = batch * seq
    capacity = int(math.ceil(self.capacity_factor * tokens / self.experts))
    flat = tf.reshape(x, [tokens, hidden])
    logits = self.router(flat)
    with tf.name_scope(f"{self.name}/dispatch"):
      probs = tf.nn.softmax(logits, axis=-1)  # [T, E]
      chosen = tf.one_hot(tf.argmax(probs, axis=-1), self.experts)
      gate = tf.reduce_sum(probs * chosen, axis=-1)  # [T]
      # A token's place in its expert's queue, in token order.
      place = tf.reduce_sum((tf.cumsum(chosen, axis=0) - 1.0) * chosen,
                            axis=-1)
      kept = chosen * tf.cast(place < capacity, chosen.dtype)[:, tf.newaxis]
      dispatch = (kept[:, :, tf.newaxis] * tf.one_hot(
          tf.cast(place, tf.int32), capacity)[:, tf.newaxis])
      queues = tf.unstack(tf.einsum("tec,th->ech", dispatch, flat))
    served = [ffn_out(ffn_in(queue))
              for (ffn_in, ffn_out), queue in zip(self.ffn, queues)]
    with tf.name_scope(f"{self.name}/combine"):
      combined = tf.einsum("tec,ech->th",
                           dispatch * gate[:, tf.newaxis, tf.newaxis],
                           tf.stack(served))
      balance = self.experts * tf.reduce_sum(
          tf.reduce_mean(chosen, axis=0) * tf.reduce_mean(probs, axis=0))
      out = x + tf.reshape(combined, [batch, seq, hidden])
    return self.norm(out), balance

  def layers(self):
    return [self.router, self.norm] + [d for pair in self.ffn for d in pair]


def switch_transformer(*, layers: int, hidden: int, experts: int, seq: int,
                       batch: int, heads: int = 8, vocab: int = 32000,
                       ffn: int = 0, capacity_factor: float = 1.25,
                       balance_weight: float = 0.01,
                       learning_rate: float = 1e-4, seed: int = 0):
  """The step: a masked-LM Switch encoder of `layers` blocks, odd ones routed.

  Token and position embeddings; each block is self-attention (residual,
  layer norm), then a dense GELU feed-forward layer (even blocks) or a
  `_SwitchLayer` of `experts` experts (odd blocks); logits by the
  transposed token embedding.
  """
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  ffn = ffn or 4 * hidden
  rng = tf.random.Generator.from_seed(seed)
  tokens = tf.Variable(rng.uniform([batch, seq], 0, vocab, dtype=tf.int32),
                       trainable=False, name="tokens")
  embed = keras.Embedding(vocab, hidden, name="token_embedding")
  position = keras.Embedding(seq, hidden, name="position_embedding")
  blocks = []
  for i in range(layers):
    attention = (keras.MultiHeadAttention(heads, hidden // heads,
                                          name=f"block{i}/attention"),
                 keras.LayerNormalization(epsilon=1e-6,
                                          name=f"block{i}/attention_norm"))
    if i % 2:
      feed_forward = _SwitchLayer(tf_keras, name=f"block{i}/switch",
                                  hidden=hidden, ffn=ffn, experts=experts,
                                  capacity_factor=capacity_factor)
    else:
      feed_forward = (keras.Dense(ffn, activation="gelu",
                                  name=f"block{i}/ffn_in"),
                      keras.Dense(hidden, name=f"block{i}/ffn_out"),
                      keras.LayerNormalization(epsilon=1e-6,
                                               name=f"block{i}/ffn_norm"))
    blocks.append((attention, feed_forward))
  final_norm = keras.LayerNormalization(epsilon=1e-6, name="final_norm")

  def forward():
    """(logits, the summed load-balancing loss)."""
    x = embed(tokens) + position(tf.range(seq))[tf.newaxis]
    balance = 0.0
    for (attention, norm), feed_forward in blocks:
      x = norm(x + attention(x, x, training=True))
      if isinstance(feed_forward, _SwitchLayer):
        x, layer_balance = feed_forward(tf, x)
        balance += layer_balance
      else:
        ffn_in, ffn_out, ffn_norm = feed_forward
        x = ffn_norm(x + ffn_out(ffn_in(x)))
    x = final_norm(x)
    return tf.einsum("bsh,vh->bsv", x, embed.embeddings), balance

  forward()  # builds every layer's weights before the variables are listed
  built = [embed, position, final_norm]
  for attention, feed_forward in blocks:
    built += list(attention)
    built += (feed_forward.layers() if isinstance(feed_forward, _SwitchLayer)
              else list(feed_forward))
  variables = [v for layer in built for v in layer.trainable_variables]

  def loss(outputs):
    logits, balance = outputs
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        tokens, logits)) + balance_weight * balance

  return training_steps.supervised_step(
      tf, forward, variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
