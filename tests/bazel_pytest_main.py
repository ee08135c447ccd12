"""Runs one pytest file as a Bazel py_test: `bazel_pytest_main.py <test file>`.

The tests are pytest files (fixtures, parametrize, conftest.py), not
unittest programs, so every py_test in tests/BUILD has this file as its
`main` and passes its own test file as the argument. Inside Bazel's sandbox
the runner also keeps every write inside the test's scratch directory
(TEST_TMPDIR): HOME, tf-gdp's cache (TF_GDP_HOME), numba's compile cache,
matplotlib's config, temporary files and Hypothesis' example database. The
current directory stays the one Bazel gives, the root of the runfiles tree,
which mirrors the repository: tests see the same relative paths as with
`make test` (pytest run from the repository root). Outside Bazel it just runs
pytest.
"""

import os
import sys

# Environment variable -> subdirectory of TEST_TMPDIR.
_SCRATCH = (
    ("HOME", "home"),
    ("TF_GDP_HOME", "tf_gdp_home"),
    ("NUMBA_CACHE_DIR", "numba_cache"),
    ("MPLCONFIGDIR", "matplotlib"),
    ("XDG_CACHE_HOME", "cache"),
    ("TMPDIR", "tmp"),
)


def _use_scratch_dir(scratch: str) -> None:
  for variable, name in _SCRATCH:
    path = os.path.join(scratch, name)
    os.makedirs(path, exist_ok=True)
    os.environ[variable] = path
  try:  # Hypothesis writes .hypothesis/ in the current directory by default.
    from hypothesis import configuration  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  configuration.set_hypothesis_home_dir(os.path.join(scratch, "hypothesis"))


def main(argv) -> int:
  if len(argv) != 2:
    print(f"usage: {argv[0]} <pytest file>", file=sys.stderr)
    return 2
  test_file = argv[1]  # relative to the runfiles root, the current directory
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  # No __pycache__ in the runfiles tree, here or in subprocesses.
  os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
  sys.dont_write_bytecode = True
  scratch = os.environ.get("TEST_TMPDIR")
  if scratch:
    _use_scratch_dir(scratch)
  args = [test_file, "-q", "-p", "no:cacheprovider"]
  xml_report = os.environ.get("XML_OUTPUT_FILE")
  if xml_report:  # per-test-case results for Bazel's test.xml
    args.append(f"--junitxml={xml_report}")
  import pytest  # pylint: disable=g-import-not-at-top
  return int(pytest.main(args))


if __name__ == "__main__":
  sys.exit(main(sys.argv))
