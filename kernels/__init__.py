"""Our router kernels and the adapters of the engines' and models' routers (never imports the harness)."""

# Every line a kernel build writes on stderr starts with this (kernels._build), so that a parent whose candidate
# builds in a worker process (whose stderr is a file, not the terminal) can pass those lines on to its console.
BUILD_NOTICE_PREFIX = "kernels: "
