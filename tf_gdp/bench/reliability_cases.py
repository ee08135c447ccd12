"""Every hostile, broken or impossible input tf-gdp must refuse cleanly.

One list (`CASES`) serves both `python -m tf_gdp.bench.reliability_check`
and the parametrized tests, so the table in docs/RELIABILITY.md, the script
and the tests cannot drift apart. What a case is: `reliability_case.Case`;
the cases: `reliability_input_cases` (graph files, op-graph JSON,
topologies) then `reliability_run_cases` (infeasible placements, placement
files, failing measurements, determinism).
"""

from tf_gdp.bench import reliability_input_cases
from tf_gdp.bench import reliability_run_cases

CASES = reliability_input_cases.cases() + reliability_run_cases.cases()
BY_NAME = {case.name: case for case in CASES}
