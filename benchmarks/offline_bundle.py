"""Run the benchmarks on a host with no network and no Java: pack what they need here, run them there.

``pack`` (here, in the project's virtual environment) writes one folder of about 50 MB:

- ``jre.tar.xz``: a Java 17 runtime cut to the modules the Kafka broker uses (``jlink``);
- ``kafka-classes.tar.xz``: the broker's jars (:func:`reclaim.localstack.kafka_broker.fetch_jars`), unpacked,
  which packs to half the size of the jars; their native libraries for other platforms left out;
- ``site.tar.xz``: the wheels of reclaim's runtime and moto's S3 server for the other host's Python
  (``--python``), installed, with botocore's and moto's data for services other than S3 left out;
- ``reclaim-<rev>.tar.gz`` (this checkout's HEAD) and, with ``--before-commit REV``, ``before-<rev>.tar.gz``
  for ``benchmarks.worker_cpu --before-tree``;
- this file, which runs there.

``run`` (there, with nothing but ``python3`` of that version) unpacks the folder once into ``--work`` and runs
a command in the unpacked source with the bundled Java, Kafka and packages on its paths; the figures a
benchmark records land in that source's ``benchmarks/results/``, named by the packed commit::

    .venv/bin/python -m benchmarks.offline_bundle pack /tmp/bundle --before-commit 172269f
    # copy /tmp/bundle to the other host, then there:
    python3 bundle/offline_bundle.py run bundle -- python3 -m benchmarks.worker_scaling --objects 20000
    python3 bundle/offline_bundle.py run bundle -- python3 -m benchmarks.worker_cpu --bindings moto \\
        --before-tree /tmp/reclaim-offline/before-172269f

MinIO is not packed (its binary alone is about 100 MB): S3 runs there use moto. ``run`` needs only the
standard library, so that it runs before anything is unpacked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KAFKA = "kafka-4.1.1"  # the folder fetch_jars fills under the cache (reclaim.localstack.kafka_broker.KAFKA_VERSION)
JAVA_MODULES = ("java.base,java.compiler,java.desktop,java.logging,java.management,java.naming,java.rmi,"
                "java.scripting,java.security.jgss,java.security.sasl,java.sql,java.xml,jdk.unsupported,"
                "jdk.management,jdk.crypto.ec")
#: Installed for the other host beside reclaim's own dependencies: moto's S3 server and what it imports.
EXTRA = ("moto", "flask", "flask-cors")
#: botocore data and moto services an S3 run uses (moto's S3 backend imports some of the others).
BOTOCORE_KEPT = {"s3", "s3control", "sts"}
MOTO_KEPT = {"core", "moto_api", "moto_server", "moto_proxy", "s3", "s3bucket_path", "s3control", "s3tables",
             "s3vectors", "sts", "iam", "utilities", "instance_metadata", "awslambda", "awslambda_simple", "sns",
             "sqs", "events", "kms", "cloudwatch", "logs", "ec2"}
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


def _xz_tar(source: Path, target: Path) -> None:
    """``source``'s contents (not the folder itself) as ``target``, an xz-compressed tar."""
    with tarfile.open(target, "w:xz", preset=6) as tar:
        for entry in sorted(source.iterdir()):
            tar.add(entry, arcname=entry.name)


def _git_tree(rev: str, target: Path, prefix: str) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar.gz", f"--prefix={prefix}/", rev],
                             capture_output=True, check=True).stdout
    target.write_bytes(archive)


def _short(rev: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True,
                          check=True).stdout.strip()


def _jre(out: Path, tmp: Path) -> None:
    jlink = shutil.which("jlink")
    if jlink is None:
        sys.exit("pack: jlink not found: a JDK 17 (with its jmods) is needed to cut the Java runtime")
    subprocess.run([jlink, "--add-modules", JAVA_MODULES, "--strip-debug", "--no-man-pages", "--no-header-files",
                    "--compress=0", "--output", str(tmp / "jre" / "jre")], check=True)
    _xz_tar(tmp / "jre", out / "jre.tar.xz")


def _kafka(out: Path, tmp: Path) -> None:
    from reclaim.localstack.kafka_broker import KAFKA_VERSION, fetch_jars
    from reclaim.settings import Settings

    assert KAFKA == f"kafka-{KAFKA_VERSION}", f"offline_bundle.KAFKA is out of date: kafka-{KAFKA_VERSION}"
    libs = fetch_jars(Settings.from_env().cache_dir)
    classes = tmp / "kafka"
    for jar in sorted(libs.glob("*.jar")):
        with zipfile.ZipFile(jar) as z:
            for member in z.namelist():
                lowered = member.lower()
                native = lowered.endswith((".so", ".dll", ".dylib", ".jnilib", ".a"))
                if native and not ("linux/amd64/" in lowered or "linux/x86_64/" in lowered):
                    continue  # zstd-jni and snappy-java carry every platform's library
                if not member.endswith("/"):
                    z.extract(member, classes / jar.name)
    _xz_tar(classes, out / "kafka-classes.tar.xz")


def _site(out: Path, tmp: Path, python: str) -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wheels, site = tmp / "wheels", tmp / "site"
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-c",
                    str(ROOT / "constraints.txt"), "--only-binary=:all:", "--python-version", python,
                    "--implementation", "cp", *platforms, "-d", str(wheels), *dependencies, *EXTRA], check=True)
    site.mkdir()
    for wheel in sorted(wheels.glob("*.whl")):  # a wheel is a zip of its installed files (no scripts needed)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    for folder, kept in ((site / "botocore" / "data", BOTOCORE_KEPT), (site / "moto", MOTO_KEPT)):
        for entry in folder.iterdir():
            if entry.is_dir() and entry.name not in kept and entry.name != "__pycache__":
                shutil.rmtree(entry)
    _xz_tar(site, out / "site.tar.xz")


def pack(out: Path, python: str, before: str | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="reclaim-pack-") as name:
        tmp = Path(name)
        _jre(out, tmp)
        _kafka(out, tmp)
        _site(out, tmp, python)
    head = _short("HEAD")
    _git_tree("HEAD", out / f"reclaim-{head}.tar.gz", f"reclaim-{head}")
    if before:
        rev = _short(before)
        _git_tree(rev, out / f"before-{rev}.tar.gz", f"before-{rev}")
    shutil.copy2(__file__, out / "offline_bundle.py")
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    print(f"packed {out} ({size:.1f} MB) for Python {python}: copy it to the other host, then there: "
          f"python3 {out.name}/offline_bundle.py run {out.name} -- COMMAND")


# --- there: the standard library only -------------------------------------------------------------------


def _unpack(bundle: Path, work: Path) -> Path:
    """Unpack ``bundle`` into ``work`` unless done already; returns the source tree."""
    done = work / ".unpacked"
    sources = sorted(bundle.glob("reclaim-*.tar.gz"))
    if len(sources) != 1:
        sys.exit(f"run: {bundle} holds {len(sources)} reclaim-<rev>.tar.gz, expected one")
    source = work / sources[0].name.removesuffix(".tar.gz")
    if done.exists():
        return source
    work.mkdir(parents=True, exist_ok=True)
    for archive, into in (("jre.tar.xz", "bundle"), ("site.tar.xz", "site"), ("kafka-classes.tar.xz", "classes")):
        with tarfile.open(bundle / archive) as tar:
            tar.extractall(work / into, filter="data")
    for archive in [sources[0], *bundle.glob("before-*.tar.gz")]:
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
    libs = work / "cache" / KAFKA / "libs"
    libs.mkdir(parents=True)
    for classes in sorted((work / "classes").iterdir()):  # each jar packed again, stored
        with zipfile.ZipFile(libs / classes.name, "w", zipfile.ZIP_STORED) as jar:
            for file in sorted(p for p in classes.rglob("*") if p.is_file()):
                jar.write(file, file.relative_to(classes).as_posix())
    (libs / ".complete").touch()
    shutil.rmtree(work / "classes")
    for tree in [source, *work.glob("before-*")]:
        link_design_folders(tree)
    # what benchmarks.results names the results file by, where there is no git
    (source / "REVISION").write_text(source.name.removeprefix("reclaim-") + "\n", encoding="utf-8")
    done.touch()
    return source


def link_design_folders(tree: Path) -> Path:
    """``tree``'s design folders linked into its ``reclaim`` package as the install maps them (``consumers/``
    importable as ``reclaim.consumers``), where they are not linked yet; returns ``tree``."""
    mapping = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in mapping.items():
        link = tree / "reclaim" / package.split(".")[-1]
        if package.count(".") == 1 and folder != "reclaim" and not link.exists():
            link.symlink_to(tree / folder)
    return tree


def run(bundle: Path, work: Path, command: list[str]) -> int:
    if not command:
        sys.exit("run: no command given after --")
    source = _unpack(bundle.resolve(), work.resolve())
    env = {key: value for key, value in os.environ.items()
           if key not in ("RECLAIM_BOOTSTRAP", "RECLAIM_S3_ENDPOINT", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")}
    jre = work.resolve() / "bundle" / "jre"
    env |= {"JAVA_HOME": str(jre), "PATH": f"{jre / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "RECLAIM_CACHE_DIR": str(work.resolve() / "cache"), "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(work.resolve() / "site"), str(source),
                                                        env.get("PYTHONPATH")]))}
    return subprocess.run(command, cwd=source, env=env, check=False).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    packing = sub.add_parser("pack", help="write the bundle here (needs jlink, pip and this checkout's git)")
    packing.add_argument("out", type=Path, help="the folder to write")
    packing.add_argument("--python", default="3.12", help="the other host's Python, major.minor (default 3.12)")
    packing.add_argument("--before-commit", metavar="REV", help="also pack the tree of REV (for --before-tree)")
    running = sub.add_parser("run", help="unpack the bundle (once) and run COMMAND in its source tree")
    running.add_argument("bundle", type=Path, help="the folder pack wrote")
    running.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "reclaim-offline",
                         help="where to unpack it (default: reclaim-offline in the temporary folder)")
    running.epilog = "The command follows a --: run BUNDLE [--work DIR] -- COMMAND..."
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    if args.verb == "pack":
        if argv[cut:]:
            parser.error("pack takes no command")
        pack(args.out, args.python, args.before_commit)
    else:
        sys.exit(run(args.bundle, args.work, argv[cut + 1:]))


if __name__ == "__main__":
    main()
