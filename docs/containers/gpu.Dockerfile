# Worker container for Dataflow GPU workers (model metrics on CUDA): Beam's Python SDK
# image of the project's Beam and Python versions, the pinned torch built for CUDA, the
# pinned requirements, a JRE (METEOR 1.5 and the PTB tokenizer run in Java) and the
# project itself with its `models` extra.
#
# Build from the repository root and push where Dataflow can pull it:
#
#     docker build -f docs/containers/gpu.Dockerfile -t REGION-docker.pkg.dev/PROJECT/REPO/qa-eval-gpu:0.1.0 .
#     docker push REGION-docker.pkg.dev/PROJECT/REPO/qa-eval-gpu:0.1.0
#
# then pass `--sdk_container_image` that tag (README, "Model-backed metrics", the GPU
# command). The NVIDIA driver comes from Dataflow (`install-nvidia-driver` in
# `worker_accelerator`); the CUDA runtime libraries come with the torch wheel.
# tests/test_packaging.py checks that the versions below match requirements.txt and the
# Makefile's torch pin.
ARG PYTHON_VERSION=3.11
ARG BEAM_VERSION=2.77.0
FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}

# torch as the Makefile pins it, built for CUDA 12.8 (drivers >= 570; Dataflow's
# install-nvidia-driver installs a current one)
ARG TORCH_VERSION=2.13.0
ARG TORCH_CUDA=cu128

RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/*

RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" \
        --index-url "https://download.pytorch.org/whl/${TORCH_CUDA}"

COPY requirements.txt /opt/qa-eval/requirements.txt
RUN pip install --no-cache-dir -r /opt/qa-eval/requirements.txt

COPY setup.py /opt/qa-eval/src/setup.py
COPY pipelines /opt/qa-eval/src/pipelines
COPY transforms /opt/qa-eval/src/transforms
RUN pip install --no-cache-dir --no-deps "/opt/qa-eval/src[models]" \
    && python -c "import torch, transforms.scoring.run_model_metrics"

# Beam's SDK harness, as in the base image
ENTRYPOINT ["/opt/apache/beam/boot"]
