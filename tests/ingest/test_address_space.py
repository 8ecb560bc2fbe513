"""A small log is read inside a 2 GiB address space (issue 15: `ulimit -v 2G`).

The bounded read asked the OS for `max_input_bytes + 1` bytes (2 GiB by default) to see
a file that grows while read, and Python reserves what a read asks for up front: under
a 2 GiB address-space limit every log, however small, was "out of memory".
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import RUNS

LIMIT_BYTES = 2 << 30
READ = (
    "import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}));"
    "from stabilitycli import read; print(read({path!r}).frame.height)"
)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux")
@pytest.mark.parametrize("name", ["plateau", "nan-tokens-gz"])
def test_a_small_log_is_read_under_a_2_gib_address_space(name) -> None:
    log = next((RUNS / name).glob("run.jsonl*"))
    code = READ.format(limit=LIMIT_BYTES, path=str(log))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1:]
    assert int(done.stdout) > 0
