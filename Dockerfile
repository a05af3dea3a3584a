# Mnemo's container image: `docker build -t mnemo .` (compose.yaml builds it too).
# The install is the Makefile's `make install`, the same steps CI runs: a venv, the package
# with constraints.txt, and the embedding model exported to ONNX into the image.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*

ENV VENV=/opt/mnemo/venv \
    MNEMO_CACHE_DIR=/opt/mnemo/cache \
    MNEMO_CONFIG=/etc/mnemo/config.toml \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/mnemo/src
COPY pyproject.toml constraints.txt Makefile README.md ./
COPY bots ./bots
COPY core ./core
COPY memory ./memory
COPY reflector ./reflector
COPY migrations ./migrations
RUN make install VENV=$VENV
# Bytecode for Mnemo's own modules, made now: the `mnemo` user cannot write __pycache__ here,
# so without it every start would compile them all again (~0.2 s of CPU before a reply).
RUN $VENV/bin/python -m compileall -q bots core memory reflector migrations

# A non-root user owns the data volume (and the model cache, which keeps an int8 copy).
RUN useradd --system --user-group --uid 10001 --home-dir /data --no-create-home mnemo \
    && mkdir -p /data /etc/mnemo \
    && chown -R mnemo:mnemo /data "$MNEMO_CACHE_DIR"
COPY deploy/config.toml /etc/mnemo/config.toml

USER mnemo
VOLUME ["/data"]
# The Telegram webhook server (mode = "webhook"); GET /healthz answers ok.
EXPOSE 8443
# SIGTERM: no new turn starts, running ones get 5 s (docker stop waits 10 s before SIGKILL).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/mnemo/venv/bin/mnemo"]
CMD ["run"]
