"""A speech recognizer's acoustic-model training step from tf_keras layers.

DeepSpeech-2's shape: a spectrogram through two 2-D convolutions (strided in
time and frequency, batch norm, clipped ReLU), then bidirectional GRUs over
the frames and a per-frame softmax. Trained here on frame-aligned labels
(softmax cross-entropy per frame, as hybrid acoustic models are), with Adam.
The GRUs are unrolled (`unroll=True`), so the step is a static graph whose
two directions run side by side and meet at every layer: a shape no other
corpus family has.
"""

from tf_gdp.corpus import training_steps


def acoustic_model(*, layers: int, hidden: int, frames: int, batch: int,
                   features: int = 161, conv_filters: int = 32,
                   classes: int = 29, learning_rate: float = 1e-3,
                   seed: int = 0):
  """The step: spectrogram [batch, frames, features] -> per-frame classes.

  The first convolution halves the frames (stride 2 in time), so the GRUs
  run `frames // 2` steps; `frames` must be even.
  """
  if frames % 2:
    raise ValueError(f"frames must be even, got {frames}")
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  keras_layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  spectrogram = tf.Variable(rng.normal([batch, frames, features]),
                            trainable=False, name="spectrogram")
  steps = frames // 2
  labels = tf.Variable(rng.uniform([batch, steps], 0, classes, dtype=tf.int32),
                       trainable=False, name="frame_labels")

  inputs = tf_keras.Input(shape=(frames, features), batch_size=batch)
  x = keras_layers.Reshape((frames, features, 1), name="to_image")(inputs)
  for i, (kernel, strides) in enumerate((((11, 41), (2, 2)),
                                         ((11, 21), (1, 2)))):
    x = keras_layers.Conv2D(conv_filters, kernel, strides=strides,
                            padding="same", use_bias=False,
                            name=f"conv{i}")(x)
    x = keras_layers.BatchNormalization(name=f"conv{i}/norm")(x)
    x = keras_layers.ReLU(max_value=20.0, name=f"conv{i}/clipped_relu")(x)
  x = keras_layers.Reshape((steps, x.shape[2] * conv_filters),
                           name="to_frames")(x)
  for i in range(layers):
    x = keras_layers.Bidirectional(
        keras_layers.GRU(hidden, return_sequences=True, unroll=True,
                         reset_after=True), name=f"bigru{i}")(x)
    x = keras_layers.BatchNormalization(name=f"bigru{i}/norm")(x)
  outputs = keras_layers.Dense(classes, name="frame_logits")(x)
  model = tf_keras.Model(inputs, outputs, name="acoustic_model")
  return training_steps.adam_classifier_step(tf, model, spectrogram, labels,
                                             learning_rate)
