# The converse worker. `docker build -t mira-converse-worker .` then
# `docker run --env-file stage.env mira-converse-worker` (runs `worker run`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    METRICS=emf

# A fixed numeric uid: Kubernetes can only verify runAsNonRoot against a number.
RUN groupadd --system --gid 10001 worker \
    && useradd --system --uid 10001 --gid worker --no-create-home --shell /usr/sbin/nologin worker

WORKDIR /src
COPY pyproject.toml README.md ./
COPY worker/ worker/
RUN pip install --no-cache-dir . \
    && rm -rf /src/build /src/*.egg-info

# Run from an empty directory so the source tree never shadows the installed package.
WORKDIR /home/worker
USER 10001:10001

# Exec form: the worker is PID 1 and receives SIGTERM itself, then drains within
# SHUTDOWN_GRACE_SECONDS. A shell form would leave /bin/sh in between, swallowing the signal.
ENTRYPOINT ["worker"]
CMD ["run"]
