"""Offline stand-in for @rules_cc//cc:defs.bzl: Bazel's native C++ rules.

Bazel 4.2.3 (Debian's bazel-bootstrap) loads `@rules_cc//cc:defs.bzl` from its
own @bazel_tools and from the auto-configured C++ toolchain, even for a build
with only Python targets, and its built-in WORKSPACE suffix would download
rules_cc from GitHub for that. Debian's bazel-rules-cc package is a newer
release that does not load in Bazel 4.2.3. This file gives the same names,
forwarding to the native rules that rules_cc itself wrapped at the time; the
project's WORKSPACE registers it, so Bazel never downloads rules_cc.
"""

def cc_binary(**attrs):
    native.cc_binary(**attrs)

def cc_import(**attrs):
    native.cc_import(**attrs)

def cc_library(**attrs):
    native.cc_library(**attrs)

def cc_proto_library(**attrs):
    native.cc_proto_library(**attrs)

def cc_test(**attrs):
    native.cc_test(**attrs)

def cc_toolchain(**attrs):
    native.cc_toolchain(**attrs)

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**attrs)

def fdo_prefetch_hints(**attrs):
    native.fdo_prefetch_hints(**attrs)

def fdo_profile(**attrs):
    native.fdo_profile(**attrs)

def objc_import(**attrs):
    native.objc_import(**attrs)

def objc_library(**attrs):
    native.objc_library(**attrs)
