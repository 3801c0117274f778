"""S3-compatible object storage, as the lake and the Iceberg tables reach it: an `s3://bucket/prefix`
location and pyarrow's S3 filesystem configured from the standard AWS variables.

Credentials are never read here: the AWS SDK inside pyarrow takes them from its default chain
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, a profile, an instance role), so no
setting, log line or Dagster record of ours can hold them. Only the endpoint (AWS_ENDPOINT_URL, for
S3-compatible stores) and the region (AWS_REGION, AWS_DEFAULT_REGION) are read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from resources.settings import SettingsError

ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # the service-specific one first, as the SDKs read them
REGION_ENVS = ("AWS_REGION", "AWS_DEFAULT_REGION")
DEFAULT_REGION = "us-east-1"


class ObjectStoreError(SettingsError):
    """An object-store location is invalid or unreachable; the message names the setting and the cause."""


@dataclass(frozen=True)
class S3Location:
    """`s3://bucket/prefix`, as pyarrow's filesystem names it: `bucket/prefix/...`."""

    bucket: str
    prefix: str  # without leading or trailing "/"; may be empty

    @classmethod
    def parse(cls, url: str, setting: str) -> S3Location:
        """The location of `url`; ObjectStoreError naming `setting` when it is not an s3:// URL of a bucket."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.hostname:
            raise ObjectStoreError(f"{setting}={url!r} is not an s3://bucket/prefix URL")
        if parts.username or parts.password:
            raise ObjectStoreError(
                f"{setting} must not hold credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead"
            )
        if parts.query or parts.fragment:
            raise ObjectStoreError(f"{setting}={url!r}: an s3:// URL takes no query or fragment")
        return cls(bucket=parts.netloc, prefix=parts.path.strip("/"))

    @property
    def url(self) -> str:
        return f"s3://{self.path}"

    @property
    def path(self) -> str:
        """pyarrow's path of the location (`bucket/prefix`)."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def join(self, *parts: str) -> str:
        """pyarrow's path of `parts` under the location."""
        return "/".join([self.path, *parts])


def endpoint_url() -> str | None:
    return next((os.environ[name] for name in ENDPOINT_ENVS if os.environ.get(name)), None)


def region() -> str:
    return next((os.environ[name] for name in REGION_ENVS if os.environ.get(name)), DEFAULT_REGION)


def s3_filesystem() -> pafs.S3FileSystem:
    """pyarrow's S3 filesystem for the environment's endpoint and region (one per process and setting)."""
    return _filesystem(endpoint_url(), region())


@cache
def _filesystem(endpoint: str | None, region_name: str) -> pafs.S3FileSystem:
    options: dict[str, object] = {"region": region_name}
    if endpoint:
        parts = urlsplit(endpoint)
        options |= {"endpoint_override": parts.netloc or parts.path, "scheme": parts.scheme or "https"}
    # Timeouts so an unreachable endpoint fails a run instead of hanging it.
    return pafs.S3FileSystem(**options, connect_timeout=10, request_timeout=60)


def described(error: OSError, location: S3Location, setting: str) -> ObjectStoreError:
    """A one-line error naming the setting, the location and the store's own reason."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    where = f" at {endpoint_url()}" if endpoint_url() else ""
    hint = ""
    lowered = text.lower()
    if "nosuchbucket" in lowered or "no_such_bucket" in lowered or "bucket does not exist" in lowered:
        hint = f": bucket {location.bucket!r} not found{where}"
    elif any(word in lowered for word in ("access denied", "accessdenied", "access_denied", "invalidaccesskeyid", "signature")):
        hint = ": access denied, check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
    elif "network_connection" in lowered or "could not connect" in lowered or "couldn't connect" in lowered:
        hint = f": cannot reach the store{where}, check AWS_ENDPOINT_URL"
    return ObjectStoreError(f"{setting}={location.url}{hint} ({text})")
