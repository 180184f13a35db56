#!/usr/bin/env bash
# Everything issue 19 measures on a lent GPU, in two steps: `prepare` here (needs the project installed and
# the package index), `run` on the GPU node (no index needed) from the repository root. The prepared folder,
# gpu-run/ (git-ignored), travels with the working tree when named in the device tool's carry.
#
#   bash benchmarks/gpu_session.sh prepare [BASELINE_REV]   # configs, wheels, the baseline's sources
#   bash benchmarks/gpu_session.sh run1 OUT_DIR             # on the node: records in OUT_DIR/*.json
#   bash benchmarks/gpu_session.sh run2 OUT_DIR             # the next call, while the machine is warm
#   python benchmarks/bench_train_gpu.py --from-json OUT_DIR/h100_1x.json ... --write   # here again
#
# Each part fits one 10-minute call on one H100 (each torchrun leg costs about 100 s besides its steps:
# start, compile, the final checkpoint and weights). run1: the reference beside the baseline's sources and
# the current ones (each change measured in one call), a profile, resume against an unstopped run. run2: the
# same run twice (the GPU's own non-determinism), the document mask, the smallest scout by micro-batch.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=gpu-run
case "${1:-}" in
prepare)
    rev=${2:-9434e4b^}  # the training code as the first H100 measurement found it
    PY=.venv/bin/python
    mkdir -p $DIR/wheels $DIR/baseline
    $PY benchmarks/bench_train_gpu.py --scale h100_1x --steps 10 --save-config $DIR/h100_1x.json
    $PY benchmarks/bench_train_gpu.py --scale h100_1x --scout s1 --steps 12 --save-config $DIR/s1.json
    rm -rf $DIR/baseline/src && git archive "$rev" src | tar -x -C $DIR/baseline && git rev-parse --short "$rev" > $DIR/baseline/REV
    cp ../shared/gpu/mfu_reference.py $DIR/
    # What the training code imports beyond the node's torch, numpy, pyarrow, PyYAML (docs/training.md).
    for pkg in pydantic pydantic_core annotated-types typing-inspection zstandard; do
        v=$($PY -m pip show "$pkg" | sed -n 's/^Version: //p')
        $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d $DIR/wheels "$pkg==$v"
    done
    du -sh $DIR ;;
run1|run2)
    OUT=${2:?usage: gpu_session.sh run1|run2 OUT_DIR}
    mkdir -p "$OUT"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/tokenmill-site $DIR/wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/tokenmill-site PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.txt"
    B="python3 benchmarks/bench_train_gpu.py"; C=$DIR/h100_1x.json
    if [ "$1" = run1 ]; then
        $B --config $C --reference $DIR/mfu_reference.py --src $DIR/baseline/src \
            --label "baseline $(cat $DIR/baseline/REV)" --json "$OUT/baseline.json"
        $B --config $C --resume --profile 3 --label "h100_1x" --json "$OUT/h100_1x.json"
    else
        $B --config $C --set train.max_steps=4 --repeat --label "h100_1x twice" --json "$OUT/repeat.json"
        $B --config $C --set train.max_steps=4 --set model.document_mask=true --label "document_mask" \
            --json "$OUT/docmask.json"
        for mb in 16 32; do
            $B --config $DIR/s1.json --set train.micro_batch=$mb --label "s1 micro $mb" --json "$OUT/s1_mb$mb.json"
        done
    fi ;;
*)
    sed -n '2,/^set/p' "$0" | grep '^#'; exit 2 ;;
esac
