"""A graph with while loops says what its prices leave out."""

import tensorflow as tf

from grappler_bridge import costs
from grappler_bridge import extract
from grappler_bridge import hardware
from tf_gdp.cost import loop_caveat
from tf_gdp.graph import generators
from tf_gdp.graph import json_io


def _document(fn, *args):
  return costs.op_graph_document(extract.from_function(fn, *args),
                                 {"CPU": hardware.HOST_CPU}, name="step")


def test_the_bridge_counts_lowered_loops():
  def two_loops(x):
    _, a = tf.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, a * 2.0),
                         [tf.constant(0), x])
    _, b = tf.while_loop(lambda i, b: i < 3, lambda i, b: (i + 1, b + a),
                         [tf.constant(0), a])
    return b

  assert _document(two_loops, tf.ones([2]))["metadata"]["while_loops"] == 2
  assert _document(tf.square, tf.ones([2]))["metadata"]["while_loops"] == 0


def _with_loops(graph, **metadata):
  return json_io.from_document({
      **json_io.to_document(graph), "metadata": {**graph.metadata, **metadata}})


def test_the_caveat_names_how_the_loop_ops_were_priced():
  graph = generators.random_layered_graph(10, width=2)
  assert loop_caveat.caveat(graph, "roofline") is None
  unread = _with_loops(graph, while_loops=2)  # no trip counts known
  roofline = loop_caveat.caveat(unread, "roofline")
  profiled = loop_caveat.caveat(unread, "profiled")
  assert roofline.startswith("2 while loops, run a number of times")
  assert "one iteration" in roofline and "all iterations" in profiled
  assert all("once per step" in text for text in (roofline, profiled))
  counted = loop_caveat.caveat(
      _with_loops(graph, while_loops=2, loop_trips=[6, 6]), "roofline")
  assert counted.startswith("2 while loops (6 iterations)")
  assert "once per iteration" in counted
  mixed = loop_caveat.caveat(
      _with_loops(graph, while_loops=2, loop_trips=[6, None]), "roofline")
  assert mixed.startswith("1 of 2 while loops run a number of times")
