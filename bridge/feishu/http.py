"""The HTTP client under `FeishuClient`: httpx, with two costs of its defaults removed
(each measured in bench/feishu_client_bench.py or bench/relay_bench.py --profile): no cookie
jar, and the bytes carried by aiohttp's client (`AiohttpTransport`).

`AiohttpTransport` is an httpx transport whose calls aiohttp's client carries: `FeishuClient`
keeps httpx's API (requests, responses, timeouts, respx in tests) while the bytes go over
aiohttp's pool, C parser and writer. httpcore's pure-Python HTTP/1.1 (h11) and its anyio
locks cost about twice the CPU per call (bench/feishu_client_bench.py).

Not the `httpx-aiohttp` package: it reports a server that hung up mid-call (after the
request may have been sent) as a connect timeout, and answers a call already sent with
"never sent" semantics; here every aiohttp error keeps what it means (`_mapped`)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import aiohttp
import httpx
from yarl import URL

# How long a connection the bridge is not using stays open (Feishu closes idle ones later).
KEEPALIVE_SECONDS = 15.0
# Most bytes of a streamed body read at once (a download arrives in pieces of this size).
CHUNK_BYTES = 64 * 1024


class AiohttpTransport(httpx.AsyncBaseTransport):
    """At most `max_connections` connections, kept alive; calls beyond them wait for one,
    up to the call's pool timeout. The session is made at the first call, on the loop that
    makes it (a transport may be built before the loop runs)."""

    def __init__(self, max_connections: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self._limit = max_connections
        self._ssl = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._limit, ssl=self._ssl, keepalive_timeout=KEEPALIVE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # Feishu sets none the bridge needs
                auto_decompress=False,  # httpx decodes by Content-Encoding, as it asked
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),  # httpx's own
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        limits = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=limits.get("pool"),  # waiting for a free connection, and connecting
            sock_connect=limits.get("connect"),
            sock_read=limits.get("read"),
        )
        data: Any
        try:
            data = request.content or None
        except httpx.RequestNotRead:  # a streamed body (a multipart upload): aiohttp reads it
            assert isinstance(request.stream, httpx.AsyncByteStream)
            data = request.stream
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        with _mapped(request):
            response = await self._client().request(
                request.method,
                URL(str(request.url), encoded=True),  # httpx encoded it: no quoting again
                headers=headers,
                data=data,
                allow_redirects=False,
                timeout=timeout,
            )
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _Body(httpx.AsyncByteStream):
    """A response's body, read through aiohttp; closing it gives the connection back (httpx
    closes every response: after reading it, or when a streamed one's block ends)."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped(self._request):
            async for chunk in self._response.content.iter_chunked(CHUNK_BYTES):
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


@contextmanager
def _mapped(request: httpx.Request) -> Iterator[None]:
    """aiohttp's errors as the httpx errors that mean the same (callers catch httpx's)."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:  # before the request was sent
        raise httpx.ConnectTimeout(str(exc), request=request) from exc
    except (aiohttp.SocketTimeoutError, TimeoutError) as exc:
        raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from exc
    except aiohttp.ClientConnectorError as exc:  # refused, unreachable, TLS handshake
        raise httpx.ConnectError(str(exc), request=request) from exc
    except aiohttp.ServerDisconnectedError as exc:  # perhaps after the request was sent
        raise httpx.RemoteProtocolError(str(exc), request=request) from exc
    except aiohttp.ClientPayloadError as exc:
        raise httpx.ReadError(str(exc), request=request) from exc
    except aiohttp.ClientResponseError as exc:  # an answer that is not HTTP
        raise httpx.RemoteProtocolError(str(exc), request=request) from exc
    except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from exc
    except aiohttp.ClientError as exc:  # a reset or other socket error mid-call
        raise httpx.ReadError(str(exc), request=request) from exc


# URLs kept parsed, the least recently used let go first: a card's changes (a streamed card's
# content many times a second), a message's replies and reactions are the same URLs again and
# again, between URLs used once (a reaction's removal). 200 chats streaming at once use about
# 1,400 (three or four a card); at about 660 bytes each, the cap holds under 1.4 MB. (A cap
# under the working set parses every URL again: 512 cost 2% of the bridge's CPU there.)
PARSED_URLS = 2048

# Connections kept open to Feishu, and the most calls in flight at once; more calls wait for
# one. The call budget has already counted a waiting call, so a queue here sends calls
# bunched when connections free up, and Feishu (counting arrivals in one-second windows)
# would see more than the budget's pace: at 300 ms an answer under load, 64 carry the
# budget's 40 a second to each of five APIs without a queue.
MAX_CONNECTIONS = 64


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def __bool__(self) -> bool:  # never any: not the jar's walk under its lock at each call
        return False


class FeishuHttp(httpx.AsyncClient):
    """- No cookies: Feishu's Open API sets none the bridge needs, yet httpx parses every
      response's cookies through urllib's cookie machinery (about 6% of the bridge's CPU per
      message in a profile).
    - The bytes go over aiohttp's client (`AiohttpTransport`), not httpcore's pure-Python
      HTTP/1.1.
    - Each URL parsed once while it is in use (`PARSED_URLS`): httpx parses a URL string in
      pure Python, character by character, about a tenth of a call's CPU."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS, **kwargs: Any) -> None:
        # For the pools httpx makes itself (a proxy's): keep-alive = connections, since
        # httpcore closes idle connections while a pool holds more than its keep-alive count
        # (it counts all, not the idle), so fewer would churn.
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        if "transport" not in kwargs:
            tls = httpx.create_ssl_context(verify=kwargs.get("verify", True))
            kwargs["transport"] = AiohttpTransport(max_connections, tls)
        super().__init__(limits=limits, **kwargs)
        self._cookies = _NoCookies()  # one jar that never fills, not one per request
        # An httpx.URL never changes: one may serve every request.
        self._parsed = lru_cache(maxsize=PARSED_URLS)(httpx.URL)

    def _merge_url(self, url: httpx.URL | str) -> httpx.URL:
        return super()._merge_url(self._parsed(url) if isinstance(url, str) else url)

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None
