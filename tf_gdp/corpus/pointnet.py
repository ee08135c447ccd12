"""A point-cloud model's training step from tf_keras layers: PointNet.

Qi et al., "PointNet: Deep Learning on Point Sets for 3D Classification and
Segmentation" (CVPR 2017). Every point goes through the same MLP (a
kernel-1 Conv1D with batch norm), twice behind a learned transform: a small
network of its own (the T-Net: per-point MLP, max over the points, dense
layers) predicts a 3x3 matrix for the coordinates and a 64x64 matrix for
the features, initialised to the identity. A max over the points gives the
global feature. The classifier reads it alone; the segmenter tiles it back
onto every point's own 64 features and labels each point. Softmax
cross-entropy plus the paper's penalty keeping the feature transform near
orthogonal (weight 0.001), Adam.
"""

from tf_gdp.corpus import training_steps

_ORTHOGONALITY_WEIGHT = 1e-3


def pointnet(*, points: int, batch: int, segment: bool, classes: int,
             learning_rate: float = 1e-3, seed: int = 0):
  """The step: clouds [batch, points, 3] -> `classes` logits per cloud, or
  per point if `segment`."""
  tf, tf_keras = training_steps.libraries()
  tf_keras.backend.clear_session()
  layers = tf_keras.layers
  rng = tf.random.Generator.from_seed(seed)
  clouds = tf.Variable(rng.normal([batch, points, 3]), trainable=False,
                       name="clouds")
  label_shape = [batch, points] if segment else [batch]
  labels = tf.Variable(rng.uniform(label_shape, 0, classes, dtype=tf.int32),
                       trainable=False, name="point_labels")

  def shared_mlp(x, widths, name):
    for i, width in enumerate(widths):
      x = layers.Conv1D(width, 1, use_bias=False, name=f"{name}/conv{i}")(x)
      x = layers.BatchNormalization(name=f"{name}/norm{i}")(x)
      x = layers.ReLU(name=f"{name}/relu{i}")(x)
    return x

  def transform(x, size, name):
    """The T-Net: a size x size matrix from the cloud, identity at first."""
    y = shared_mlp(x, (64, 128, 1024), f"{name}/points")
    y = layers.GlobalMaxPooling1D(name=f"{name}/max")(y)
    for i, width in enumerate((512, 256)):
      y = layers.Dense(width, use_bias=False, name=f"{name}/dense{i}")(y)
      y = layers.BatchNormalization(name=f"{name}/dense_norm{i}")(y)
      y = layers.ReLU(name=f"{name}/dense_relu{i}")(y)
    identity = tf_keras.initializers.Constant(
        tf.reshape(tf.eye(size), [-1]).numpy())
    y = layers.Dense(size * size, kernel_initializer="zeros",
                     bias_initializer=identity, name=f"{name}/matrix")(y)
    return layers.Reshape((size, size), name=f"{name}/square")(y)

  inputs = tf_keras.Input(shape=(points, 3), batch_size=batch)
  aligned = layers.Dot(axes=(2, 1), name="input_transform/apply")(
      [inputs, transform(inputs, 3, "input_transform")])
  local = shared_mlp(aligned, (64, 64), "point_mlp")
  feature_matrix = transform(local, 64, "feature_transform")
  local = layers.Dot(axes=(2, 1), name="feature_transform/apply")(
      [local, feature_matrix])
  x = shared_mlp(local, (64, 128, 1024), "global_mlp")
  global_feature = layers.GlobalMaxPooling1D(name="global_max")(x)
  if segment:
    tiled = layers.RepeatVector(points, name="global_to_points")(
        global_feature)
    x = layers.Concatenate(name="point_and_global")([local, tiled])
    x = shared_mlp(x, (512, 256, 128), "segment_mlp")
    logits = layers.Conv1D(classes, 1, name="point_logits")(x)
  else:
    x = global_feature
    for i, width in enumerate((512, 256)):
      x = layers.Dense(width, use_bias=False, name=f"head/dense{i}")(x)
      x = layers.BatchNormalization(name=f"head/norm{i}")(x)
      x = layers.ReLU(name=f"head/relu{i}")(x)
    x = layers.Dropout(0.3, name="head/dropout")(x)
    logits = layers.Dense(classes, name="logits")(x)
  model = tf_keras.Model(inputs, [logits, feature_matrix], name="pointnet")

  def loss(outputs):
    logits, matrix = outputs
    cross_entropy = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    gram = tf.matmul(matrix, matrix, transpose_b=True)
    off = tf.reduce_mean(tf.reduce_sum(
        tf.square(gram - tf.eye(64)), axis=[1, 2]))
    return cross_entropy + _ORTHOGONALITY_WEIGHT * off

  variables = model.trainable_variables
  return training_steps.supervised_step(
      tf, lambda: model(clouds, training=True), variables, loss,
      training_steps.Optimizer(variables, "adam", learning_rate))
