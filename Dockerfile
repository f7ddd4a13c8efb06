# One image for the service and the GPU worker (docker-compose.yml runs both).
# The base image carries a CUDA build of PyTorch with its Triton; pip keeps them (they satisfy the pins).
FROM pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY autotuner ./autotuner
COPY kernels ./kernels
COPY search_spaces ./search_spaces
COPY db ./db
COPY api ./api
RUN pip install ".[server,postgres,predict]" \
    && useradd --create-home --uid 1000 autotuner

# Triton's kernel cache and the default SQLite file live in the user's home.
USER autotuner
EXPOSE 8000
CMD ["autotuner", "serve", "--host", "0.0.0.0", "--port", "8000"]
