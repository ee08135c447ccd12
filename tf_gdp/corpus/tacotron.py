"""A Tacotron 2 text-to-speech model's training step.

Shen et al., "Natural TTS Synthesis by Conditioning WaveNet on Mel
Spectrogram Predictions" (ICASSP 2018). Encoder: a character embedding,
three width-5 convolutions (`encoder/conv_{i}`, batch norm, ReLU) and a
bidirectional LSTM. The decoder is unrolled in Python, one scope
`decoder/step_{t}` per mel frame, as the autoregressive model runs, every
step on the same weights: a ReLU prenet on the previous ground-truth frame
(teacher forcing), an attention LSTM, location-sensitive attention (a
convolution over the attention weights summed so far keeps the alignment
moving forward), a decoder LSTM, and projections to the frame and a
stop-token logit. A postnet (`postnet/conv_{k}`) adds a residual to the
frames. Mean squared error before and after the postnet plus the stop
token's cross-entropy; Adam on gradients clipped to global norm 1, the
paper's recipe. No dropout or zoneout: they change no shape.
"""

from tf_gdp.corpus import training_steps

_KERNEL = 5
_ENCODER_CONVS = 3
_POSTNET_CONVS = 5


def tacotron(*, text_len: int, frames: int, batch: int, vocab: int = 148,
             embedding: int = 512, encoder_lstm: int = 256, prenet: int = 256,
             rnn: int = 1024, attention: int = 128, location_filters: int = 32,
             location_kernel: int = 31, mels: int = 80,
             postnet_channels: int = 512, learning_rate: float = 1e-3,
             clip_norm: float = 1.0, seed: int = 0):
  """The step: characters [batch, text_len] -> mel frames [batch, frames,
  mels] and stop-token logits [batch, frames], against targets of those
  shapes. The encoder's convolutions are `embedding` wide, its LSTM
  `encoder_lstm` each way; both decoder LSTMs are `rnn` wide."""
  if min(text_len, frames, batch) < 1:
    raise ValueError("text_len, frames and batch must be at least 1")
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras = tf_keras.layers
  memory_width = 2 * encoder_lstm

  def weights(name, **shapes):
    """A layer holding the named weights of a cell written in tf ops below
    (the LSTMs, the attention): every step that calls it reads the same."""
    layer = keras.Layer(name=name)
    for key, shape in shapes.items():
      setattr(layer, key, layer.add_weight(name=key, shape=shape, initializer=(
          "zeros" if key == "bias" else "glorot_uniform")))
    return layer

  def built(layer, inputs, rank=3):
    layer.build((None,) * (rank - 1) + (inputs,))
    return layer

  def lstm(name, inputs, units):
    return weights(name, kernel=(inputs, 4 * units), bias=(4 * units,),
                   recurrent_kernel=(units, 4 * units))

  def lstm_inputs(w, x):
    """x @ kernel + bias: the inputs' share of the gates."""
    return tf.nn.bias_add(tf.matmul(x, w.kernel), w.bias, name="inputs")

  def lstm_step(w, projected, state):
    """One LSTM step: the gates are the inputs' share plus h's."""
    h, c = state
    z = tf.add(projected, tf.matmul(h, w.recurrent_kernel), name="gates")
    i, f, g, o = tf.split(z, 4, axis=-1)
    c = tf.add(tf.sigmoid(f) * c, tf.sigmoid(i) * tf.tanh(g), name="c")
    return tf.multiply(tf.sigmoid(o), tf.tanh(c), name="h"), c

  def attend(w, query, processed, memory, cumulative):
    """Energies v^T tanh(W query + V memory + U (F * cumulative) + b), F the
    location filters; -> (context [batch, memory_width], weights)."""
    query = tf.matmul(query, w.query_kernel, name="query")
    previous = tf.expand_dims(cumulative, -1, name="cumulative_weights")
    location = tf.nn.conv1d(previous, w.location_filters, 1, "SAME",
                            name="location_conv")
    location = tf.reshape(tf.matmul(
        tf.reshape(location, [batch * text_len, location_filters]),
        w.location_kernel), [batch, text_len, attention],
                          name="location_features")
    keys = tf.add(processed, location, name="keys")
    hidden = tf.tanh(keys + tf.expand_dims(query + w.bias, 1), name="hidden")
    energies = tf.reduce_sum(hidden * w.v, axis=-1, name="energies")
    weights = tf.nn.softmax(energies, axis=-1, name="weights")
    context = tf.squeeze(tf.matmul(tf.expand_dims(weights, 1), memory), 1,
                         name="context")
    return context, weights

  def conv_block(channels, inputs):
    return (built(keras.Conv1D(channels, _KERNEL, padding="same",
                               use_bias=False, name="conv"), inputs),
            built(keras.BatchNormalization(name="batch_norm"), channels))

  with unallocated_variables.scope():
    characters = keras.Embedding(vocab, embedding, name="characters")
    characters.build((None,))
    with tf.name_scope("encoder"):
      encoder = [conv_block(embedding, embedding)
                 for _ in range(_ENCODER_CONVS)]
      directions = [lstm(name, embedding, encoder_lstm)
                    for name in ("forward", "backward")]
    with tf.name_scope("decoder"):
      with tf.name_scope("prenet"):
        prenets = [built(keras.Dense(prenet, "relu", name=name), width, 2)
                   for name, width in (("first", mels), ("second", prenet))]
      attention_lstm = lstm("attention_lstm", prenet + memory_width, rnn)
      attender = weights(
          "attention", query_kernel=(rnn, attention), bias=(attention,),
          memory_kernel=(memory_width, attention), v=(attention,),
          location_filters=(location_kernel, 1, location_filters),
          location_kernel=(location_filters, attention))
      decoder_lstm = lstm("decoder_lstm", rnn + memory_width, rnn)
      to_frame, to_stop = (built(keras.Dense(n, name=name), rnn + memory_width,
                                 2) for n, name in ((mels, "frame"),
                                                    (1, "stop_token")))
    with tf.name_scope("postnet"):
      postnet = [conv_block(postnet_channels if k < _POSTNET_CONVS - 1
                            else mels, mels if k == 0 else postnet_channels)
                 for k in range(_POSTNET_CONVS)]
    layers = [characters, *directions, *prenets, attention_lstm, attender,
              decoder_lstm, to_frame, to_stop]
    layers += [l for pair in encoder + postnet for l in pair]
    variables = [v for l in layers for v in l.trainable_variables]
    optimizer = training_steps.ClippedAdam(variables, learning_rate, clip_norm)

  rng = tf.random.Generator.from_seed(seed)
  text = tf.Variable(rng.uniform([batch, text_len], 0, vocab, tf.int32),
                     trainable=False, name="text")
  targets = tf.Variable(rng.normal([batch, frames, mels]), trainable=False,
                        name="mel_targets")
  # The stop token is 1 on each utterance's last frame.
  stop_targets = tf.Variable(tf.one_hot([frames - 1] * batch, frames),
                             trainable=False, name="stop_targets")

  def encode():
    x = characters(text)
    with tf.name_scope("encoder"):
      for i, (conv, norm) in enumerate(encoder):
        with tf.name_scope(f"conv_{i}"):
          x = tf.nn.relu(norm(conv(x), training=True), name="relu")
      outputs = []
      for w, order in zip(directions, (1, -1)):  # forward, backward
        with tf.name_scope(w.name):
          # The inputs' share of every position's gates in one product.
          projected = tf.unstack(tf.reshape(
              lstm_inputs(w, tf.reshape(x, [batch * text_len, embedding])),
              [batch, text_len, 4 * encoder_lstm]), axis=1)
          state, hs = (tf.zeros([batch, encoder_lstm]),) * 2, []
          for gates in projected[::order]:
            state = lstm_step(w, gates, state)
            hs.append(state[0])
          outputs.append(tf.stack(hs[::order], axis=1))
      return tf.concat(outputs, axis=-1, name="memory")

  def decode(memory):
    with tf.name_scope("decoder"):
      processed = tf.reshape(tf.matmul(
          tf.reshape(memory, [batch * text_len, memory_width]),
          attender.memory_kernel), [batch, text_len, attention],
                             name="processed_memory")  # once for every step
      # Teacher forcing: step t reads ground-truth frame t - 1.
      previous = [tf.zeros([batch, mels], name="go_frame")] + tf.unstack(
          targets, axis=1, name="previous_frames")[:-1]
      zeros = tf.zeros([batch, rnn])
      attention_state = decoder_state = (zeros, zeros)
      context = tf.zeros([batch, memory_width])
      cumulative = tf.zeros([batch, text_len])  # earlier steps' weights
      predicted, stops = [], []
      for t in range(frames):
        with tf.name_scope(f"step_{t}"):
          with tf.name_scope("prenet"):
            x = prenets[1](prenets[0](previous[t]))
          with tf.name_scope("attention_lstm"):
            attention_state = lstm_step(attention_lstm, lstm_inputs(
                attention_lstm, tf.concat([x, context], -1)), attention_state)
          with tf.name_scope("attention"):
            if t:
              cumulative = tf.add(cumulative, weights, name="cumulative")
            context, weights = attend(attender, attention_state[0],
                                      processed, memory, cumulative)
          with tf.name_scope("decoder_lstm"):
            decoder_state = lstm_step(decoder_lstm, lstm_inputs(
                decoder_lstm, tf.concat([attention_state[0], context], -1)),
                                      decoder_state)
          output = tf.concat([decoder_state[0], context], -1, name="output")
          predicted.append(to_frame(output))
          stops.append(to_stop(output))
      return (tf.stack(predicted, axis=1, name="mel"),
              tf.concat(stops, axis=1, name="stop_logits"))

  def forward():
    mel, stop_logits = decode(encode())
    y = mel
    with tf.name_scope("postnet"):
      for k, (conv, norm) in enumerate(postnet):
        with tf.name_scope(f"conv_{k}"):
          y = norm(conv(y), training=True)
          y = tf.tanh(y, name="tanh") if k < _POSTNET_CONVS - 1 else y
      refined = tf.add(mel, y, name="residual")
    return mel, refined, stop_logits

  def loss(outputs):
    mel, refined, stop_logits = outputs
    with tf.name_scope("loss"):
      before = tf.reduce_mean(tf.square(mel - targets), name="mel_before")
      after = tf.reduce_mean(tf.square(refined - targets), name="mel_after")
      stop = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
          stop_targets, stop_logits), name="stop_token")
      return tf.add_n([before, after, stop], name="total")

  return training_steps.supervised_step(tf, forward, variables, loss,
                                        optimizer)
