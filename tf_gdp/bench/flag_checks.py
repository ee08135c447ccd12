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


def graphs(spec: str) -> None:
  """InputError unless every item of `spec` names a graph (not built)."""
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  graph_specs.parse(spec)


def devices(names) -> None:
  """InputError unless every name is a topology."""
  from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
  for name in names:
    topology.get(name)
