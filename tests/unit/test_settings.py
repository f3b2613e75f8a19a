from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.settings import Settings


def test_defaults_match_the_contract(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert s.database_url == "sqlite:///var/gateway.db"
    assert s.webhook_retry_schedule == (5, 30, 120, 600, 1800, 3600, 7200)
    assert s.webhook_timeout_seconds == 15
    assert s.max_body_bytes == 1024 * 1024
    assert s.lease_seconds == 30
    assert s.job_retention_seconds == 86400
    assert s.queue_degraded_age_seconds == 60
    assert s.webhook_allow_private_networks is False


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEWAY_WEBHOOK_RETRY_SCHEDULE", "1, 2.5,10")
    monkeypatch.setenv("GATEWAY_WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
    monkeypatch.setenv("GATEWAY_MAX_BODY_BYTES", "2048")
    s = Settings()
    assert s.webhook_retry_schedule == (1.0, 2.5, 10.0)
    assert s.webhook_allow_private_networks is True
    assert s.max_body_bytes == 2048


def test_bad_schedule_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEWAY_WEBHOOK_RETRY_SCHEDULE", "5,soon")
    with pytest.raises(ValidationError, match="comma-separated"):
        Settings()


def test_config_file_is_read_and_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "gw.toml"
    cfg.write_text('port = 9999\nwebhook_retry_schedule = "3,4"\nlease_seconds = 12\n')
    monkeypatch.setenv("GATEWAY_CONFIG_FILE", str(cfg))
    monkeypatch.setenv("GATEWAY_LEASE_SECONDS", "7")
    s = Settings()
    assert s.port == 9999 and s.webhook_retry_schedule == (3.0, 4.0) and s.lease_seconds == 7


def test_trusted_proxies_are_addresses_or_networks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings().trusted_proxies == ()  # by default nobody's X-Forwarded-For is believed
    monkeypatch.setenv("GATEWAY_TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.7,::1")
    assert Settings().trusted_proxies == ("10.0.0.0/8", "192.0.2.7", "::1")
    monkeypatch.setenv("GATEWAY_TRUSTED_PROXIES", "*")
    assert Settings().trusted_proxies == ("*",)
    monkeypatch.setenv("GATEWAY_TRUSTED_PROXIES", "10.0.0.0/8,proxy.internal")
    with pytest.raises(ValidationError, match=r"'proxy\.internal' is not an IP address or network"):
        Settings()


def test_the_filter_process_is_on_where_there_is_a_second_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gateway.settings.os.cpu_count", lambda: 2)
    assert Settings().use_filter_process
    monkeypatch.setattr("gateway.settings.os.cpu_count", lambda: 1)
    assert not Settings().use_filter_process
    monkeypatch.setenv("GATEWAY_FILTER_PROCESS", "true")
    assert Settings().use_filter_process  # asked for: on even with one CPU
    monkeypatch.setenv("GATEWAY_FILTER_PROCESS", "false")
    monkeypatch.setattr("gateway.settings.os.cpu_count", lambda: 8)
    assert not Settings().use_filter_process
