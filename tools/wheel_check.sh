#!/usr/bin/env bash
# Checks the tf-gdp wheel as a user gets it: `tools/wheel_check.sh <wheel>`
# (`make wheel-check` builds the wheel first and calls this).
#
# 1. The wheel carries every file under tf_gdp/pretrained/ of the source tree
#    (the pre-trained policy) and every JSON data file of the package.
# 2. It installs into a fresh virtualenv in a temporary directory (no
#    --system-site-packages; pip may reuse its local cache / wheel dirs).
# 3. From another directory (not the source tree), the installed package
#    imports, reports the version of tf_gdp/version.py, and `tf-gdp --help`
#    works; the installed package data matches the source tree.
#
# Environment: PYTHON (base interpreter for the venv, default python3),
# KEEP=1 keeps the temporary directory for inspection.
set -euo pipefail

wheel="$(realpath "${1:?usage: $0 <wheel file>}")"
source_root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"

work="$(mktemp -d "${TMPDIR:-/tmp}/tf-gdp-wheel-check.XXXXXX")"
if [[ "${KEEP:-0}" == 1 ]]; then
  echo "keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi

step() { echo "== $*"; }

# Files the wheel must carry: package data of the source tree (relative to
# the repository root, as wheel paths are).
expected="$work/expected.txt"
(cd "$source_root" &&
  { if [[ -d tf_gdp/pretrained ]]; then find tf_gdp/pretrained -type f; fi
    find tf_gdp -name '*.json' -type f
  } | sort -u) > "$expected"

step "package data in $(basename "$wheel"): $(wc -l < "$expected") file(s)"
"$python" - "$wheel" "$expected" <<'PY'
import sys, zipfile
wheel, expected = sys.argv[1:]
names = set(zipfile.ZipFile(wheel).namelist())
want = [line.strip() for line in open(expected) if line.strip()]
missing = [name for name in want if name not in names]
if missing:
  sys.exit("missing from the wheel: " + ", ".join(missing))
for module in ("tf_gdp/__init__.py", "tf_gdp/version.py",
               "tf_gdp/cli/main.py", "grappler_bridge/__init__.py"):
  if module not in names:
    sys.exit(f"missing from the wheel: {module}")
PY

step "fresh virtualenv in $work/venv"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
step "pip install $(basename "$wheel") (dependencies from pip's cache/index)"
"$venv_python" -m pip install --quiet "$wheel"

# Run from an empty directory so that nothing resolves to the source tree.
mkdir "$work/elsewhere"
cd "$work/elsewhere"

want_version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$source_root/tf_gdp/version.py")"
step "python -c 'import tf_gdp; print(tf_gdp.__version__)'"
got_version="$("$venv_python" -c 'import tf_gdp; print(tf_gdp.__version__)')"
echo "$got_version"
[[ "$got_version" == "$want_version" ]] ||
  { echo "version $got_version != $want_version (tf_gdp/version.py)" >&2; exit 1; }

step "installed from site-packages, with its package data"
"$venv_python" - "$work/venv" "$expected" <<'PY'
import os, sys
import tf_gdp
venv, expected = sys.argv[1:]
package_dir = os.path.dirname(os.path.realpath(tf_gdp.__file__))
if not package_dir.startswith(os.path.realpath(venv) + os.sep):
  sys.exit(f"tf_gdp imported from {package_dir}, not from the virtualenv")
site = os.path.dirname(package_dir)
for line in open(expected):
  name = line.strip()
  if name and not os.path.isfile(os.path.join(site, name)):
    sys.exit(f"not installed: {name}")
print(package_dir)
PY

step "tf-gdp --help"
"$work/venv/bin/tf-gdp" --help

step "tf-gdp place (zero-shot with the packaged policy, from elsewhere)"
"$work/venv/bin/tf-gdp" place --graphs=transformer_xl2 --devices=p100x4 \
    --method=gdp --compare=single_device --out="$work/placed"
report="$work/placed/transformer_xl2/report.json"
test -s "$work/placed/transformer_xl2/placement.json"
"$venv_python" - "$report" "$work/venv" <<'PY'
import json, os, sys
report = json.load(open(sys.argv[1]))
policy = report["details"]["policy"]
if not os.path.realpath(policy).startswith(os.path.realpath(sys.argv[2])):
  sys.exit(f"placed with {policy}, not the packaged policy")
print(f"zero-shot {report['step_time_us'] / 1e3:.1f} ms, valid {report['valid']}")
PY

step "wheel check passed"
