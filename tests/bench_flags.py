"""A bench run with one bad flag: one usage line naming it, nothing written."""

import subprocess
import sys


def assert_one_usage_line(module: str, flag: str, *extra: str) -> str:
  """Runs `python -m module flag *extra`; returns its stderr.

  The bad value must contain "bogus": exactly one stderr line mentions it,
  with the flag's name, and there is no traceback.
  """
  run = subprocess.run([sys.executable, "-m", module, flag, *extra],
                       capture_output=True, text=True, timeout=300,
                       check=False)
  assert run.returncode != 0
  mentions = [line for line in run.stderr.splitlines() if "bogus" in line]
  assert len(mentions) == 1 and flag.split("=")[0] in mentions[0], run.stderr
  assert "Traceback" not in run.stderr
  return run.stderr
