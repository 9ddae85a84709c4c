"""Start-up checks of the demo server that need neither a model nor a port."""

from __future__ import annotations

import pytest

from caffetool.demo import launcher
from caffetool.errors import ConfigError


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "localhost"])
def test_loopback_hosts_get_no_warning(host):
    assert launcher.network_warning(host) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "demo.example.org"])
def test_every_other_host_is_warned_about(host):
    assert launcher.network_warning(host) == (
        f"Warning: --host {host} makes the demo reachable from the network, with no authentication; "
        "--host 127.0.0.1 keeps it on this machine")


@pytest.mark.parametrize("port", [-1, 0, 65536, 99999])
def test_ports_outside_1_to_65535_are_refused(port):
    with pytest.raises(ConfigError, match=rf"^--port must be a TCP port from 1 to 65535, got {port}$"):
        launcher.check_port(port)


@pytest.mark.parametrize("port", [1, 8000, 65535])
def test_ports_inside_are_accepted(port):
    launcher.check_port(port)


def test_uvicorn_gets_the_deadline_protocol_and_the_keep_alive_time():
    options = launcher.uvicorn_options("127.0.0.1", 8000)
    assert options["http"].__name__ == "DeadlineProtocol" and options["timeout_keep_alive"] == 5
