"""A training root directory: what one run keeps in it, and its lock.

  <root>/.lock             held by the process training into it
  <root>/run.json          the run's tasks (name, graph fingerprint, devices)
  <root>/best/<task>.json  each task's best placement, rewritten when it
                           improves
  <root>/checkpoints/      the trainer's checkpoints
  <root>/train/            TensorBoard summaries
  <root>/policy/           the exported policy (`policy_io.save_policy`)
  <root>/targets/          pretrain's imitation targets, one file per task
                           (`search_targets`)
  <root>/imitation.json    the imitation phase's statistics, written when
                           it ends (`imitation`)

A resumed run must train on the same tasks (`check_run_file`), and only one
process at a time may train into a root directory (`lock_root_dir`).
"""

import fcntl
import json
import os

from grappler_bridge import errors as grappler_errors

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.graph import identity

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
IMITATION_FILE = "imitation.json"
TARGETS_DIR = "targets"
# Root directories this process holds the lock of: path -> open lock file.
_HELD_LOCKS = {}


def lock_root_dir(root_dir: str) -> None:
  """Refuses a second process training into the same root directory.

  Two runs interleaving checkpoints and best placements in one folder would
  corrupt each other's resume state. The lock is an flock on
  `<root>/.lock`, held until this process exits (the kernel drops it on a
  crash or SIGKILL, so a killed run never blocks its own restart); the same
  process may reopen its own root (sequential runs, tests).
  """
  path = os.path.join(os.path.abspath(root_dir), LOCK_FILE)
  if path in _HELD_LOCKS:
    return
  handle = open(path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    handle.seek(0)
    owner = handle.read().strip() or "unknown"
    handle.close()
    raise errors.InputError(
        f"{root_dir} is in use by another training run (pid {owner}); wait "
        "for it to finish or use another root directory") from e
  handle.seek(0)
  handle.truncate()
  handle.write(str(os.getpid()))
  handle.flush()
  _HELD_LOCKS[path] = handle


def check_run_file(root_dir: str, tasks) -> None:
  """Writes `run.json` for a new run; refuses a root holding other tasks."""
  path = os.path.join(root_dir, RUN_FILE)
  doc = {"tasks": [{"name": t.name,
                    "fingerprint": identity.graph_fingerprint(t.graph),
                    "topology": t.topology.name}
                   for t in tasks]}
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      previous = json.load(f)
    if previous.get("tasks") != doc["tasks"]:
      raise errors.InputError(
          f"{root_dir} holds a run over other graphs or devices; "
          "resume it with the same ones or use a new root directory")
    return
  fileio.write_atomically(path, json.dumps(doc, indent=1))


def best_path(root_dir: str, task) -> str:
  """Where a task's best placement is kept."""
  return os.path.join(root_dir, "best", identity.safe_name(task.name) + ".json")


def imitation_path(root_dir: str) -> str:
  """Where the imitation phase's statistics are kept (its end marker)."""
  return os.path.join(root_dir, IMITATION_FILE)


def targets_dir(root_dir: str) -> str:
  """Where the imitation targets are cached."""
  return os.path.join(root_dir, TARGETS_DIR)


def resumed_line(checkpointed: bool, iteration: int, evaluations: int,
                 seconds: float) -> str:
  """What a resumed run logs. A run stopped before its first checkpoint
  keeps only its best placements: training itself starts again."""
  if not checkpointed:
    return ("no checkpoint yet: training starts at iteration 0, from the "
            "best placements the stopped run wrote")
  return (f"resumed at iteration {iteration}, {evaluations} evaluations, "
          f"{seconds:.0f} s")


def restore_checkpoint(checkpoint, prefix: str, *,
                       partial: bool = False) -> None:
  """Restores `prefix` into a `tf.train.Checkpoint`; InputError if its files
  cannot be read (cut short, overwritten) rather than the reader's error.

  `partial`: variables the checkpoint lacks keep their values
  (`policy.compat`); otherwise every object that exists must be matched.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    status = checkpoint.restore(prefix)
    if partial:
      status.expect_partial()
    else:
      status.assert_existing_objects_matched()
  except (tf.errors.OpError, IndexError, ValueError) as e:
    raise errors.InputError(f"{prefix}: the checkpoint cannot be read "
                            f"({type(e).__name__}: {grappler_errors.first_line(e)})"
                           ) from e
