"""Offline stand-in for @rules_java//java:defs.bzl: Bazel's native Java rules.

Bazel 4.2.3 registers the Java toolchains of @bazel_tools//tools/jdk for every
build, and loading that package loads `@rules_java//java:defs.bzl`, which its
built-in WORKSPACE suffix would download from GitHub, although the project has
no Java. This file gives the same names, forwarding to the native rules as
rules_java itself did at the time; the project's WORKSPACE registers it.
"""

def java_binary(**attrs):
    native.java_binary(**attrs)

def java_import(**attrs):
    native.java_import(**attrs)

def java_library(**attrs):
    native.java_library(**attrs)

def java_lite_proto_library(**attrs):
    native.java_lite_proto_library(**attrs)

def java_package_configuration(**attrs):
    native.java_package_configuration(**attrs)

def java_plugin(**attrs):
    native.java_plugin(**attrs)

def java_proto_library(**attrs):
    native.java_proto_library(**attrs)

def java_runtime(**attrs):
    native.java_runtime(**attrs)

def java_test(**attrs):
    native.java_test(**attrs)

def java_toolchain(**attrs):
    native.java_toolchain(**attrs)
