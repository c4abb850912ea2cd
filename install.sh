#!/usr/bin/env bash
# Set up .venv with the project's pinned dependencies. Safe to run again.
# torch==2.13.0 goes in first, explicitly: on these machines that pin takes the local
# CPU wheel, while any looser torch requirement would download a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
if ! command -v git >/dev/null; then
  echo "install.sh: git is required (apt-get install git)" >&2
  exit 1
fi
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e '.[dev]'
.venv/bin/python -c "import prereg, torch, faiss, bm25s, tree_sitter_go, lmstudio; print('prereg installed in .venv (torch', torch.__version__ + ')')"
