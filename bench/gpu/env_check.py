"""What the GPU machine is and what loads there, as json (bench/gpu/run.sh's first step after the unpacking):
the GPU, driver and clocks as found, torch and transformers, and whether CTranslate2's CUDA 12 build
sees the GPU, alone and with its cuBLAS linked to the machine's (bench/gpu_longform.py does the same)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def ct2_cuda(env: dict) -> str:
    code = "import ctranslate2; print(ctranslate2.get_cuda_device_count())"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    lines = (p.stdout + p.stderr).strip().splitlines()
    return lines[-1] if lines else f"exit {p.returncode}"


def main() -> int:
    import torch
    import transformers

    out = dict(python=platform.python_version(), cpus=os.cpu_count(), torch=torch.__version__, transformers=transformers.__version__,
               cuda_available=torch.cuda.is_available())
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        out.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda, gpu_free_gb=round(free / 2**30, 1),
                   gpu_total_gb=round(total / 2**30, 1))
        try:
            out["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.used,clocks.sm,clocks.mem,temperature.gpu",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            out["nvidia_smi"] = str(exc)
        from bench.gpu_longform import cublas12_folder

        out["ct2_cuda_devices"] = ct2_cuda(dict(os.environ))
        libs = cublas12_folder()
        out["cublas12_link"] = libs
        if libs:
            out["ct2_cuda_devices_with_link"] = ct2_cuda(dict(os.environ, LD_LIBRARY_PATH=f"{libs}:{os.environ.get('LD_LIBRARY_PATH', '')}"))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
