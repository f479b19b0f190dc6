#!/usr/bin/env bash
# Wheels for a bare GPU machine that has torch, peft, pandas, rich and nvidia-ml-py but not the rest
# (the device tool's H200: Python 3.12, x86-64). Writes .whl/ (git-ignored); then, there:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#   python3 scripts/gpu_acceptance.py --out /tmp/acceptance
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON_VERSION:-3.12}
rm -rf .whl && mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# The versions this checkout was tested with (its .venv), where there is one.
python=python3; [ -x .venv/bin/python ] && python=.venv/bin/python
pinned() { for p in "$@"; do v=$($python -c "import importlib.metadata as m; print(m.version('$p'))" 2>/dev/null) \
  && echo "$p==$v" || echo "$p"; done; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp "${platforms[@]}" \
  -d .whl $(pinned sqlalchemy hydra-core omegaconf diffusers torchao sdnq)
python3 -m pip wheel -q --no-deps -w .whl $(pinned antlr4-python3-runtime) .   # antlr4 ships no wheel; ckpt-sweep itself
rm -rf build  # what pip wheel . left behind
ls -1 .whl
du -sh .whl
