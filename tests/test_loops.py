"""While loops: trip counts read from the graph, ops priced per iteration."""

import numpy as np
import tensorflow as tf
import tf_keras

from grappler_bridge import costs
from grappler_bridge import extract
from grappler_bridge import hardware

HARDWARE = {"CPU": hardware.HOST_CPU}


def _document(fn, *args):
  return costs.op_graph_document(extract.from_function(fn, *args), HARDWARE,
                                 name="loops")


def _node(document, suffix):
  (node,) = [n for n in document["nodes"] if n["name"].endswith(suffix)]
  return node


def test_counted_loop_prices_its_body_per_iteration():
  w = tf.Variable(tf.ones([32, 32]))

  def looped(x):
    _, y = tf.while_loop(lambda i, y: i < 5,
                         lambda i, y: (i + 1, tf.matmul(y, w, name="body")),
                         [tf.constant(0), x])
    return tf.matmul(y, w, name="after")

  document = _document(looped, tf.ones([32, 32]))
  assert document["metadata"]["loop_trips"] == [5]
  body, after = _node(document, "/body"), _node(document, "after")
  assert body["executions"] == 5 and "executions" not in after
  # Same op, same shapes: five times the price of the one outside the loop.
  np.testing.assert_allclose(body["cost"]["CPU"], 5 * after["cost"]["CPU"],
                             rtol=1e-3)


def test_nested_loops_multiply_and_unknown_counts_stay_one():
  def nested(x):
    def outer(i, y):
      _, y = tf.while_loop(lambda j, z: j < 4,
                           lambda j, z: (j + 1, tf.sin(z, name="inner")),
                           [tf.constant(0), y])
      return i + 1, y
    _, y = tf.while_loop(lambda i, y: i < 3, outer, [tf.constant(0), x])
    (y,) = tf.while_loop(lambda y: tf.reduce_sum(y) > 1.0,
                         lambda y: (tf.cos(y, name="unknown"),), [y])
    return y

  document = _document(nested, tf.ones([8]))
  assert sorted(document["metadata"]["loop_trips"],
                key=lambda t: -1 if t is None else t) == [None, 3, 4]
  assert _node(document, "/inner")["executions"] == 12
  assert "executions" not in _node(document, "/unknown")


def test_keras_lstm_loops_and_their_gradient_run_once_per_time_step():
  tf_keras.utils.set_random_seed(1)
  model = tf_keras.Sequential([tf_keras.layers.Embedding(20, 4),
                               tf_keras.layers.LSTM(8)])
  tokens = tf.ones([2, 6], tf.int32)
  model(tokens)

  def step(t):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(model(t))
    return tape.gradient(loss, model.trainable_variables)

  document = _document(step, tokens)
  assert document["metadata"]["loop_trips"] == [6, 6]
  in_loops = [n for n in document["nodes"]
              if n["op"] == "MatMul" and "/while" in n["name"]]
  assert len(in_loops) >= 3  # the step's and the gradient's
  assert all(n.get("executions") == 6 for n in in_loops)


def test_map_fn_scan_and_for_range_are_counted_but_a_bound_alone_is_not():
  w = tf.Variable(tf.ones([4, 4]))

  def loops(x, n):
    mapped = tf.map_fn(lambda row: tf.linalg.matvec(w, row), x)
    summed = tf.scan(lambda a, row: a + row, mapped)
    total = tf.constant(0.0)
    for i in tf.range(3):
      total += tf.reduce_sum(summed) * tf.cast(i, tf.float32)
    # At most 9 iterations, fewer if the data says so: not a count.
    _, capped = tf.while_loop(lambda i, y: tf.reduce_sum(y) < n,
                              lambda i, y: (i + 1, y * 2.0),
                              [tf.constant(0), summed],
                              maximum_iterations=9)
    return total + tf.reduce_sum(capped)

  document = _document(loops, tf.ones([5, 4]), tf.constant(100.0))
  trips = document["metadata"]["loop_trips"]
  # map_fn: 5 rows; scan without an initializer: the 4 after the first.
  assert sorted(t for t in trips if t is not None) == [3, 4, 5]
  assert trips.count(None) == 1


def test_keras3_lstm_bounded_by_an_unread_maximum_is_counted_by_its_time():
  # Keras 3 runs `time < steps` beside `loop_counter < maximum_iterations`,
  # a bound it computes at run time: the counted condition decides.
  import keras  # pylint: disable=g-import-not-at-top
  layer = keras.layers.LSTM(4)
  tokens = tf.ones([2, 7, 3])
  layer(tokens)
  document = _document(lambda t: layer(t), tokens)
  assert document["metadata"]["loop_trips"] == [7]
