"""The policy: shipped defaults (policies/default.toml) < the user's policy.toml < RES_* environment.

pydantic-settings does the layering and validation; a broken file is an error naming it, never a
silently weaker default.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from reconciler.config.memo import ByIdentity
from reconciler.config.resources import shipped
from reconciler.core.quantities import BadValue, parse_duration_s
from reconciler.core.rules import Rules


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


POLICY_LIMIT = 1 << 20  # a policy file is a few dozen lines


def _read_toml(path: Path) -> dict[str, Any]:
    """The TOML in `path` ({} if it does not exist). A FIFO, a device, a huge or non-UTF-8 file is one
    line naming it, never a hang or a traceback."""
    from reconciler.config.files import FileProblem, read_text

    try:
        text = read_text(path, POLICY_LIMIT)
    except FileProblem as e:
        raise PolicyError(str(e)) from None
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{path}: {e}") from None


class ClusterPolicy(BaseModel):
    """The policy's [cluster] table: where `res run --on cluster` submits (DESIGN §6b)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str = Field(default="", pattern=r"^[A-Za-z0-9_.,-]*$", max_length=200)
    account: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]*$", max_length=200)
    qos: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]*$", max_length=200)
    # Where cluster jobs write their logs and exit records, on a filesystem the nodes and this host
    # share; empty: the state directory's logs/ (which must then be shared).
    shared_dir: str = Field(default="", max_length=1000)

    @field_validator("shared_dir")
    @classmethod
    def _absolute_plain_path(cls, v: str) -> str:
        if not v:
            return v
        import os.path

        if not v.startswith("/") or any(c in v for c in "\0\n\r") or ".." in v.split("/"):
            raise ValueError("must be an absolute path, without '..', newlines or NUL")
        return os.path.normpath(v)


class Policy(BaseSettings):
    """Every key is required here: the one home of the defaults is policies/default.toml."""

    model_config = SettingsConfigDict(env_prefix="RES_", extra="forbid", frozen=True, allow_inf_nan=False)

    # Every value has a range: `inf`, `1e-300` or a negative figure is a mistake (or an agent's
    # doing), named in one line, never a loop that spins or a reserve that means nothing.
    user_reserve_gb: float = Field(ge=0, le=65536)
    user_reserve_cpus: float = Field(ge=0, le=4096)
    game_reserve_gb: float = Field(ge=0, le=65536)
    game_reserve_cpus: float = Field(ge=0, le=4096)
    game_hours: float = Field(gt=0, le=24 * 365)
    small_headroom_gb: float = Field(ge=0, le=65536)
    agents_mem_gb: float = Field(ge=0, le=65536)
    scratch_hours: float = Field(gt=0, le=24 * 365)
    clean_every_minutes: float = Field(ge=0, le=60 * 24 * 365)
    adopt_sessions: bool
    session_mem_gb: float = Field(ge=0, le=65536)
    agents_slice: str = Field(pattern=r"^[A-Za-z0-9_.:-]+\.slice$", max_length=200)
    jobs_slice: str = Field(pattern=r"^[A-Za-z0-9_.:-]+\.slice$", max_length=200)
    unit_prefix: str = Field(pattern=r"^[A-Za-z0-9_]+$", max_length=64)
    lock_title_words: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]] = Field(max_length=100)
    heavy_mem_gb: float = Field(gt=0, le=65536)
    heavy_cpus: float = Field(gt=0, le=4096)
    heavy_minutes: float = Field(gt=0, le=24 * 60 * 365)
    gate_wait_s: float = Field(ge=0, le=3600)
    gate_heavy_add: dict[str, dict[str, float]] = Field(max_length=1000)
    gate_heavy_remove: list[Annotated[str, Field(max_length=200)]] = Field(max_length=1000)
    auto_mem_gb: float = Field(gt=0, le=65536)
    auto_cpus: float = Field(gt=0, le=4096)
    auto_minutes: float = Field(gt=0, le=24 * 60 * 365)
    pressure_full_pct: float = Field(ge=0, le=100)
    margin: float = Field(ge=1, le=10)
    cpu_overcommit: float = Field(ge=1, le=64)
    guard_gb: float = Field(ge=0, le=65536)
    ladder_session_gb: float = Field(ge=0, le=65536)
    max_concurrent_sessions: int = Field(ge=0, le=10000)
    max_starts_per_tick: int = Field(ge=1, le=10000)
    cpu_quota: bool
    max_log_gb: float = Field(ge=0, le=65536)
    private_manager: Literal["auto", "never"]
    loop_autostart: bool
    max_cost_usd: float = Field(ge=0, le=1e6)
    max_duration: int = Field(ge=0, le=365 * 86400)  # seconds; the file may say "30m"
    max_iterations: int = Field(ge=0, le=10**9)
    daily_cost_usd: float = Field(ge=0, le=1e6)
    tick_s: float = Field(ge=0.05, le=3600)
    attach_lease_s: float = Field(ge=1, le=86400)
    attach_renew_s: float = Field(ge=0.1, le=86400)
    sweep_s: float = Field(ge=0.05, le=3600)
    answer_timeout_s: float = Field(ge=1, le=3600)
    time_zone: str = Field(max_length=100)
    overflow: Literal["off", "cluster"]
    cluster_requeue_on_node_failure: int = Field(ge=0, le=100)
    web_port: int = Field(ge=0, le=65535)
    web_actions: bool
    cluster: ClusterPolicy

    @field_validator("*", mode="before")
    @classmethod
    def _no_truth_for_a_figure(cls, v: Any, info) -> Any:
        """`user_reserve_gb = true` is a mistake, not 1 GB, and `loop_autostart = inf` one, not true
        (pydantic would take both). A variable's text ("true", "8") is read as pydantic reads it."""
        from pydantic_core import PydanticCustomError

        kind = cls.model_fields[info.field_name].annotation
        if isinstance(v, bool) and kind in (int, float):
            raise PydanticCustomError("float_type", "not a number")
        if kind is bool and isinstance(v, (int, float)) and not isinstance(v, bool):
            raise PydanticCustomError("bool_type", "not true or false")
        return v

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, v: str) -> str:
        from reconciler.config.zone import zone_named

        zone_named(v)  # a name no tzdata knows is named now, not at the first clock time shown
        return v

    @field_validator("gate_heavy_add")
    @classmethod
    def _gate_table(cls, v: dict) -> dict:
        from reconciler.core.gate import TableError, make_table

        try:
            make_table(None, v)
        except TableError as e:
            raise ValueError(str(e).removeprefix("gate_heavy_add: ")) from None
        return v

    @field_validator("max_duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v.strip() in ("0", ""):
                return 0
            try:
                return parse_duration_s(v, "max_duration")
            except BadValue as e:  # its line names the key and the value already: the rest says what
                raise ValueError(str(e).split(": ", 1)[-1]) from None
        return v

    @field_validator("jobs_slice")
    @classmethod
    def _jobs_under_agents(cls, v: str, info) -> str:
        agents = info.data.get("agents_slice")
        if agents and not v.startswith(agents[: -len(".slice")] + "-"):
            raise ValueError(f"jobs_slice {v!r} must be a child of agents_slice {agents!r} (name it {agents[:-6]}-jobs.slice)")
        return v

    def rules(self) -> Rules:
        """What the core reads of this policy (core/rules.py), made once per policy object."""
        return _RULES.get(self, rules_of)

    # Which of the memory reserves and the headroom the user's file, a RES_ variable or the caller set
    # (load_policy): a reserve set stands as set; a shipped one is scaled down on a small machine.
    _reserve_as_set: tuple[str, ...] = PrivateAttr(default=())

    @property
    def reserve_as_set(self) -> tuple[str, ...]:
        return self._reserve_as_set

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        # The files as load_policy read them (checked: regular, bounded, UTF-8), the user's over the
        # shipped defaults: pydantic-settings never opens a path itself (a FIFO would hang it).
        return (init_settings, env_settings, _FilesSource(settings_cls))


def rules_of(policy: Policy) -> Rules:
    """The core's values of `policy`: each field of Rules, read from the policy's field of that name."""
    return Rules(**{f.name: getattr(policy, f.name) for f in fields(Rules)})


_RULES = ByIdentity(limit=64)  # a pass asks every time; a policy is replaced only when its files change


class _FilesSource(PydanticBaseSettingsSource):
    """The policy files' values, read once by load_policy (see settings_customise_sources)."""

    files: dict[str, Any] = {}

    def get_field_value(self, field, field_name):  # unused: __call__ gives the whole mapping
        return self.files.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.files)


def load_policy(**overrides: Any) -> Policy:
    """Defaults < user file < RES_* environment < explicit overrides (tests)."""
    user_path = user_policy_path()
    default = _read_toml(default_policy_path())
    user = _read_toml(user_path)
    _FilesSource.files = {**default, **user}
    unknown = sorted(set(user) - set(Policy.model_fields))
    if unknown:
        from reconciler.core.invalid import quoted

        name = unknown[0] if unknown[0].isidentifier() else quoted(unknown[0])
        raise PolicyError(f"{user_path}: {name}: not a key of the policy (a typo? policies/default.toml lists "
                          "every key)")

    from pydantic_settings import SettingsError

    try:
        loaded = Policy(**overrides)
    except ValidationError as e:
        raise PolicyError(policy_problem(e.errors()[0], user, user_path)) from None
    except SettingsError as e:  # a list or table key given as a variable that is not JSON
        import re

        from reconciler.core.invalid import allowed, quoted

        m = re.search(r'field "([A-Za-z0-9_]+)"', str(e))
        key = m.group(1) if m else "?"
        var = f"RES_{key.upper()}"
        said = allowed(Policy.model_fields.get(key), key)
        raise PolicyError(f"{var}={quoted(os.environ.get(var, ''))[:60]}: not JSON; allowed: "
                          f"{said or 'a value'}, written as JSON (e.g. [\"gate\"] or {{}})") from None
    variables = {k.lower() for k in os.environ}
    loaded._reserve_as_set = tuple(k for k in RESERVE_KEYS if k in user or k in overrides or f"res_{k}" in variables)
    return loaded


RESERVE_KEYS = ("user_reserve_gb", "small_headroom_gb", "game_reserve_gb")  # core/capacity.mem_reserve


def policy_problem(err: dict, user: dict[str, Any], user_path: Path) -> str:
    """One line, in res's words, naming where the bad value came from (the RES_ variable, the user's
    file, the shipped defaults), what is wrong with it and what is allowed (core/invalid.py)."""
    from reconciler.core.invalid import explain, quoted

    top = str(err["loc"][0]) if err.get("loc") else "policy"
    var = f"RES_{top.upper()}"
    if var in os.environ:
        return explain(err, Policy, head=f"{var}={quoted(os.environ[var])}")[1]
    source = str(user_path) if top in user else str(default_policy_path())
    return f"{source}: {explain(err, Policy)[1]}"
