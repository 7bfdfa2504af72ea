"""reclaim's command line: one module per command; :mod:`reclaim.cli.main` only registers them."""
