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
as_root_with_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
if ! command -v git >/dev/null; then
  if as_root_with_apt; then apt-get update -qq && apt-get install -y -qq git >/dev/null; else
    echo "install.sh: git is required (apt-get install git)" >&2; exit 1; fi
fi
# Debian's Chromium renders the HTML reports in the browser checks; without it they skip.
if [ ! -x /usr/bin/chromium ]; then
  if as_root_with_apt; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install.sh: note: /usr/bin/chromium is absent; the report browser checks will skip (apt-get install chromium)"
  fi
fi
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e '.[dev]'
.venv/bin/python -c "import prereg, torch, faiss, bm25s, tree_sitter_go, lmstudio; print('prereg installed in .venv (torch', torch.__version__ + ')')"
.venv/bin/python -m prereg.rp002a.gru_kernel --build  # compiles the "compiled" GRU kernel (C++, needs CXX or c++)
