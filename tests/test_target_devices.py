"""What `devices=` names: presets, "local", and lists of TF device strings."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tf_gdp as gdp
from tf_gdp import errors
from tf_gdp import target_devices
from tf_gdp.cost import topology

_CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


def _need_two_cpus():
  if len(tf.config.list_logical_devices("CPU")) < 2:
    pytest.skip("needs the 2 logical CPU devices tests/conftest.py configures")


def test_local_devices_resolve_to_this_process():
  topo = target_devices.resolve("local")
  count = len(tf.config.list_logical_devices("CPU"))
  if tf.config.list_logical_devices("GPU"):
    assert "GPU" in topo.kinds
  else:
    assert topo.name == f"local-cpus:{count}"
    assert topo.device_names == [_CPU.format(i) for i in range(count)]


def test_local_gpus_are_priced_by_their_model():
  topo = target_devices.local_gpu_topology(2, "Tesla V100-SXM2-32GB")
  assert topo.kinds == ["GPU", "GPU", "CPU"] and topo.hardware["GPU"] == "v100"
  with pytest.raises(errors.InputError, match="no hardware spec"):
    target_devices.local_gpu_topology(1, "Some New GPU")


def test_attached_cpu_strings_and_logical_devices_are_local_cpus():
  _need_two_cpus()
  local = topology.get("local-cpus:2")
  by_string = target_devices.resolve(["/device:CPU:0", "/device:CPU:1"])
  by_object = target_devices.resolve(tf.config.list_logical_devices("CPU")[:2])
  for topo in (by_string, by_object):
    assert topo.device_names == local.device_names
    assert topo.hardware == local.hardware
    assert topo.memory_bytes.tolist() == local.memory_bytes.tolist()
  assert target_devices.runs_here(by_string)


def test_a_subset_keeps_the_order_and_its_links():
  _need_two_cpus()
  topo = target_devices.resolve(["/cpu:1"])
  assert topo.device_names == [_CPU.format(1)]
  assert topo.bandwidth_gbps.shape == (1, 1)


def test_unattached_gpus_are_priced_as_the_default_preset():
  if tf.config.list_logical_devices("GPU"):
    pytest.skip("GPUs attached: they are priced as themselves")
  topo = target_devices.resolve(["/device:GPU:0", "/device:GPU:2"])
  preset = topology.get("p100x4")
  assert topo.device_names == [preset.device_names[0], preset.device_names[2]]
  assert topo.hardware == {"GPU": "p100"}
  np.testing.assert_array_equal(topo.bandwidth_gbps,
                                preset.bandwidth_gbps[np.ix_([0, 2], [0, 2])])
  assert not target_devices.runs_here(topo)


def test_worker_devices_are_a_cpu_worker_cluster():
  topo = target_devices.resolve(["/job:worker/task:0/device:CPU:0",
                                 "/job:worker/task:1/device:CPU:0"])
  assert topo.name == "cpu-workers:2"


@pytest.mark.parametrize("devices,message", [
    (["/device:TPU:0"], "neither attached here .* nor in a preset"),
    (["/device:GPU:9"], "neither attached here"),
    (["not a device"], "not a TF device string"),
    (["/job:localhost"], "names no device type and index"),
    (["/device:CPU:0", "/cpu:0"], "names a device twice"),
    ([], "names no device"),
    ([3], "must be a TF device string or a tf.config.LogicalDevice"),
])
def test_unknown_devices_are_one_clear_error(devices, message):
  with pytest.raises(errors.InputError, match=message) as info:
    target_devices.resolve(devices)
  assert "\n" not in str(info.value)


def test_place_on_a_device_list_matches_the_unplaced_step():
  _need_two_cpus()
  tf_keras.utils.set_random_seed(3)
  w = tf.Variable(tf.random.normal([32, 32]))
  twin = tf.Variable(w)

  def step_on(var):
    @tf.function
    def step(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.tanh(tf.tanh(x @ var) @ var) ** 2)
      var.assign_sub(1e-3 * tape.gradient(loss, var))
      return loss
    return step

  x = tf.random.normal([8, 32])
  placed = gdp.place(step_on(w), x, devices=["/device:CPU:0", "/device:CPU:1"],
                     method="round_robin", compare=())
  assert set(placed.placement.values()) == {_CPU.format(0), _CPU.format(1)}
  reference = step_on(twin)
  for _ in range(2):
    np.testing.assert_allclose(placed(x).numpy(), reference(x).numpy(),
                               rtol=1e-5)
  np.testing.assert_allclose(w.numpy(), twin.numpy(), rtol=1e-5)
