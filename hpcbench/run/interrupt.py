"""Stopping a run cleanly: SIGINT / SIGTERM (and SLURM's ``--signal``) end every process of it.

A task is a tree of processes that do not stay in one process group: papermill's
Jupyter kernel and ``torchrun`` each start their own session, and when the kernel
dies its ``torchrun`` is re-parented. Killing "our children" or "our group" therefore
misses ranks that go on writing records after hpcbench has exited. The guard below:

* makes this process a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so orphaned
  descendants are re-parented to it, not to PID 1, and stay in its process tree;
* marks every process of the run with an environment variable (:data:`RUN_TOKEN_ENV`),
  inherited through papermill, the kernel, torchrun and srun, so a process that
  escaped the tree anyway is still found in ``/proc``;
* on the first signal: stops launching (:attr:`Stop.requested`), sends SIGTERM to the
  whole tree at once, then SIGKILL to what is left after a grace period; the backends
  see the flag, cancel their SLURM jobs and mark the running tasks ``interrupted``;
* on a second signal: SIGKILL at once, fire the cancel commands, exit ``128 + signal``.

Signal handlers can only be installed in the main thread; elsewhere (a library call
from a thread) the guard is inert and Python's default behaviour stays.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Callable, Iterable

import psutil

RUN_TOKEN_ENV = "HPCBENCH_RUN_TOKEN"
#: Signals that stop a run. SIGUSR1 is what ``sbatch --signal=B:USR1@120`` sends before
#: the time limit; SIGTERM is what scancel and SLURM's time limit send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
#: Seconds between SIGTERM and SIGKILL. SLURM's KillWait is 30 s by default (5 s on the
#: emulated cluster), so the guard must finish well inside it.
GRACE_S = 3.0
_PR_SET_CHILD_SUBREAPER = 36


class RunInterrupted(Exception):
    """A run stopped by a signal; carries the task statuses as they ended."""

    def __init__(self, signum: int, statuses: list | None = None, run_dir=None):
        self.signum = signum
        self.statuses = statuses or []
        self.run_dir = run_dir
        super().__init__(f"interrupted by {signal_name(signum)}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Stop:
    """What the backends look at: was a stop asked for, by which signal, when."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None
        self.at: str | None = None
        #: Commands fired (not awaited) on a hard kill, e.g. ``scancel JOB...``.
        self.cancel_commands: list[list[str]] = []
        #: Called once the run's processes are terminated, e.g. to record a task as
        #: interrupted at once: under SLURM, SIGKILL follows SIGTERM after KillWait, and
        #: papermill may take longer than that to notice its kernel is gone.
        self.on_stopped: list[Callable[[], None]] = []

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signum: int) -> None:
        from hpcbench.run.rundir import now

        if not self._event.is_set():
            self.signum, self.at = signum, now()
            self._event.set()

    def reason(self) -> str:
        return f"interrupted by {signal_name(self.signum or signal.SIGINT)} at {self.at}"


def become_subreaper(on: bool = True) -> bool:
    """Make orphaned descendants re-parent to this process (Linux only; False elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def run_processes(token: str, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Processes of this run: descendants of this process, and any process carrying ``token``."""
    me = psutil.Process()
    skip = set(exclude)
    found: dict[int, psutil.Process] = {}
    try:
        for p in me.children(recursive=True):
            if p.pid not in skip:
                found[p.pid] = p
    except psutil.Error:
        pass
    for p in psutil.process_iter():
        if p.pid in found or p.pid == me.pid or p.pid in skip:
            continue
        try:
            if p.environ().get(RUN_TOKEN_ENV) == token:
                found[p.pid] = p
        except (psutil.Error, OSError):
            continue  # gone, a zombie, or not ours to read
    return list(found.values())


def terminate(procs: list[psutil.Process], grace_s: float = GRACE_S) -> None:
    """SIGTERM every process at once, SIGKILL the survivors after ``grace_s``, reap our children."""
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


class SignalGuard:
    """Install the stop handlers for the duration of a run (see the module docstring).

    Usage::

        with SignalGuard() as stop:
            ... backends poll stop.requested ...
        if stop.requested: raise RunInterrupted(stop.signum, statuses)
    """

    def __init__(self, *, grace_s: float = GRACE_S):
        self.stop = Stop()
        self.grace_s = grace_s
        # Always a fresh token: a task started by SLURM inherits its runner's token, and
        # on a shared node another task of the same run must not be taken for its own.
        self.token = uuid.uuid4().hex
        self._old: dict[int, object] = {}
        self._old_token: str | None = None
        self._preexisting: set[int] = set()
        self._terminator: threading.Thread | None = None
        self.active = False

    def __enter__(self) -> Stop:
        if threading.current_thread() is not threading.main_thread():
            return self.stop
        self.active = True
        # Children this process had before the run (e.g. a notebook's other work) are not the run's.
        self._preexisting = {p.pid for p in psutil.Process().children(recursive=True)}
        self._old_token = os.environ.get(RUN_TOKEN_ENV)
        os.environ[RUN_TOKEN_ENV] = self.token
        become_subreaper()
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._handle)
        return self.stop

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        if self._terminator is not None:
            self._terminator.join()
        for sig, old in self._old.items():
            signal.signal(sig, old)
        become_subreaper(False)  # a library caller (a notebook, pytest) gets its process back as it was
        if self._old_token is None:
            os.environ.pop(RUN_TOKEN_ENV, None)
        else:
            os.environ[RUN_TOKEN_ENV] = self._old_token
        self.active = False

    # -- the handler runs in the main thread between two bytecodes -------------
    def _handle(self, signum: int, frame) -> None:
        if self.stop.requested:
            self._hard_kill(signum)
            return
        self.stop.request(signum)
        print(f"\nhpcbench: {signal_name(signum)} received: stopping the run "
              f"(terminating its processes; a second signal kills at once)", file=sys.stderr, flush=True)
        # The termination waits up to the grace period; a thread keeps the main
        # thread free to take a second signal meanwhile.
        self._terminator = threading.Thread(target=self._terminate, name="hpcbench-stop", daemon=True)
        self._terminator.start()

    def _terminate(self) -> None:
        terminate(run_processes(self.token, self._preexisting), self.grace_s)
        for hook in list(self.stop.on_stopped):
            try:
                hook()
            except Exception as exc:  # noqa: BLE001 - a hook must not keep the others from running
                print(f"hpcbench: while stopping: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def _hard_kill(self, signum: int) -> None:
        for p in run_processes(self.token, self._preexisting):
            try:
                p.kill()
            except psutil.Error:
                pass
        for cmd in self.stop.cancel_commands:
            try:
                subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError:
                pass
        from hpcbench.run.lock import release_all

        release_all()
        print(f"hpcbench: second signal ({signal_name(signum)}): killed every process of the run",
              file=sys.stderr, flush=True)
        os._exit(128 + signum)


@functools.cache
def quiet_shutdown_kernel_manager() -> type:
    """The Jupyter kernel manager to run a task's notebook with: its shutdown sends the kernel no SIGINT.

    jupyter_client starts every graceful shutdown by interrupting the kernel, SIGINT to the
    kernel's whole process group, in case a cell still runs. Once papermill shuts the kernel down
    the notebook has ended and nothing runs that a SIGINT should stop; the signal only reaches
    whatever is mid-way: a kernel finishing its last message prints ``[IPKernelApp] ERROR |
    KeyboardInterrupt caught in kernel.`` on the user's terminal, and a process the notebook left
    in that group a traceback. Without it the shutdown is the rest of jupyter_client's sequence:
    the shutdown request, then SIGTERM, then SIGKILL. What the notebook left in the kernel's
    process group, which the SIGINT used to end, gets a SIGTERM once the kernel is gone: it ends
    as quietly as the kernel. A stopped run never relies on any of it: :class:`SignalGuard` ends
    the kernel and its descendants itself.

    A function, not a module-level class: jupyter_client costs a third of a second to import,
    which every ``hpcbench`` command would pay.

    Returns:
        A subclass of ``jupyter_client.manager.AsyncKernelManager`` (nbclient's default), for
        ``papermill.execute_notebook(..., kernel_manager_class=...)``.
    """
    from jupyter_client.manager import AsyncKernelManager

    class QuietShutdownKernelManager(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:  # set by shutdown_kernel before it interrupts
                return
            await super()._async_interrupt_kernel()

        interrupt_kernel = _async_interrupt_kernel

        async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
            pgid = getattr(self.provisioner, "pgid", None)
            await super()._async_shutdown_kernel(now=now, restart=restart)
            if pgid and not restart:
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass  # the group is empty: nothing was left behind

        shutdown_kernel = _async_shutdown_kernel

    return QuietShutdownKernelManager


def wait_until(predicate, timeout_s: float, interval_s: float = 0.5) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passed; return its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
