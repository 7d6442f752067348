. .gpu/sh/env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl 2>&1 | tail -3
mkdir -p /tmp/g && tar xJf .gpu/small/small.tar.xz -C /tmp/g && cat .gpu/w1/c > /tmp/g/base.xz
mkdir -p /tmp/xdg/specwhisper/models/base-ct2conv1 && cp /tmp/g/basejson/* /tmp/xdg/specwhisper/models/base-ct2conv1/
nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.mem --format=csv
python3 -c "import torch,transformers,tokenizers,soundfile,silero_vad,jiwer; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"
python3 -c "from specwhisper.asr.engine import AsrEngine; print('import ok')"
ls -la /tmp/g; df -h /tmp | tail -1
