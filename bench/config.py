"""What one benchmark run is configured with (parsed once from the command line, then passed down)."""

from __future__ import annotations

from dataclasses import dataclass

PHASES = ("enqueue-batch", "enqueue-single", "process", "latency")
BACKENDS = ("sqlite", "postgres", "memory")


@dataclass(frozen=True, slots=True)
class WorkerSetting:
    """How the jobs are worked: ``processes`` worker processes, each with these jobengine options."""

    processes: int
    concurrency: int
    fetch_batch: int  # 0: as many as there are free slots
    poll_interval: float
    lease_seconds: float = 30.0
    prefetch: int | None = None  # jobs claimed beyond the free slots; None: the product's default
    loop: str = "asyncio"  # the worker processes' event loop: asyncio (the product's), or uvloop to compare
    #: The workers' log level: ``warning`` keeps job lines out; ``info`` writes the job lines that
    #: ``jobengine worker`` writes at its defaults, through the command line's own handler.
    log_level: str = "warning"

    @property
    def label(self) -> str:
        ahead = "" if self.prefetch is None else f", prefetch {self.prefetch}"
        loop = "" if self.loop == "asyncio" else f", {self.loop} loop"
        logs = "" if self.log_level == "warning" else f", log {self.log_level}"
        return (
            f"{self.processes}x{self.concurrency}, fetch {self.fetch_batch or 'auto'}{ahead}, "
            f"poll {self.poll_interval:g}s{loop}{logs}"
        )


@dataclass(frozen=True, slots=True)
class BenchConfig:
    backend: str
    dsn: str | None
    n: int
    runs: int
    chunk: int
    phases: tuple[str, ...]
    settings: tuple[WorkerSetting, ...]  # compared against each other, runs interleaved
    rate: float
    duration: float
    warmup_jobs: int
    idle_after_warmup: float
    synchronous: str
    ceiling_commits: int
    ceilings: bool
    tmpdir: str | None
    timeout: float  # per waiting step (all completions, drained store)
    profile_dir: str | None
    profile_idle: bool = False
    transport: str = "database"  # database | redis | nats (bench/transports.py)
    broker_url: str | None = None  # the broker of --transport (default: its standard local port)
