"""``python -m ttsq``: the client's command line (:mod:`ttsq.client.cli`), and the operator's commands
that talk to Redis directly (``keys``, ``dead-letters``: :mod:`ttsq.runtime.admin`), which read the
process settings."""

import sys

ADMIN_COMMANDS = ("keys", "dead-letters")

if len(sys.argv) > 1 and sys.argv[1] in ADMIN_COMMANDS:
    from settings import get_settings
    from ttsq.domain.ssrf import SsrfGuard
    from ttsq.runtime import admin
    from ttsq.runtime.deliverer import system_resolver

    settings = get_settings()
    guard = SsrfGuard(settings.webhook_allow_list(), resolver=system_resolver, resolve_timeout_s=settings.webhook_resolve_timeout_s)
    callbacks = admin.Callbacks(guard, configured=settings.webhook_config() is not None)
    sys.exit(admin.main(sys.argv[1:], settings.redis_config(), settings.queue_config(), callbacks))

from ttsq.client.cli import main  # noqa: E402 - the client needs none of the above

sys.exit(main())
