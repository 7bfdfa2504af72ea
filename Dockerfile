# reclaim's images. Two targets:
#   reclaim        the worker, the truncation applier and the operator commands (`reclaim ...`), with the
#                  [postgres] extra and no Spark
#   reclaim-spark  the same plus the [spark] extra, a Java runtime and Spark's Kafka connector, for
#                  `reclaim retention-job`
# Everything is installed at build time, pinned by constraints.txt; the containers run as a non-root user
# and install nothing when they start.
#   docker build --target reclaim -t reclaim:0.1.0 .
#   docker build --target reclaim-spark -t reclaim-spark:0.1.0 .

# The official Python image, by tag and by the index digest docker-library/repo-info publishes for it.
ARG PYTHON_IMAGE=python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/reclaim/venv
WORKDIR /src
# The dependencies first, in a layer of their own that a change to reclaim's code does not invalidate.
COPY pyproject.toml constraints.txt README.md ./
RUN /opt/reclaim/venv/bin/python -c "import tomllib; \
p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\\n'.join(p['dependencies'] + p['optional-dependencies']['postgres']))" > /tmp/requirements.txt \
    && /opt/reclaim/venv/bin/pip install -c constraints.txt -r /tmp/requirements.txt
COPY schemas/ schemas/
COPY storage/ storage/
COPY segments/ segments/
COPY deletion/ deletion/
COPY retention/ retention/
COPY security/ security/
COPY producers/ producers/
COPY consumers/ consumers/
COPY reclaim/ reclaim/
RUN /opt/reclaim/venv/bin/pip install -c constraints.txt '.[postgres]' \
    && /opt/reclaim/venv/bin/reclaim --version

# The retention job's environment: the same plus the [spark] extra (PySpark, pandas, Arrow).
FROM build AS build-spark
RUN /opt/reclaim/venv/bin/pip install -c constraints.txt '.[spark,postgres]'


FROM ${PYTHON_IMAGE} AS reclaim
ARG USER_ID=10001
LABEL org.opencontainers.image.title="reclaim" \
      org.opencontainers.image.description="Safe deletion and retention for tiered stream storage, on Kafka and Spark." \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/reclaim/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RECLAIM_STATE_DIR=/var/lib/reclaim/state \
    RECLAIM_CACHE_DIR=/opt/reclaim/cache
# The directories compose mounts named volumes on exist here, owned by reclaim: a new named volume
# takes the owner of the directory it is mounted on, so the non-root user can write to it.
RUN groupadd --gid "${USER_ID}" reclaim \
    && useradd --uid "${USER_ID}" --gid reclaim --no-log-init --create-home --shell /usr/sbin/nologin reclaim \
    && mkdir -p /var/lib/reclaim/state /var/lib/reclaim/metadata /var/lib/reclaim/tier2 \
                /var/lib/reclaim/retention-checkpoint /opt/reclaim/cache \
    && chown -R reclaim:reclaim /var/lib/reclaim /opt/reclaim/cache
COPY --from=build /opt/reclaim/venv /opt/reclaim/venv
USER reclaim
WORKDIR /var/lib/reclaim
ENTRYPOINT ["reclaim"]
CMD ["--help"]


FROM reclaim AS reclaim-spark
USER root
COPY --from=build-spark /opt/reclaim/venv /opt/reclaim/venv
# PySpark 4.x runs on Java 17 or 21: bookworm's headless JRE 17. The manual directory is made first
# because the JRE's package scripts link manual pages into it and slim images ship without it.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
USER reclaim
# Spark's Kafka connector and its dependencies, resolved from Maven Central into RECLAIM_CACHE_DIR now,
# by the code the job runs, so that the job starts without reaching Maven Central.
RUN SPARK_LOCAL_IP=127.0.0.1 python -c "from reclaim.settings import Settings; \
from reclaim.retention.spark_session import build_spark_session; \
build_spark_session('reclaim-image-build', Settings.from_env().cache_dir, master='local[1]').stop()"
