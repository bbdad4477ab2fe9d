# Dockerfile - the posattnd image: a build stage with the -dev packages, a
# runtime stage with only the shared libraries posattnd links against.
#
#   podman build --format docker -t localhost/posattnd:dev .     (or: make image)
#   podman run --rm -p 127.0.0.1:8080:8080 --read-only localhost/posattnd:dev
#
# Configuration is by POSATTN_* environment variables (posattnd --help lists
# them); arguments after the image name are passed to posattnd. The server
# writes no files, so the root filesystem may be read-only. `--format docker`
# keeps the HEALTHCHECK (the OCI image format has no field for it).

FROM debian:bookworm-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       gcc libc6-dev make pkg-config \
       libopenblas-dev libmicrohttpd-dev libcjson-dev libuv1-dev libgnutls28-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the daemon is built from, so edits to tests or docs reuse the cache.
COPY Makefile openapi.yaml ./
COPY include/ include/
COPY lib/ lib/
COPY server/ server/
RUN make BUILD=/build WERROR=1 /build/posattnd \
    && strip /build/posattnd \
    && /build/posattnd --version

FROM debian:bookworm-slim
# libopenblas0-pthread is the variant the build linked (openblas-pthread).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       libopenblas0-pthread libmicrohttpd12 libcjson1 libuv1 libgnutls30 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 posattn \
    && useradd --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin posattn
COPY --from=build /build/posattnd /usr/local/bin/posattnd
# Where a volume for --cache-dir goes (deploy/compose.yaml): a new named
# volume takes this folder's owner, so the server (uid 10001) may write it.
RUN install -d -o 10001 -g 10001 -m 0770 /var/lib/posattn /var/lib/posattn/sessions

# A numeric user, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
ENV POSATTN_HOST=0.0.0.0 \
    POSATTN_PORT=8080
EXPOSE 8080

# No curl in this image: bash's /dev/tcp sends GET /healthz and the status
# line must say 200. Follows POSATTN_PORT if it is changed.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${POSATTN_PORT:-8080} && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && IFS= read -r -t 2 status <&3 && [[ $status == HTTP/1.?' 200 '* ]]"]

# Exec form: posattnd is PID 1 and gets SIGTERM itself, so `docker stop` or a
# pod's termination starts the drain (readyz 503, finish accepted work, exit 0).
ENTRYPOINT ["/usr/local/bin/posattnd"]

LABEL org.opencontainers.image.title="posattnd" \
      org.opencontainers.image.description="Positional encodings and multi-head attention over HTTP"
