"""Flags that every command reading graphs defines the same way."""

from absl import flags


def define_signature(module_name: str) -> flags.FlagHolder:
  """`--signature=NAME`, listed under the command `module_name`'s --help."""
  return flags.DEFINE_string(
      "signature", None, "SavedModel signature to read (default: "
      "serving_default if the SavedModel has it, else its only signature).",
      module_name=module_name)
