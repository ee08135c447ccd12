"""Size knobs of zoo builders: typed after the builder's defaults, checked.

Knobs arrive as Python values from code and as "k=v,k=v" text from the CLI;
both end up as the type of the builder's default, or as an `InputError`
with one line that says what was wrong. TensorFlow-free on purpose.
"""

import inspect
import math

from grappler_bridge import errors

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def defaults_of(builder) -> dict:
  """The builder's keyword parameters and their defaults, in order."""
  return {name: p.default
          for name, p in inspect.signature(builder).parameters.items()
          if p.default is not inspect.Parameter.empty}


def split_pairs(text: str) -> dict:
  """Splits "a=1, b=x" into {"a": "1", "b": "x"}; values stay strings."""
  pairs = {}
  for item in (text or "").split(","):
    item = item.strip()
    if not item:
      continue
    key, sep, value = item.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
      raise errors.InputError(f"bad knob {item!r}: expected name=value")
    if key in pairs:
      raise errors.InputError(f"knob {key!r} given twice")
    pairs[key] = value
  return pairs


def coerce(name: str, value, default):
  """Converts `value` (a string or a Python value) to the type of `default`."""
  convert = _CONVERTERS.get(type(default))
  if convert is None:
    return value  # a knob of another type: passed through unchecked
  try:
    return convert(value)
  except ValueError:
    raise errors.InputError(
        f"knob {name}={value!r}: expected {type(default).__name__} "
        f"(default {default!r})") from None


def require_positive(**values):
  """Raises InputError unless every value is >= 1."""
  for name, value in values.items():
    if value < 1:
      raise errors.InputError(f"{name} must be >= 1, got {value}")


def _to_bool(value) -> bool:
  if isinstance(value, bool):
    return value
  if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
    return value.strip().lower() in _TRUE
  raise ValueError


def _to_int(value) -> int:
  if isinstance(value, bool):
    raise ValueError
  if isinstance(value, int):
    return value
  if isinstance(value, str):
    return int(value.strip())
  raise ValueError


def _to_float(value) -> float:
  if isinstance(value, bool):
    raise ValueError
  if isinstance(value, (int, float)):
    result = float(value)
  elif isinstance(value, str):
    result = float(value.strip())
  else:
    raise ValueError
  if not math.isfinite(result):
    raise ValueError
  return result


def _to_str(value) -> str:
  if not isinstance(value, str) or not value:
    raise ValueError
  return value


_CONVERTERS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}
