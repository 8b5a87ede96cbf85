"""The worker process: ``python worker.py``. One per model replica (normally one per GPU).

Order matters: the CUDA allocator setting must be in the environment before torch is imported,
so this module sets it first and imports the engine (and torch) only afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from settings import Settings, get_settings

if TYPE_CHECKING:  # torch loads only after PYTORCH_CUDA_ALLOC_CONF is set (see _configure_process)
    from ttsq.engine import Engine


def _configure_process(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", settings.cuda_alloc_conf)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def chattts_engine(settings: Settings) -> Engine:
    """The production engine: real ChatTTS, wrapped for fault injection only when a test asks."""
    from ttsq.engine import ChatTTSEngine
    from ttsq.faults import FaultInjectingEngine
    from ttsq.tiny_checkpoint import build_tiny_checkpoint

    if settings.model == "tiny":
        build_tiny_checkpoint(settings.tiny_checkpoint_dir)
    engine: Engine = ChatTTSEngine(settings.engine_config())
    if settings.fault_mode != "none":
        logging.getLogger("ttsq.worker").warning(
            "FAULT INJECTION is on: mode=%s match=%r", settings.fault_mode, settings.fault_match
        )
        engine = FaultInjectingEngine(engine, settings.fault_config())
    return engine


async def _main(settings: Settings, make_engine: Callable[[Settings], Engine]) -> bool:
    from ttsq.cache import ResultCache
    from ttsq.queue import JobQueue, check_eviction_policy
    from ttsq.redis_conn import create_redis
    from ttsq.worker import Worker, WorkerConfig

    log = logging.getLogger("ttsq.worker")
    engine = make_engine(settings)

    redis = create_redis(settings.redis_config())
    try:
        warning = await check_eviction_policy(redis)
    except Exception as exc:  # noqa: BLE001 - the worker waits out a Redis outage
        warning = f"cannot reach Redis at start-up ({exc}); will keep retrying"
    if warning:
        log.warning(warning)
        if settings.require_noeviction and "maxmemory-policy is" in warning:
            raise SystemExit(warning)

    cache_redis_config = settings.cache_redis_config()
    cache_redis = create_redis(cache_redis_config) if cache_redis_config else redis
    worker = Worker(
        JobQueue(redis, settings.queue_config()),
        engine,
        WorkerConfig(
            worker_id=settings.worker_id,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            reap_interval_s=settings.reap_interval_s,
            job_timeout_s=settings.job_timeout_s,
            shutdown_grace_s=settings.shutdown_grace_s,
            health_host=settings.worker_health_host,
            health_port=settings.worker_health_port,
            max_batch=settings.max_batch,
            batch_wait_ms=settings.batch_wait_ms,
            oom_recover_s=settings.oom_recover_s,
        ),
        cache=ResultCache(cache_redis, settings.cache_config()),
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.request_stop)
    log.info("worker %s starting (model=%s)", settings.worker_id, settings.model)
    try:
        return await worker.run()
    finally:
        await redis.aclose()
        if cache_redis is not redis:
            await cache_redis.aclose()


def main(make_engine: Callable[[Settings], Engine] = chattts_engine) -> None:
    """Run a worker. Benchmarks pass another ``make_engine`` (a labelled fixed-cost stand-in)."""
    settings = get_settings()
    _configure_process(settings)
    import uvloop

    from ttsq.engine import ModelLoadError

    try:
        clean = uvloop.run(_main(settings, make_engine))
    except ModelLoadError as exc:
        logging.getLogger("ttsq.worker").error("cannot load the model: %s", exc)
        logging.shutdown()
        sys.exit(1)
    logging.getLogger("ttsq.worker").info("worker stopped%s", "" if clean else " (left an inference running)")
    logging.shutdown()
    sys.stdout.flush()
    # An abandoned inference thread cannot be interrupted: exit without joining it. Its job
    # stays leased until the lease lapses, then the reaper requeues it.
    os._exit(0)


if __name__ == "__main__":
    main()
