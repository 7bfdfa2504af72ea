"""reclaim's tests: the shared fixtures, registered once as plugins for the whole run.

Every server fixture starts its server once per session. Outside CI a server that cannot start
skips the tests that need it, with the reason; with ``CI=true`` it fails them instead.

A test that names ``s3_endpoint`` (itself or through ``s3_bucket`` or ``s3_binding``) runs once per S3
server: moto and MinIO, or only the endpoint ``RECLAIM_TEST_S3_ENDPOINT`` names. moto accepts any
credentials, key or bucket name; MinIO checks them as a real server does.

``tests/unit`` needs none of the servers; ``tests/integration`` and ``tests/chaos`` do. Helpers that are
not fixtures live in ``tests/support``.
"""

pytest_plugins = [
    "tests.fixtures.common",
    "tests.fixtures.s3",
    "tests.fixtures.gcs",
    "tests.fixtures.azure",
    "tests.fixtures.kafka",
    "tests.fixtures.postgres",
    "tests.fixtures.spark",
    "tests.fixtures.spark_cluster",
    "tests.fixtures.storage",
    "tests.fixtures.segments",
    "tests.fixtures.pipeline",
    "tests.fixtures.prometheus",
    "tests.fixtures.chaos",
    "tests.fixtures.toxiproxy",
]
