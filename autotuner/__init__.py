"""autotuner: an autotuning service for Triton GPU kernels with a persistent result database."""

__version__ = "0.1.0"
