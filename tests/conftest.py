"""Test setup: quiet TensorFlow, Keras 2, and two logical CPU devices.

Two logical CPU devices let tests place ops on more than one device on a
machine without GPUs; they must be configured before TF initializes its
devices, hence here, before any test module runs.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["TF_USE_LEGACY_KERAS"] = "1"

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
