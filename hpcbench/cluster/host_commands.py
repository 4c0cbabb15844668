"""Running host tools (ip, tc, nsenter, SLURM clients) with a timeout and a clear error.

Every call the emulated cluster makes goes through :func:`run_command`, so a hung
tool (a SLURM client waiting on a dead controller) cannot hang a test, and a
failure names the command and its stderr.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from hpcbench.core.errors import LogError

#: What to install when a system piece is missing (Debian/Ubuntu package names).
INSTALL_HINT = "apt-get install slurm-wlm munge iproute2"


class ClusterError(LogError):
    """The emulated cluster could not be built, reached or torn down.

    The message says what is missing and how to install it, or what failed and
    which log to read (``log_path``).
    """


def run_command(argv: Sequence[str], *, timeout: float = 30, check: bool = True,
                env: Mapping[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` with a timeout; raise :class:`ClusterError` on failure when ``check``.

    Args:
        argv: the command line (no shell).
        timeout: seconds before the command is killed and an error raised.
        check: raise on a non-zero exit status (otherwise return it).
        env: the full environment (default: inherit).
        input: text fed to stdin.
    Returns:
        The completed process, with text ``stdout``/``stderr``.
    """
    cmd = shlex.join(argv)
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=dict(env) if env is not None else None, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise ClusterError(f"{argv[0]} is not installed ({INSTALL_HINT})") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"`{cmd}` did not finish within {timeout:g} s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise ClusterError(f"`{cmd}` failed with exit status {proc.returncode}: {detail}")
    return proc


def log_tail(path: str | Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ('' when absent)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
