"""The documentation site in a real browser: headless Chromium and the mermaid release the theme loads.

``python -m devtools.docsite install`` (run by `make servers`) installs Debian's ``chromium`` package when
no Chromium is found (as root, with apt-get, as :mod:`devtools.pg_server` does PostgreSQL) and unpacks
mermaid's npm package, at a pinned version and checked against its registry checksum, into
``<cache>/mermaid-<version>``.

The material theme loads mermaid from ``https://unpkg.com/mermaid@11/dist/mermaid.min.js``, and unpkg
serves npm's packages file for file. :class:`DocSite` serves a built site on loopback and that file under
unpkg.com's name over TLS (Chromium maps the name to loopback and trusts that one certificate; every
other name fails to resolve), so the page a reader gets is checked as it is, with no network.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import http.server
import io
import os
import shutil
import ssl
import subprocess
import tarfile
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devtools.debian import apt_install
from reclaim.localstack.procs import StackError
from reclaim.settings import Settings

#: The newest mermaid 11 when this was pinned; the theme asks unpkg for ``mermaid@11``, the newest 11.x.
MERMAID_VERSION = "11.17.2"
#: npm's ``dist.integrity`` of that release's tarball.
MERMAID_INTEGRITY = "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg=="
MERMAID_TARBALL = f"https://registry.npmjs.org/mermaid/-/mermaid-{MERMAID_VERSION}.tgz"
#: Where the theme loads mermaid from: host, then path.
CDN_HOST = "unpkg.com"
CDN_PATH = "mermaid@11/dist/mermaid.min.js"

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str | None:
    """The path of a Chromium (or Chrome) program, or None."""
    for name in _BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def mermaid_file(cache_dir: Path) -> Path:
    return cache_dir / f"mermaid-{MERMAID_VERSION}" / "mermaid.min.js"


def install_chromium() -> str:
    """Chromium's path, installing Debian's ``chromium`` package first when there is none."""
    found = chromium()
    if found is not None:
        return found
    apt_install("chromium", "no Chromium found: install one (Debian: `apt-get install chromium`)")
    found = chromium()
    if found is None:
        raise StackError("apt-get installed chromium but no chromium program is on the PATH")
    return found


def install_mermaid(cache_dir: Path, timeout_s: float = 300.0) -> Path:
    """``mermaid.min.js`` of :data:`MERMAID_VERSION`, fetched from npm's registry once and checked."""
    target = mermaid_file(cache_dir)
    if target.is_file():
        return target
    with urllib.request.urlopen(MERMAID_TARBALL, timeout=timeout_s) as response:  # noqa: S310 - a fixed https URL
        tarball = response.read()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    if digest != MERMAID_INTEGRITY:
        raise StackError(f"{MERMAID_TARBALL}: checksum {digest} is not the pinned {MERMAID_INTEGRITY}")
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        member = archive.extractfile("package/dist/mermaid.min.js")
        if member is None:
            raise StackError(f"{MERMAID_TARBALL} holds no package/dist/mermaid.min.js")
        script = member.read()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as partial:
        partial.write(script)
    os.replace(partial.name, target)  # whole or absent: two installs at once write the same bytes
    return target


def find(cache_dir: Path | None = None) -> tuple[str, Path]:
    """Chromium's path and mermaid's file, or a StackError naming what is missing and how to get it."""
    browser, script = chromium(), mermaid_file(cache_dir or Settings.from_env().cache_dir)
    missing = ([] if browser else ["Chromium"]) + ([] if script.is_file() else [f"mermaid {MERMAID_VERSION}"])
    if missing:
        raise StackError(f"{' and '.join(missing)} not installed: run `python -m devtools.docsite install` "
                         "(`make servers` does)")
    assert browser is not None
    return browser, script


@dataclass(frozen=True)
class Rendered:
    """A page as Chromium left it: its DOM after its scripts ran, and what it wrote to its console."""

    url: str
    dom: str
    console: tuple[str, ...]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class DocSite:
    """A built site served on loopback, and Chromium to render its pages; use :func:`serve`."""

    def __init__(self, browser: str, base_url: str, cdn_port: int, spki: str, profile: Path) -> None:
        self.browser, self.base_url = browser, base_url
        self._cdn_port, self._spki, self._profile = cdn_port, spki, profile

    def render(self, page: str, screenshot: Path | None = None, timeout_s: float = 120.0) -> Rendered:
        """``page`` (a path under the site, e.g. ``concepts/pipeline/``) after its scripts have run, with
        ``screenshot`` written as a 1280-pixel wide PNG when given."""
        url = f"{self.base_url}/{page}"
        argv = [self.browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--user-data-dir={self._profile}",
                f"--host-resolver-rules=MAP {CDN_HOST} 127.0.0.1:{self._cdn_port}, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                f"--ignore-certificate-errors-spki-list={self._spki}",
                "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000"]
        argv += [f"--screenshot={screenshot}", "--window-size=1280,2000"] if screenshot else ["--dump-dom"]
        done = subprocess.run([*argv, url], capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise StackError(f"chromium exited {done.returncode} on {url}: {done.stderr.strip()[-500:]}")
        console = tuple(line for line in done.stderr.splitlines() if ":CONSOLE" in line)
        return Rendered(url, done.stdout, console)


def _spki_sha256(cert_path: Path) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = x509.load_pem_x509_certificate(cert_path.read_bytes()).public_key()
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@contextmanager
def _http_server(directory: Path, context: ssl.SSLContext | None = None) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory)))
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name=f"docsite {directory}", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def serve(site: Path, browser: str, mermaid: Path) -> Iterator[DocSite]:
    """``site`` (a built mkdocs site) on loopback, ``mermaid`` as unpkg.com serves it, for the block."""
    from reclaim.localstack.certs import make_ca

    with tempfile.TemporaryDirectory(prefix="reclaim-docsite-") as scratch:
        root = Path(scratch)
        cdn_file = root / "cdn" / CDN_PATH
        cdn_file.parent.mkdir(parents=True)
        shutil.copyfile(mermaid, cdn_file)
        cert = make_ca(root / "ca").issue("cdn", hosts=[CDN_HOST], client=False)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert.cert_path, cert.key_path)
        with _http_server(site) as port, _http_server(root / "cdn", context) as cdn_port:
            yield DocSite(browser, f"http://127.0.0.1:{port}", cdn_port, _spki_sha256(cert.cert_path),
                          root / "profile")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.docsite", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["install"])
    parser.parse_args(argv)
    try:
        browser = install_chromium()
        script = install_mermaid(Settings.from_env().cache_dir)
    except (StackError, OSError) as exc:
        parser.exit(2, f"docsite: {exc}\n")
    print(f"chromium: {browser}\nmermaid {MERMAID_VERSION}: {script}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
