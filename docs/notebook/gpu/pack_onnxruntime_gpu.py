"""Pack onnxruntime-gpu for a machine that can receive at most 64 MiB a call and runs
only sm_90 (H100/H200) code (benchmarks notebook, 2026-11-27).

    pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --platform manylinux_2_28_x86_64 -d /tmp/whl onnxruntime-gpu==1.31.1
    python docs/notebook/gpu/pack_onnxruntime_gpu.py /tmp/whl/onnxruntime_gpu-*.whl OUT

Zeroes every cubin (fatbin ELF entry) of the CUDA provider library built for another
architecture than sm_90: the file keeps its layout, the zeros compress away. Leaves
out `libonnxruntime.so` (the Python binding does not load it), the TensorRT provider
and the transformers/quantization/tools subpackages, then writes OUT.tar.xz split in
parts of 54 MiB (OUT.tar.xz.part.aa, ...). On the device: `cat parts | xz -d | tar -C
SITE -x` and put SITE first on PYTHONPATH, with the CUDA 13 libraries of the machine's
PyTorch (site-packages/nvidia/*/lib) on LD_LIBRARY_PATH.
"""

import io
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

MAGIC = struct.pack("<I", 0xBA55ED50)  # a fatbin container's header
KEEP_ARCH = 90
DROP = (
    "onnxruntime/capi/libonnxruntime.so",
    "onnxruntime/capi/libonnxruntime_providers_tensorrt.so",
    "onnxruntime/transformers/",
    "onnxruntime/quantization/",
    "onnxruntime/tools/",
)


def keep_one_arch(data: bytearray, arch: int) -> int:
    """Zero the payloads of the fatbin ELF entries (kind 2) of other architectures;
    returns the bytes zeroed."""
    pos, zeroed = 0, 0
    while (i := data.find(MAGIC, pos)) >= 0:
        _, header, size = struct.unpack_from("<HHQ", data, i + 4)
        if header != 16 or size > len(data):
            pos = i + 4
            continue
        p, end = i + header, i + header + size
        while p < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, p)
            entry_arch = struct.unpack_from("<I", data, p + 28)[0]
            if kind == 2 and entry_arch != arch:
                start = p + entry_header
                data[start : start + payload] = bytes(payload)
                zeroed += payload
            p += entry_header + payload
        pos = end
    return zeroed


def main(wheel: str, out: str) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(wheel) as z, tarfile.open(fileobj=buf, mode="w") as tar:
        for info in z.infolist():
            if info.is_dir() or info.filename.startswith(DROP):
                continue
            data = bytearray(z.read(info))
            if info.filename.endswith("libonnxruntime_providers_cuda.so"):
                print(f"zeroed {keep_one_arch(data, KEEP_ARCH) / 1e6:.0f} MB of cubins")
            member = tarfile.TarInfo(info.filename)
            member.size, member.mode = len(data), 0o755
            tar.addfile(member, io.BytesIO(bytes(data)))
    xz = subprocess.run(
        ["xz", "-T0", "-9e"], input=buf.getvalue(), capture_output=True, check=True
    ).stdout
    Path(f"{out}.tar.xz").write_bytes(xz)
    subprocess.run(["split", "-b", "54M", f"{out}.tar.xz", f"{out}.tar.xz.part."])
    print(f"{out}.tar.xz: {len(xz) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
