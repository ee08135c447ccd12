"""gdp.place(): a placed Keras training step runs on two logical CPUs and
matches the unplaced step; placements save, reload without search, and a
placement of another function is refused."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tf_gdp as gdp
from tf_gdp import api
from tf_gdp import errors
from tf_gdp import gdp_method
from tf_gdp import placing
from tf_gdp.cost import presets
from tf_gdp.cost import topology

DEVICES = "local-cpus:2"
_CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


def _need_two_cpus():
  if len(tf.config.list_logical_devices("CPU")) < 2:
    pytest.skip("needs the 2 logical CPU devices tests/conftest.py configures")


def _model(seed=1):
  tf_keras.utils.set_random_seed(seed)
  model = tf_keras.Sequential([tf_keras.layers.Dense(8, activation="relu"),
                               tf_keras.layers.Dense(1)])
  model.build((None, 4))
  return model


def _train_step(model, learning_rate=0.05):
  """A tf.function training step: forward, MSE loss, gradients, SGD update."""

  @tf.function
  def step(x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    for var, grad in zip(model.trainable_variables, grads):
      var.assign_sub(learning_rate * grad)
    return {"loss": loss, "scaled": (loss, 2.0 * loss)}

  return step


def _data():
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(16, 4)), tf.float32)
  y = tf.constant(rng.normal(size=(16, 1)), tf.float32)
  return x, y


@pytest.fixture(scope="module")
def placed():
  """A round-robin-placed step of one model, and an unplaced twin model."""
  _need_two_cpus()
  x, y = _data()
  model, twin = _model(), _model()
  for a, b in zip(model.variables, twin.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  step = gdp.place(_train_step(model), x, y, devices=DEVICES,
                   method="round_robin", compare=("single_device", "metis"))
  return step, model, twin, x, y


def test_ops_are_priced_by_a_profile_on_the_local_devices(placed):
  report = placed[0].report()
  assert report["costs"]["source"] == "profiled"
  assert report["costs"]["target"] == "local"
  assert report["links"] == "estimated"


def test_placement_spreads_over_both_devices(placed):
  step = placed[0]
  assert isinstance(step, gdp.PlacedFunction)
  used = set(step.placement.values())
  assert used == {_CPU.format(0), _CPU.format(1)}
  # the variables live on CPU:0, so their ops stay there
  resource_ops = [op for op in step.placement if op.endswith("/resource")]
  assert resource_ops
  assert {step.placement[op] for op in resource_ops} == {_CPU.format(0)}


def test_placed_steps_match_unplaced_steps(placed):
  step, model, twin, x, y = placed
  reference = _train_step(twin)
  for _ in range(3):
    got, want = step(x, y), reference(x, y)
    assert set(got) == {"loss", "scaled"} and len(got["scaled"]) == 2
    np.testing.assert_allclose(got["loss"].numpy(), want["loss"].numpy(),
                               rtol=1e-5)
    np.testing.assert_allclose(got["scaled"][1].numpy(),
                               want["scaled"][1].numpy(), rtol=1e-5)
  for a, b in zip(model.variables, twin.variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
  # the steps really trained: the weights moved from their initial values
  assert not np.allclose(model.variables[0].numpy(), _model().variables[0])
  # and what ran carried the placement's devices
  ran = step._state.runner.graph.get_operations()  # pylint: disable=protected-access
  assert {op.device for op in ran} >= {_CPU.format(0), _CPU.format(1)}


def test_report_has_times_bound_baselines_and_memory(placed):
  report = placed[0].report()
  json.dumps(report)  # JSON-able
  assert report["method"] == "round_robin" and report["topology"] == DEVICES
  assert report["predicted_step_time_us"] > 0
  assert 0 < report["lower_bound_us"] <= report["step_time_us"]
  assert set(report["compared"]) == {"single_device", "metis"}
  assert report["compared"]["single_device"]["step_time_us"] > 0
  assert set(report["memory_per_device"]) == {_CPU.format(0), _CPU.format(1)}
  assert all(b > 0 for b in report["memory_per_device"].values())
  assert sum(report["ops_per_device"].values()) == len(placed[0].placement)


def test_saved_placement_is_reused_without_search(placed, tmp_path):
  step, model, _, x, y = placed
  path = tmp_path / "step.placement.json"
  step.save(path)
  loaded = gdp.load_placement(path)
  assert loaded.method == "round_robin" and loaded.devices == step.placement
  again = gdp.place(_train_step(model), x, y, devices=DEVICES,
                    placement=loaded, compare=("single_device",))
  assert again.placement == step.placement
  report = again.report()
  assert report["method"] == api.LOADED and report["evaluations"] == 0
  assert report["details"]["found_by"] == "round_robin"
  assert report["step_time_us"] == pytest.approx(step.report()["step_time_us"])
  assert set(report["compared"]) == {"single_device"}
  before = [v.numpy() for v in model.variables]
  loss = again(x, y)["loss"]
  assert np.isfinite(loss.numpy())
  assert not np.allclose(before[0], model.variables[0].numpy())


def test_placement_of_another_function_is_refused(placed, tmp_path):
  step, _, _, x, _ = placed
  path = tmp_path / "other.placement.json"
  step.save(path)

  @tf.function
  def other(x):
    return tf.reduce_sum(tf.tanh(x))

  with pytest.raises(errors.PlacementError, match="does not match graph"):
    gdp.place(other, x, devices=DEVICES, placement=str(path), compare=())


def test_measure_backend_times_the_placement_on_copies(placed):
  _, model, _, x, y = placed
  before = [v.numpy() for v in model.variables]
  timed = gdp.place(_train_step(model), x, y, devices=DEVICES,
                    method="round_robin", backend="measure", compare=())
  measured = timed.report()["measured"]
  assert measured["valid"] and measured["step_time_us"] > 0
  assert measured["target"] == "local"
  for a, b in zip(before, model.variables):  # measure runs on copies
    np.testing.assert_array_equal(a, b.numpy())


def test_devices_elsewhere_give_a_plan_that_does_not_run_here(
    placed, monkeypatch, tmp_path):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))  # uncalibrated preset
  _, model, _, x, y = placed
  plan = gdp.place(_train_step(model), x, y, devices="cpu-workers:2",
                   method="round_robin", compare=(), confirm=False)
  assert {d.split("/device")[0] for d in plan.placement.values()} == {
      "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"}
  with pytest.raises(errors.PlacementError,
                     match="does not exist here.*job 'worker'.*not connected"):
    plan(x, y)


def test_decorator_places_on_first_call():
  _need_two_cpus()
  x, y = _data()
  model, twin = _model(), _model()

  @gdp.place(devices=DEVICES, method="round_robin", compare=())
  def step(x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    for var, grad in zip(model.trainable_variables, grads):
      var.assign_sub(0.05 * grad)
    return loss

  assert isinstance(step, gdp.PlacedFunction) and step.__name__ == "step"
  with pytest.raises(errors.InputError, match="not placed yet"):
    _ = step.placement
  reference = _train_step(twin)
  for _ in range(2):
    np.testing.assert_allclose(step(x, y).numpy(),
                               reference(x, y)["loss"].numpy(), rtol=1e-5)
  assert len(set(step.placement.values())) == 2
  with pytest.raises(errors.InputError, match="another trace"):
    step(x[:8], y[:8])


def test_keras_recurrent_layers_without_unrolling_place_and_match():
  # Keras's LSTM and GRU layers call a loop behind an `api_implements`
  # function, which Grappler alone would not inline.
  _need_two_cpus()
  tokens = tf.constant([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
  for layer in (tf_keras.layers.LSTM, tf_keras.layers.GRU):
    tf_keras.utils.set_random_seed(2)
    model = tf_keras.Sequential([tf_keras.layers.Embedding(10, 4),
                                 layer(6), tf_keras.layers.Dense(2)])
    model(tokens)
    loss = lambda t: tf.reduce_sum(tf.square(model(t)))
    placed = gdp.place(loss, tokens, devices=DEVICES, method="round_robin",
                       compare=())
    np.testing.assert_allclose(placed(tokens).numpy(), loss(tokens).numpy(),
                               rtol=1e-5)
    assert len(set(placed.placement.values())) == 2
    # The report says how the layer's loop is priced: once per time step.
    assert placed.report()["costs"]["loops"].startswith(
        "1 while loop (5 iterations)")


def test_ctc_loss_scans_place_and_match():
  _need_two_cpus()
  weights = tf.Variable(tf.random.stateless_normal([5, 4], [1, 2]))
  labels = tf.constant([[1, 2], [2, 2]])

  def loss(features):
    logits = tf.einsum("btf,fc->btc", features, weights)
    return tf.reduce_sum(tf.nn.ctc_loss(
        labels, logits, tf.fill([2], 2), tf.fill([2], 6),
        logits_time_major=False, blank_index=-1))

  features = tf.random.stateless_normal([2, 6, 5], [3, 4])
  placed = gdp.place(loss, features, devices=DEVICES, method="round_robin",
                     compare=())
  np.testing.assert_allclose(placed(features).numpy(),
                             loss(features).numpy(), rtol=1e-5)
  assert len(set(placed.placement.values())) == 2


def test_a_mirrored_strategy_step_places_and_matches():
  # Each replica's captured scalars are traced in its device scope: their
  # placeholders keep that device, where the eager values live elsewhere.
  _need_two_cpus()
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  with strategy.scope():
    weights = tf.Variable(tf.ones([4, 4]))

  @tf.function
  def step(x):
    def replica(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(x @ weights)
      grad = tf.distribute.get_replica_context().all_reduce(
          "sum", tape.gradient(loss, weights))
      weights.assign_sub(0.01 * grad)
      return loss
    return strategy.reduce("SUM", strategy.run(replica, args=(x,)),
                           axis=None)

  x = tf.ones([2, 4])
  placed = gdp.place(step, x, devices=DEVICES, method="metis", compare=(),
                     profile=False)
  first, second = placed(x).numpy(), placed(x).numpy()
  assert first == pytest.approx(64.0) and second == pytest.approx(61.44)


def test_a_function_that_fails_to_trace_is_one_input_error():
  def step(x):
    if tf.reduce_sum(x) > 0:  # a graph condition: autograph traces both arms
      raise ValueError("no graph for a positive batch")
    return x * 2.0

  with pytest.raises(errors.InputError, match=(
      r"^step: tracing it as a tf.function failed: ValueError: no graph for "
      r"a positive batch \(File .*\)$")):
    gdp.place(step, tf.ones([2]), devices="p100x2", method="metis")


def test_plain_function_with_literal_default_and_no_outputs():
  _need_two_cpus()
  total = tf.Variable(0.0)

  def accumulate(x, scale=2.0):
    total.assign_add(scale * tf.reduce_sum(x))

  x = tf.ones([3])
  run = gdp.place(accumulate, x, devices=DEVICES, method="single_device",
                  compare=())
  assert run(x) is None
  assert run(x=x) is None
  assert total.numpy() == pytest.approx(12.0)


def test_bad_options_fail_fast():
  with pytest.raises(errors.InputError, match="unknown method"):
    gdp.place(devices=DEVICES, method="nope")
  with pytest.raises(errors.InputError, match="unknown backend"):
    gdp.place(devices=DEVICES, backend="guess")
  with pytest.raises(errors.InputError, match="not a baseline"):
    gdp.place(devices=DEVICES, compare=("gdp",))
  with pytest.raises(errors.InputError, match="budget"):
    gdp.place(devices=DEVICES, budget=-1)
  with pytest.raises(errors.InputError, match="load_placement"):
    gdp.place(devices=DEVICES, placement={"op": "/device:CPU:0"})


def test_load_placement_rejects_other_files(tmp_path):
  path = tmp_path / "x.json"
  path.write_text(json.dumps({"format": "something-else"}))
  with pytest.raises(errors.InputError, match="not a tf-gdp placement file"):
    gdp.load_placement(path)
  with pytest.raises(errors.InputError):
    gdp.load_placement(tmp_path / "missing.json")


def test_local_cpus_preset():
  topo = topology.get("local-cpus:3")
  assert topo.device_names == [_CPU.format(i) for i in range(3)]
  assert topo.hardware == {"CPU": "local_cpu_core"}
  assert topo.memory_bytes.tolist() == [16 * topology.GIB] * 3
  assert "local-cpus:K" in presets.names()
  assert presets.kind_hardware("local-cpus:2")["CPU"].name == "local-cpu-core"
  with pytest.raises(errors.InputError, match="local-cpus:K"):
    topology.get("local-cpus:0")


def test_gdp_method_without_a_policy_says_how_to_get_one(placed):
  if os.path.isdir(gdp_method.PRETRAINED_POLICY):
    pytest.skip("a pretrained policy ships here")
  _, model, _, x, y = placed
  with pytest.raises(errors.InputError, match="make pretrain"):
    gdp.place(_train_step(model), x, y, devices=DEVICES, method="gdp")


def test_public_names_and_lazy_tensorflow():
  assert {"place", "load_placement", "PlacedFunction"} <= set(gdp.__all__)
  code = ("import sys, tf_gdp; tf_gdp.place; "
          "sys.exit('tensorflow' in sys.modules)")
  assert subprocess.run([sys.executable, "-c", code], check=False,
                        timeout=60).returncode == 0
