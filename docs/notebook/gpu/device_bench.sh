#!/bin/bash
# The GPU benchmark call of 2026-11-27 (benchmarks notebook), run in the repo root on
# the device machine. Two calls: the first carries .gpu1/ (the first part of
# pack_onnxruntime_gpu.py's archive) and copies it to /tmp; this one carries .gpu2/:
#   ort90.part.ab   the archive's second part
#   whl/            the service's cp312 wheels (pip download --only-binary=:all:
#                   --python-version 3.12 ... pydantic fastapi uvicorn redis msgspec ...)
#   redis.tar.xz    Debian's redis-server with the libraries it links (ldd)
#   art25/          the 25-channel paper-size artifact + model.fp16.onnx (speed only)
#   demo16/         the demo artifact exported with --fp16 (parity)
# It unpacks onnxruntime-gpu (sm_90 only) and the wheels, then runs 1) bench infer's
# CUDA rows on art25, 2) the same on demo16 (parity), 3) bench serve with the scorer
# on CUDA fp16.
set -u
exec > >(tee "$OUT/log.txt") 2>&1
date -u; nproc; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
mkdir -p /tmp/site /tmp/bin
cat /tmp/ort90.part.aa .gpu2/ort90.part.ab | xz -d | tar -C /tmp/site -x || { echo UNPACK-FAILED; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu2/whl/*.whl || { echo PIP-FAILED; exit 4; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
export LD_LIBRARY_PATH=$(find "$SP/nvidia" -name 'lib*.so*' -printf '%h\n' | sort -u | paste -sd:)
tar -C /tmp -xJf .gpu2/redis.tar.xz
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/redis/lib exec /tmp/redis/redis-server "$@"\n' > /tmp/bin/redis-server
chmod +x /tmp/bin/redis-server; export PATH=/tmp/bin:$PATH
redis-server --version
python3 - <<'PY'
import onnxruntime as o, numpy as np
print("ort", o.__version__, o.__file__, o.get_available_providers())
s = o.InferenceSession(".gpu2/demo16/model.fp16.onnx", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
print("active", s.get_providers())
print(s.run(["risk"], {"window": np.ones((4, 100, 8), np.float32)})[0])
PY
S=(python3 -m training.cli bench)
date -u; timeout 230 "${S[@]}" infer --artifact .gpu2/art25 --devices cuda --threads 8 --seconds 1 \
  --batch-sizes 1,16,64,256,1024,4096,16384 --json "$OUT/infer-h100-art25.json"; echo "rc infer-art25 $?"
date -u; timeout 90 "${S[@]}" infer --artifact .gpu2/demo16 --devices cuda --threads 8 --seconds 0.5 \
  --batch-sizes 1,64,1024,16384 --json "$OUT/infer-h100-demo16.json"; echo "rc infer-demo16 $?"
date -u; uptime; timeout 200 "${S[@]}" serve --artifact .gpu2/art25 --max-batch 1024 --threads 1 \
  --service-env SCJEPA_PROVIDER=cuda --service-env SCJEPA_PRECISION=fp16 \
  --requests 2000 --risk-seconds 10 --drain-windows 20000 --json "$OUT/serve-h100-art25.json"; echo "rc serve $?"
date -u; uptime; nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv
