"""One long-running ClientApp process for a SuperNode started with ``--isolation process``.

Flower's SuperNode (1.41, 1.42), in its default ``--isolation subprocess`` mode,
starts a ``flower-superexec`` that starts a fresh ``flwr-clientapp``
process for every message: a Python interpreter, Flower's and fedhh's
imports and the node's experiment and shard, rebuilt for every round
(seconds of CPU, far more under load).  Started
with ``--isolation process``, the SuperNode runs no executor of its own and
waits for one to ask its Runtime API for tasks.  This is that executor, as
one process that lives as long as the node: it acquires each ClientApp
task, runs the app in this process, and sends the reply and the task's
status back, exactly as ``flwr-clientapp`` does
(``flwr.supernode.runtime.run_clientapp``).  Imports happen once, the
loaded ClientApp is kept per app bundle, and the ClientApp's own caches
(``strategies.client_app``: experiment and shard per run config) live on
across messages, so a round costs the protocol's work.

Usage, next to ``flower-supernode --isolation process --port PORT ...``::

    python -m simulations.clientapp_process --runtime-api-address 127.0.0.1:PORT --insecure

It stops on SIGTERM or SIGINT (between tasks, or after the current one),
and when the SuperNode named by ``--parent-pid`` exits.
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from flwr.app import Context, Error, Message
from flwr.cli.install import install_from_fab
from flwr.clientapp.client_app import ClientApp, LoadClientAppError
from flwr.clientapp.utils import get_load_client_app_fn
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.app_utils import start_parent_process_monitor
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

POLL_INTERVAL = 0.1  # seconds between task requests when the node has none: one loopback HTTP call each


def runtime_client(address: str, component: str, token: str | None = None) -> RuntimeHttpClient:
    """An insecure (loopback) client of the SuperNode's Runtime API, as Flower's own processes build it."""
    interceptors: list[RuntimeVersionHttpInterceptor | RuntimeTokenHttpInterceptor] = [
        RuntimeVersionHttpInterceptor(component_name=component)
    ]
    if token is not None:
        interceptors.append(RuntimeTokenHttpInterceptor(token))
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,
        root_certificates=None,
        interceptors=interceptors,
        retry_invoker=make_simple_http_retry_invoker(),
    )


class ClientAppProcess:
    """Acquire the node's ClientApp tasks one at a time and run each in this process."""

    def __init__(self, runtime_api_address: str, poll_interval: float = POLL_INTERVAL) -> None:
        self.address = runtime_api_address
        self.poll_interval = poll_interval
        self.stopping = threading.Event()
        self._apps: dict[str, ClientApp] = {}  # per app bundle (FAB hash): loaded once
        self._load = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)

    def serve(self) -> None:
        """Run tasks until :meth:`stop` is called."""
        tasks = runtime_client(self.address, "SuperExec")
        try:
            while not self.stopping.is_set():
                acquired = tasks.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]))
                if acquired.HasField("task") and acquired.token:
                    self.run_task(acquired.token)
                else:
                    self.stopping.wait(self.poll_interval)
        finally:
            tasks.close()

    def stop(self) -> None:
        self.stopping.set()

    def app(self, fab_id: str, fab_version: str, fab_hash: str, fab_content: bytes) -> ClientApp:
        """The bundle's ClientApp, installed into the Flower home and imported on first use."""
        if fab_hash not in self._apps:
            install_from_fab(fab_content, skip_prompt=True)
            self._apps[fab_hash] = self._load(fab_id, fab_version, fab_hash)
        return self._apps[fab_hash]

    def run_task(self, token: str) -> None:
        """One message, as ``flwr-clientapp`` handles it: pull, run, push the reply and the status."""
        client = runtime_client(self.address, "flwr-clientapp", token)
        heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
        heartbeat.start()
        message: Message | None = None
        context: Context | None = None
        reply: Message | None = None
        status, details = SubStatus.FAILED, "ClientApp task failed due to unknown reason"
        try:
            message, context, run, fab = pull_task_input(client)
            client_app = self.app(run.fab_id, run.fab_version, fab.hash_str, fab.content)
            reply = client_app(message=message, context=context)
            status, details = SubStatus.COMPLETED, ""
        except Exception as error:  # pylint: disable=broad-exception-caught
            # the same error reply flwr-clientapp sends: the server counts the node as failed
            code, reason = ErrorCode.CLIENT_APP_RAISED_EXCEPTION, f"{type(error)}:<'{error}'>"
            if isinstance(error, LoadClientAppError):
                code, reason = (
                    ErrorCode.LOAD_CLIENT_APP_EXCEPTION,
                    "An exception was raised when attempting to load `ClientApp`",
                )
            details = reason
            if message is not None:
                reply = Message(Error(code=code, reason=reason), reply_to=message)
        finally:
            try:
                if reply is not None and context is not None:
                    push_message(client, reply, context)
                push_task_output(client=client, context=context, sub_status=status, details=details)
            finally:
                heartbeat.stop()
                client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API, host:port")
    parser.add_argument(
        "--insecure", action="store_true", required=True, help="plain HTTP (loopback only; TLS is not supported here)"
    )
    parser.add_argument("--parent-pid", type=int, help="stop when this process (the SuperNode) exits")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=POLL_INTERVAL,
        help=f"seconds between task requests when idle (default {POLL_INTERVAL})",
    )
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        start_parent_process_monitor(args.parent_pid)
    worker = ClientAppProcess(args.runtime_api_address, args.poll_interval)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.serve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
