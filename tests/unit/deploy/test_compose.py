"""docker-compose.yml, the Dockerfile and .dockerignore, checked without a Docker engine.

The compose file is read with PyYAML and validated against the Compose Specification's JSON schema,
a pinned copy in ``compose-spec.schema.json``: the file ``schemas/compose.schema.json`` of the npm
package ``dclint`` 3.1.0, which ships the specification's schema unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml

from reclaim.cli.main import build_parser
from reclaim.settings import Settings
from tests.support.paths import REPO

ROOT = REPO
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SCHEMA = Path(__file__).with_name("compose-spec.schema.json")
SCHEMA_SHA256 = "46b7d35f19dd93a05f8fea530291bf84d881c1791ec167ecf0e6fb94e639d496"

# The restart policies of a service that must stay up.
KEEP_RUNNING = ("always", "unless-stopped", "on-failure")


# --- reading the files ---------------------------------------------------------------------------

@cache
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict), "docker-compose.yml is not a mapping"
    return loaded


def services() -> dict[str, dict[str, Any]]:
    return dict(compose()["services"])


def one_shots() -> set[str]:
    """Services others wait to see exit successfully: they run once."""
    return {name for service in services().values() for name, dep in _depends_on(service).items()
            if dep.get("condition") == "service_completed_successfully"}


def long_running() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in services().items() if name not in one_shots()}


def reclaim_services() -> dict[str, dict[str, Any]]:
    """Services whose image is built from the Dockerfile: their entrypoint is ``reclaim``."""
    return {name: service for name, service in services().items() if "build" in service}


def _depends_on(service: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    deps = service.get("depends_on", {})
    assert isinstance(deps, dict), f"depends_on as a list waits for nothing: {deps}"
    return deps


def project_version() -> str:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert isinstance(version, str)
    return version


@dataclass(frozen=True)
class Stage:
    """One build stage of the Dockerfile: its name, the image or stage it starts from, its instructions."""

    name: str
    base: str
    instructions: tuple[tuple[str, str], ...]


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined and comments left out."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        pending = ""
    return instructions


def dockerfile_stages(text: str) -> dict[str, Stage]:
    """The stages by name, with the global ``ARG`` defaults substituted into each ``FROM``."""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: tuple[str, str] | None = None
    body: list[tuple[str, str]] = []
    for keyword, rest in [*dockerfile_instructions(text), ("FROM", "scratch AS <end>")]:
        if keyword == "ARG" and current is None and "=" in rest:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            if current is not None:
                stages[current[0]] = Stage(current[0], current[1], tuple(body))
            words = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest).split()
            assert len(words) == 3 and words[1].upper() == "AS", f"every stage is named: FROM {rest}"
            current, body = (words[2], words[0]), []
        elif current is not None:
            body.append((keyword, rest))
    return stages


def effective_user(stages: Mapping[str, Stage], name: str) -> str:
    """The user a stage's containers run as: its last ``USER``, else the one of the stage it builds on."""
    stage = stages[name]
    users = [rest for keyword, rest in stage.instructions if keyword == "USER"]
    if users:
        return users[-1]
    return effective_user(stages, stage.base) if stage.base in stages else "root"


def pin_problem(image: str) -> str | None:
    """Why ``image`` is not pinned to one version, or None when it is (a tag, optionally a digest)."""
    name, _, digest = image.partition("@")
    if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        return f"{image}: a digest is sha256: and 64 hex digits"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"{image}: no tag"
    tag = last.rsplit(":", 1)[1]
    if not tag or tag == "latest":
        return f"{image}: the tag {tag or '(empty)'} is no version"
    return None


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a parsed YAML value, keys and list items included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def interpolated(value: str) -> str:
    """``value`` as compose sends it when no variable is set: ``${NAME:-default}`` becomes ``default``."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


# --- the helpers themselves, on plain values ------------------------------------------------------

@pytest.mark.parametrize(("image", "problem"), [
    ("apache/kafka:4.1.1", None),
    ("python:3.11.16-slim-bookworm@sha256:" + "c4" * 32, None),
    ("localhost:5000/reclaim:0.1.0", None),
    ("minio/minio", "no tag"),
    ("localhost:5000/reclaim", "no tag"),
    ("minio/mc:latest", "is no version"),
    ("python:3.11@sha256:abc", "64 hex digits"),
])
def test_a_pin_is_a_tag_that_is_not_latest(image: str, problem: str | None) -> None:
    found = pin_problem(image)
    assert found is None if problem is None else (found is not None and problem in found)


def test_dockerfile_stages_follow_their_bases_and_users() -> None:
    text = ("ARG BASE=python:3.11-slim\n# a comment\nFROM ${BASE} AS one\nUSER app\n"
            "RUN a \\\n    && b\nFROM one AS two\nRUN c\nFROM ${BASE} AS three\n")
    stages = dockerfile_stages(text)
    assert [(s.name, s.base) for s in stages.values()] == [("one", "python:3.11-slim"), ("two", "one"),
                                                          ("three", "python:3.11-slim")]
    assert ("RUN", "a     && b") in stages["one"].instructions
    assert (effective_user(stages, "two"), effective_user(stages, "three")) == ("app", "root")


# --- docker-compose.yml ---------------------------------------------------------------------------

def test_the_compose_file_follows_the_compose_specification() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256, "the pinned schema was changed"
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []


def test_the_schema_refuses_what_compose_refuses() -> None:
    """The validator is live: an unquoted ``restart: no`` (a YAML boolean) and an unknown key fail it."""
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    broken = yaml.safe_load("services:\n  a:\n    image: x:1\n    restart: no\n    healthcheck_test: true\n")
    assert len(list(validator.iter_errors(broken))) == 2


def test_every_image_is_pinned_to_a_version() -> None:
    problems = [f"{name}: {problem}" for name, service in services().items()
                if (problem := pin_problem(service.get("image", "")))]
    stages = dockerfile_stages(DOCKERFILE.read_text())
    problems += [f"Dockerfile {stage.name}: {problem}" for stage in stages.values()
                 if stage.base not in stages and (problem := pin_problem(stage.base))]
    assert problems == []


def test_reclaims_images_are_built_here_and_tagged_with_its_version() -> None:
    stages = dockerfile_stages(DOCKERFILE.read_text())
    version = project_version()
    assert reclaim_services(), "no service builds reclaim's image"
    for name, service in reclaim_services().items():
        assert service["build"]["context"] == ".", name
        assert service["build"]["target"] in stages, f"{name}: no stage {service['build']['target']!r}"
        assert service["image"].endswith(f":{version}"), f"{name}: {service['image']} is not version {version}"
    assert f'org.opencontainers.image.version="{version}"' in DOCKERFILE.read_text()


def test_long_running_services_have_a_healthcheck_and_a_restart_policy() -> None:
    for name, service in long_running().items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test != ["NONE"] and not service["healthcheck"].get("disable"), f"{name}: no healthcheck"
        assert str(service.get("restart", "")).startswith(KEEP_RUNNING), f"{name}: restart {service.get('restart')}"


def test_one_shot_services_run_once() -> None:
    """A restarted one-shot could be seen failing by the services that wait for its success."""
    assert one_shots() == {"minio-bucket", "topics"}
    for name in one_shots():
        assert services()[name]["restart"] == "no", name


def test_services_wait_for_health_or_completion() -> None:
    for name, service in services().items():
        for dependency, how in _depends_on(service).items():
            wanted = "service_completed_successfully" if dependency in one_shots() else "service_healthy"
            assert how.get("condition") == wanted, f"{name} -> {dependency}: {how}"


def test_the_worker_starts_once_its_store_and_bucket_exist() -> None:
    """The worker never creates the metadata store (the truncation applier does) nor the bucket."""
    deps = _depends_on(services()["worker"])
    assert deps["truncation-applier"]["condition"] == "service_healthy"
    assert deps["minio-bucket"]["condition"] == "service_completed_successfully"
    applier_check = " ".join(services()["truncation-applier"]["healthcheck"]["test"])
    assert services()["worker"]["environment"]["RECLAIM_METADATA_PATH"] in applier_check


def test_every_reclaim_service_reaches_the_broker_after_it_is_healthy() -> None:
    def waits_for_kafka(name: str) -> bool:
        deps = _depends_on(services()[name])
        return deps.get("kafka", {}).get("condition") == "service_healthy" or any(map(waits_for_kafka, deps))

    assert [name for name in reclaim_services() if not waits_for_kafka(name)] == []


def test_nothing_is_installed_when_a_container_starts() -> None:
    installs = re.compile(r"\bpip3?\s+install\b|\bapt-get\b|\bapk\s+add\b")
    found = [text for text in strings_in(services()) if installs.search(text)]
    assert found == []


def test_every_reclaim_variable_is_a_setting() -> None:
    known = {f"RECLAIM_{f.name.upper()}" for f in fields(Settings)}
    used = set(re.findall(r"RECLAIM_[A-Z0-9_]+", COMPOSE.read_text() + DOCKERFILE.read_text()))
    assert used, "no RECLAIM_* variable found"
    assert sorted(used - known) == []


def test_every_reclaim_service_environment_reads_as_settings() -> None:
    for name, service in reclaim_services().items():
        env = {key: interpolated(str(value)) for key, value in service.get("environment", {}).items()}
        settings = Settings.from_env(env)
        assert settings.bootstrap == "kafka:9092", name


@pytest.fixture(scope="module")
def reclaim_help() -> str:
    done = subprocess.run([sys.executable, "-m", "reclaim", "--help"], capture_output=True, text=True, check=True)
    return done.stdout


def test_the_commands_exist_in_reclaims_help(reclaim_help: str) -> None:
    for name, service in reclaim_services().items():
        command = service["command"]
        assert isinstance(command, list), f"{name}: give the command as a list"
        assert re.search(rf"^\s+{re.escape(command[0])}\s", reclaim_help, re.MULTILINE), f"{name}: {command[0]}"
        try:
            build_parser().parse_args(command)
        except SystemExit as exc:
            pytest.fail(f"{name}: `reclaim {' '.join(command)}` is refused by reclaim's parser ({exc.code})")


def test_metrics_healthchecks_probe_the_port_the_command_serves() -> None:
    served = {name: service for name, service in reclaim_services().items() if "--metrics-port" in service["command"]}
    assert set(served) == set(long_running()) & set(reclaim_services())
    for name, service in served.items():
        port = flag(service["command"], "--metrics-port")
        assert flag(service["command"], "--metrics-addr") == "0.0.0.0", f"{name}: metrics unreachable from the host"
        assert f"http://127.0.0.1:{port}/metrics" in " ".join(service["healthcheck"]["test"]), name
        assert any(str(mapping).endswith(f":{port}") for mapping in service.get("ports", [])), f"{name}: {port}"


def _named_mounts(service: Mapping[str, Any]) -> dict[str, str]:
    """Mount target -> named volume, for the service's short-syntax volumes."""
    mounts: dict[str, str] = {}
    for volume in service.get("volumes", []):
        source, target = str(volume).split(":")[:2]
        if source in (compose().get("volumes") or {}):
            mounts[target] = source
    return mounts


def test_the_metadata_store_and_tier2_are_named_volumes_shared_by_their_users() -> None:
    users = {name: service for name, service in services().items()
             if "RECLAIM_METADATA_PATH" in service.get("environment", {})}
    assert set(users) == {"worker", "truncation-applier"}
    for variable, directory_of in (("RECLAIM_METADATA_PATH", lambda p: str(PurePosixPath(p).parent)),
                                   ("RECLAIM_FS_ROOT", str)):
        volumes = set()
        for name, service in users.items():
            target = directory_of(service["environment"][variable])
            assert target in _named_mounts(service), f"{name}: {variable} is not on a named volume"
            volumes.add(_named_mounts(service)[target])
        assert len(volumes) == 1, f"{variable}: the services use different volumes {volumes}"


def test_named_volume_directories_belong_to_the_image_user() -> None:
    """A new named volume takes the owner of the image directory it is mounted on."""
    created = " ".join(rest for keyword, rest in dockerfile_instructions(DOCKERFILE.read_text()) if keyword == "RUN")
    for name, service in reclaim_services().items():
        for target in _named_mounts(service):
            assert target in created, f"{name}: the image does not create {target}"


def test_the_bucket_made_is_the_bucket_configured() -> None:
    bucket = services()["worker"]["environment"]["RECLAIM_S3_BUCKET"]
    assert services()["minio-bucket"]["command"][-1] == f"local/{bucket}"


# --- Dockerfile and .dockerignore -----------------------------------------------------------------

def test_the_dockerfile_installs_with_the_constraints_file() -> None:
    runs = [rest for keyword, rest in dockerfile_instructions(DOCKERFILE.read_text()) if keyword == "RUN"]
    installs = [part for run in runs for part in run.split("&&") if re.search(r"\bpip3?\s+install\b", part)]
    project = re.compile(r"pip install -c constraints\.txt '?\.(\[[\w,]+\])?'?(\s|$)")  # `.`, or `.` with extras
    assert any(project.search(part) for part in installs), installs
    assert all("-c constraints.txt" in part for part in installs), installs


def test_the_images_run_as_a_non_root_user() -> None:
    stages = dockerfile_stages(DOCKERFILE.read_text())
    for service in reclaim_services().values():
        target = service["build"]["target"]
        assert effective_user(stages, target) not in ("root", "0", ""), target


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    ignore = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", "the context starts empty and lets files back in"
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [rest.split() for keyword, rest in dockerfile_instructions(DOCKERFILE.read_text())
              if keyword == "COPY" and not rest.startswith("--from")]
    sources = {source.rstrip("/") for words in copies for source in words[:-1]}
    assert sources - kept == set()
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert set(folders.values()) <= sources
