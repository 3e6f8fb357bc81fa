"""systemd's notify protocol (sd_notify), without libsystemd: one datagram to $NOTIFY_SOCKET.

`Type=notify` units learn readiness (READY=1), liveness (WATCHDOG=1 within WatchdogSec), status
lines and an orderly stop (STOPPING=1). Outside systemd (no NOTIFY_SOCKET) every call is a no-op.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, env=None):
        env = os.environ if env is None else env
        addr = env.get("NOTIFY_SOCKET") or ""
        if addr.startswith("@"):  # abstract namespace socket
            addr = "\0" + addr[1:]
        self.address = addr or None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        self.watchdog_s = int(usec) / 1e6 if usec and usec.isdigit() and (not pid or pid == str(os.getpid())) else None
        self.sent = 0
        self.errors = 0

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, **fields) -> bool:
        """Send KEY=value lines (e.g. notify(READY=1, STATUS="ok")). False when not sent."""
        if not self.address:
            return False
        msg = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.connect(self.address)
                s.sendall(msg)
        except OSError:
            self.errors += 1  # systemd not listening (any more): never fatal to the daemon
            return False
        self.sent += 1
        return True

    def ready(self, status=""):
        return self.notify(READY=1, STATUS=status) if status else self.notify(READY=1)

    def watchdog(self, status=""):
        return self.notify(WATCHDOG=1, STATUS=status) if status else self.notify(WATCHDOG=1)

    def stopping(self, status=""):
        return self.notify(STOPPING=1, STATUS=status) if status else self.notify(STOPPING=1)
