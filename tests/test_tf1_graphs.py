"""Graphs written by TF1 code: ref variables, v1 SavedModels, device pins."""

import numpy as np
import pytest
import tensorflow as tf

from grappler_bridge import extract
from grappler_bridge import graph_view
from grappler_bridge import runnable
from tf_gdp import graph_specs
from tf_gdp import place_batch
from tf_gdp import placing
from tf_gdp.cost import topology as topology_lib

V1 = tf.compat.v1
DEVICES = "local-cpus:2"


def _need_two_cpus():
  if len(tf.config.list_logical_devices("CPU")) < 2:
    pytest.skip("needs two logical CPU devices")


def _v1_training_graph(resource_variables: bool):
  """A TF1 training step: v1 cond and while loop, Momentum, a global step."""
  graph = tf.Graph()
  with graph.as_default():
    x = V1.placeholder(tf.float32, [4, 6], name="x")
    y = V1.placeholder(tf.int32, [4], name="y")
    with V1.variable_scope("net", use_resource=resource_variables):
      w1 = V1.get_variable("w1", [6, 8])
      w2 = V1.get_variable("w2", [8, 3])
      h = tf.nn.relu(tf.matmul(x, w1))
      h = V1.cond(tf.reduce_sum(h) > 0, lambda: h * 2.0, lambda: h)
      _, h = V1.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a * 0.5),
                           [tf.constant(0), h])
      logits = tf.matmul(h, w2)
    loss = tf.reduce_mean(V1.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits), name="loss")
    step = V1.train.get_or_create_global_step()
    train = V1.train.MomentumOptimizer(0.1, 0.9).minimize(
        loss, global_step=step, name="train")
  return graph, x, y, loss, train


def _v1_saved_model(path: str, resource_variables: bool) -> str:
  graph, x, y, loss, _ = _v1_training_graph(resource_variables)
  with graph.as_default(), V1.Session(graph=graph) as session:
    session.run(V1.global_variables_initializer())
    builder = V1.saved_model.Builder(path)
    builder.add_meta_graph_and_variables(
        session, ["serve"], signature_def_map={
            "serving_default": V1.saved_model.predict_signature_def(
                {"x": x, "y": y}, {"loss": loss})})
    builder.save()
  return path


def test_ref_variable_training_graph_runs_from_its_metagraph(tmp_path):
  # Its ref variables live in the session: they are initialized as a bare
  # graph's VarHandleOps are, and two steps train them.
  graph, _, _, _, train = _v1_training_graph(resource_variables=False)
  path = str(tmp_path / "v1.meta")
  with graph.as_default():
    V1.add_to_collection("train_op", train)
    V1.train.export_meta_graph(path, graph=graph)
  extracted = extract.from_graph_file(path)
  ops = {node.op for node in extracted.graph_def.node}
  assert "VariableV2" in ops and "ApplyMomentum" in ops  # ref variables
  made = runnable.runnable_graph(graph_view.as_graph(extracted), {})
  assert set(made.variables) >= {"net/w1", "net/w2", "global_step"}
  step = made.imported(extracted.fetches)
  with V1.Session(graph=step.graph) as session:
    session.run(step.init_ops, step.init_feeds)
    seen = [session.run("net/w1:0")]
    for _ in range(2):
      session.run(step.targets, step.feeds)
      seen.append(session.run("net/w1:0"))
  assert np.isfinite(seen).all()
  assert not np.allclose(seen[0], seen[1])
  assert not np.allclose(seen[1], seen[2])


def test_a_train_op_collection_of_tensors_names_their_ops(tmp_path):
  # TF1 code puts tensors in the collection too (`loss:0`), and a control
  # input spelling (`^train`) names an op as well.
  graph, _, _, loss, train = _v1_training_graph(resource_variables=True)
  path = str(tmp_path / "tensors.meta")
  with graph.as_default():
    V1.add_to_collection("train_op", loss)
    V1.add_to_collection("train_op", train)
    meta_graph = V1.train.export_meta_graph(graph=graph)
  meta_graph.collection_def["train_op"].node_list.value.append("^train")
  with open(path, "wb") as f:
    f.write(meta_graph.SerializeToString())
  extracted = extract.from_graph_file(path)
  assert sorted(extracted.fetches) == ["loss", "train"]
  assert {"loss", "train"} <= {node.name for node in extracted.graph_def.node}


def test_v1_saved_model_is_placed_and_written_back_with_its_input_names(
    tmp_path):
  _need_two_cpus()
  source = _v1_saved_model(str(tmp_path / "v1_model"), resource_variables=True)
  loaded = graph_specs.load(source, devices=DEVICES)
  topology = topology_lib.get(DEVICES)
  result = placing.place(loaded.graph, topology, "round_robin", compare=())
  out = tmp_path / "out"
  place_batch.write_outputs(str(out), loaded, topology, result,
                            pictures=False, write_graph=True)
  serve = tf.saved_model.load(
      str(out / "placed_saved_model")).signatures["serving_default"]
  assert sorted(serve.structured_input_signature[1]) == ["x", "y"]
  original = tf.saved_model.load(source).signatures["serving_default"]
  x = tf.random.stateless_normal([4, 6], seed=[1, 2])
  y = tf.constant([0, 1, 2, 1])
  np.testing.assert_allclose(serve(x=x, y=y)["loss"].numpy(),
                             original(x=x, y=y)["loss"].numpy(), rtol=1e-5)


def test_ref_variable_saved_model_cannot_be_written_back(tmp_path):
  source = _v1_saved_model(str(tmp_path / "v1_ref"), resource_variables=False)
  out = tmp_path / "out"
  (outcome,) = place_batch.place_many(
      source, DEVICES, str(out), method="single_device", compare=(),
      pictures=False, write_graph=True)
  assert outcome.result is None
  assert "TF1 reference variables" in outcome.error
  assert not out.exists() or not any(out.rglob("placement.json"))


def test_graph_file_pinned_to_another_local_device_is_profiled(tmp_path):
  # The profile runs every op on the first device but a pinned one.
  _need_two_cpus()
  graph = tf.Graph()
  with graph.as_default():
    x = V1.placeholder(tf.float32, [16, 16], name="x")
    w = tf.Variable(tf.ones([16, 16]), name="w")
    with tf.device("/device:CPU:1"):
      y = tf.matmul(x, w, name="pinned")
    tf.reduce_sum(tf.matmul(y, w), name="out")
  path = str(tmp_path / "pinned.pb")
  tf.io.write_graph(graph.as_graph_def(), str(tmp_path), "pinned.pb",
                    as_text=False)
  (outcome,) = place_batch.place_many(
      path, DEVICES, str(tmp_path / "out"), method="m_etf", compare=(),
      pictures=False)
  assert outcome.error is None
  graph = graph_specs.load(path, devices=DEVICES).graph
  index = graph.node_names.index("pinned")
  assert outcome.result.placement[index] == 1
  report = (tmp_path / "out" / "pinned.pb" / "report.json").read_text()
  assert '"source": "profiled"' in report
