"""The worker process: ``python worker.py``. One per model replica (normally one per GPU).

Order matters: the CUDA allocator setting (``CUDA_ALLOC_CONF``, exported as PYTORCH_ALLOC_CONF, or
PYTORCH_CUDA_ALLOC_CONF before torch 2.9) must be in the environment before torch is imported, so
this module sets it first and imports the engine (and torch) only afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from pydantic import ValidationError

from settings import Settings, get_settings, startup_warnings
from ttsq.runtime.clock_skew import skew_host_clock
from ttsq.runtime.launch import CONFIG_ERROR_EXIT
from ttsq.runtime.logs import configure_logging

if TYPE_CHECKING:  # torch loads only after the allocator setting is exported (see _configure_process)
    from ttsq.inference.base import Engine

log = logging.getLogger("ttsq.worker")


def _configure_process(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    skew_host_clock(settings.fault_clock_skew_s, log)  # a test's drifted host; nothing but tests sets it
    for warning in startup_warnings():
        log.warning(warning)
    os.environ.setdefault(_alloc_conf_variable(), settings.cuda_alloc_conf)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _alloc_conf_variable() -> str:
    """torch 2.9 renamed PYTORCH_CUDA_ALLOC_CONF to PYTORCH_ALLOC_CONF (and warns about the old name)."""
    try:
        major, minor = (int(part) for part in version("torch").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return "PYTORCH_CUDA_ALLOC_CONF"
    return "PYTORCH_ALLOC_CONF" if (major, minor) >= (2, 9) else "PYTORCH_CUDA_ALLOC_CONF"


def chattts_engine(settings: Settings) -> Engine:
    """The production engine (:func:`ttsq.inference.engines.factory.build_engine`: ChatTTS's model decoded by ttsq, or by
    ChatTTS itself with ``ENGINE_BACKEND=chattts``), wrapped for fault injection only when a test asks; ``MODEL=tiny``
    builds its checkpoint first."""
    from ttsq.inference.engines.checkpoint import build_tiny_checkpoint
    from ttsq.inference.engines.factory import build_engine

    if settings.model == "tiny":
        build_tiny_checkpoint(settings.tiny_checkpoint_dir)
    faults = settings.fault_config() if settings.fault_mode != "none" else None
    return build_engine(settings.engine_config(), settings.backend_config(), faults)


async def _main(settings: Settings, make_engine: Callable[[Settings], Engine]) -> bool:
    from ttsq.runtime.worker import Worker
    from ttsq.store.cache import ResultCache
    from ttsq.store.connection import create_redis, verify_redis
    from ttsq.store.queue import JobQueue

    engine = make_engine(settings)
    redis = create_redis(settings.redis_config())
    await verify_redis(redis, require_noeviction=settings.require_noeviction, warn=log.warning)
    cache_redis_config = settings.cache_redis_config()
    cache_redis = create_redis(cache_redis_config) if cache_redis_config else redis
    worker = Worker(
        JobQueue(redis, settings.queue_config()),
        engine,
        settings.worker_config(),
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
    """Run a worker. Benchmarks pass another ``make_engine`` (a labelled fixed-cost stand-in).

    A configuration error — settings that do not validate, a model that cannot be loaded, a Redis that may
    evict — exits with :data:`~ttsq.runtime.launch.CONFIG_ERROR_EXIT` after saying why, so a supervisor can
    tell it from a crash (restarting cannot fix it). Anything else that ends the process (an exception, a
    signal, the OOM killer) is a crash, which a supervisor restarts.
    """
    try:
        settings = get_settings()
    except ValidationError as exc:  # before logging is set up: it is configured from these settings
        print(f"ttsq worker: configuration error: invalid settings: {exc}", file=sys.stderr, flush=True)
        sys.exit(CONFIG_ERROR_EXIT)
    _configure_process(settings)
    import uvloop

    from ttsq.inference.base import ModelLoadError
    from ttsq.store.connection import UnsafeRedisError

    try:
        clean = uvloop.run(_main(settings, make_engine))
    except ModelLoadError as exc:
        log.error("configuration error: cannot load the model: %s", exc)
        logging.shutdown()
        sys.exit(CONFIG_ERROR_EXIT)
    except UnsafeRedisError as exc:
        log.error("configuration error: refusing to start (REQUIRE_NOEVICTION): %s", exc)
        logging.shutdown()
        sys.exit(CONFIG_ERROR_EXIT)
    log.info("worker stopped%s", "" if clean else " (left an inference running)")
    logging.shutdown()
    sys.stdout.flush()
    # An abandoned inference thread cannot be interrupted: exit without joining it. Its job
    # stays leased until the lease lapses, then the sweep requeues it.
    os._exit(0)


if __name__ == "__main__":
    main()
