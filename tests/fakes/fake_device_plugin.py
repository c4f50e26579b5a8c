# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake NVIDIA device plugin for a REAL kubelet's device manager (deviceplugin v1beta1, gRPC).

    python fake_device_plugin.py --config FAKE_NVML_CONFIG --devdir DIR [--dp-dir DIR] [--resource NAME]
                                 [--reregister-delay SECONDS] [--health]

It advertises ``nvidia.com/gpu`` with the GPU UUIDs of the fake-NVML config file
(tests/fakes/fakenode.py's format: the file the node's fake libnvidia-ml.so.1 reads, so NVML and
kubelet agree on the UUIDs, and a "replaced GPU" written there changes both at the plugin's next
start). Like the real plugin's ``--pass-device-specs``, ``Allocate`` returns
``NVIDIA_VISIBLE_DEVICES=<uuids>`` and one DeviceSpec per GPU whose host node is
``DIR/<uuid>`` (a character device, a /dev/null twin) at ``/dev/nvidiaN``. The nodes of GPUs no
longer in the config are removed, so a container started with a gone GPU's cached allocation fails
the way a real one does (``CreateContainerError``).

With ``--health`` it runs the real plugin's health loop (k8s-device-plugin ``internal/rm/health.go``,
``runEventMonitor``) through unmodified pynvml on the node's (fake) NVML: an event set with the XID-critical
and ECC events registered for each GPU, waited on; an XID critical error that is not an application error
(13, 31, 43, 45, 68, 109: the list upstream ignores) marks that GPU ``Unhealthy``, and ListAndWatch sends
kubelet the new list, so the real kubelet lowers the node's allocatable. As upstream, nothing marks a GPU
Healthy again but a new plugin process (its FIXME; k8s-device-plugin#1014). A failed wait marks every GPU
Unhealthy, as upstream does.

kubelet removes every socket in its device-plugin directory when it starts and recreates
``kubelet.sock``: the plugin watches that socket's inode and registers again, as the real
plugin does (it watches with fsnotify). Runs until SIGTERM.

Whether kubelet, restarted, admits the pods it already runs before or after the plugin registers
again decides their fate (field report 000's pods were admitted first: UnexpectedAdmissionError).
kubelet admits them about 50 ms after it serves ``kubelet.sock``; this plugin polls every 0.5 s, so
both orders happened in CI. ``--reregister-delay`` (the node's tests: 2 s, ``hack/kube-node.sh``)
waits that long before registering again, which makes the field report's order the test's, not a
coin toss. The first registration is not delayed.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import stat
import sys
import threading
from concurrent import futures

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet_grpc  # noqa: E402  pylint: disable=wrong-import-position

pb, rpc, dummy, dummy2 = kubelet_grpc.load()
log = logging.getLogger("fake-device-plugin")
SOCKET_NAME = "gpuops-fake-nvidia.sock"


def read_uuids(config):
    """The GPU UUIDs of a fake-NVML config, in order (``gpu|<uuid>|...`` lines)."""
    with open(config) as handle:
        return [line.split("|")[1] for line in handle.read().splitlines() if line.startswith("gpu|")]


# upstream's hard-coded application XIDs (internal/rm/health.go getDisabledHealthCheckXids): the GPU stays healthy
APPLICATION_XIDS = frozenset((13, 31, 43, 45, 68, 109))


class Health:
    """The GPUs' health as this plugin process sees it: all Healthy at its start; ``unhealthy`` only grows."""

    def __init__(self):
        self.unhealthy = set()
        self.changed = threading.Condition()
        self.generation = 0

    def mark(self, uuids, why):
        with self.changed:
            new = set(uuids) - self.unhealthy
            if new:
                self.unhealthy |= new
                self.generation += 1
                log.info("%s: marking %s Unhealthy", why, sorted(new))
                self.changed.notify_all()

    def devices(self, uuids):
        return [pb.Device(ID=u, health="Unhealthy" if u in self.unhealthy else "Healthy") for u in uuids]


def health_loop(health, uuids, done):
    """upstream's runEventMonitor, in pynvml: register XID-critical and ECC events for each GPU, then wait."""
    # only the --health plugin needs the NVML library
    import pynvml  # pylint: disable=import-outside-toplevel

    pynvml.nvmlInit()
    try:
        events = pynvml.nvmlEventSetCreate()
        by_handle = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if uuid not in uuids:
                continue
            supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
            wanted = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError | pynvml.nvmlEventTypeSingleBitEccError
            pynvml.nvmlDeviceRegisterEvents(handle, wanted & supported, events)
            by_handle[ctypes.cast(handle, ctypes.c_void_p).value] = uuid
        log.info("health: events registered for %s", sorted(by_handle.values()))
        while not done.is_set():
            try:
                event = pynvml.nvmlEventSetWait_v2(events, 1000)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as exc:
                health.mark(uuids, "error waiting for an event (%s)" % exc)
                continue
            if event.eventType != pynvml.nvmlEventTypeXidCriticalError or event.eventData in APPLICATION_XIDS:
                log.info("health: skipping event type 0x%x data %d", event.eventType, event.eventData)
                continue
            uuid = by_handle.get(ctypes.cast(event.device, ctypes.c_void_p).value)
            if uuid is None:
                log.info("health: ignoring an event for an unexpected device")
                continue
            log.info("XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy.", event.eventData, uuid)  # upstream's words, every event
            health.mark([uuid], "XID %d" % event.eventData)
        pynvml.nvmlEventSetFree(events)
    finally:
        pynvml.nvmlShutdown()


class Plugin(rpc.DevicePluginServicer):
    def __init__(self, uuids, devdir, health):
        self.uuids = uuids
        self.devdir = devdir
        self.health = health
        self.stopped = threading.Event()

    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions()

    def ListAndWatch(self, request, context):
        with self.health.changed:
            sent, devices = self.health.generation, self.health.devices(self.uuids)
        log.info("ListAndWatch: %s", [(d.ID, d.health) for d in devices])
        yield pb.ListAndWatchResponse(devices=devices)
        while context.is_active() and not self.stopped.is_set():
            with self.health.changed:
                self.health.changed.wait(1)
                if self.health.generation == sent:
                    continue
                sent, devices = self.health.generation, self.health.devices(self.uuids)
            log.info("ListAndWatch: %s", [(d.ID, d.health) for d in devices])
            yield pb.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        return pb.PreferredAllocationResponse()

    def Allocate(self, request, context):
        reply = pb.AllocateResponse()
        for want in request.container_requests:
            ids = list(want.devicesIDs)
            unknown = [i for i in ids if i not in self.uuids]
            if unknown:
                log.warning("Allocate of unknown devices %s", unknown)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown device(s) %s" % unknown)
            log.info("Allocate %s", ids)
            reply.container_responses.append(pb.ContainerAllocateResponse(
                envs={"NVIDIA_VISIBLE_DEVICES": ",".join(ids)},
                devices=[pb.DeviceSpec(container_path="/dev/nvidia%d" % n, host_path=os.path.join(self.devdir, i), permissions="rw")
                         for n, i in enumerate(ids)]))
        return reply

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()


def make_device_nodes(devdir, uuids):
    os.makedirs(devdir, exist_ok=True)
    for name in os.listdir(devdir):
        if name not in uuids:
            os.unlink(os.path.join(devdir, name))
            log.info("removed the device node of %s (not in the config: a replaced GPU)", name)
    for uuid in uuids:
        path = os.path.join(devdir, uuid)
        if not os.path.exists(path):
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))


def serve_and_register(args, uuids, health):
    sock = os.path.join(args.dp_dir, SOCKET_NAME)
    if os.path.exists(sock):
        os.unlink(sock)
    plugin = Plugin(uuids, args.devdir, health)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    rpc.add_DevicePluginServicer_to_server(plugin, server)
    server.add_insecure_port("unix://" + sock)
    server.start()
    try:
        with grpc.insecure_channel("unix://" + os.path.join(args.dp_dir, "kubelet.sock")) as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            rpc.RegistrationStub(channel).Register(pb.RegisterRequest(
                version="v1beta1", endpoint=SOCKET_NAME, resource_name=args.resource, options=pb.DevicePluginOptions()), timeout=10)
    except Exception:
        plugin.stopped.set()
        server.stop(0)
        raise
    log.info("registered %s with kubelet: %s", args.resource, uuids)
    return plugin, server


def inode(path):
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the fake-NVML config (GPUOPS_FAKE_NVML_CONFIG)")
    parser.add_argument("--devdir", required=True, help="where the GPUs' device nodes are made")
    parser.add_argument("--dp-dir", default="/var/lib/kubelet/device-plugins", help="kubelet's device-plugin directory")
    parser.add_argument("--resource", default="nvidia.com/gpu")
    parser.add_argument("--reregister-delay", type=float, default=0.0, metavar="SECONDS",
                        help="after kubelet recreates kubelet.sock, wait this long before registering again")
    parser.add_argument("--health", action="store_true",
                        help="run the real plugin's health loop on NVML's XID events (needs the NVML library and its config)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    uuids = read_uuids(args.config)
    make_device_nodes(args.devdir, uuids)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    signal.signal(signal.SIGINT, lambda *a: done.set())
    health = Health()
    if args.health:
        threading.Thread(target=health_loop, args=(health, uuids, done), name="health", daemon=True).start()
    plugin = server = None
    registered_at, delayed = None, False
    kubelet_sock = os.path.join(args.dp_dir, "kubelet.sock")
    while not done.is_set():
        current = inode(kubelet_sock)
        if current is not None and (current != registered_at or not os.path.exists(os.path.join(args.dp_dir, SOCKET_NAME))):
            if registered_at is not None and not delayed and args.reregister_delay > 0:
                log.info("kubelet restarted: registering again in %.1f s", args.reregister_delay)
                delayed = True
                done.wait(args.reregister_delay)
                continue
            if server is not None:
                plugin.stopped.set()
                server.stop(0)
                plugin = server = None
            try:
                plugin, server = serve_and_register(args, uuids, health)
                registered_at, delayed = current, False
            except Exception as exc:  # kubelet still starting: try again in a moment
                log.warning("registration failed: %s", exc)
        done.wait(0.5)
    if server is not None:
        plugin.stopped.set()
        server.stop(0)
    sock = os.path.join(args.dp_dir, SOCKET_NAME)
    if os.path.exists(sock):
        os.unlink(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
