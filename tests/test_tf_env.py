"""`import tf_gdp` binds tf.keras to Keras 2, or says clearly why it cannot."""

import os
import subprocess
import sys

_ENV = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
_ENV["TF_CPP_MIN_LOG_LEVEL"] = "3"


def _run(code: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", code], env=_ENV, text=True,
                        capture_output=True, timeout=300, check=False)


def test_import_sets_legacy_keras_before_tensorflow():
  result = _run("import tf_gdp, os, tensorflow as tf; "
                "print(os.environ['TF_USE_LEGACY_KERAS'], tf.keras.__name__)")
  assert result.returncode == 0, result.stderr
  flag, module = result.stdout.split()
  assert flag == "1" and module.startswith("tf_keras")


def test_import_after_keras3_bound_raises_clear_import_error():
  result = _run("import tensorflow as tf; tf.keras.layers; import tf_gdp")
  assert result.returncode != 0
  assert "ImportError: tf_gdp needs Keras 2 (tf_keras)" in result.stderr


def test_tensorflow_imported_but_keras_untouched_is_fine():
  result = _run("import tensorflow as tf; import tf_gdp; print(tf.keras.__name__)")
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip().startswith("tf_keras")


def test_dilated_convolution_gradient_runs_on_cpu():
  # Needs TF's oneDNN CPU kernels, which TF enables only on some processors.
  code = ("import tf_gdp, tensorflow as tf\n"
          "x = tf.Variable(tf.ones([1, 9, 3]))\n"
          "with tf.GradientTape() as tape:\n"
          "  y = tf.nn.conv1d(x, tf.ones([2, 3, 3]), 1, 'VALID', dilations=2)\n"
          "  loss = tf.reduce_sum(y)\n"
          "print(tape.gradient(loss, x).shape)")
  env = {k: v for k, v in _ENV.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  result = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                          capture_output=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "(1, 9, 3)"
