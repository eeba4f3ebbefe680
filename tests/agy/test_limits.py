"""How the caps per thread are enforced: cgroup v2, v1, or rlimits, and what each says."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bridge.agy.limits import Limits, enforcement, limits_line
from bridge.agy.network import host_addresses, loopback_nameservers

LIMITS = Limits(max_processes=64, max_memory=256 << 20)


def _v2_tree(root: Path, *, delegated: bool) -> Path:
    """A cgroup v2 tree as the kernel shows it, the bridge in ``/svc``."""
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    own = root / "svc"
    own.mkdir()
    (own / "cgroup.procs").write_text("")
    (own / "cgroup.subtree_control").write_text("memory pids\n" if delegated else "")
    return own


def test_a_cgroup_v2_whose_controllers_never_appear_falls_back_to_rlimits(
    tmp_path: Path,
) -> None:
    """Here a folder made under the bridge's cgroup gets no ``pids.max`` or ``memory.max`` (as
    when the controllers are not really delegated): the bridge says so and uses rlimits."""
    root = tmp_path / "cg"
    root.mkdir()
    own = _v2_tree(root, delegated=True)
    membership = tmp_path / "self"
    membership.write_text("0::/svc\n")
    found = enforcement(LIMITS, root=root, self_cgroup=membership)
    assert found.mechanism == "rlimits"
    assert f"cannot create a cgroup under {own}" in found.problem
    assert [p.name for p in own.iterdir() if p.is_dir()] == []  # the attempt left nothing


def test_cgroup_v1_as_root_is_used_here() -> None:
    found = enforcement(LIMITS)
    if found.mechanism != "cgroup1":
        return  # another host: covered by the tests above
    assert found.describe() == (
        "each thread capped at 64 processes and 256 MiB of memory (cgroup v1)"
    )
    assert found.gaps() == []
    assert limits_line(found).startswith("• 📏 Limits:")
    confinement = found.open()
    try:
        assert [(d / "pids.max").read_text().strip() for d in confinement.dirs[:1]] == ["64"]
        assert (confinement.dirs[1] / "memory.limit_in_bytes").read_text().strip() == str(256 << 20)
    finally:
        confinement.close()
    assert not any(d.exists() for d in confinement.dirs)


def test_without_cgroups_the_fallback_is_rlimits_and_doctor_says_what_they_miss(
    tmp_path: Path,
) -> None:
    membership = tmp_path / "self"
    membership.write_text("0::/svc\n")
    found = enforcement(LIMITS, root=tmp_path / "none", self_cgroup=membership)
    assert found.mechanism == "rlimits"
    assert "rlimits only" in found.describe()
    gaps = " ".join(found.gaps())
    assert "per process (RLIMIT_AS), not per thread" in gaps
    assert "RLIMIT_NPROC" in gaps
    assert limits_line(found).startswith("• ⚠️ Limits:")


def test_the_rlimits_reach_what_the_sandbox_starts() -> None:
    confinement = enforcement(LIMITS, self_cgroup=Path("/nonexistent")).open()
    assert confinement.mechanism == "rlimits"
    argv = confinement.wrap(["sh", "-c", "ulimit -v"])
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(LIMITS.max_memory // 1024)


def test_no_caps_wanted_is_said_too() -> None:
    found = enforcement(Limits())
    assert found.mechanism == "off"
    assert found.open().wrap(["agy"]) == ["agy"]
    assert "no process or memory cap" in found.describe()


def test_the_hosts_own_addresses_come_from_its_local_table(tmp_path: Path) -> None:
    trie = tmp_path / "fib_trie"
    trie.write_text(
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n"
        "     |-- 127.0.0.1\n        /32 host LOCAL\n"
        "     |-- 192.0.2.2\n        /32 host LOCAL\n"
        "     |-- 192.0.2.255\n        /32 link BROADCAST\n"
        "Local:\n     |-- 192.0.2.2\n        /32 host LOCAL\n"
        "     |-- 10.1.0.7\n        /32 host LOCAL\n"
    )
    assert host_addresses(trie) == ["10.1.0.7", "192.0.2.2"]


def test_a_resolver_on_the_hosts_loopback_is_named(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("# systemd-resolved\nnameserver 127.0.0.53\nnameserver 10.0.0.2\n")
    assert loopback_nameservers(resolv) == ["127.0.0.53"]
