"""Benchmark flags checked when they are parsed, not after the first graph.

A bad `--graphs`, `--devices` or `--policy` should cost the user one usage
line before anything is built, not a traceback minutes into a run.
"""

from absl import flags

from tf_gdp import errors


def from_parser(parse):
  """An absl flag validator from a parser that raises InputError."""
  def validate(value):
    try:
      parse(value)
    except errors.InputError as e:
      raise flags.ValidationError(str(e)) from e
    return True
  return validate
