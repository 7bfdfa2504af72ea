"""The Schema Registry client's credentials and CA: basic auth moved out of the URL, so no URL carries a password."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit


def registry_client_config(url: str, *, basic_auth: str | None = None,
                           ca_location: str | None = None) -> tuple[str, dict[str, str]]:
    """The registry URL without credentials, and the ``SchemaRegistryClient`` settings beside it.

    Basic auth comes from the URL's ``user:password@`` (percent-decoded) or from ``basic_auth``
    (``user:password``), not both; ``ca_location`` (a PEM file or directory) verifies the
    registry's certificate. A comma-separated list of URLs shares one set of credentials.

    Examples
    --------
    >>> registry_client_config("https://sr:p%40ss@registry:8081", ca_location="/etc/ca.pem")
    ('https://registry:8081', {'basic.auth.user.info': 'sr:p@ss', 'ssl.ca.location': '/etc/ca.pem'})
    """
    urls: list[str] = []
    found: set[str] = set()
    for part in url.split(","):
        plain, userinfo = _without_userinfo(part.strip())
        urls.append(plain)
        if userinfo is not None:
            found.add(userinfo)
    if len(found) > 1:
        raise ValueError("schema_registry_url: its URLs name different credentials; give one set "
                         "(schema_registry_basic_auth)")
    if found and basic_auth:
        raise ValueError("schema_registry_url has a user:password and schema_registry_basic_auth is set too: keep one")
    credentials = next(iter(found), None) or basic_auth
    config: dict[str, str] = {}
    if credentials:
        if ":" not in credentials:
            raise ValueError("schema_registry_basic_auth must be USER:PASSWORD")
        config["basic.auth.user.info"] = credentials
    if ca_location:
        config["ssl.ca.location"] = ca_location
    return ",".join(urls), config


def _without_userinfo(url: str) -> tuple[str, str | None]:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    return urlunsplit(parts._replace(netloc=host)), f"{user}:{password}"
