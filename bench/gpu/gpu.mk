# The GPU benchmark (bench/README.md, "GPU benchmark"); the Makefile includes this file.
# Uses the Makefile's PY (.venv/bin/python), VENV and install target.
BENCH_GPU_ARGS ?=
GPU_DIR        ?= var/gpu

.PHONY: bench-gpu gpu-prepare

## GPU benchmark: ChatTTS's loop and ttsq's decoder (CUDA graphs) alone, the service (ENGINE_BACKEND=ttsq) at MAX_BATCH auto/8/1, COMPILE=true, real-time streaming capacity beside ChatTTS's own streaming (bench.listening.realtime); each phase time-boxed (BENCH_GPU_ARGS, e.g. --budget-s 600). Results in var/bench-gpu/; without a GPU, a dry run on CPU.
bench-gpu: install
	$(PY) -m bench.gpu $(BENCH_GPU_ARGS)

## For a GPU machine with no package registry: $(GPU_DIR)/ with the source, the cp312 wheels it lacks and run.sh (then scripts/gpu_run.sh there).
gpu-prepare: install
	PY=$(VENV)/bin/python scripts/gpu_prepare.sh $(GPU_DIR)
