"""tf-agents, imported without its noise and without rebinding `tf.keras`.

Import this module before any `tf_agents` module: every module of `tf_gdp.rl`
that imports tf-agents imports it first.
"""

import contextlib
import io
import sys

import tensorflow as tf


def _import_gym_quietly() -> None:
  """tf-agents imports gym, which prints a multi-line deprecation banner to
  stderr; it would sit above every CLI progress line. Import it silenced."""
  with contextlib.redirect_stderr(io.StringIO()):
    try:
      import gym  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      pass


_import_gym_quietly()
# pylint: disable=g-import-not-at-top,wrong-import-position,unused-import
from tf_agents.environments import py_environment
# pylint: enable=g-import-not-at-top,wrong-import-position,unused-import


def _rebind_keras_2() -> None:
  """Points tf.keras back at the Keras 2 API module after tf-agents' import.

  tf-agents runs `from tensorflow.keras import layers`, which loads the Keras
  2 API (tf_keras) a second time under the name "tensorflow.keras" and binds
  tf.keras to that copy. The classes are the same, but
  `grappler_bridge.tf_env` checks the module's *name* and then refuses every
  later import of the zoo or the bridge ("tf.keras bound to tensorflow.keras
  (Keras 3)").
  """
  original = sys.modules.get("tf_keras.api._v2.keras")
  if original is not None and getattr(tf.keras, "__name__", "") != (
      original.__name__) and getattr(tf.keras, "__file__", None) == getattr(
          original, "__file__", ""):
    tf.keras = original


_rebind_keras_2()
