"""tf-gdp's own Keras layers compute in float32, whatever the user set.

`gdp.place` runs in the user's process, where a training script may have
set a global mixed-precision policy (`mixed_float16`). Keras layers built
under it cast their inputs to float16, and the policy network's float32
observations then meet float16 layers. Placing is tf-gdp's work, not the
model's: it runs under the float32 policy, and the user's comes back after.
"""

import contextlib
import functools


@contextlib.contextmanager
def scope():
  """The global Keras dtype policy is float32 inside, the caller's after."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  precision = tf.keras.mixed_precision
  before = precision.global_policy()
  if before.name == "float32":
    yield
    return
  precision.set_global_policy("float32")
  try:
    yield
  finally:
    precision.set_global_policy(before)


def in_float32(function):
  """`function` run inside `scope()`."""
  @functools.wraps(function)
  def wrapped(*args, **kwargs):
    with scope():
      return function(*args, **kwargs)
  return wrapped
