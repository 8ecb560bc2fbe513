"""What counts as a memory cap (`core.memory_cap`): an rlimit, or a memory cgroup's limit
below the machine's memory, read from cgroup v1 or v2."""

from __future__ import annotations

import resource

import pytest

from stabilitycli.core import memory_cap
from stabilitycli.pipeline import memory


@pytest.fixture
def no_rlimit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda _limit: (resource.RLIM_INFINITY,) * 2)


def _cgroup(monkeypatch, tmp_path, proc: str, files: dict[str, str]) -> None:
    (tmp_path / "proc").write_text(proc)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(memory_cap, "_PROC_CGROUP", tmp_path / "proc")
    monkeypatch.setattr(memory_cap, "_CGROUP_V1", tmp_path / "v1")
    monkeypatch.setattr(memory_cap, "_CGROUP_V2", tmp_path / "v2")


def test_a_v1_memory_cgroup_limit_below_the_machine_is_a_cap(
    monkeypatch, tmp_path, no_rlimit
) -> None:
    proc = "9:cpu:/\n4:memory:/stab\n0::/\n"
    _cgroup(monkeypatch, tmp_path, proc, {"v1/stab/memory.limit_in_bytes": "2147483648\n"})
    assert memory_cap.memory_capped()


def test_the_v1_no_limit_value_and_v2_max_are_no_cap(monkeypatch, tmp_path, no_rlimit) -> None:
    # cgroup v1 writes 2^63 - 4096 for no limit, v2 writes `max`
    proc = "4:memory:/job\n0::/job\n"
    files = {"v1/job/memory.limit_in_bytes": "9223372036854771712\n", "v2/job/memory.max": "max\n"}
    _cgroup(monkeypatch, tmp_path, proc, files)
    assert not memory_cap.memory_capped()


def test_a_v2_memory_max_is_a_cap(monkeypatch, tmp_path, no_rlimit) -> None:
    _cgroup(monkeypatch, tmp_path, "0::/user/stab\n", {"v2/user/stab/memory.max": "1073741824\n"})
    assert memory_cap.memory_capped()


def test_no_cgroup_file_is_no_cap(monkeypatch, tmp_path, no_rlimit) -> None:
    monkeypatch.setattr(memory_cap, "_PROC_CGROUP", tmp_path / "missing")
    assert not memory_cap.memory_capped()


def test_release_freed_asks_the_c_library_only_under_a_cap(monkeypatch) -> None:
    calls: list[int] = []
    memory._malloc_trim.cache_clear()
    monkeypatch.setattr(memory, "_malloc_trim", lambda: calls.append)
    monkeypatch.setattr(memory, "memory_capped", lambda: False)
    memory.release_freed()
    assert calls == []
    monkeypatch.setattr(memory, "memory_capped", lambda: True)
    memory.release_freed()
    assert calls == [0]


def test_a_cgroup_with_room_for_the_columns_is_no_cap(monkeypatch, tmp_path, no_rlimit) -> None:
    _cgroup(monkeypatch, tmp_path, "0::/pod\n", {"v2/pod/memory.max": str(4 << 30)})
    assert memory_cap.memory_capped()
    # 1 GiB of columns has room in 4 GiB; 3 GiB of columns has not
    assert not memory_cap.memory_capped(1 << 30)
    assert memory_cap.memory_capped(3 << 30)


def _status(monkeypatch, **counts: int) -> None:
    monkeypatch.setattr(memory_cap, "_own_status", lambda: dict(counts))


def test_no_limit_leaves_no_room_to_count(monkeypatch, tmp_path, no_rlimit) -> None:
    monkeypatch.setattr(memory_cap, "_PROC_CGROUP", tmp_path / "missing")
    assert memory_cap.room_beside_files() is None


def test_a_cgroup_s_room_is_its_limit_less_the_process_s_own_memory(
    monkeypatch, tmp_path, no_rlimit
) -> None:
    _cgroup(monkeypatch, tmp_path, "0::/pod\n", {"v2/pod/memory.max": str(2 << 30)})
    _status(monkeypatch, RssAnon=300 << 20, VmData=900 << 20)
    assert memory_cap.room_beside_files() == (2 << 30) - (300 << 20)


def test_a_data_segment_limit_s_room_is_what_the_segment_has_left(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(memory_cap, "_PROC_CGROUP", tmp_path / "missing")
    limits = {resource.RLIMIT_DATA: (1 << 30, resource.RLIM_INFINITY)}
    # an address-space limit counts mapped files as well: it leaves them no room apart
    limits[resource.RLIMIT_AS] = (1 << 20, resource.RLIM_INFINITY)
    monkeypatch.setattr(
        resource, "getrlimit", lambda which: limits.get(which, (resource.RLIM_INFINITY,) * 2)
    )
    _status(monkeypatch, VmData=400 << 20, RssAnon=100 << 20)
    assert memory_cap.room_beside_files() == (1 << 30) - (400 << 20)
    # both: the tighter
    _cgroup(monkeypatch, tmp_path, "0::/pod\n", {"v2/pod/memory.max": str(600 << 20)})
    assert memory_cap.room_beside_files() == 500 << 20
    # a process already over its limit has no room, not a negative one
    _status(monkeypatch, VmData=2 << 30, RssAnon=100 << 20)
    assert memory_cap.room_beside_files() == 0
