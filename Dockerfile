# The converse worker. `docker build -t mira-converse-worker .` then
# `docker run --env-file stage.env mira-converse-worker` (runs `worker run`).
#
# The base is pinned to a Python patch release and a Debian release. For a release build, pin
# its digest as well: `docker buildx imagetools inspect python:3.11.18-slim-bookworm` prints it,
# and the line becomes `FROM python:3.11.18-slim-bookworm@sha256:<that digest>`
# (docs/DEPLOY.md, "The image").
FROM python:3.11.18-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    METRICS=emf

# A fixed numeric uid: Kubernetes can only verify runAsNonRoot against a number.
RUN groupadd --system --gid 10001 worker \
    && useradd --system --uid 10001 --gid worker --no-create-home --shell /usr/sbin/nologin worker

WORKDIR /src
# The dependencies, exactly as locked (`make lock`): each file pip downloads must match a hash
# in the lock, and --no-deps means nothing the lock does not name is installed. `pip check`
# fails the build if the lock misses a dependency. This layer changes only with the lock.
COPY requirements.lock ./
RUN pip install --no-cache-dir --no-deps --require-hashes -r requirements.lock \
    && pip check

# The project itself: built with the locked setuptools (no isolated build environment that
# would fetch unpinned build tools) and with no index, so nothing more is downloaded. LICENSE is
# pyproject.toml's license-files: the installed package carries it.
COPY pyproject.toml README.md LICENSE ./
COPY worker/ worker/
RUN pip install --no-cache-dir --no-deps --no-build-isolation --no-index . \
    && rm -rf /src/build /src/*.egg-info

# Run from an empty directory so the source tree never shadows the installed package.
WORKDIR /home/worker
USER 10001:10001

# `worker health` fails when the receive loop or the lease heartbeat has not beaten within
# HEALTH_MAX_SILENCE_SECONDS (120). For `docker run` and compose; ECS runs the task
# definition's HealthCheck and Kubernetes its livenessProbe instead, with the same command.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["worker", "health"]

# Exec form: the worker is PID 1 and receives SIGTERM itself, then drains within
# SHUTDOWN_GRACE_SECONDS. A shell form would leave /bin/sh in between, swallowing the signal.
ENTRYPOINT ["worker"]
CMD ["run"]
