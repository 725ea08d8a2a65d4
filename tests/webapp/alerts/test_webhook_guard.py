"""Webhooks cannot reach inside the network: every spelling of an inside address is refused beside
the field and again at sending, a real loopback receiver sees no request, the request goes to the
very address that was checked (no DNS rebinding), no redirect is followed, and an admin can allow a
network. Addresses other than loopback are only ever resolved here, never connected to: the stub
resolver answers for made-up names, and the guard refuses before any connection."""

import socket

import pytest
from django.urls import reverse

from webapp.alerts.webhook import (
    WebhookRefused,
    WebhookRejected,
    WebhookTemporaryError,
    check_destination,
    post_json,
)

NEUTRAL = ("the rules page refusing an inside address beside the webhook field (the address is checked in "
           "Python, nothing is saved); the rules page's queries are tested on both backends in "
           "tests/webapp/alerts/test_views.py")

# Loopback in every spelling the resolver reads: these would reach the test receiver if let through.
LOOPBACK_SPELLINGS = ["127.0.0.1", "localhost", "2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1",
                      "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]"]
# Inside addresses elsewhere: checked only, never sent to.
INSIDE = {"169.254.169.254": "link-local", "10.1.2.3": "private", "192.168.0.1": "private", "172.16.5.4": "private",
          "100.64.0.1": "not global", "0.0.0.0": "unspecified", "224.0.0.1": "multicast", "240.0.0.1": "reserved",
          "[fe80::1]": "link-local", "[fc00::1]": "private", "[::]": "unspecified", "[ff02::1]": "multicast",
          "[2002:a01:203::1]": "private",  # 6to4 carrying 10.1.2.3
          "012.0.0.1": "private", "167772161": "private"}  # octal 10.0.0.1, decimal 10.0.0.1


def stub_resolver(answers: dict[str, list[str]]):
    """A resolver with getaddrinfo's signature answering made-up names; real resolution otherwise."""

    def resolve(host, port, *args, **kwargs):
        if host in answers:
            family = socket.AF_INET6
            return [(family if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[host]]
        return socket.getaddrinfo(host, port, *args, **kwargs)

    return resolve


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_loopback_in_any_spelling_is_refused_and_the_receiver_hears_nothing(webhook_server, host):
    port = webhook_server.url.split(":")[2].split("/")[0]
    url = f"http://{host}:{port}/hook"
    with pytest.raises(WebhookRefused, match="inside the network \\(loopback\\)"):
        post_json(url, {"x": 1}, timeout_s=5)  # no allowed network here
    assert webhook_server.requests == []


@pytest.mark.parametrize(("host", "reason"), INSIDE.items())
def test_other_inside_addresses_are_refused_before_any_connection(host, reason):
    with pytest.raises(WebhookRefused, match=f"inside the network \\({reason}\\)"):
        check_destination(f"https://{host}/latest/meta-data/")


def test_a_name_with_one_inside_address_among_public_ones_is_refused():
    resolve = stub_resolver({"hooks.lab.test": ["93.184.216.34", "10.0.0.7"]})
    with pytest.raises(WebhookRefused, match="hooks.lab.test is 10.0.0.7"):
        check_destination("https://hooks.lab.test/x", resolve=resolve)
    assert check_destination("https://93.184.216.34/x").address == "93.184.216.34"  # a public address passes


def test_the_request_goes_to_the_address_that_was_checked_not_a_second_answer(webhook_server):
    """DNS rebinding: the name answers an allowed address first and the receiver's afterwards. The
    request connects to the checked one (nothing listens there), so the receiver hears nothing."""
    port = int(webhook_server.url.split(":")[2].split("/")[0])
    answers = iter([["127.0.0.2"], ["127.0.0.1"], ["127.0.0.1"]])

    def rebinding(host, p, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, p)) for a in next(answers)]

    with pytest.raises(WebhookTemporaryError, match="cannot connect"):
        post_json(f"http://rebind.test:{port}/hook", {"x": 1}, timeout_s=5, allowed_networks=["127.0.0.2/32"],
                  resolve=rebinding)
    assert webhook_server.requests == []
    assert next(answers) == ["127.0.0.1"]  # resolved once


def test_an_allowed_network_is_reached_and_a_redirect_is_not_followed(webhook_server):
    webhook_server.script = [200, 302]
    assert post_json(webhook_server.url, {"x": 1}, timeout_s=5, allowed_networks=["127.0.0.0/8"]) == 200
    with pytest.raises(WebhookRejected, match="HTTP 302"):
        post_json(webhook_server.url, {"x": 2}, timeout_s=5, allowed_networks=["127.0.0.0/8"])
    assert [r["json"] for r in webhook_server.requests] == [{"x": 1}, {"x": 2}]


@pytest.mark.django_db
@pytest.mark.backend_neutral(reason=NEUTRAL)
@pytest.mark.parametrize(("url", "message"), [
    ("http://localhost:8080/h", "localhost is 127.0.0.1, an address inside the network (loopback)"),
    ("http://[::ffff:127.0.0.1]/h", "inside the network (loopback)"),
    ("http://[::1]/h", "inside the network (loopback)"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254, an address inside the network (link-local)"),
    ("http://10.0.0.1/h", "inside the network (private)"),
    # Django's URL check already refuses the decimal and octal spellings of an address
    ("http://2130706433:8080/h", "Enter an http:// or https:// URL."),
    ("http://0177.0.0.1/h", "Enter an http:// or https:// URL."),
])
def test_the_rule_form_refuses_them_beside_the_field(client, owner, settings, url, message):
    from tests.webapp.alerts.test_views import defaults_post
    from webapp.alerts.models import AlertRule

    settings.COHORT_WEBHOOK_ALLOWED_NETWORKS = []
    client.force_login(owner)
    response = client.post(reverse("alerts:rules"), defaults_post({"failed-enabled": "on", "failed-webhook_url": url}))
    assert response.status_code == 400
    fieldset = response.content.decode().split('id="rule-failed"')[1].split("</fieldset>")[0]
    assert message in fieldset.replace("&#x27;", "'")
    assert not AlertRule.objects.filter(webhook_url=url).exists()
