"""Prepares the process environment before TensorFlow is imported.

TF-GNN only works with Keras 2 (`tf_keras`). TensorFlow decides which Keras
`tf.keras` means the first time `tf.keras` is touched, reading the
`TF_USE_LEGACY_KERAS` variable at that moment; so the variable must be set
before anything touches `tf.keras`, and if something already bound it to
Keras 3 we cannot undo that and must say so clearly.

TensorFlow turns its oneDNN CPU kernels on by default only on some
processors; without them the CPU has no gradient for dilated convolutions
(a WaveNet training step fails to run), so they are on unless the user
chose otherwise.

AutoGraph compiles tf-agents' `state is not ()` checks into generated files,
and Python warns about each ("SyntaxWarning: "is not" with a literal") in
code the user never wrote; that warning is silenced for generated code only.
"""

import os
import sys
import warnings

_QUIET_DEFAULT = "2"  # hide TF's INFO and WARNING chatter unless the user asked for it


def prepare_tensorflow_environment():
  """Sets TF_USE_LEGACY_KERAS=1; raises ImportError if tf.keras is Keras 3."""
  os.environ["TF_USE_LEGACY_KERAS"] = "1"
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", _QUIET_DEFAULT)
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
  warnings.filterwarnings("ignore", message='"is not" with a literal',
                          category=SyntaxWarning,
                          module=r".*__autograph_generated_file")
  tf = sys.modules.get("tensorflow")
  if tf is None:
    return
  # TensorFlow was imported before us: make sure tf.keras resolves to tf_keras.
  keras = getattr(tf, "keras", None)
  bound_to = str(getattr(keras, "__name__", ""))
  # tf-agents re-exports tf_keras under the name "tensorflow.keras"; what
  # matters is whose classes tf.keras hands out.
  model_module = str(getattr(getattr(keras, "Model", None), "__module__", ""))
  if not (bound_to.startswith("tf_keras") or model_module.startswith("tf_keras")):
    raise ImportError(
        "tf_gdp needs Keras 2 (tf_keras), but TensorFlow was already imported "
        f"with tf.keras bound to {bound_to or 'another Keras'} (Keras 3). Set "
        "TF_USE_LEGACY_KERAS=1 before importing TensorFlow, or import tf_gdp "
        "first.")


def import_tensorflow():
  """The `tensorflow` module, imported after `prepare_tensorflow_environment`.

  For modules that import TensorFlow only when they first run a graph.
  """
  prepare_tensorflow_environment()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf
