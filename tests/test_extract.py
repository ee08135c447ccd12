"""Extraction: nested functions and control flow end up as one flat graph."""

import os

import pytest
import tensorflow as tf
from google.protobuf import text_format

from grappler_bridge import errors
from grappler_bridge import extract


@tf.function
def _inner(x):
  return tf.nn.relu(x) * 2.0


@tf.function
def _middle(x):
  return _inner(x) + 1.0


def _control_flow_step(variable):
  @tf.function
  def step(x):
    y = _middle(tf.matmul(x, variable))
    _, y = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 0.5),
                         [tf.constant(0), y])
    z = tf.cond(tf.reduce_sum(y) > 0, lambda: y * 2.0, lambda: y - 1.0)
    variable.assign_add(z)
    return tf.reduce_sum(z)
  return step


def _ops(extracted):
  return {node.op for node in extracted.graph_def.node}


def test_nested_functions_and_control_flow_are_flattened():
  variable = tf.Variable(tf.ones([3, 3]))
  extracted = extract.from_function(_control_flow_step(variable), tf.ones([3, 3]))
  ops = _ops(extracted)
  assert not ops & {"PartitionedCall", "StatefulPartitionedCall", "While",
                    "StatelessWhile", "If", "StatelessIf"}
  # the while loop and the cond were lowered to dataflow control flow ...
  assert {"Enter", "Exit", "NextIteration", "Merge", "Switch", "LoopCond"} <= ops
  # ... and the nested functions' bodies are inlined as real ops.
  assert {"Relu", "MatMul", "AddV2"} <= ops
  assert not extracted.graph_def.library.function


def test_jit_compiled_functions_are_inlined_too():
  # Keras builds grouped convolutions as such a function; Grappler alone
  # would leave the call in the graph.
  jitted = tf.function(lambda x: tf.nn.relu(x) * 3.0, jit_compile=True)
  extracted = extract.from_function(lambda x: jitted(tf.square(x)),
                                    tf.ones([2, 2]))
  ops = _ops(extracted)
  assert "Relu" in ops and not ops & {"PartitionedCall",
                                      "StatefulPartitionedCall"}


def test_keras_recurrent_layers_are_inlined_to_their_loop():
  import tf_keras  # pylint: disable=g-import-not-at-top
  layer = tf_keras.layers.LSTM(4)
  tokens = tf.ones([2, 3, 5])
  layer(tokens)

  def step(x):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(layer(x))
    return tape.gradient(loss, layer.trainable_variables)

  ops = _ops(extract.from_function(step, tokens))
  assert not ops & {"PartitionedCall", "StatefulPartitionedCall"}
  assert {"Enter", "NextIteration", "MatMul"} <= ops


def test_while_ops_built_directly_are_lowered_too():
  # `tf.nn.ctc_loss` scans with a `While` op it builds itself, without the
  # attribute `tf.while_loop` sets for lowering.
  labels = tf.constant([[1, 2], [2, 1]])

  def step(logits):
    return tf.nn.ctc_loss(labels, logits, tf.fill([2], 2), tf.fill([2], 4),
                          logits_time_major=False, blank_index=-1)

  ops = _ops(extract.from_function(step, tf.ones([2, 4, 3])))
  assert not ops & {"While", "StatelessWhile", "PartitionedCall",
                    "StatefulPartitionedCall"}
  assert {"Enter", "NextIteration", "LoopCond"} <= ops


def test_variable_updates_are_fetches():
  variable = tf.Variable(tf.ones([3, 3]))
  extracted = extract.from_function(_control_flow_step(variable), tf.ones([3, 3]))
  names = {node.name: node.op for node in extracted.graph_def.node}
  assert all(f in names for f in extracted.fetches)
  assert "AssignAddVariableOp" in {names[f] for f in extracted.fetches}
  assert list(extracted.meta_graph.collection_def["train_op"].node_list.value) == (
      extracted.fetches)
  assert extracted.arg_names == ["x"]
  assert len(extracted.capture_names) == 1


def test_side_effect_fetches_follow_their_names():
  # TF keeps a function's control outputs in a set; the fetch list must not
  # inherit its order, or two traces of one step record two graphs.
  variables = [tf.Variable(1.0, name=f"v{i}") for i in range(24)]

  def step(x):
    for variable in reversed(variables):
      variable.assign_add(x)
    return x * 2.0

  extracted = extract.from_function(step, tf.ones([]))
  side_effects = extracted.fetches[1:]
  assert len(side_effects) == 24
  assert side_effects == sorted(side_effects)


def test_concrete_function_and_plain_python_function():
  concrete = tf.function(lambda x: tf.square(x)).get_concrete_function(
      tf.TensorSpec([2], tf.float32))
  assert "Square" in _ops(extract.from_concrete_function(concrete))
  assert "Sqrt" in _ops(extract.from_function(tf.sqrt, tf.ones([2])))


def _write_graph_files(tmp_path):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2, 2], name="x")
    tf.identity(tf.matmul(x, x), name="out")
  binary = tmp_path / "g.pb"
  binary.write_bytes(graph.as_graph_def().SerializeToString())
  text = tmp_path / "g.pbtxt"
  text.write_text(text_format.MessageToString(graph.as_graph_def()))
  meta = tmp_path / "g.meta"
  meta.write_bytes(tf.compat.v1.train.export_meta_graph(
      graph_def=graph.as_graph_def(), graph=graph).SerializeToString())
  return binary, text, meta


def test_graph_files_binary_text_and_metagraph(tmp_path):
  for path in _write_graph_files(tmp_path):
    extracted = extract.from_graph_file(str(path))
    assert extracted.fetches == ["out"], path
    assert "MatMul" in _ops(extracted)


def test_saved_model_signature(tmp_path):
  module = tf.Module()
  module.w = tf.Variable(tf.ones([2, 2]))
  module.f = tf.function(lambda x: tf.matmul(x, module.w),
                         input_signature=[tf.TensorSpec([1, 2], tf.float32)])
  tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.f)
  extracted = extract.from_saved_model(str(tmp_path / "sm"))
  assert "MatMul" in _ops(extracted)
  with pytest.raises(errors.GraphLoadError, match="no signature 'nope'"):
    extract.from_saved_model(str(tmp_path / "sm"), "nope")


@pytest.mark.parametrize("content,message", [
    (b"", "file is empty"),
    (os.urandom(2048), "not a binary GraphDef or MetaGraphDef|holds no graph"),
    (None, "no such file"),
])
def test_bad_graph_files(tmp_path, content, message):
  path = tmp_path / "bad.pb"
  if content is not None:
    path.write_bytes(content)
  with pytest.raises(errors.GraphLoadError, match=message) as info:
    extract.from_graph_file(str(path))
  assert "\n" not in str(info.value)


def test_a_metagraph_of_an_empty_graph_says_so(tmp_path):
  path = tmp_path / "empty.pb"
  graph = tf.Graph()
  path.write_bytes(tf.compat.v1.train.export_meta_graph(
      graph_def=graph.as_graph_def(), graph=graph).SerializeToString())
  with pytest.raises(errors.GraphLoadError, match="graph has no nodes"):
    extract.from_graph_file(str(path))


def test_truncated_and_syntax_error_files(tmp_path):
  binary, text, _ = _write_graph_files(tmp_path)
  truncated = tmp_path / "t.pb"
  truncated.write_bytes(binary.read_bytes()[:-7])
  broken = tmp_path / "b.pbtxt"
  broken.write_text(text.read_text().replace("}", "", 1))
  for path in (truncated, broken):
    with pytest.raises(errors.GraphLoadError):
      extract.from_graph_file(str(path))
