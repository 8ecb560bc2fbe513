"""What `stab watch` does about an alert besides printing it: a command, a webhook, a signal
to the training job, a sentinel file. Each failure is one line; the watch goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from stabilitycli.core.records import dataclass
from stabilitycli.watch.alerts import Alert

# seconds a hook may take: a stuck receiver or command must not stop the watch
COMMAND_TIMEOUT_S = 30.0
WEBHOOK_TIMEOUT_S = 10.0


@dataclass
class Hooks:
    on_alert: str | None = None  # a shell command, the alert's JSON on its stdin
    webhook: str | None = None  # a URL the alert is POSTed to
    stop_pid: int | None = None
    stop_signal: signal.Signals = signal.SIGTERM
    touch: Path | None = None

    @property
    def any(self) -> bool:
        return any(x is not None for x in (self.on_alert, self.webhook, self.stop_pid, self.touch))

    def act(self, alert: Alert, say: Callable[[str], None]) -> None:
        """Every hook given, in the order: sentinel, command, webhook, signal."""
        document = json.dumps(alert.to_dict(), allow_nan=False, default=str)
        if self.touch is not None:
            self._touch(document, say)
        if self.on_alert:
            self._command(document, say)
        if self.webhook:
            self._post(alert, say)
        if self.stop_pid is not None:
            self._stop(alert, say)

    def _touch(self, document: str, say: Callable[[str], None]) -> None:
        assert self.touch is not None
        try:
            # written whole under another name, then renamed: a trainer polling the file never
            # reads half of it
            part = self.touch.with_name(self.touch.name + ".part")
            part.write_text(document + "\n")
            os.replace(part, self.touch)
            say(f"--touch: wrote {self.touch}")
        except OSError as err:
            say(f"--touch {self.touch}: {err.strerror or err}")

    def _command(self, document: str, say: Callable[[str], None]) -> None:
        assert self.on_alert is not None
        try:
            done = subprocess.run(
                self.on_alert,
                shell=True,  # the user's own command line, as a shell would run it
                input=document.encode(),
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            say(f"--on-alert: the command ran past {COMMAND_TIMEOUT_S:g} s; stopped it")
            return
        except OSError as err:
            say(f"--on-alert: could not run the command: {err.strerror or err}")
            return
        if done.returncode != 0:
            say(f"--on-alert: the command exited {done.returncode}")

    def _post(self, alert: Alert, say: Callable[[str], None]) -> None:
        assert self.webhook is not None
        # Slack reads `text`; the alert's fields go beside it for any other receiver
        body = json.dumps({"text": alert.line(), **alert.to_dict()}, default=str).encode()
        request = urllib.request.Request(
            self.webhook,
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
                response.read()
        except urllib.error.HTTPError as err:
            say(f"--webhook: the receiver answered HTTP {err.code}")
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", None) or err
            say(f"--webhook: could not post the alert: {reason}")

    def _stop(self, alert: Alert, say: Callable[[str], None]) -> None:
        assert self.stop_pid is not None
        name = self.stop_signal.name
        try:
            os.kill(self.stop_pid, self.stop_signal)
        except ProcessLookupError:
            say(f"--stop-pid: no process {self.stop_pid} (already ended?)")
            return
        except PermissionError:
            say(f"--stop-pid: not allowed to signal process {self.stop_pid}")
            return
        event = f"{alert.code} at step {alert.step}"
        say(f"--stop-pid: sent {name} to process {self.stop_pid} ({event})")
