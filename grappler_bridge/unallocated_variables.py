"""Variables that have a dtype and a shape but hold no value.

A graph that is only traced and priced, never run, needs its variables'
shapes, not their contents. A recommender's embedding tables and their
optimizer slots are gigabytes each: made as real variables, they would need
that much host memory just to trace the step. Inside `scope()`, a variable
made from a callable initial value with a known dtype and shape (as Keras
layers make their weights) is an uninitialized resource handle instead: the
traced graph, its shapes and so its costs are the same, no memory is taken,
and reading it eagerly fails. Other variables are made as usual.
"""

import contextlib

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-import-not-at-top


def _is_shape_only(kwargs) -> bool:
  shape = kwargs.get("shape")
  return (callable(kwargs.get("initial_value")) and
          kwargs.get("dtype") is not None and shape is not None and
          tf.TensorShape(shape).is_fully_defined())


def _creator(next_creator, **kwargs):
  if not _is_shape_only(kwargs):
    return next_creator(**kwargs)
  return resource_variable_ops.UninitializedVariable(
      shape=tf.TensorShape(kwargs["shape"]),
      dtype=tf.as_dtype(kwargs["dtype"]).base_dtype,
      name=kwargs.get("name"),
      trainable=kwargs.get("trainable", True))


@contextlib.contextmanager
def scope():
  """Variables made inside (from callable initial values) hold no memory."""
  with tf.variable_creator_scope(_creator):
    yield
