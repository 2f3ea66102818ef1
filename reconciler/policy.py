"""The policy: shipped defaults (policies/default.toml) < the user's policy.toml < RES_* environment.

pydantic-settings does the layering and validation; a broken file is an error naming it, never a
silently weaker default.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, TomlConfigSettingsSource

from .resources import shipped
from .units import BadValue, parse_duration_s


class PolicyError(Exception):
    """One line naming the file (or variable) and what is wrong with it."""


def default_policy_path() -> Path:
    return shipped("policies") / "default.toml"


def user_policy_path() -> Path:
    env = os.environ
    if env.get("RES_POLICY_FILE"):
        return Path(env["RES_POLICY_FILE"])
    config = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", os.path.expanduser("~")), ".config")
    return Path(config) / "res" / "policy.toml"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{path}: {e}") from None
    except OSError as e:
        raise PolicyError(f"{path}: {e.strerror}") from None


class Policy(BaseSettings):
    """Every key is required here: the one home of the defaults is policies/default.toml."""

    model_config = SettingsConfigDict(env_prefix="RES_", extra="forbid", frozen=True)

    user_reserve_gb: float = Field(ge=0)
    user_reserve_cpus: float = Field(ge=0)
    game_reserve_gb: float = Field(ge=0)
    game_reserve_cpus: float = Field(ge=0)
    game_hours: float = Field(gt=0)
    small_headroom_gb: float = Field(ge=0)
    scratch_hours: float = Field(gt=0)
    clean_every_minutes: float = Field(ge=0)
    adopt_sessions: bool
    session_mem_gb: float = Field(ge=0)
    agents_slice: str = Field(pattern=r"^[A-Za-z0-9_.:-]+\.slice$")
    jobs_slice: str = Field(pattern=r"^[A-Za-z0-9_.:-]+\.slice$")
    unit_prefix: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    max_concurrent_sessions: int = Field(ge=0)
    max_starts_per_tick: int = Field(ge=1)
    cpu_quota: bool
    private_manager: Literal["auto", "never"]
    max_cost_usd: float = Field(ge=0)
    max_duration: int = Field(ge=0)  # seconds; the file may say "30m"
    max_iterations: int = Field(ge=0)
    daily_cost_usd: float = Field(ge=0)
    tick_s: float = Field(gt=0)
    attach_lease_s: float = Field(gt=0)
    attach_renew_s: float = Field(gt=0)
    sweep_s: float = Field(gt=0)
    answer_timeout_s: float = Field(gt=0)

    @field_validator("max_duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v.strip() in ("0", ""):
                return 0
            try:
                return parse_duration_s(v, "max_duration")
            except BadValue as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("jobs_slice")
    @classmethod
    def _jobs_under_agents(cls, v: str, info) -> str:
        agents = info.data.get("agents_slice")
        if agents and not v.startswith(agents[: -len(".slice")] + "-"):
            raise ValueError(f"jobs_slice {v!r} must be a child of agents_slice {agents!r} (name it {agents[:-6]}-jobs.slice)")
        return v

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        # Later files override earlier ones: the user's policy over the shipped defaults.
        files = [default_policy_path(), user_policy_path()]
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=files))


def load_policy(**overrides: Any) -> Policy:
    """Defaults < user file < RES_* environment < explicit overrides (tests)."""
    user_path = user_policy_path()
    _read_toml(default_policy_path())  # a broken file is named here, before pydantic-settings reads it
    user = _read_toml(user_path)
    unknown = sorted(set(user) - set(Policy.model_fields))
    if unknown:
        raise PolicyError(f"{user_path}: unknown key {unknown[0]!r}")

    try:
        loaded = Policy(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"]) or "policy"
        var = f"RES_{key.upper()}"
        source = var if var in os.environ else str(user_path) if key in user else "policy"
        raise PolicyError(f"{source}: {key}: {err['msg']}") from None
    return loaded
