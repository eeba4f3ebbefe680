"""The bridge's configuration: one TOML file read into pydantic models.

Every key is documented in ``config.example.toml``. Unknown keys are refused (a typo in an
operator's file must fail at start, naming the key), and secrets may also come from the
environment so they need not sit in the file.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bridge.core.approvals.options import SpecError, parse_spec
from bridge.core.approvals.rules import RuleError, parse_rule
from bridge.forge_settings import FORGE_TOKEN_ENV, ForgeSection, merged_forge, with_env_token
from bridge.schedule_settings import ScheduleSection
from bridge.team_settings import BudgetSection, PricingSection

# The key of the validation context that carries the file a config was read from.
SOURCE_CONTEXT = "source"

# Environment variables that may carry a secret instead of the file, and where each one goes.
ENV_SECRETS: dict[str, tuple[str, str]] = {
    "SLACK_BOT_TOKEN": ("slack", "bot_token"),
    "SLACK_APP_TOKEN": ("slack", "app_token"),
    "SLACK_SIGNING_SECRET": ("slack", "signing_secret"),
    "MATRIX_ACCESS_TOKEN": ("matrix", "access_token"),
    "MATRIX_PASSWORD": ("matrix", "password"),
    "AGY_BRIDGE_STORE_URL": ("store", "url"),
}

PositiveSeconds = Annotated[float, Field(gt=0)]

# agy's login inside its state directory, as far as it is known (docs/agy.md, "agy's state"):
# its file token storage, the credential files some builds and tools keep beside it, and the
# project simulator's login.
DEFAULT_LOGIN_ENTRIES = (
    "antigravity-cli/antigravity-oauth-token",
    "oauth_creds.json",
    "google_accounts.json",
    "sim-login.json",
)


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BridgeSection(_Section):
    data_dir: Path = Path("data")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = False
    # Attachments bigger than this are refused with a message in the thread.
    max_attachment_bytes: int = Field(default=25 * 1024 * 1024, gt=0)
    # Extra environment variable names (beyond the bridge's own tokens) never passed to agy.
    secret_env: list[str] = Field(default_factory=list)
    # thread_history posts by authors the access lists do not serve (other people, apps,
    # webhooks): "mark" shows them marked as such, "omit" leaves them out.
    unlisted_history: Literal["mark", "omit"] = "mark"
    # Budget periods are calendar days, weeks and months in this time zone (an IANA name).
    timezone: str = "UTC"
    # The audit trail keeps this many days (pruned daily, a checkpoint keeps it verifiable).
    audit_days: int = Field(default=90, gt=0)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, name: str) -> str:
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone `{name}` (an IANA name such as Europe/Paris)"
            ) from None
        return name


class AgySection(_Section):
    command: list[str] = Field(default_factory=lambda: ["agy"], min_length=1)
    model: str = ""
    skip_permissions: bool = True
    # agy's --mode (for example "accept-edits" or "plan"); used when skip_permissions is false.
    mode: str = ""
    sandbox: bool = False
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Names of the bridge's own environment variables agy gets besides the allow-list (PATH,
    # HOME, USER, LOGNAME, SHELL, LANG, LC_*, TERM, TZ): taken by name, so a secret agy needs
    # (its API key) need not be written into this file.
    pass_env: list[str] = Field(default_factory=list)
    max_processes: int = Field(default=4, ge=1)
    idle_timeout: PositiveSeconds = 900.0
    turn_timeout: PositiveSeconds = 1800.0
    init_timeout: PositiveSeconds = 90.0
    stop_grace: PositiveSeconds = 5.0
    # The `agy --help` probe's deadline. Unset: init_timeout (see probe_timeout).
    help_timeout: PositiveSeconds | None = None
    guidance: str = ""
    # Largest stdout line read from agy; a longer line is reported and skipped.
    max_line_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # "bwrap": every agy process in its own bubblewrap sandbox (refuses to start where that
    # cannot work); "none": no isolation. Unset: bwrap wherever it works on this host.
    isolation: Literal["bwrap", "none"] | None = None
    # Caps per thread (docs/host-safety.md): processes and memory of its sandbox, through a
    # cgroup where the bridge may create one (rlimits otherwise), and the size of its /tmp
    # (counted against the memory cap under cgroups). 0: no cap of that kind.
    max_processes_per_thread: int = Field(default=2048, ge=0)
    max_memory_per_thread: ByteSize = Field(default=ByteSize(4 << 30), ge=0)
    tmp_size: ByteSize = Field(default=ByteSize(1 << 30), ge=1 << 20)
    # Disk (docs/host-safety.md): below this much free space on a workspace's filesystem the
    # turn writing there is stopped and no new turn starts there; a workspace past
    # max_workspace_bytes (unset: no cap) likewise.
    min_free_bytes: ByteSize = Field(default=ByteSize(512 << 20), ge=0)
    max_workspace_bytes: ByteSize | None = None
    # "private": each sandbox has a network of its own (the internet, not the host's local
    # services; refuses to start where that cannot work); "shared": the host's network. Unset:
    # private wherever it works (root, slirp4netns), else shared (said loudly).
    network: Literal["private", "shared"] | None = None
    # Only these hosts ("example.com", "*.example.com") are reachable from a sandbox, through a
    # proxy the bridge runs; list agy's own login and model API hosts too. Unset: the internet.
    egress: list[str] | None = None
    # agy's own state directories, shared by every thread outside a sandbox. Inside one, each
    # thread gets a private directory in each one's place (conversations, settings, rules),
    # where only the login entries of the shared directory are seen, read-only.
    state_dirs: list[Path] = Field(default_factory=lambda: [Path("~/.gemini")])
    # Where each thread's private agy state lives (sandboxed threads; docs/agy.md). Unset: in
    # each state directory (``<state dir>/.agy-bridge-threads/<thread>``), which every instance
    # on one host finds, so a takeover there resumes the thread's conversation. Set it to a
    # folder on storage several hosts share for the same across hosts.
    state_root: Path | None = None
    # agy's login: paths relative to a state directory (docs/agy.md says why these).
    login_entries: list[str] = Field(default_factory=lambda: list(DEFAULT_LOGIN_ENTRIES))

    @property
    def probe_timeout(self) -> float:
        """How long ``agy --help`` (and doctor's other probes of agy) may take: ``help_timeout``
        when set, else the start's allowance. A probe is a start of agy's, as slow as one on a
        loaded host; a fixed 4 s, passed there, left the bridge sending only the essential flags
        for its whole life (no ``--sandbox``, ``--mode`` or ``--print-timeout``)."""
        return self.help_timeout if self.help_timeout is not None else self.init_timeout

    @field_validator("login_entries")
    @classmethod
    def _relative_entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            parts = PurePosixPath(entry).parts
            if not parts or entry.startswith("/") or any(p in ("..", ".") for p in parts):
                raise ValueError(
                    f"{entry!r}: each entry is a path relative to a state directory, "
                    "without . or .."
                )
        return [str(PurePosixPath(entry)) for entry in entries]


class IdentitySection(_Section):
    """The commit identity agy's commands run with (GIT_AUTHOR_* and GIT_COMMITTER_*)."""

    name: str = "agy-bridge"
    email: str = "agy-bridge@localhost"


class SlackSection(_Section):
    enabled: bool = True
    bot_token: SecretStr | None = None
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    api_url: str = "https://slack.com/api/"
    # "socket" (default, needs app_token) or "http" (needs signing_secret).
    transport: Literal["socket", "http"] = "socket"
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=3000, ge=0, le=65535)
    streaming: bool = True
    allowed_users: list[str] = Field(default_factory=list)
    allowed_channels: list[str] = Field(default_factory=list)
    # Other apps whose posts may reach the agent (app ids A… or bot ids B…); none by default.
    allowed_bots: list[str] = Field(default_factory=list)
    # After a reconnect and at start, threads with messages in the last this many hours are
    # read back for what the connection missed (0: never).
    catch_up_hours: float = Field(default=24.0, ge=0)
    # The agent's DM: a short greeting at a person's first visit, and up to four suggested
    # prompts (Slack shows no more) at the top of the Messages tab (agent_view) or in each new
    # thread of the assistant container (assistant_view); empty: none.
    greeting: str = "Hi! I'm a coding agent. Ask me about the code, or to change it."
    suggested_prompts: list[str] = Field(
        default_factory=lambda: [
            "What does this repository do?",
            "Find and fix a failing test",
            "Review the latest changes on my branch",
            "Explain how to build and run the tests",
        ],
        max_length=4,
    )
    # Feedback buttons (👍/👎) under each final answer, recorded per turn.
    feedback: bool = False
    # How a streamed answer shows the agent's tool calls: "plan" (together, as Slack's plan
    # block with a title saying how far it got) or "timeline" (cards between the text).
    task_display: Literal["plan", "timeline"] = "plan"
    # Who sees the bridge's health on their App Home tab (Slack user ids).
    admins: list[str] = Field(default_factory=list)

    @field_validator("api_url")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        # AsyncWebClient joins method names onto the base URL: without the slash, urljoin
        # silently drops the last path segment ("/api").
        return value if value.endswith("/") else value + "/"

    @property
    def configured(self) -> bool:
        return self.enabled and self.bot_token is not None


class MatrixSection(_Section):
    enabled: bool = True
    homeserver: str = ""
    user_id: str = ""
    password: SecretStr | None = None
    access_token: SecretStr | None = None
    device_name: str = "agy-bridge"
    allowed_users: list[str] = Field(default_factory=list)
    allowed_rooms: list[str] = Field(default_factory=list)
    threads: bool = False
    encryption: bool = True
    # Which devices of a user the bot obeys and shares room keys with in encrypted rooms:
    # "cross-signed" (those their owner signed, the owner's identity pinned on first use) or
    # "any" (every device: for servers and clients without cross-signing).
    trust: Literal["cross-signed", "any"] = "cross-signed"
    # Answer only in encrypted rooms (a stolen password alone then commands nothing).
    require_encryption: bool = False

    @property
    def configured(self) -> bool:
        return self.enabled and bool(self.homeserver and self.user_id)


class WorkspaceSection(_Section):
    """Maps a Slack channel or a Matrix room (or, with neither, every thread) to a directory."""

    channel: str = ""
    room: str = ""
    path: Path
    worktree: bool = False
    notes_file: Path | None = None
    # What happens to a thread's repository when its thread is finished: "keep", or "remove"
    # (its branch brought into the workspace's repository first; kept while uncommitted).
    worktree_cleanup: Literal["keep", "remove"] = "keep"
    # Extra paths this workspace's sandboxes see read-only / read-write (e.g. a shared cache).
    read_only: list[Path] = Field(default_factory=list)
    read_write: list[Path] = Field(default_factory=list)
    # This workspace's forge, key by key over [forge] (docs/pull-requests.md).
    forge: ForgeSection | None = None

    @property
    def is_default(self) -> bool:
        return not self.channel and not self.room


class AdminSection(_Section):
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=9464, ge=0, le=65535)


class WebSection(_Section):
    """The operator console in the browser (docs/console.md): off unless enabled."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8470, ge=0, le=65535)
    # The address people open (behind the operator's TLS proxy): the base of the sign-in links
    # `!web` sends; an https address makes the session cookie Secure.
    public_url: str = ""
    # Chat user ids who see every thread (others see the threads of their channels and DMs).
    admins: list[str] = Field(default_factory=list)
    # A header the operator's proxy sets to the signed-in person's chat user id (off: "");
    # its platform is trusted_platform. Only for a console reachable through that proxy alone.
    trusted_header: str = ""
    trusted_platform: str = ""
    link_seconds: PositiveSeconds = 300.0
    session_hours: float = Field(default=12.0, gt=0)
    # How long a person's channel memberships are trusted before the chat is asked again.
    membership_seconds: PositiveSeconds = 60.0

    @model_validator(mode="after")
    def _coherent(self) -> WebSection:
        if self.public_url and not self.public_url.startswith(("http://", "https://")):
            raise ValueError("[web] public_url must start with http:// or https://")
        if bool(self.trusted_header) != bool(self.trusted_platform):
            raise ValueError("[web] trusted_header and trusted_platform go together")
        return self


class ApprovalsSection(_Section):
    """Which tool calls wait for a person in the thread (agy's ``PreToolUse`` hook)."""

    # ask: gated calls wait for an approver; deny: gated calls are refused; off: no gate at all.
    mode: Literal["ask", "deny", "off"] = "ask"
    # Rules as word lists (split as the shell would): a command's argv must start with the
    # words; a final `*` stands for any further arguments (docs/approvals.md).
    allow_commands: list[str] = Field(default_factory=list)
    deny_commands: list[str] = Field(default_factory=list)
    # Hosts read_url_content (and agy's browser) may fetch without asking: "docs.python.org"
    # or "*.python.org" (any subdomain).
    allow_hosts: list[str] = Field(default_factory=list)
    # Options added to the gate's tables, per program or subcommand, in the tables' language
    # (docs/approvals.md): {"mytool" = "-v --verbose -o=write", "git log" = "--my-opt"}.
    options: dict[str, str] = Field(default_factory=dict)
    # Files and folders that any read asks for (besides agy's login and the bridge's own
    # files); secrets in them are never posted.
    secret_paths: list[Path] = Field(default_factory=list)
    # Who may answer (chat user ids); empty: anyone the thread lets talk to the agent.
    approvers: list[str] = Field(default_factory=list)
    timeout: PositiveSeconds = 600.0
    # How soon after a turn starts agy's first hook call must reach the bridge: an agy that
    # runs no hooks is stopped then, before its tool calls can run (docs/approvals.md).
    hook_proof_seconds: PositiveSeconds = 2.0
    # How long a tool step of agy's stream may wait for its PreToolUse call before agy is
    # stopped (a build that skips that hook); unset: max(10, 5 × hook_proof_seconds).
    hook_step_grace: PositiveSeconds | None = None

    @field_validator("allow_commands", "deny_commands")
    @classmethod
    def _word_rules(cls, rules: list[str]) -> list[str]:
        # Refused at start, naming the rule and its replacement: an old glob rule such as
        # `git diff*` no longer means what it meant.
        errors = []
        for rule in rules:
            try:
                parse_rule(rule)
            except RuleError as exc:
                errors.append(str(exc))
        if errors:
            raise ValueError("; ".join(errors))
        return rules

    @field_validator("options")
    @classmethod
    def _options(cls, options: dict[str, str]) -> dict[str, str]:
        for name, spec in options.items():
            try:
                parse_spec(spec)
            except SpecError as exc:
                raise ValueError(f"options for `{name}`: {exc}") from None
        return options

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            bare = host.removeprefix("*.")
            if not bare or any(c in bare for c in "/:*@ ") or bare.startswith("."):
                raise ValueError(f"`{host}`: a host name (docs.python.org) or *.domain")
        return [host.lower() for host in hosts]


class StoreSection(_Section):
    """Where the state lives: SQLite for one host, PostgreSQL for several instances."""

    # sqlite:///path or postgresql://user:password@host/db; empty: bridge.sqlite3 in data_dir.
    # A secret (it can hold a password): may come from AGY_BRIDGE_STORE_URL instead.
    url: SecretStr | None = None
    # This instance's name among several (default: the host name).
    instance: str = ""
    # Replaced by ``[agy] state_root`` (a thread's agy state is where every instance of the
    # host finds it by default); still accepted so older configs load, and ignored.
    shared_agy_state: bool = False
    # A thread's lease lapses this long after its instance was last heard from (PostgreSQL).
    lease_seconds: PositiveSeconds = 30.0
    # SIGTERM: how long running turns get to finish before they are handed over.
    drain_seconds: PositiveSeconds = 60.0

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: SecretStr | None) -> SecretStr | None:
        value = url.get_secret_value() if url is not None else ""
        if value and not value.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("must start with sqlite:/// or postgresql://")
        return url


class Config(_Section):
    bridge: BridgeSection = Field(default_factory=BridgeSection)
    agy: AgySection = Field(default_factory=AgySection)
    identity: IdentitySection = Field(default_factory=IdentitySection)
    slack: SlackSection = Field(default_factory=SlackSection)
    matrix: MatrixSection = Field(default_factory=MatrixSection)
    workspaces: list[WorkspaceSection] = Field(default_factory=list)
    admin: AdminSection = Field(default_factory=AdminSection)
    web: WebSection = Field(default_factory=WebSection)
    approvals: ApprovalsSection = Field(default_factory=ApprovalsSection)
    store: StoreSection = Field(default_factory=StoreSection)
    pricing: PricingSection = Field(default_factory=PricingSection)
    budgets: list[BudgetSection] = Field(default_factory=list)
    schedules: list[ScheduleSection] = Field(default_factory=list)
    # Pull requests from worktree threads (docs/pull-requests.md); per workspace too.
    forge: ForgeSection | None = None

    # The file this config was read from (None: defaults and environment only); agy's sandbox
    # hides it and its folder.
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    @model_validator(mode="after")
    def _read_from(self, info: ValidationInfo) -> Config:
        # The file comes from load_config's validation context, never from the file's own
        # keys: a config cannot name some other file as the one the sandbox should hide.
        context = info.context if isinstance(info.context, dict) else {}
        source = context.get(SOURCE_CONTEXT)
        if isinstance(source, Path):
            self._source = source
        return self

    @model_validator(mode="after")
    def _budget_names(self) -> Config:
        labels = [budget.label for budget in self.budgets]
        if twice := sorted({label for label in labels if labels.count(label) > 1}):
            raise ValueError(f"budgets need distinct names: {', '.join(twice)} (set `name`)")
        return self

    @model_validator(mode="after")
    def _schedule_names(self) -> Config:
        names = [schedule.name for schedule in self.schedules]
        if twice := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"schedules need distinct names: {', '.join(twice)}")
        for schedule in self.schedules:
            # Runs only where the bridge serves: a listed channel or room when any is listed.
            lists = {"slack": self.slack.allowed_channels, "matrix": self.matrix.allowed_rooms}
            listed = lists.get(schedule.platform)
            paths = [w.path.expanduser() for w in self.workspaces]
            if schedule.workspace and Path(schedule.workspace).expanduser() not in paths:
                raise ValueError(
                    f"schedule `{schedule.name}`: workspace {schedule.workspace} is not the path "
                    "of a [[workspaces]] entry"
                )
            if listed and schedule.place not in listed:
                raise ValueError(
                    f"schedule `{schedule.name}`: the bridge does not serve {schedule.place} "
                    "(it is not in the allowed channels or rooms)"
                )
        return self

    @model_validator(mode="after")
    def _one_default_workspace(self) -> Config:
        if sum(1 for w in self.workspaces if w.is_default) > 1:
            raise ValueError("only one [[workspaces]] entry may omit both channel and room")
        return self

    def forge_for(self, workspace: WorkspaceSection | None) -> ForgeSection | None:
        """The forge a thread of ``workspace`` uses (None: no forge configured)."""
        return merged_forge(self.forge, workspace.forge if workspace is not None else None)

    def secret_values(self) -> list[str]:
        """Every secret this config holds, for scrubbing from logs and agy's environment."""
        values: list[str] = []
        for secret in (
            self.slack.bot_token,
            self.slack.app_token,
            self.slack.signing_secret,
            self.matrix.password,
            self.matrix.access_token,
            self.store.url if self.store.url and "@" in self.store.url.get_secret_value() else None,
        ):
            if secret is not None and secret.get_secret_value():
                values.append(secret.get_secret_value())
        forges = [self.forge, *(w.forge for w in self.workspaces)]
        for forge in forges:
            for secret in (forge.token, forge.webhook_secret) if forge is not None else ():
                if secret is not None and secret.get_secret_value():
                    values.append(secret.get_secret_value())
        return list(dict.fromkeys(values))

    def secret_env_names(self) -> list[str]:
        """Environment variable names agy must never inherit."""
        return [*ENV_SECRETS, FORGE_TOKEN_ENV, *self.bridge.secret_env]


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"{key}: {item['msg']}")
    return "; ".join(lines)


def build_config(
    raw: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    source: Path | None = None,
) -> Config:
    """Validate a parsed TOML mapping, with secrets from ``environ`` taking precedence.

    ``source``: the file ``raw`` was read from (``Config.source``).
    """
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {key: value for key, value in raw.items()}
    for env_name, (section, key) in ENV_SECRETS.items():
        value = environ.get(env_name)
        if value:
            section_data = dict(data.get(section) or {})
            section_data[key] = value
            data[section] = section_data
    if forge_token := environ.get(FORGE_TOKEN_ENV):
        data = with_env_token(data, forge_token)
    try:
        context = {SOURCE_CONTEXT: source.resolve()} if source is not None else None
        return Config.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(f"bad configuration: {_describe(exc)}") from None


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (or only defaults and the environment when it is None)."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    config = build_config(raw, environ, source=path)
    if path is not None and not config.bridge.data_dir.is_absolute():
        # A relative data_dir is relative to the config file, not to wherever we were started.
        data_dir = (path.parent / config.bridge.data_dir).resolve()
        config = config.model_copy(
            update={"bridge": config.bridge.model_copy(update={"data_dir": data_dir})}
        )
    return config
