"""The ASGI guard answers 413 from the declared size, before the body is read."""

from asgiref.sync import async_to_sync

from webapp.body_limit import FORM_OVERHEAD_BYTES, BodySizeLimit


def call(app, headers):
    sent, reads = [], []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def run():
        await app({"type": "http", "path": "/admin/", "headers": headers}, receive, send)

    async_to_sync(run)()
    return sent, reads


def test_a_declared_oversize_body_is_refused_unread_and_others_pass():
    reached = []

    async def inner(scope, receive, send):
        reached.append(scope["path"])

    guard = BodySizeLimit(inner, max_bytes=1000)
    sent, reads = call(guard, [(b"content-length", str(1000 + FORM_OVERHEAD_BYTES + 1).encode())])
    assert sent[0]["status"] == 413 and b"MB limit" in sent[1]["body"] and reads == [] and reached == []
    call(guard, [(b"content-length", b"500")])
    call(guard, [(b"content-length", b"not-a-number")])
    call(guard, [])
    assert reached == ["/admin/"] * 3
