"""Packs a finished pre-training run as the policy that ships with tf_gdp.

`make pretrain` runs `tf-gdp pretrain` with documented graphs, budget and
seed, then this:

  python -m tf_gdp.rl.shipped --root_dir=build/pretrain --out=tf_gdp/pretrained \
      --command="..." --held_out=gnmt8,transformer_xl2,...

which copies `<root_dir>/policy` to `<out>/policy` and writes beside it
`PROVENANCE.json` (command, commit, date, graphs, held-out graphs, budget
reached, final best/reference per graph, the imitation phase in brief) and `curves.json` (the training
curves read back from the run's TensorBoard events), so the checkpoint can
be traced to how it was made and reproduced.
"""

import json
import os
import shutil
import subprocess
import sys
import time

from absl import app
from absl import flags

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.rl import run_dir

CURVE_TAGS = ("gdp/reward_mean", "gdp/best_over_reference", "gdp/entropy",
              "gdp/greedy_ratio", "gdp/loss", "gdp/evaluations")


def read_curves(train_dir: str) -> dict:
  """tag -> [[step, value], ...] of the scalar summaries in `train_dir`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  curves = {}
  files = sorted(tf.io.gfile.glob(os.path.join(train_dir, "events.out.*")))
  for path in files:
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag not in CURVE_TAGS and not value.tag.startswith(
            "best_step_time_ms/"):
          continue
        number = (float(tf.make_ndarray(value.tensor)) if value.HasField(
            "tensor") else float(value.simple_value))
        curves.setdefault(value.tag, []).append([int(event.step), number])
  for points in curves.values():
    points.sort()
  return curves


def imitation_summary(root_dir: str):
  """The run's imitation phase in brief (`rl.imitation`), or None if none."""
  path = run_dir.imitation_path(root_dir)
  if not os.path.isfile(path):
    return None
  with open(path, encoding="utf-8") as f:
    stats = json.load(f)
  keys = ("epochs", "learning_rate", "tasks", "loss", "accuracy",
          "greedy_ratio", "search_evaluations", "seconds")
  summary = {k: stats.get(k) for k in keys}
  summary["targets"] = {task: target.get("method")
                        for task, target in stats.get("targets", {}).items()}
  return summary


def git_commit(directory: str) -> str:
  try:
    out = subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"],
                         capture_output=True, text=True, timeout=10,
                         check=True)
    dirty = subprocess.run(["git", "-C", directory, "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True,
                           text=True, timeout=10, check=True).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")
  except (OSError, subprocess.SubprocessError):
    return "unknown"


def ship(root_dir: str, out_dir: str, *, command: str, held_out: list) -> dict:
  """Copies the run's policy into `out_dir` with its provenance; returns it."""
  policy_dir = os.path.join(root_dir, "policy")
  if not os.path.isfile(os.path.join(policy_dir, "policy_config.json")):
    raise errors.InputError(f"{root_dir}: no finished run (no policy/)")
  with open(os.path.join(root_dir, "run.json"), encoding="utf-8") as f:
    run = json.load(f)
  curves = read_curves(os.path.join(root_dir, "train"))
  last = lambda tag: curves[tag][-1][1] if curves.get(tag) else None
  provenance = {
      "command": command,
      "commit": git_commit(os.path.dirname(os.path.abspath(__file__))),
      "date": time.strftime("%Y-%m-%d %H:%M %Z"),
      "graphs": [task["name"] for task in run["tasks"]],
      "held_out": held_out,
      "iterations": curves["gdp/reward_mean"][-1][0]
                    if curves.get("gdp/reward_mean") else 0,
      "evaluations": last("gdp/evaluations"),
      "final_best_over_reference": last("gdp/best_over_reference"),
      "final_best_step_time_ms": {
          tag.split("/", 1)[1]: points[-1][1]
          for tag, points in curves.items()
          if tag.startswith("best_step_time_ms/")},
      "imitation": imitation_summary(root_dir),
  }
  os.makedirs(out_dir, exist_ok=True)
  target = os.path.join(out_dir, "policy")
  staging = target + ".tmp"
  shutil.rmtree(staging, ignore_errors=True)
  shutil.copytree(policy_dir, staging)
  shutil.rmtree(target, ignore_errors=True)
  os.replace(staging, target)
  fileio.write_atomically(os.path.join(out_dir, "PROVENANCE.json"),
                          json.dumps(provenance, indent=1))
  fileio.write_atomically(os.path.join(out_dir, "curves.json"),
                          json.dumps(curves))
  return provenance


def main(argv):
  del argv
  try:
    provenance = ship(_ROOT_DIR.value, _OUT.value, command=_COMMAND.value,
                      held_out=[g for g in _HELD_OUT.value if g])
  except errors.InputError as e:
    sys.exit(f"error: {e}")
  print(json.dumps(provenance, indent=1))


if __name__ == "__main__":
  _ROOT_DIR = flags.DEFINE_string("root_dir", None, "The pretrain run.",
                                  required=True)
  _OUT = flags.DEFINE_string("out", None, "Where the shipped policy goes.",
                             required=True)
  _COMMAND = flags.DEFINE_string("command", "", "The pretrain command line.")
  _HELD_OUT = flags.DEFINE_list("held_out", [], "Graphs never trained on.")
  app.run(main)
