"""Test setup: quiet TensorFlow, Keras 2, two logical CPU devices, own home.

Two logical CPU devices let tests place ops on more than one device on a
machine without GPUs; they must be configured before TF initializes its
devices, hence here, before any test module runs.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Calibrations and profiles go to a scratch home, not the user's cache; it
# goes when the test process ends.
if "TF_GDP_HOME" not in os.environ:
  os.environ["TF_GDP_HOME"] = tempfile.mkdtemp(prefix="tf_gdp_home_")
  atexit.register(shutil.rmtree, os.environ["TF_GDP_HOME"], True)
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import pytest  # pylint: disable=g-import-not-at-top
import tf_gdp  # pylint: disable=g-import-not-at-top,unused-import
import tensorflow as tf  # pylint: disable=g-import-not-at-top

LOCAL_CPU_DEVICES = 2


def _configure_logical_cpus():
  cpus = tf.config.list_physical_devices("CPU")
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * LOCAL_CPU_DEVICES)
  except RuntimeError:
    pass  # already initialized by an earlier import; tests that need 2 check


_configure_logical_cpus()


@pytest.fixture(scope="session")
def train_step_saved_model(tmp_path_factory):
  """A SavedModel whose only signature is a training step, `train_step`."""

  class Step(tf.Module):

    def __init__(self):
      super().__init__()
      self.w = tf.Variable(tf.random.stateless_normal([8, 8], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([4, 8], tf.float32)])
    def train_step(self, x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.tanh(tf.matmul(tf.tanh(tf.matmul(x, self.w)),
                                               self.w)))
      self.w.assign_sub(0.01 * tape.gradient(loss, self.w))
      return {"loss": loss}

  step = Step()
  path = str(tmp_path_factory.mktemp("saved") / "train_step_model")
  tf.saved_model.save(step, path, signatures={"train_step": step.train_step})
  return path
