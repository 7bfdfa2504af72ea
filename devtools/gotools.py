"""Go programs reclaim's tests and benchmarks run (MinIO, Prometheus, promtool, Toxiproxy, fake-gcs-server), built
from Go modules.

How a tool is built and cached (``go install`` into ``<cache>/bin``, stamped with its version) is
:mod:`reclaim.localstack.gotool`, which the local stack uses for fake-gcs-server; this module holds the pins
of the tools only the tests and benchmarks run, and builds any of them on request.
"""

from __future__ import annotations

import argparse

from reclaim.localstack.gcs_emulator import FAKE_GCS
from reclaim.localstack.gotool import Built, GoTool, build

__all__ = ["FAKE_GCS", "MINIO", "PROMETHEUS", "PROMTOOL", "TOOLS", "TOXIPROXY", "Built", "GoTool", "build", "main"]

#: The Prometheus module's versions follow its releases: v0.316.0 is Prometheus 3.16.0.
PROMETHEUS_VERSION = "v0.316.0"
#: Static targets are all reclaim's tests need; without the service-discovery plugins the build needs
#: none of the cloud SDKs (the module proxy refuses some of their versions, e.g. Nomad's API client).
PROMETHEUS_TAGS = ("remove_all_sd",)

#: The module proxy serves neither MinIO's ``RELEASE.*`` tags nor their commits: the pin is the
#: pseudo-version ``@latest`` resolved to, the module's commit of 2026-02-12.
MINIO = GoTool("minio", "github.com/minio/minio", "v0.0.0-20260212201848-7aac2a2c5b7c")
PROMETHEUS = GoTool("prometheus", "github.com/prometheus/prometheus/cmd/prometheus", PROMETHEUS_VERSION,
                    PROMETHEUS_TAGS)
PROMTOOL = GoTool("promtool", "github.com/prometheus/prometheus/cmd/promtool", PROMETHEUS_VERSION, PROMETHEUS_TAGS)
#: The network-fault proxy of the chaos suite (its HTTP API: :mod:`devtools.toxiproxy`).
TOXIPROXY = GoTool("toxiproxy-server", "github.com/Shopify/toxiproxy/v2/cmd/server", "v2.5.0")
TOOLS = {tool.name: tool for tool in (MINIO, PROMETHEUS, PROMTOOL, TOXIPROXY, FAKE_GCS)}


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.gotools prometheus promtool``: build the named tools now (CI does, before the tests)."""
    from reclaim.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("tools", nargs="+", choices=sorted(TOOLS))
    args = parser.parse_args(argv)
    cache_dir = Settings.from_env().cache_dir
    for name in args.tools:
        built = build(TOOLS[name], cache_dir)
        print(f"{name} {TOOLS[name].build_id}: {built.path} ({built.seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
