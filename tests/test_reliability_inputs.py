"""Hostile and broken inputs give one typed line, via the API and the CLI.

The cases live in `tf_gdp.bench.reliability_cases` (shared with
`python -m tf_gdp.bench.reliability_check` and docs/RELIABILITY.md). Every
case's API side runs here; the measurement cases are proven by their own
tests in test_measure.py and test_workers.py. CLI sides that need no
TensorFlow import run for every case; of the slow ones (each CLI call imports
TensorFlow, several seconds) a sample of each kind runs.
"""

import dataclasses
import os

import pytest

from grappler_bridge import limits
from tf_gdp import errors
from tf_gdp.bench import reliability_cases
from tf_gdp.bench import reliability_check

_API_CASES = [c for c in reliability_cases.CASES
              if c.test.startswith("tests/test_reliability_inputs.py")]
_FAST_CLI_CASES = [c for c in reliability_cases.CASES
                   if c.cli is not None and not c.slow]
# One of each kind: binary and text protobuf, a huge JSON, an infeasible
# placement. (reliability_check runs them all.)
_SLOW_CLI_SAMPLE = ["random_pb", "pbtxt_deep", "json_10m_empty_nodes",
                    "op_bigger_than_any_device"]


def _names(cases):
  return [c.name for c in cases]


def test_every_case_names_a_test_and_the_names_are_unique():
  names = _names(reliability_cases.CASES)
  assert len(names) == len(set(names))
  for case in reliability_cases.CASES:
    path, _, test = case.test.partition("::")
    assert os.path.isfile(path) and test, case.name
    with open(path, encoding="utf-8") as f:
      assert f"def {test.split('[')[0]}(" in f.read(), case.test


@pytest.mark.parametrize("case", _API_CASES, ids=_names(_API_CASES))
def test_api(case, tmp_path):
  outcome = reliability_check.run_api(case, str(tmp_path))
  assert outcome.passed, f"expected {outcome.expected}, got {outcome.got}"


@pytest.mark.parametrize("case", _FAST_CLI_CASES, ids=_names(_FAST_CLI_CASES))
def test_cli(case, tmp_path):
  reliability_check.run_api(case, str(tmp_path))  # writes the inputs
  for outcome in reliability_check.run_cli(case, str(tmp_path)):
    assert outcome.passed, (f"{outcome.side}: expected {outcome.expected}, "
                            f"got {outcome.got}")


@pytest.mark.parametrize("name", _SLOW_CLI_SAMPLE)
def test_cli_slow_sample(name, tmp_path):
  case = reliability_cases.BY_NAME[name]
  reliability_check.run_api(case, str(tmp_path))
  last_only = dataclasses.replace(  # export-graph when there is one
      case, cli=lambda tmp: case.cli(tmp)[-1:])
  for outcome in reliability_check.run_cli(last_only, str(tmp_path)):
    assert outcome.passed, (f"{outcome.side}: expected {outcome.expected}, "
                            f"got {outcome.got}")


def test_size_limit_env_is_parsed_and_checked(monkeypatch, tmp_path):
  monkeypatch.setenv(limits.MAX_INPUT_BYTES_ENV, "2M")
  assert limits.max_input_bytes() == 2 << 20
  monkeypatch.setenv(limits.MAX_INPUT_BYTES_ENV, "1000")
  assert limits.max_input_bytes() == 1000
  monkeypatch.delenv(limits.MAX_INPUT_BYTES_ENV)
  assert limits.max_input_bytes() == limits.DEFAULT_MAX_INPUT_BYTES
  monkeypatch.setenv(limits.MAX_INPUT_BYTES_ENV, "lots")
  with pytest.raises(errors.InputError, match="TF_GDP_MAX_INPUT_BYTES"):
    limits.max_input_bytes()
  # A directory named like a graph file is refused by the same check.
  folder = tmp_path / "graph.pb"
  folder.mkdir()
  with pytest.raises(errors.GraphLoadError, match="not a regular file"):
    limits.read_input_file(str(folder), limit=10)


def test_no_loader_unpickles():
  """Input is parsed as JSON or protobuf only: no pickle, no np.load of it."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  offenders = []
  for package in ("tf_gdp", "grappler_bridge"):
    for folder, _, files in os.walk(os.path.join(root, package)):
      for name in files:
        if not name.endswith(".py"):
          continue
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8") as f:
          text = f.read()
        if ("import pickle" in text or "allow_pickle=True" in text or
            "np.load(" in text and "allow_pickle=False" not in text):
          offenders.append(os.path.relpath(path, root))
  assert not offenders
