"""Settings from the environment (GATEWAY_*), a `.env` file, or a TOML config file.

Precedence, highest first: init arguments, environment, `.env`, the config file named by
`GATEWAY_CONFIG_FILE` (default `config/gateway.toml` when it exists).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def _comma_separated(value: str) -> list[str]:
    """The non-empty items of a comma-separated setting, stripped: "5, 30,,120" -> ["5", "30", "120"]."""
    return [p.strip() for p in value.split(",") if p.strip()]


def _default_policy_dir() -> Path:
    local = Path("config/policies")
    if local.is_dir():
        return local
    return REPO_ROOT / "config" / "policies"


def _config_file() -> Path:
    return Path(os.environ.get("GATEWAY_CONFIG_FILE", "config/gateway.toml"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", env_file=".env", extra="ignore", frozen=True)

    database_url: str = "sqlite:///var/gateway.db"
    sqlite_synchronous: str = "FULL"
    sqlite_busy_timeout_seconds: float = Field(default=5.0, gt=0)
    database_schema: str | None = None  # PostgreSQL: created if missing; isolates one deployment
    database_pool_min: int = Field(default=2, ge=1)
    database_pool_max: int = Field(default=10, ge=1)
    bootstrap_api_key: SecretStr | None = None
    secret_key: SecretStr | None = None
    var_dir: Path = Path("var")
    policy_dir: Path = Field(default_factory=_default_policy_dir)

    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_header_bytes: int = Field(default=64 * 1024, ge=4096)  # request line + headers; over it, 431

    lease_seconds: float = Field(default=30.0, gt=0)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    poll_interval_seconds: float = Field(default=1.0, gt=0)
    job_retention_seconds: int = Field(default=86400, ge=0)
    queue_degraded_age_seconds: float = Field(default=60.0, gt=0)
    idempotency_ttl_seconds: int = Field(default=86400, ge=1)

    worker_concurrency: int = Field(default=64, ge=1)
    # A job whose texts add up to at most this many characters is filtered inside POST /v1/jobs and
    # stored filtered (one write, no worker claim); larger ones are left to the workers. 0 = never.
    inline_filter_max_chars: int = Field(default=8192, ge=0)
    # Scan jobs' texts in a helper process (gateway/filterproc.py) rather than on the event loop's
    # thread; unset: on where there are two CPUs or more.
    filter_process: bool | None = None
    # Comma-separated seconds in the environment (`5,30,120`), as the contract has it.
    webhook_retry_schedule: Annotated[tuple[float, ...], NoDecode] = (5, 30, 120, 600, 1800, 3600, 7200)
    webhook_retry_jitter: float = Field(default=0.2, ge=0, le=1)
    webhook_timeout_seconds: float = Field(default=15.0, gt=0)
    webhook_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    webhook_allow_private_networks: bool = False
    webhook_max_concurrency: int = Field(default=512, ge=1)
    webhook_max_per_host: int = Field(default=64, ge=1)
    webhook_response_body_cap: int = Field(default=4096, ge=0)
    webhook_max_retry_after_seconds: float = Field(default=3600.0, ge=0)
    # The HTTP client that sends webhooks: our lean HTTP/1.1 client (gateway/delivery/h1.py, about a
    # third of aiohttp's CPU per request), or aiohttp's ClientSession as a fallback.
    webhook_http_client: Literal["h1", "aiohttp"] = "h1"

    metrics_require_auth: bool = False
    rate_limit_per_second: float = Field(default=0.0, ge=0)  # 0 = off
    rate_limit_burst: int = Field(default=200, ge=1)
    # Invalid API keys per client address: every invalid key costs a database read (misses are
    # not cached, so a key created a moment ago works at once); past this budget the address gets
    # 429 for keys it has not shown valid before, without a read. 0 = off.
    auth_failure_rate_per_second: float = Field(default=1.0, ge=0)
    auth_failure_burst: int = Field(default=30, ge=1)
    # How long an instance trusts a valid key without asking the store again: a key revoked with
    # `gateway keys revoke` stops working on every instance within this time. 0 = a read per request.
    api_key_cache_seconds: float = Field(default=10.0, ge=0, le=300)
    # Proxies whose X-Forwarded-For names the client (addresses or networks, comma-separated; "*"
    # trusts any peer). Empty: the peer's own address is the client's, and the header is ignored.
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()

    @property
    def use_filter_process(self) -> bool:
        if self.filter_process is not None:
            return self.filter_process
        return (os.cpu_count() or 1) >= 2

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _parse_schedule(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = _comma_separated(value)
            try:
                out = tuple(float(p) for p in parts)
            except ValueError as exc:
                raise ValueError("must be comma-separated seconds, e.g. 5,30,120") from exc
            if any(p < 0 for p in out):
                raise ValueError("delays must be >= 0")
            return out
        if isinstance(value, int | float):
            return (float(value),)
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _parse_proxies(cls, value: Any) -> Any:
        parts = _comma_separated(value) if isinstance(value, str) else value
        for part in parts:
            if part == "*":
                continue
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError as exc:
                raise ValueError(f"{part!r} is not an IP address or network (e.g. 10.0.0.0/8)") from exc
        return tuple(parts)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        path = _config_file()
        if path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        sources.append(file_secret_settings)
        return tuple(sources)
