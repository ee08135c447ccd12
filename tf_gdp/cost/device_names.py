"""TF device strings: their fields, and whether a device satisfies a pin.

A pin constrains only the fields it names (`/device:GPU:1` matches any
job/task's GPU 1, `/job:worker/task:1` any device of that task), so names are
compared field by field rather than as strings.
"""

import re

from tf_gdp import errors

_LEGACY_DEVICE = re.compile(r"^(cpu|gpu|tpu)(?::(\d+|\*))?$", re.IGNORECASE)


def parse_device(spec: str) -> dict:
  """Fields of a TF device string: job, replica, task, type, index.

  Accepts full names (`/job:w/replica:0/task:1/device:GPU:0`), partial ones
  (`/device:GPU:1`, `/job:worker/task:1`, `/gpu:0`) and `*` wildcards. Only
  the fields present are returned, so a pin constrains just what it names.
  """
  fields = {}
  for part in spec.strip().split("/"):
    if not part:
      continue
    key, _, rest = part.partition(":")
    key = key.lower()
    if key in ("job", "replica", "task"):
      if rest and rest != "*":
        fields[key] = rest if key == "job" else str(int(rest))
    elif key == "device":
      kind, _, index = rest.partition(":")
      if kind and kind != "*":
        fields["type"] = kind.upper()
      if index and index != "*":
        fields["index"] = str(int(index))
    elif _LEGACY_DEVICE.match(part):
      kind, _, index = part.partition(":")
      fields["type"] = kind.upper()
      if index and index != "*":
        fields["index"] = str(int(index))
    else:
      raise errors.InputError(f"{spec!r} is not a TF device string")
  return fields


def device_matches(wanted: dict, device: dict) -> bool:
  """Whether a device (parsed) satisfies every field of a (partial) spec."""
  return all(device.get(key) == value for key, value in wanted.items())
