"""An OAuth-protected MCP server on the official Python SDK, for tests/mcp_oauth.rs.

One process is both the authorization server (the SDK's routes: metadata, dynamic client
registration, authorize, token with PKCE and refresh) and the resource server (protected-resource
metadata, bearer tokens checked on every MCP request), on 127.0.0.1:PORT. The authorization page
approves at once: there is no person in a test, so the browser step is a redirect.

    oauth_server.py PORT [--token-secs N] [--refuse-refresh] [--demand-admin-when FILE] [--sse]

Access tokens last N seconds (default 3600), so a test can watch one expire and be refreshed;
with --refuse-refresh every refresh is refused (invalid_grant). With --demand-admin-when, once
FILE exists, an MCP request whose token lacks the `admin` scope is refused with `403
insufficient_scope` naming `todo admin` (a step-up). The `stats` tool tells how many codes and
refreshes the server issued. With --sse the MCP endpoint is the HTTP+SSE transport of 2024-11-05
(the stream at /sse, its messages posted to /messages/), behind the same bearer check.
"""

import json
import os
import secrets
import sys
import time

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

PORT = int(sys.argv[1])
TOKEN_SECS = int(sys.argv[sys.argv.index("--token-secs") + 1]) if "--token-secs" in sys.argv else 3600
REFUSE_REFRESH = "--refuse-refresh" in sys.argv
BASE = f"http://127.0.0.1:{PORT}"
SCOPE = "todo"
ADMIN = "admin"
DEMAND_FILE = sys.argv[sys.argv.index("--demand-admin-when") + 1] if "--demand-admin-when" in sys.argv else None


class Provider:
    """Everything in memory; every client and grant is approved."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.stats = {"codes": 0, "refreshes": 0, "refused_refreshes": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = "at-" + secrets.token_urlsafe(24)
        refresh = "rt-" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + TOKEN_SECS,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=TOKEN_SECS,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.stats["codes"] += 1
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client, refresh_token: str):
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        if REFUSE_REFRESH:
            self.stats["refused_refreshes"] += 1
            raise TokenError("invalid_grant", "refresh refused by this test server")
        self.refresh.pop(refresh_token.token, None)
        self.stats["refreshes"] += 1
        return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return access

    async def revoke_token(self, token) -> None:
        self.access.pop(token.token, None)


provider = Provider()
server = MCPServer(
    "oauth-todo",
    auth_server_provider=provider,
    auth=AuthSettings(
        issuer_url=BASE,
        # The resource is the URL clients are configured with (RFC 9728 checks they match).
        resource_server_url=f"{BASE}/sse" if "--sse" in sys.argv else f"{BASE}/mcp",
        validate_token_resource=False,
        required_scopes=[SCOPE],
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=[SCOPE, ADMIN], default_scopes=[SCOPE]
        ),
    ),
)


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two numbers."""
    return str(a + b)


@server.tool()
def stats() -> str:
    """How many authorization codes and refreshes the server issued."""
    return json.dumps(provider.stats)


class DemandAdmin:
    """With --demand-admin-when, once the file exists: refuses an MCP request whose token lacks
    `admin` with the challenge a resource server sends for a step-up."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/mcp")
            and DEMAND_FILE is not None
            and os.path.exists(DEMAND_FILE)
        ):
            header = dict(scope["headers"]).get(b"authorization", b"").decode()
            token = provider.access.get(header.removeprefix("Bearer ").strip())
            # No token: the SDK's own 401 asks for a login.
            if token is not None and ADMIN not in token.scopes:
                challenge = (
                    f'Bearer error="insufficient_scope", scope="{SCOPE} {ADMIN}", '
                    f'resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'
                )
                body = json.dumps({"error": "insufficient_scope"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", challenge.encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    import uvicorn

    mcp_app = server.sse_app(host="127.0.0.1") if "--sse" in sys.argv else server.streamable_http_app(host="127.0.0.1")
    app = DemandAdmin(mcp_app)
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
