"""Graphs with ops that reach outside the step are not run unless allowed.

Profiling and measuring execute the graph; a graph from elsewhere that writes
a file must not write it during placement or measurement unless the user
passes --allow_side_effects (allow_side_effects=True).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_gdp as gdp
from grappler_bridge import extract
from grappler_bridge import profiling
from grappler_bridge import side_effects
from tf_gdp import errors
from tf_gdp.runtime import measure

_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
_CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_ORDINARY_TRAINING_OPS = ("AssignVariableOp", "ResourceApplyAdam",
                          "RandomUniform", "VarHandleOp", "ReadVariableOp",
                          "AssignSubVariableOp", "TensorArrayWriteV3",
                          "Snapshot", "ScalarSummary", "Print", "PrintV2")


def _writing_step(path):
  """A tf.function training step that also writes `path`."""
  weights = tf.Variable(tf.ones([4, 4]))

  @tf.function
  def step(x):
    loss = tf.reduce_sum(tf.matmul(x, weights))
    weights.assign_sub(0.01 * weights)
    tf.io.write_file(path, tf.strings.as_string(loss))
    return loss

  return step


def _all_on_cpu0(extracted):
  return {node.name: _CPU0 for node in extracted.graph_def.node}


def test_the_list_has_outside_ops_and_not_ordinary_training_ops():
  for op in ("WriteFile", "ReadFile", "PyFunc", "EagerPyFunc",
             "PyFuncStateless", "SaveV2", "RestoreV2", "MergeV2Checkpoints",
             "WriteScalarSummary", "CreateSummaryFileWriter", "MatchingFiles",
             "TFRecordDataset", "DebugIdentity"):
    assert op in side_effects.OPS, op
  for op in _ORDINARY_TRAINING_OPS:
    assert op not in side_effects.OPS, op
  # Built from the registry: ops no fixed list names are found by pattern.
  assert {"DebugIdentityV3", "WriteHistogramSummary",
          "TextLineReaderV2"} <= side_effects.OPS


def test_print_is_allowed_unless_it_prints_to_a_file(tmp_path):

  def graph_with(**print_options):
    graph = tf.Graph()
    with graph.as_default():
      tf.print(tf.constant(1.0) * 2.0, **print_options)
    return graph.as_graph_def()

  assert side_effects.find(graph_with()) == []
  found = side_effects.find(graph_with(
      output_stream=f"file://{tmp_path / 'printed.txt'}"))
  assert [op for _, op in found] == ["PrintV2"]


def test_ops_inside_called_functions_count_and_uncalled_ones_do_not():

  @tf.function
  def inner(x):
    tf.io.write_file("never_written.txt", tf.strings.as_string(x))
    return x * 2.0

  @tf.function
  def outer(x):
    return inner(x) + 1.0

  graph_def = outer.get_concrete_function(
      tf.TensorSpec([], tf.float32)).graph.as_graph_def()
  assert graph_def.library.function  # not flattened: the call survives
  found = side_effects.find(graph_def)
  assert [op for _, op in found] == ["WriteFile"]
  assert "/" in found[0][0]  # named by the function that holds it
  uncalled = tf.compat.v1.GraphDef()
  uncalled.library.CopyFrom(graph_def.library)
  uncalled.node.add(name="c", op="NoOp")
  assert side_effects.find(uncalled) == []


def test_measure_and_profile_refuse_before_anything_runs(tmp_path):
  path = tmp_path / "written.txt"
  extracted = extract.from_function(_writing_step(str(path)), tf.ones([4, 4]))
  with pytest.raises(errors.InputError) as refused:
    measure.measure(extracted, _all_on_cpu0(extracted), "local")
  line = str(refused.value)
  assert "\n" not in line and "WriteFile" in line
  assert "--allow_side_effects" in line and "allow_side_effects=True" in line
  with pytest.raises(errors.InputError, match="WriteFile"):
    measure.profile_op_times(extracted, "local")
  with pytest.raises(errors.InputError, match="WriteFile"):
    profiling.profile_step(extracted)
  assert not path.exists()
  allowed = measure.measure(extracted, _all_on_cpu0(extracted), "local",
                            warmup=0, repeats=1, allow_side_effects=True)
  assert allowed.valid, allowed.reason
  assert path.exists()


def test_gdp_place_measures_only_when_allowed(tmp_path):
  path = tmp_path / "written.txt"
  step = _writing_step(str(path))
  x = tf.ones([4, 4])
  with pytest.raises(errors.InputError, match="WriteFile"):
    gdp.place(step, x, devices="local-cpus:1", method="single_device",
              backend="measure", compare=())
  assert not path.exists()
  # Placing alone simulates: nothing runs, no flag needed.
  planned = gdp.place(step, x, devices="local-cpus:1", method="single_device",
                      compare=())
  assert planned.report()["step_time_us"] > 0 and not path.exists()
  timed = gdp.place(step, x, devices="local-cpus:1", method="single_device",
                    backend="measure", compare=(), allow_side_effects=True)
  assert timed.report()["measured"]["valid"]
  assert path.exists()


def test_training_on_measurements_refuses_at_setup(tmp_path):
  from tf_gdp.rl import environment  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import placement_task  # pylint: disable=g-import-not-at-top
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  extracted = extract.from_function(
      _writing_step(str(tmp_path / "written.txt")), tf.ones([4, 4]))
  graph = graph_specs.op_graph_from_extracted(extracted, name="writer",
                                              devices="local-cpus:2")
  task = placement_task.PlacementTask(graph, gdp.get_topology("local-cpus:2"),
                                      extracted=extracted)
  with pytest.raises(errors.InputError, match="writer@local-cpus:2 has ops"):
    environment.PlacementEnv([task], backend="measure", measure_target="local")
  environment.PlacementEnv([task], backend="measure", measure_target="local",
                           allow_side_effects=True)


@pytest.fixture(scope="module")
def writing_saved_model(tmp_path_factory):
  """A SavedModel whose training step writes `written.txt` beside it."""
  folder = tmp_path_factory.mktemp("writer")
  target = str(folder / "written.txt")

  class Step(tf.Module):

    def __init__(self):
      super().__init__()
      self.w = tf.Variable(np.ones([4, 4], np.float32))

    @tf.function(input_signature=[tf.TensorSpec([4, 4], tf.float32)])
    def step(self, x):
      loss = tf.reduce_sum(tf.matmul(x, self.w))
      self.w.assign_sub(0.01 * self.w)
      tf.io.write_file(target, tf.strings.as_string(loss))
      return {"loss": loss}

  model = Step()
  path = str(folder / "model")
  tf.saved_model.save(model, path, signatures={"step": model.step})
  return path, target


def test_measure_cli_refuses_a_saved_model_that_writes_a_file(
    writing_saved_model):
  path, target = writing_saved_model
  args = [sys.executable, "-m", "tf_gdp", "measure", f"--graph={path}",
          "--devices=local-cpus:1", "--warmup=0", "--repeats=1"]
  refused = subprocess.run(args, env=_ENV, text=True, capture_output=True,
                           timeout=600, check=False)
  assert refused.returncode == 2, refused.stderr
  lines = [line for line in refused.stderr.splitlines() if line]
  assert len(lines) == 1, lines
  assert lines[0].startswith("error: ") and "WriteFile" in lines[0]
  assert "--allow_side_effects" in lines[0]
  assert not os.path.exists(target)
  allowed = subprocess.run(args + ["--allow_side_effects"], env=_ENV,
                           text=True, capture_output=True, timeout=600,
                           check=False)
  assert allowed.returncode == 0, allowed.stderr
  assert "measured" in allowed.stdout
  assert os.path.exists(target)


def test_placing_never_runs_a_graph_that_writes_a_file(tmp_path, monkeypatch):
  # gdp.place profiles and confirms on local devices by default: a step
  # that writes a file is neither profiled nor run, and is still placed.
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path / "home"))  # no cached profile
  if len(tf.config.list_logical_devices("CPU")) < 2:
    pytest.skip("needs the 2 logical CPU devices tests/conftest.py configures")
  path = str(tmp_path / "written.txt")
  placed = gdp.place(_writing_step(path), tf.ones([4, 4]),
                     devices="local-cpus:2", method="round_robin", compare=())
  report = placed.report()
  assert not os.path.exists(path)
  assert report["costs"]["source"] == "roofline"
  assert "reach outside the step" in report["costs"]["why"]
  assert "WriteFile" in report["costs"]["why"]
