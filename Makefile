# make quickstart   set up .venv and run the smoke pipeline: build -> train -> held-out matrix -> report
#                   (CPU, offline, a few minutes; report in evals/smoke/report.md)
# make build        set up .venv and build the benchmark data (real sources if ../shared/data/raw exists)
# make test         set up .venv and run the test suite
# make test-vllm    set up .venv-vllm (vLLM's CPU build, its own pins; scripts/setup-vllm.sh) and run the
#                   tests marked vllm there: the vllm backend and `vllm serve` for real (a few minutes)
RAW ?= ../shared/data/raw
PY := .venv/bin/python

.PHONY: setup quickstart build test test-vllm bench
setup:
	bash scripts/setup.sh

build: setup
	@if [ -d "$(RAW)" ]; then \
	  $(PY) data_build/build.py sources.root=$(RAW) out=data/builds/default overwrite=true; \
	else \
	  echo "no $(RAW): building from automon's synthetic sources"; \
	  $(PY) -c "from automon.sources.synthetic import write_synthetic_root as w; w('data/synthetic_raw')"; \
	  $(PY) data_build/build.py sources.root=data/synthetic_raw out=data/builds/synthetic overwrite=true \
	    $$($(PY) -m automon.subsets test-overrides 6); \
	fi

quickstart: setup
	$(PY) pipeline.py experiment=smoke

test: setup
	$(PY) -m pytest -n auto --dist loadfile

test-vllm:
	bash scripts/setup-vllm.sh
	.venv-vllm/bin/python -m pytest -m vllm

bench: setup
	$(PY) bench/bench_build.py
