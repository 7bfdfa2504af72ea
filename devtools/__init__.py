"""Servers and tools reclaim's tests and benchmarks run: Go builds, PostgreSQL, MinIO, Toxiproxy, fault
proxies, network namespaces. Not part of the installed package."""
