"""The test suite's own layout: tests share code through tests/support and fixtures through tests/fixtures only,
and nothing under tests/unit asks for a server."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import REPO

TESTS = REPO / "tests"
SHARED = ("tests.support", "tests.fixtures")

#: Fixtures that start a server or reach one: Kafka, S3, PostgreSQL, Spark, Prometheus, toxiproxy.
SERVERS = {"kafka_bootstrap", "secure_kafka", "moto_s3", "minio_s3", "external_s3", "s3_endpoint", "postgres_url",
           "spark", "promtool", "prometheus_binary", "own_broker", "own_minio", "own_postgres", "toxiproxy",
           "proxied_broker", "fake_gcs", "azurite"}
#: Fixtures that look a server up at run time (``request.getfixturevalue``) for some of their parameters.
DYNAMIC = {"metadata_location", "s3_binding_on", "make_tier2", "chunk_storage", "any_binding", "cloud_binding"}


def python_files() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports (relative imports resolved), with its line."""
    package = module_name(path).split(".") if path.name == "__init__.py" else module_name(path).split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            if node.module is None:  # ``from . import x``: x may be a module
                yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)


def is_test_code(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def fixture_functions(path: Path) -> dict[str, list[str]]:
    """The fixtures ``path`` defines, each with the fixtures it requests by argument."""
    found: dict[str, list[str]] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            found[node.name] = [a.arg for a in node.args.args]
    return found


def plugin_fixtures() -> dict[str, list[str]]:
    fixtures: dict[str, list[str]] = {}
    for path in sorted((TESTS / "fixtures").glob("*.py")):
        fixtures.update(fixture_functions(path))
    return fixtures


def parametrized(function: ast.FunctionDef) -> set[str]:
    """The arguments a ``parametrize`` mark gives ``function`` (they shadow fixtures of the same name)."""
    names: set[str] = set()
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize") and decorator.args:
            first = decorator.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.update(name.strip() for name in first.value.split(","))
            elif isinstance(first, ast.Tuple | ast.List):
                names.update(e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return names


def reaches_a_server(name: str, fixtures: dict[str, list[str]], seen: set[str] | None = None) -> bool:
    seen = set() if seen is None else seen
    if name in SERVERS or name in DYNAMIC:
        return True
    if name in seen or name not in fixtures:
        return False
    seen.add(name)
    return any(reaches_a_server(arg, fixtures, seen) for arg in fixtures[name])


def test_tests_import_only_support_and_fixtures() -> None:
    wrong = [f"{path.relative_to(REPO)}:{line}: {module}" for path in python_files()
             for line, module in imported_modules(path)
             if (module.startswith("tests.") and not module.startswith(SHARED)) or is_test_code(module)]
    assert not wrong, f"test code imported; share it through tests/support or tests/fixtures instead: {wrong}"


def test_unit_tests_request_no_server() -> None:
    servers = []
    for path in sorted((TESTS / "unit").rglob("*.py")):
        fixtures = {**plugin_fixtures(), **fixture_functions(path)}
        tree = ast.parse(path.read_text(), str(path))
        requests = {(node.name, arg.arg) for node in ast.walk(tree)
                    if isinstance(node, ast.FunctionDef) and (node.name.startswith("test") or node.name in fixtures)
                    for arg in node.args.args if arg.arg not in parametrized(node)}
        servers += sorted(f"{path.relative_to(REPO)}: {function}({arg})" for function, arg in requests
                          if reaches_a_server(arg, fixtures))
    assert not servers, f"unit tests that ask for a server; move them to tests/integration: {servers}"


def test_the_guard_sees_what_it_guards() -> None:
    assert reaches_a_server("engine_pipeline", plugin_fixtures())
    assert reaches_a_server("segments", plugin_fixtures())  # through store and metadata_location
    assert not reaches_a_server("unique_name", plugin_fixtures())
    assert is_test_code("tests.integration.deletion.test_crash") and is_test_code("tests.conftest")
    assert not is_test_code("tests.support.pipeline")
