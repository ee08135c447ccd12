"""Inputs of unknown shape: the caveat that says so, and --input_shapes."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.cost import shape_caveat
from tf_gdp.cost import simulator
from tf_gdp.cost import topology

from grappler_bridge import input_shapes  # pylint: disable=g-bad-import-order


@pytest.fixture(scope="module")
def open_batch_model(tmp_path_factory):
  """A SavedModel whose signature leaves the batch dimension open."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  class Step(tf.Module):

    def __init__(self):
      super().__init__()
      self.w = tf.Variable(tf.ones([64, 32]))

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32),
                                  tf.TensorSpec([None], tf.int32)])
    def step(self, x, y):
      with tf.GradientTape() as tape:
        logits = tf.matmul(x, self.w)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
      self.w.assign_sub(0.1 * tape.gradient(loss, self.w))
      return {"loss": loss}

  path = str(tmp_path_factory.mktemp("open_batch") / "model")
  module = Step()
  tf.saved_model.save(module, path, signatures={"serving_default": module.step})
  return path


def test_parse_accepts_dims_joined_by_x_and_refuses_the_rest():
  assert input_shapes.parse("x:32x128, y:32,s:") == {
      "x": [32, 128], "y": [32], "s": []}
  assert input_shapes.parse(None) == {} and input_shapes.parse("") == {}
  for bad, why in (("x", "NAME:DIMS"), ("x:3xq", "positive integers"),
                   ("x:0x4", "positive integers"), ("x:1,x:2", "twice")):
    with pytest.raises(errors.InputError, match=why):
      input_shapes.parse(bad)


def _single_device_time(graph):
  topo = topology.get("p100x2")
  gpu = next(i for i, d in enumerate(topo.devices) if d.kind == "GPU")
  placement = np.full(graph.num_nodes, gpu, np.int32)
  return simulator.simulate(graph, placement, topo).step_time_us


def test_an_open_batch_is_named_and_fixed_shapes_price_the_real_batch(
    open_batch_model):
  open_graph = graph_specs.load(open_batch_model, devices="p100x2").graph
  line = shape_caveat.caveat(open_graph)
  assert "x [?, 64], y [?]" in line and "priced as 1" in line
  assert "--input_shapes=x:BATCHx64,y:BATCH" in line
  fixed = graph_specs.load(open_batch_model, devices="p100x2",
                           input_shapes="x:16384x64,y:16384").graph
  assert shape_caveat.caveat(fixed) is None
  # The batch reaches the ops through shape inference: the forward matmul's
  # output, and the step's time (launch overheads aside).
  matmul = next(i for i, name in enumerate(fixed.node_names)
                if fixed.op_types[i] == "MatMul" and "gradient" not in name)
  assert fixed.output_shapes[matmul] == ((16384, 32),)
  assert open_graph.output_shapes[matmul] == ((-1, 32),)
  assert sum(fixed.output_bytes) > 1000 * sum(open_graph.output_bytes) / 10
  assert _single_device_time(fixed) > _single_device_time(open_graph) + 20


def test_shapes_that_contradict_the_graph_or_name_no_input_are_refused(
    open_batch_model):
  with pytest.raises(errors.InputError, match=r"is \[\?, 64\]; \[8, 32\]"):
    graph_specs.load(open_batch_model, devices="p100x2",
                     input_shapes="x:8x32")
  with pytest.raises(errors.InputError, match=r"no input 'z' \(its inputs: "
                     r"x \[\?, 64\], y \[\?\]\)"):
    graph_specs.load(open_batch_model, devices="p100x2", input_shapes="z:8")
  with pytest.raises(errors.InputError, match="has fixed shapes"):
    graph_specs.load_graph("layered:30", devices="p100x2", input_shapes="x:1")


def test_evaluate_prints_the_caveat_and_takes_the_flag(open_batch_model):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")

  def evaluate(*flags):
    return subprocess.run(
        [sys.executable, "-m", "tf_gdp", "evaluate", f"--graph={open_batch_model}",
         "--placement=single_device", "--devices=p100x2", *flags],
        env=env, text=True, capture_output=True, timeout=300, check=False)

  plain = evaluate()
  assert plain.returncode == 0, plain.stderr
  assert "inputs of unknown shape (x [?, 64], y [?])" in plain.stdout
  fixed = evaluate("--input_shapes=x:64x64,y:64")
  assert fixed.returncode == 0, fixed.stderr
  assert "unknown shape" not in fixed.stdout
  wrong = evaluate("--input_shapes=x:64x65")
  assert wrong.returncode == 2
  assert wrong.stderr.strip().splitlines()[-1].startswith("error: ")
