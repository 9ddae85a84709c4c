# caffetool's images from an engine bundle: the engine is compiled once (on the host, by
# `caffetool engine.install`, or `engine.compile-check` for CUDA), packed by `caffetool engine.bundle`,
# staged by `caffetool docker.build` in build/docker-context/engine/ and unpacked here by
# `caffetool engine.install --bundle`. No compiler, no -dev package and no source build in the
# image; any Docker builds it (no BuildKit features: the legacy builder and BuildKit alike).
#   cpu:             a CPU-only engine's bundle
#   gpu, base pypi:  a CUDA engine's bundle; installing it pip-installs the NVIDIA wheels it declares
#                    (CUDA runtime, cuBLAS, cuRAND, cuDNN, NCCL) into /opt/venv, and the NVIDIA
#                    container runtime mounts the driver (NVIDIA_VISIBLE_DEVICES=all asks for it)
ARG BASE_IMAGE=debian:12

FROM ${BASE_IMAGE} AS install
ENV DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The packages follow the base image's release, which its tag pins (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/caffetool
COPY pyproject.toml README.md tasks.py ./
COPY caffetool ./caffetool
# pip installs models/ as the package caffetool.models: the image's tasks find them there.
COPY models ./models
# The host's local certificate authorities (a TLS-inspecting proxy's, say), staged by docker.build,
# are trusted by this stage's pip only; the final image does not carry them.
COPY build/docker-context/ca-certificates/ /usr/local/share/ca-certificates/
RUN update-ca-certificates \
    && python3 -m venv /opt/venv \
    && PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/venv/bin/pip install --no-cache-dir . \
    && rm -rf build ./*.egg-info
# The bundle carries every library the engine needs but glibc (vendored, found through $ORIGIN);
# installing it links pycaffe into /opt/venv. This stage is left behind, the archive with it.
COPY build/docker-context/engine/ /tmp/engine/
RUN PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_NO_CACHE_DIR=1 \
    /opt/venv/bin/caffetool engine.install --prefix /opt/caffe --link-python --bundle /tmp/engine/engine.tar.zst

FROM ${BASE_IMAGE} AS runtime
ARG NVIDIA_VISIBLE_DEVICES=void
ENV DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# graphviz: the dot that caffe.draw and python/draw_net.py render nets with
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 graphviz \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 caffetool
ENV PATH=/opt/venv/bin:${PATH} \
    CAFFE_ROOT=/opt/caffe \
    MPLCONFIGDIR=/tmp/matplotlib \
    NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES} \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
WORKDIR /opt/caffetool
ENTRYPOINT ["/opt/venv/bin/caffetool"]
CMD ["--list"]
USER 1000:1000
# The large layers last: a storage driver without copy-on-write (vfs) copies the whole tree for
# every later step, so the settings above cost nothing here.
COPY --from=install /opt/caffe /opt/caffe
COPY --from=install /opt/venv /opt/venv
COPY --from=install /opt/caffetool /opt/caffetool
