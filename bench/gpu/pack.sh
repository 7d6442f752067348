#!/bin/sh
# Builds .gpu/ for the GPU check (bench/gpu/README.md); run from anywhere, with the project's virtual environment.
cd "$(dirname "$0")/../.." && exec "${PY:-.venv/bin/python}" bench/gpu/pack.py "$@"
