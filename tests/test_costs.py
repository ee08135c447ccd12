"""Tests for grappler_bridge.costs and grappler_bridge.hardware (tiny graphs)."""

import pytest

from grappler_bridge import constraints
from grappler_bridge import costs
from grappler_bridge import errors
from grappler_bridge import extract
from grappler_bridge import hardware
import tensorflow as tf

from tf_gdp.graph import json_io

_BOTH = {"GPU": hardware.P100, "CPU": hardware.HOST_CPU}


def _by_name(document):
  return {node["name"]: node for node in document["nodes"]}


def _by_op(document, op):
  return [node for node in document["nodes"] if node["op"] == op]


def _assert_acyclic(document):
  num_nodes = len(document["nodes"])
  indegree = [0] * num_nodes
  successors = [[] for _ in range(num_nodes)]
  for edge in document["edges"]:
    successors[edge["src"]].append(edge["dst"])
    indegree[edge["dst"]] += 1
  ready = [i for i in range(num_nodes) if indegree[i] == 0]
  visited = 0
  while ready:
    visited += 1
    for nxt in successors[ready.pop()]:
      indegree[nxt] -= 1
      if indegree[nxt] == 0:
        ready.append(nxt)
  assert visited == num_nodes, "edges have a cycle"


@pytest.fixture(scope="module")
def train_step():
  """A training step: matmul + conv forward, gradients, in-place updates."""
  w = tf.Variable(tf.ones([64, 32]))
  k = tf.Variable(tf.ones([3, 3, 4, 8]))

  @tf.function
  def step(x, img):
    with tf.GradientTape() as tape:
      loss = (tf.reduce_sum(tf.matmul(x, w)) +
              tf.reduce_sum(tf.nn.conv2d(img, k, 1, "SAME")))
    grad_w, grad_k = tape.gradient(loss, [w, k])
    w.assign_sub(0.1 * grad_w)
    k.assign_sub(0.1 * grad_k)
    return loss, tf.strings.as_string(loss)

  extracted = extract.from_function(step, tf.ones([128, 64]),
                                    tf.ones([2, 16, 16, 4]))
  return extracted, costs.op_graph_document(extracted, _BOTH, name="step")


def test_document_is_valid_op_graph_json(train_step):
  extracted, document = train_step
  graph = json_io.from_document(document)
  assert graph.num_nodes == len(extracted.graph_def.node)
  assert document["format"] == "tf-gdp-opgraph" and document["version"] == 1
  assert set(document["fetches"]) == set(extracted.fetches)
  assert document["metadata"]["cost_source"] == {
      "GPU": "roofline:p100", "CPU": "roofline:host-cpu"}


def test_edge_bytes_are_source_output_bytes(train_step):
  _, document = train_step
  nodes = document["nodes"]
  matmul = _by_name(document)["MatMul"]
  assert matmul["output_shapes"] == [[128, 32]]
  assert matmul["output_bytes"] == 128 * 32 * 4
  for edge in document["edges"]:
    src = nodes[edge["src"]]
    if edge["output"] == -1:
      assert edge["bytes"] == 0
    elif len(src["output_shapes"]) == 1:
      assert edge["bytes"] == src["output_bytes"]


def test_matmul_cost_is_flops_over_peak():
  m, k, n = 512, 1024, 1024

  @tf.function
  def matmul(a, b):
    return tf.matmul(a, b)

  extracted = extract.from_function(matmul, tf.ones([m, k]), tf.ones([k, n]))
  document = costs.op_graph_document(extracted, _BOTH, name="matmul")
  node, = _by_op(document, "MatMul")
  spec = hardware.P100
  compute_us = 2 * m * n * k / (spec.peak_gflops * 1e3)
  memory_us = 4 * (m * k + k * n + m * n) / (spec.mem_bandwidth_gbps * 1e3)
  assert compute_us > memory_us  # the test is about the FLOP term
  assert node["cost"]["GPU"] == pytest.approx(
      spec.launch_overhead_us + compute_us, rel=1e-3)
  assert document["metadata"]["total_gflops"] == pytest.approx(
      2 * m * n * k / 1e9, rel=1e-6)


def test_compute_ops_cost_more_than_zero_and_sources_cost_zero(train_step):
  _, document = train_step
  compute_ops = {"MatMul", "Conv2D", "Conv2DBackpropFilter", "Sum", "Mul",
                 "AddV2", "Tile", "AssignSubVariableOp", "AsString"}
  seen = set()
  for node in document["nodes"]:
    if node["op"] in compute_ops:
      seen.add(node["op"])
      assert min(node["cost"].values()) > 0, node["name"]
    if node["op"] in ("Const", "Placeholder", "NoOp"):
      assert max(node["cost"].values()) == 0, node["name"]
  assert seen == compute_ops
  conv, = _by_op(document, "Conv2D")
  beyond_launch = {kind: conv["cost"][kind] - spec.launch_overhead_us
                   for kind, spec in _BOTH.items()}
  assert beyond_launch["CPU"] > beyond_launch["GPU"] > 0


def test_ops_no_fetch_needs_cost_nothing_and_receive_nothing(train_step):
  # The gradient of the image input is built by autodiff but never used:
  # the session prunes it, so it is free, its inputs are not sent to it,
  # and the ops of the step still cost what they did.
  _, document = train_step
  unused, = _by_op(document, "Conv2DBackpropInput")
  assert max(unused["cost"].values()) == 0 and unused["output_bytes"] == 0
  index = [n["name"] for n in document["nodes"]].index(unused["name"])
  assert not [e for e in document["edges"] if e["dst"] == index]
  assert document["metadata"]["unneeded_nodes"] >= 1
  filter_grad, = _by_op(document, "Conv2DBackpropFilter")
  assert min(filter_grad["cost"].values()) > 0


def test_variable_ops_share_a_colocation_group(train_step):
  _, document = train_step
  by_name = _by_name(document)
  handle = "MatMul/ReadVariableOp/resource"
  members = [n for n in document["nodes"]
             if n.get("colocation_group") == handle]
  assert {n["op"] for n in members} == {
      "Placeholder", "ReadVariableOp", "AssignSubVariableOp"}
  assert by_name[handle]["memory_bytes"] == 64 * 32 * 4
  assert "device" not in by_name[handle]  # a capture's device is no pin
  other = by_name["Conv2D/ReadVariableOp"]["colocation_group"]
  assert other != handle


def test_while_loop_edges_are_a_dag_with_back_edges():
  v = tf.Variable(tf.ones([8, 8]))

  @tf.function
  def loop(x):
    return tf.while_loop(lambda i, a: i < 3,
                         lambda i, a: (i + 1, tf.matmul(a, v)),
                         [tf.constant(0), x])[1]

  document = costs.op_graph_document(
      extract.from_function(loop, tf.ones([4, 8])), _BOTH, name="loop")
  nodes = document["nodes"]
  assert document["back_edges"]
  for edge in document["back_edges"]:
    assert nodes[edge["src"]]["op"] == "NextIteration"
    assert nodes[edge["dst"]]["op"] == "Merge"
  _assert_acyclic(document)
  json_io.from_document(document)


def test_op_without_gpu_kernel_is_cpu_only(train_step):
  _, document = train_step
  as_string, = _by_op(document, "AsString")
  matmul = _by_name(document)["MatMul"]
  if constraints.registry_has_gpu_kernels():
    assert as_string["device_kinds"] == ["CPU"]
    assert "device_kinds" not in matmul
  else:
    assert "kernel_registry" in document["metadata"]


def test_kernel_type_constraints_decide_device_kinds():
  @tf.function
  def int_matmul(a):
    return tf.matmul(a, a)  # GPU MatMul kernels are float types only

  document = costs.op_graph_document(
      extract.from_function(int_matmul, tf.ones([4, 4], tf.int32)), _BOTH,
      name="t")
  matmul, = _by_op(document, "MatMul")
  if constraints.registry_has_gpu_kernels():
    assert matmul["device_kinds"] == ["CPU"]


def test_cpu_only_op_makes_its_colocation_group_cpu_only():
  table = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(["a", "b"], [1, 2]), -1)

  @tf.function
  def lookup(keys):
    return table.lookup(keys)

  document = costs.op_graph_document(
      extract.from_function(lookup, tf.constant(["a"])), _BOTH, name="t")
  find, = _by_op(document, "LookupTableFindV2")
  group = [n for n in document["nodes"]
           if n.get("colocation_group") == find["colocation_group"]]
  assert len(group) > 1
  if constraints.registry_has_gpu_kernels():
    assert all(n["device_kinds"] == ["CPU"] for n in group)


def test_pinned_nodes_get_device(train_step):
  extracted, _ = train_step
  document = costs.op_graph_document(
      extracted, _BOTH, name="t", pinned={"MatMul": "/device:GPU:1"})
  assert _by_name(document)["MatMul"]["device"] == "/device:GPU:1"
  with pytest.raises(errors.InputError, match="not in the graph"):
    costs.op_graph_document(extracted, _BOTH, name="t",
                            pinned={"nope": "/device:CPU:0"})


def test_profile_replaces_costs_of_its_kind(train_step):
  extracted, _ = train_step
  profile = costs.profile_step(extracted, runs=2, warmup=1)
  assert profile["MatMul"] > 0 and profile["Conv2D"] > 0
  document = costs.op_graph_document(
      extracted, {"GPU": "p100", "CPU": "local-cpu-core"}, name="t",
      profile=profile, profile_kind="CPU")
  matmul = _by_name(document)["MatMul"]
  assert matmul["cost"]["CPU"] == pytest.approx(profile["MatMul"], abs=1e-3)
  metadata = document["metadata"]
  assert metadata["cost_source"]["CPU"] == "profiled:CPU"
  assert metadata["profile"]["profiled_nodes"] == len(
      set(profile) & set(_by_name(document)))


def test_profile_of_bare_metagraph_with_captured_handles_is_refused(
    train_step):
  extracted, _ = train_step
  with pytest.raises(errors.InputError, match="not a known variable"):
    costs.profile_step(extracted.meta_graph, runs=1, warmup=0)


def test_cross_check_and_grappler_costs(train_step):
  extracted, _ = train_step
  grappler = costs.grappler_op_costs(extracted, hardware.V100)
  assert grappler["MatMul"] > 0 and grappler["Conv2D"] > 0
  document = costs.op_graph_document(extracted, {"GPU": hardware.V100},
                                     name="t", cross_check=True)
  summary = document["metadata"]["cross_check"]["GPU"]
  assert summary["grappler_total_us"] == pytest.approx(
      sum(grappler.values()), rel=1e-3)
  assert summary["roofline_total_us"] > summary["roofline_without_overhead_us"]


def test_unknown_hardware_and_kinds_are_input_errors(train_step):
  extracted, _ = train_step
  with pytest.raises(errors.InputError, match="p100"):
    hardware.get_spec("tpu-v9")
  assert hardware.get_spec("HOST_CPU") is hardware.HOST_CPU
  with pytest.raises(errors.InputError, match="unknown device kind"):
    costs.op_graph_document(extracted, {"TPU": hardware.P100}, name="t")
  with pytest.raises(errors.InputError, match="a GPU spec"):
    costs.op_graph_document(extracted, {"CPU": hardware.P100}, name="t")
  with pytest.raises(errors.InputError):
    costs.op_graph_document(extracted, _BOTH, name="t", profile={"a": 1.0},
                            profile_kind="TPU")
