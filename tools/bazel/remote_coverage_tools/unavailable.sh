#!/bin/sh
# Offline stand-in for Bazel's coverage tools (see BUILD).
echo "bazel coverage is not available in this offline setup; use pytest --cov" >&2
exit 1
