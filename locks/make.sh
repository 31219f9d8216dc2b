#!/usr/bin/env bash
# Make the locks of pyproject.toml's runtime dependencies, every file pinned by its sha256, for CPython 3.11 on
# x86_64 Linux (glibc 2.28 or newer): locks/requirements-cpu.lock with torch's CPU build and
# locks/requirements-cuda.lock with PyPI's torch, the CUDA build with its nvidia wheels (docs/installation.md).
#
#   bash locks/make.sh CPU_WHEELS
#
# CPU_WHEELS: a folder holding torch's CPU wheel for cp311 (it is not on PyPI):
#   pip download --no-deps torch==2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu -d CPU_WHEELS
# Needs uv (pip install uv). Everything else comes from PyPI, at the newest versions that fit pyproject.toml.
set -euo pipefail
cpu_wheels=${1:?usage: bash locks/make.sh CPU_WHEELS, a folder holding the CPU wheel of torch}
torch=2.13.0  # the README's torch
cd "$(dirname "$0")/.."
compile=(uv pip compile pyproject.toml - --generate-hashes --python-version 3.11
    --python-platform x86_64-manylinux_2_28 --custom-compile-command "bash locks/make.sh CPU_WHEELS")
echo "torch==$torch+cpu" | "${compile[@]}" --find-links "$cpu_wheels" --no-emit-find-links -o locks/requirements-cpu.lock
echo "torch==$torch" | "${compile[@]}" -o locks/requirements-cuda.lock
