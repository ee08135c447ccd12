"""The networks of the HDP-style baseline: a feed-forward grouper and a
seq2seq placer with attention, trained jointly by REINFORCE.

Kept apart from `hdp` (the search loop) and `hdp_problem` (the numpy side)
so that importing the baseline does not import TensorFlow; `hdp.search`
imports this module on first use.

Everything is a plain `tf.Module` with `tf.Variable`s initialised from a
stateless generator keyed by the search seed, sampling uses stateless
categorical draws keyed by (seed, step), and Adam is written out here, so a
search is a pure function of its seed on CPU (no global TF random state, no
Keras layer-naming or initializer-seeding surprises).

Shapes: U units (colocation groups, the grouper's items), G groups, D
devices, B samples per step, F unit features, E group features, H hidden.
"""

import tensorflow as tf

_NEG = -1e9  # logit of a masked device


class _Init:
  """Glorot-uniform and zero initial values from one stateless seed."""

  def __init__(self, seed: int):
    self._seed = int(seed)
    self._count = 0

  def glorot(self, shape, name):
    self._count += 1
    limit = (6.0 / float(shape[0] + shape[-1])) ** 0.5
    value = tf.random.stateless_uniform(
        shape, seed=[self._seed, self._count], minval=-limit, maxval=limit)
    return tf.Variable(value, name=name)

  @staticmethod
  def zeros(shape, name, value=0.0):
    return tf.Variable(tf.fill(shape, tf.constant(value, tf.float32)),
                       name=name)


def _lstm_bias(hidden: int, name: str):
  """LSTM bias with the usual +1 on the forget gate (gate order i, f, g, o)."""
  bias = tf.concat([tf.zeros([hidden]), tf.ones([hidden]),
                    tf.zeros([2 * hidden])], axis=0)
  return tf.Variable(bias, name=name)


def _lstm_step(input_gates, h, c, recurrent_kernel):
  """One LSTM step; `input_gates` = x @ input_kernel + bias, computed by the
  caller (for all steps at once where the inputs are known in advance)."""
  gates = input_gates + tf.matmul(h, recurrent_kernel)
  i, f, g, o = tf.split(gates, 4, axis=-1)
  c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
  h = tf.sigmoid(o) * tf.tanh(c)
  return h, c


class HdpPolicy(tf.Module):
  """Grouper (units -> groups) and placer (groups -> devices).

  Grouper: a two-layer feed-forward network over per-unit features,
  `logits = W2 relu(W1 x + b1) + b2`, a softmax over the G groups per unit.

  Placer: group embeddings -> dense projection -> LSTM encoder over the G
  groups (in group-id order, as in the paper); an LSTM decoder emits one
  device per group, fed the previous device's embedding and the group's own
  projected embedding, with Luong ("general") attention over the encoder
  states; device logits are masked to the devices the group may use.
  """

  def __init__(self, *, num_unit_features: int, num_group_features: int,
               num_groups: int, num_devices: int, grouper_hidden: int,
               placer_hidden: int, device_embedding: int, seed: int,
               learning_rate: float, grouper_learning_rate: float,
               entropy_weight: float, grad_clip: float):
    super().__init__(name="hdp_policy")
    init = _Init(seed)
    f, e, g, d = (num_unit_features, num_group_features, num_groups,
                  num_devices)
    hg, h, k = grouper_hidden, placer_hidden, device_embedding
    self.num_groups = g
    self.num_devices = d
    self.hidden = h
    # Grouper.
    self.g_w1 = init.glorot([f, hg], "grouper_w1")
    self.g_b1 = init.zeros([hg], "grouper_b1")
    self.g_w2 = init.glorot([hg, g], "grouper_w2")
    self.g_b2 = init.zeros([g], "grouper_b2")
    # Placer.
    self.p_in_w = init.glorot([e, h], "placer_in_w")
    self.p_in_b = init.zeros([h], "placer_in_b")
    self.enc_w = init.glorot([h, 4 * h], "encoder_kernel")
    self.enc_u = init.glorot([h, 4 * h], "encoder_recurrent_kernel")
    self.enc_b = _lstm_bias(h, "encoder_bias")
    self.dev_emb = init.glorot([d + 1, k], "device_embedding")  # d = <start>
    self.dec_w_dev = init.glorot([k, 4 * h], "decoder_device_kernel")
    self.dec_w_x = init.glorot([h, 4 * h], "decoder_input_kernel")
    self.dec_u = init.glorot([h, 4 * h], "decoder_recurrent_kernel")
    self.dec_b = _lstm_bias(h, "decoder_bias")
    self.att_w = init.glorot([h, h], "attention_w")
    self.out_w1 = init.glorot([2 * h, h], "output_w1")
    self.out_b1 = init.zeros([h], "output_b1")
    self.out_w2 = init.glorot([h, d], "output_w2")
    self.out_b2 = init.zeros([d], "output_b2")
    self.grouper_vars = (self.g_w1, self.g_b1, self.g_w2, self.g_b2)
    self.placer_vars = (self.p_in_w, self.p_in_b, self.enc_w, self.enc_u,
                        self.enc_b, self.dev_emb, self.dec_w_dev,
                        self.dec_w_x, self.dec_u, self.dec_b, self.att_w,
                        self.out_w1, self.out_b1, self.out_w2, self.out_b2)
    self._adam = _Adam(
        self.grouper_vars + self.placer_vars,
        [grouper_learning_rate] * len(self.grouper_vars) +
        [learning_rate] * len(self.placer_vars))
    self._entropy_weight = float(entropy_weight)
    self._grad_clip = float(grad_clip)

    unit_x = tf.TensorSpec([None, f], tf.float32)
    groups = tf.TensorSpec([None, None], tf.int32)
    group_x = tf.TensorSpec([None, g, e], tf.float32)
    mask = tf.TensorSpec([None, g, d], tf.bool)
    devices = tf.TensorSpec([None, g], tf.int32)
    seed_spec = tf.TensorSpec([2], tf.int32)
    count = tf.TensorSpec([], tf.int32)
    self.sample_groups = tf.function(
        self._sample_groups, input_signature=[unit_x, count, seed_spec])
    self.sample_devices = tf.function(
        self._sample_devices, input_signature=[group_x, mask, seed_spec])
    self.train_step = tf.function(
        self._train_step,
        input_signature=[unit_x, groups, group_x, mask, devices,
                         tf.TensorSpec([None], tf.float32)])
    self.log_probs = tf.function(
        self._log_probs,
        input_signature=[unit_x, groups, group_x, mask, devices])

  # ---- grouper -------------------------------------------------------------

  def _grouper_logits(self, unit_x):
    hidden = tf.nn.relu(tf.matmul(unit_x, self.g_w1) + self.g_b1)
    return tf.matmul(hidden, self.g_w2) + self.g_b2

  def _sample_groups(self, unit_x, count, seed):
    """int32[count, U]: a group per unit for each of `count` samples."""
    logits = self._grouper_logits(unit_x)
    draws = tf.random.stateless_categorical(logits, count, seed=seed,
                                            dtype=tf.int32)
    return tf.transpose(draws)

  # ---- placer --------------------------------------------------------------

  def _encode(self, group_x):
    """(decoder input gates from the groups [G, B, 4H], encoder states
    [B, G, H], final h, c)."""
    x = tf.tanh(tf.einsum("bge,eh->gbh", group_x, self.p_in_w) + self.p_in_b)
    enc_gates = tf.einsum("gbh,hk->gbk", x, self.enc_w) + self.enc_b
    batch = tf.shape(x)[1]
    h = tf.zeros([batch, self.hidden])
    c = tf.zeros([batch, self.hidden])
    states = tf.TensorArray(tf.float32, size=self.num_groups)
    for t in tf.range(self.num_groups):
      h, c = _lstm_step(enc_gates[t], h, c, self.enc_u)
      states = states.write(t, h)
    enc = tf.transpose(states.stack(), [1, 0, 2])
    dec_gates = tf.einsum("gbh,hk->gbk", x, self.dec_w_x) + self.dec_b
    return dec_gates, enc, h, c

  def _head(self, h, enc, keys, mask):
    """Masked device logits [B, T, D] from decoder states h [B, T, H]."""
    scores = tf.einsum("bth,bsh->bts", h, keys)
    context = tf.einsum("bts,bsh->bth", tf.nn.softmax(scores), enc)
    out = tf.tanh(tf.matmul(tf.concat([h, context], -1), self.out_w1) +
                  self.out_b1)
    logits = tf.matmul(out, self.out_w2) + self.out_b2
    return tf.where(mask, logits, _NEG)

  def _sample_devices(self, group_x, mask, seed):
    """(int32[B, G] a device per group, decoded autoregressively; float[B]
    the log-probability of each sampled sequence)."""
    dec_gates, enc, h, c = self._encode(group_x)
    keys = tf.einsum("bsh,kh->bsk", enc, self.att_w)
    device_gates = tf.matmul(self.dev_emb, self.dec_w_dev)  # [D + 1, 4H]
    batch = tf.shape(group_x)[0]
    prev = tf.fill([batch], self.num_devices)
    log_prob = tf.zeros([batch])
    chosen = tf.TensorArray(tf.int32, size=self.num_groups)
    for t in tf.range(self.num_groups):
      h, c = _lstm_step(dec_gates[t] + tf.gather(device_gates, prev), h, c,
                        self.dec_u)
      logits = self._head(h[:, None], enc, keys, mask[:, t:t + 1])[:, 0]
      prev = tf.random.stateless_categorical(
          logits, 1, seed=seed + tf.stack([0, t]), dtype=tf.int32)[:, 0]
      log_prob += tf.gather(tf.nn.log_softmax(logits), prev, batch_dims=1)
      chosen = chosen.write(t, prev)
    return tf.transpose(chosen.stack()), log_prob

  def _placer_logits(self, group_x, mask, devices):
    """[B, G, D] masked logits, the decoder fed `devices` (teacher forcing)."""
    dec_gates, enc, h, c = self._encode(group_x)
    keys = tf.einsum("bsh,kh->bsk", enc, self.att_w)
    batch = tf.shape(group_x)[0]
    prev = tf.concat([tf.fill([batch, 1], self.num_devices),
                      devices[:, :-1]], axis=1)
    device_gates = tf.matmul(self.dev_emb, self.dec_w_dev)
    dec_gates += tf.transpose(tf.gather(device_gates, prev), [1, 0, 2])
    states = tf.TensorArray(tf.float32, size=self.num_groups)
    for t in tf.range(self.num_groups):
      h, c = _lstm_step(dec_gates[t], h, c, self.dec_u)
      states = states.write(t, h)
    hs = tf.transpose(states.stack(), [1, 0, 2])  # [B, G, H]
    return self._head(hs, enc, keys, mask)

  # ---- objective -----------------------------------------------------------

  def _log_probs(self, unit_x, groups, group_x, mask, devices):
    """(log p(grouping) [B], log p(placement | grouping) [B], entropy)."""
    group_logp = tf.nn.log_softmax(self._grouper_logits(unit_x))  # [U, G]
    picked = tf.gather(group_logp, tf.transpose(groups), batch_dims=1)
    lp_group = tf.reduce_sum(picked, axis=0)
    group_entropy = -tf.reduce_mean(
        tf.reduce_sum(tf.exp(group_logp) * group_logp, -1))
    place_logp = tf.nn.log_softmax(self._placer_logits(group_x, mask, devices))
    lp_place = tf.reduce_sum(
        tf.gather(place_logp, devices, batch_dims=2), axis=1)
    probs = tf.exp(place_logp)
    place_entropy = -tf.reduce_mean(tf.reduce_sum(
        tf.where(mask, probs * place_logp, 0.0), -1))
    return lp_group, lp_place, group_entropy + place_entropy

  def _train_step(self, unit_x, groups, group_x, mask, devices, advantage):
    """One REINFORCE update through both samples; returns (loss, entropy)."""
    with tf.GradientTape() as tape:
      lp_group, lp_place, entropy = self._log_probs(unit_x, groups, group_x,
                                                    mask, devices)
      loss = (-tf.reduce_mean(advantage * (lp_group + lp_place)) -
              self._entropy_weight * entropy)
    variables = self.grouper_vars + self.placer_vars
    grads = tape.gradient(loss, variables)
    if self._grad_clip > 0:
      grads, _ = tf.clip_by_global_norm(grads, self._grad_clip)
    self._adam.apply(grads)
    return loss, entropy


class _Adam(tf.Module):
  """Adam (Kingma & Ba) with a learning rate per variable."""

  def __init__(self, variables, learning_rates, beta1=0.9, beta2=0.999,
               epsilon=1e-8):
    super().__init__(name="adam")
    self._vars = tuple(variables)
    self._rates = tuple(float(r) for r in learning_rates)
    self._m = tuple(tf.Variable(tf.zeros_like(v)) for v in self._vars)
    self._v = tuple(tf.Variable(tf.zeros_like(v)) for v in self._vars)
    self._t = tf.Variable(0.0)
    self._b1, self._b2, self._eps = beta1, beta2, epsilon

  def apply(self, grads):
    self._t.assign_add(1.0)
    correction1 = 1.0 - tf.pow(self._b1, self._t)
    correction2 = 1.0 - tf.pow(self._b2, self._t)
    for var, grad, m, v, rate in zip(self._vars, grads, self._m, self._v,
                                     self._rates):
      if grad is None:
        continue
      grad = tf.convert_to_tensor(grad)  # embedding lookups give IndexedSlices
      m.assign(self._b1 * m + (1.0 - self._b1) * grad)
      v.assign(self._b2 * v + (1.0 - self._b2) * tf.square(grad))
      var.assign_sub(rate * (m / correction1) /
                     (tf.sqrt(v / correction2) + self._eps))
