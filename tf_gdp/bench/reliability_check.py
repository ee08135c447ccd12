"""Runs every reliability case and prints case / expected / got / pass.

The cases (`reliability_cases.CASES`) are hostile or broken inputs,
infeasible problems, failing measurements and determinism checks. API cases
run in this process; CLI cases run `python -m tf_gdp ...` as subprocesses in
a temp folder and must exit 2 with one `error:` line, no traceback and no
file left in the output folder. Exit code 1 if any case fails.

Examples:
  python -m tf_gdp.bench.reliability_check
  python -m tf_gdp.bench.reliability_check --cases=json_cycle,pb_cycle --nocli
  python -m tf_gdp.bench.reliability_check --markdown   # the docs table
"""

import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

from absl import app
from absl import flags

from grappler_bridge import errors as bridge_errors
import tf_gdp
from tf_gdp import errors
from tf_gdp.bench import reliability_case
from tf_gdp.bench import reliability_cases

_CASES = flags.DEFINE_list("cases", [], "Case names to run (default: all).")
_CLI = flags.DEFINE_bool("cli", True, "Also run the CLI side of each case.")
_MARKDOWN = flags.DEFINE_bool(
    "markdown", False, "Run the API side only and print the "
    "docs/RELIABILITY.md table (with the real lines) instead.")

CLI_TIMEOUT_S = 300.0
_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tf_gdp.__file__)))
# TF's C++ runtime prints these before its logging is configured; they are
# not ours and cannot be silenced from Python.
_CHATTER = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)|"
    r"[IW]\d{4} [\d:.]+\s+\d+ \S+:\d+\])")


@dataclasses.dataclass
class Outcome:
  """One run of one side (api or a CLI command) of a case."""
  case: str
  side: str
  expected: str
  got: str
  passed: bool
  seconds: float


def run_api(case: reliability_case.Case, tmp: str) -> Outcome:
  """Calls the case's API; checks the error type, one line and the text."""
  started = time.perf_counter()
  with reliability_case.environment(case.env):
    try:
      result = case.api(tmp)
    except errors.InputError as e:
      text = str(e)
      got = f"{type(e).__name__}: {text}"
      passed = (case.error is not None and isinstance(e, case.error) and
                "\n" not in text.strip() and
                re.search(case.expect, text) is not None)
    except Exception as e:  # pylint: disable=broad-except
      got = f"UNTYPED {type(e).__name__}: {bridge_errors.first_line(e)}"
      passed = False
    else:
      got = str(result)
      passed = case.error is None and re.search(case.expect, got) is not None
  expected = (f"{case.error.__name__}: /{case.expect}/" if case.error
              else f"/{case.expect}/")
  return Outcome(case.name, "api", expected, got, passed,
                 time.perf_counter() - started)


def run_cli(case: reliability_case.Case, tmp: str) -> List[Outcome]:
  """Runs each CLI invocation of the case as a subprocess."""
  outcomes = []
  for argv in case.cli(tmp):
    started = time.perf_counter()
    out_dir = os.path.join(tmp, reliability_case.OUT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(case.env or {}))
    # The subprocess runs this very tf_gdp, not whatever is installed.
    env["PYTHONPATH"] = os.pathsep.join(
        [_CODE_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    try:
      result = subprocess.run(
          [sys.executable, "-m", "tf_gdp", *argv], env=env, text=True,
          capture_output=True, timeout=CLI_TIMEOUT_S, check=False,
          cwd=tmp)
    except subprocess.TimeoutExpired:
      outcomes.append(Outcome(case.name, argv[0], "exit 2", "HUNG", False,
                              time.perf_counter() - started))
      continue
    lines = ours(result.stderr)
    error_lines = [line for line in lines if line.startswith("error: ")]
    left = leftovers(out_dir)
    got = (f"exit {result.returncode}: "
           f"{error_lines[0] if error_lines else ' | '.join(lines)[:300]}"
           + (f" [left behind: {left}]" if left else ""))
    if case.error is None:  # an input that must be accepted
      passed = (result.returncode == 0 and not error_lines and
                "Traceback" not in result.stderr)
      outcomes.append(Outcome(case.name, argv[0], "exit 0", got, passed,
                              time.perf_counter() - started))
      continue
    # `place` prints progress lines too; the others print just the error.
    one_line = len(error_lines) == 1 and (argv[0] == "place" or
                                          len(lines) == 1)
    passed = (result.returncode == 2 and one_line and not left and
              "Traceback" not in result.stderr and
              re.search(case.expect, error_lines[0]) is not None)
    outcomes.append(Outcome(case.name, argv[0], f"exit 2: /{case.expect}/",
                            got, passed, time.perf_counter() - started))
  return outcomes


def ours(stderr: str) -> List[str]:
  """stderr lines that tf-gdp printed (TF's start-up chatter dropped)."""
  return [line for line in stderr.splitlines()
          if line.strip() and not _CHATTER.match(line)]


def leftovers(folder: str) -> List[str]:
  """Files anywhere under `folder` (a failed command must leave none)."""
  found = []
  for root, _, files in os.walk(folder):
    found += [os.path.relpath(os.path.join(root, f), folder) for f in files]
  return sorted(found)


def run_case(case: reliability_case.Case, *, cli: bool = True
             ) -> List[Outcome]:
  with tempfile.TemporaryDirectory(prefix="tf_gdp_reliability_") as tmp:
    outcomes = [run_api(case, tmp)]
    if cli and case.cli is not None:
      outcomes += run_cli(case, tmp)
  return outcomes


def format_table(outcomes: List[Outcome]) -> str:
  rows = [("case", "side", "expected", "got", "pass", "s")]
  for o in outcomes:
    rows.append((o.case, o.side, _clip(o.expected, 60), _clip(o.got, 90),
                 "PASS" if o.passed else "FAIL", f"{o.seconds:.1f}"))
  widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
  lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
           for row in rows]
  lines.insert(1, "  ".join("-" * w for w in widths))
  return "\n".join(lines)


def markdown_table(cases: List[reliability_case.Case],
                   outcomes: List[Outcome]) -> str:
  """The docs table: input, the line the user sees, the proving test."""
  seen = {o.case: o for o in outcomes if o.side == "api"}
  lines = ["| case | input | the user sees (API; the CLI prints `error: ` + "
           "the same line and exits 2) | test |", "|---|---|---|---|"]
  for case in cases:
    got = re.sub(r"/tmp/tf_gdp_reliability_[^/]+/", "", seen[case.name].got)
    if case.cli is None:
      side = "API only"
    elif case.error is None:
      side = "CLI exits 0"
    else:
      side = "CLI too"
    cell = f"`{got}` ({side})".replace("|", "\\|")
    lines.append(f"| {case.name} | {case.given} | {cell} | `{case.test}` |")
  return "\n".join(lines)


def _clip(text: str, width: int) -> str:
  text = " ".join(text.split())
  return text if len(text) <= width else text[:width - 3] + "..."


def main(argv):
  del argv
  names = _CASES.value or [c.name for c in reliability_cases.CASES]
  unknown = [n for n in names if n not in reliability_cases.BY_NAME]
  if unknown:
    raise app.UsageError(f"unknown case(s) {unknown}; known: "
                         f"{', '.join(reliability_cases.BY_NAME)}")
  outcomes = []
  for name in names:
    case = reliability_cases.BY_NAME[name]
    done = run_case(case, cli=_CLI.value and not _MARKDOWN.value)
    for o in done:
      print(f"{'PASS' if o.passed else 'FAIL'} {o.case} [{o.side}] "
            f"{o.seconds:.1f} s", file=sys.stderr, flush=True)
    outcomes += done
  if _MARKDOWN.value:
    print(markdown_table([reliability_cases.BY_NAME[n] for n in names],
                         outcomes))
  else:
    print(format_table(outcomes))
  passed = sum(o.passed for o in outcomes)
  print(f"\n{len(names)} cases, {len(outcomes)} checks tried, {passed} "
        f"passed, {len(outcomes) - passed} failed")
  if passed != len(outcomes):
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
