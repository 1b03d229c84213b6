"""Errors agents meet, as their tools see them: argument validation (AgentTx's own wording and
pydantic's, serde's, jsonschema's) and the LLM / API SDKs (Anthropic, OpenAI, Google, httpx,
requests). Written for these tests from the shapes those libraries print; the SDKs are not
installed. ``test_hints`` counts these cases when it checks every built-in rule has one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentCase:
    name: str
    raw: str
    rule: str
    category: str
    key: str
    says: tuple[str, ...] = ()


SITE = "/srv/agent/.venv/lib/python3.12/site-packages"


def frames(*calls: tuple[str, int, str, str]) -> str:
    return "".join(
        f'  File "{path}", line {line}, in {func}\n    {code}\n' for path, line, func, code in calls
    )


ANTHROPIC_OVERLOADED = (
    "Traceback (most recent call last):\n"
    + frames(
        ("/srv/agent/tools/summarize.py", 31, "summarize", "reply = client.messages.create("),
        (f"{SITE}/anthropic/_base_client.py", 1058, "request", "raise self._make_status_error"),
    )
    + "anthropic.InternalServerError: Error code: 529 - {'type': 'error', 'error': "
    "{'type': 'overloaded_error', 'message': 'Overloaded'}, 'request_id': 'req_011CT1kq9Yx3w4Z'}\n"
)

ANTHROPIC_RATE_LIMITED = (
    "anthropic.RateLimitError: Error code: 429 - {'type': 'error', 'error': {'type': "
    "'rate_limit_error', 'message': 'This request would exceed the rate limit for your "
    "organization (5f1c2a9e-7d3b-4c1a-9e2f-0b6d8a4c3e21) of 50,000 input tokens per minute. "
    "For details, refer to: https://docs.claude.com/en/api/rate-limits.'}}"
)

ANTHROPIC_AUTH = (
    "Traceback (most recent call last):\n"
    + frames(("/srv/agent/tools/classify.py", 18, "classify", "msg = client.messages.create("))
    + "anthropic.AuthenticationError: Error code: 401 - {'type': 'error', 'error': {'type': "
    "'authentication_error', 'message': 'invalid x-api-key'}, 'request_id': 'req_011CT1m2Q'}\n"
)

ANTHROPIC_NO_KEY = (
    'TypeError: "Could not resolve authentication method. Expected either api_key or '
    "auth_token to be set. Or for one of the `X-Api-Key` or `Authorization` headers to be "
    'explicitly omitted"'
)

ANTHROPIC_FORBIDDEN = (
    "anthropic.PermissionDeniedError: Error code: 403 - {'type': 'error', 'error': {'type': "
    "'permission_error', 'message': 'Your API key does not have permission to use the "
    "specified resource.'}}"
)

ANTHROPIC_CREDIT = (
    "anthropic.BadRequestError: Error code: 400 - {'type': 'error', 'error': {'type': "
    "'invalid_request_error', 'message': 'Your credit balance is too low to access the "
    "Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.'}}"
)

OPENAI_RATE_LIMITED = (
    "openai.RateLimitError: Error code: 429 - {'error': {'message': 'Rate limit reached for "
    "gpt-4o in organization org-Xy12AbCdEf on tokens per min (TPM): Limit 30000, Used 29804, "
    "Requested 1200. Please try again in 2.008s. Visit https://platform.openai.com/account/"
    "rate-limits to learn more.', 'type': 'tokens', 'param': None, 'code': "
    "'rate_limit_exceeded'}}"
)

OPENAI_QUOTA = (
    "openai.RateLimitError: Error code: 429 - {'error': {'message': 'You exceeded your current "
    "quota, please check your plan and billing details. For more information on this error, "
    "read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.', 'type': "
    "'insufficient_quota', 'param': None, 'code': 'insufficient_quota'}}"
)

OPENAI_500 = (
    "openai.InternalServerError: Error code: 500 - {'error': {'message': 'The server had an "
    "error while processing your request. Sorry about that!', 'type': 'server_error', "
    "'param': None, 'code': None}}"
)

OPENAI_503 = (
    "openai.InternalServerError: Error code: 503 - {'error': {'message': 'The engine is "
    "currently overloaded, please try again later', 'type': 'server_error', 'param': None, "
    "'code': None}}"
)

OPENAI_TIMEOUT = (
    "Traceback (most recent call last):\n"
    + frames(
        (f"{SITE}/httpx/_transports/default.py", 101, "map_httpcore_exceptions", "yield"),
    )
    + "httpx.ReadTimeout: The read operation timed out\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "Traceback (most recent call last):\n"
    + frames(("/srv/agent/tools/draft.py", 12, "draft", "r = client.chat.completions.create("))
    + "openai.APITimeoutError: Request timed out.\n"
)

OPENAI_AUTH = (
    "openai.AuthenticationError: Error code: 401 - {'error': {'message': 'Incorrect API key "
    "provided: sk-proj-********************abcd. You can find your API key at "
    "https://platform.openai.com/account/api-keys.', 'type': 'invalid_request_error', "
    "'param': None, 'code': 'invalid_api_key'}}"
)

OPENAI_NO_KEY = (
    "openai.OpenAIError: The api_key client option must be set either by passing api_key to "
    "the client or by setting the OPENAI_API_KEY environment variable"
)

GOOGLE_EXHAUSTED = (
    "google.genai.errors.ClientError: 429 RESOURCE_EXHAUSTED. {'error': {'code': 429, "
    "'message': 'You exceeded your current quota, please check your plan and billing details. "
    "For more information on this error, head to: https://ai.google.dev/gemini-api/docs/"
    "rate-limits.', 'status': 'RESOURCE_EXHAUSTED', 'details': [{'@type': "
    "'type.googleapis.com/google.rpc.RetryInfo', 'retryDelay': '37s'}]}}"
)

GOOGLE_CORE_EXHAUSTED = (
    "google.api_core.exceptions.ResourceExhausted: 429 Resource has been exhausted "
    "(e.g. check quota)."
)

GOOGLE_UNAVAILABLE = (
    "google.genai.errors.ServerError: 503 UNAVAILABLE. {'error': {'code': 503, 'message': "
    "'The model is overloaded. Please try again later.', 'status': 'UNAVAILABLE'}}"
)

GOOGLE_CORE_UNAVAILABLE = (
    "google.api_core.exceptions.ServiceUnavailable: 503 failed to connect to all addresses; "
    "last error: UNAVAILABLE: ipv4:142.250.74.10:443: Socket closed"
)

GOOGLE_BAD_KEY = (
    "google.genai.errors.ClientError: 400 INVALID_ARGUMENT. {'error': {'code': 400, 'message': "
    "'API key not valid. Please pass a valid API key.', 'status': 'INVALID_ARGUMENT', "
    "'details': [{'@type': 'type.googleapis.com/google.rpc.ErrorInfo', 'reason': "
    "'API_KEY_INVALID', 'domain': 'googleapis.com'}]}}"
)

GOOGLE_NO_CREDENTIALS = (
    "google.auth.exceptions.DefaultCredentialsError: Your default credentials were not found. "
    "To set up Application Default Credentials, see https://cloud.google.com/docs/"
    "authentication/external/set-up-adc for more information."
)

REQUESTS_READ_TIMEOUT = (
    "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='api.example.com', port=443): "
    "Read timed out. (read timeout=10)"
)

REQUESTS_CONNECT_TIMEOUT = (
    "requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host='api.example.com', "
    "port=443): Max retries exceeded with url: /v1/orders (Caused by ConnectTimeoutError("
    "<urllib3.connection.HTTPSConnection object at 0x7f3a2c1d0e50>, 'Connection to "
    "api.example.com timed out. (connect timeout=5)'))"
)

PYDANTIC_EXTRA = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for InvoiceIn\n"
    "notes\n"
    "  Extra inputs are not permitted [type=extra_forbidden, input_value='rush', "
    "input_type=str]\n"
    "    For further information visit https://errors.pydantic.dev/2.7/v/extra_forbidden\n"
)

PYDANTIC_RANGE = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for OrderIn\n"
    "quantity\n"
    "  Input should be greater than 0 [type=greater_than, input_value=-3, input_type=int]\n"
    "    For further information visit https://errors.pydantic.dev/2.7/v/greater_than\n"
)

PYDANTIC_TOO_LONG = (
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for OrderIn\n"
    "sku\n"
    "  String should have at most 12 characters [type=string_too_long, "
    "input_value='ABCDEFGHIJKLMNOP', input_type=str]\n"
    "    For further information visit https://errors.pydantic.dev/2.7/v/string_too_long\n"
)

SERDE_UNKNOWN_FIELD = "Error: unknown field `ttl`, expected `key` or `value` at line 1 column 27"

JSONSCHEMA_EXTRA = (
    "jsonschema.exceptions.ValidationError: Additional properties are not allowed ('ttl' was "
    "unexpected)\n\nFailed validating 'additionalProperties' in schema:\n"
    "    {'type': 'object', 'properties': {'key': {'type': 'string'}}}\n"
)

AGENT_CASES = [
    # AgentTx's own argument messages (agenttx.tools.argument_errors)
    AgentCase(
        "ours: unexpected",
        "unexpected argument 'ttl'; kv.put accepts: key, value",
        "unexpected_argument",
        "unexpected_argument",
        "ttl",
        ("unexpected argument 'ttl'; kv.put accepts: key, value",),
    ),
    AgentCase(
        "ours: did you mean",
        "unexpected argument 'emial'; did you mean 'email'? crm.create accepts: email, name",
        "unexpected_argument",
        "unexpected_argument",
        "emial",
        ("did you mean 'email'?", "crm.create accepts: email, name"),
    ),
    AgentCase(
        "ours: missing",
        "missing argument 'email' (string); crm.create accepts: email, name",
        "tool_missing_argument",
        "missing_argument",
        "email",
        ("'email' (string)", "crm.create accepts: email, name"),
    ),
    AgentCase(
        "ours: type",
        "argument 'age' of people.add has the wrong type: expected a valid integer, "
        "got string 'forty'",
        "tool_argument_type",
        "type_mismatch",
        "age",
        ("'age'", "a valid integer", "string 'forty'"),
    ),
    AgentCase(
        "ours: range",
        "argument 'qty' of shop.order is out of range: expected greater than 0, got number -1",
        "out_of_range",
        "out_of_range",
        "qty",
        ("'qty'", "greater than 0", "-1"),
    ),
    AgentCase(
        "unknown tool, close name",
        "unknown tool 'kv.putt'; did you mean kv.put? registered tools: kv.put, kv.get, "
        "kv.delete, record.insert",
        "unknown_tool",
        "unknown_tool",
        "",
        ("did you mean kv.put?",),
    ),
    # other validators
    AgentCase(
        "pydantic extra",
        PYDANTIC_EXTRA,
        "unexpected_argument",
        "unexpected_argument",
        "notes",
        ("'notes'",),
    ),
    AgentCase(
        "pydantic range",
        PYDANTIC_RANGE,
        "out_of_range",
        "out_of_range",
        "quantity",
        ("greater than 0", "-3"),
    ),
    AgentCase(
        "pydantic too long",
        PYDANTIC_TOO_LONG,
        "out_of_range",
        "out_of_range",
        "sku",
        ("at most 12 characters",),
    ),
    AgentCase(
        "serde unknown field",
        SERDE_UNKNOWN_FIELD,
        "unexpected_argument",
        "unexpected_argument",
        "ttl",
        ("`key` or `value`",),
    ),
    AgentCase(
        "jsonschema extra",
        JSONSCHEMA_EXTRA,
        "unexpected_argument",
        "unexpected_argument",
        "ttl",
        ("'ttl'",),
    ),
    # Anthropic
    AgentCase(
        "anthropic 529",
        ANTHROPIC_OVERLOADED,
        "llm_server_error",
        "server_error",
        "",
        ("overloaded", "529"),
    ),
    AgentCase(
        "anthropic 429",
        ANTHROPIC_RATE_LIMITED,
        "rate_limited",
        "rate_limited",
        "",
        ("rate_limit_error",),
    ),
    AgentCase(
        "anthropic 401",
        ANTHROPIC_AUTH,
        "llm_auth",
        "http_auth",
        "",
        ("ANTHROPIC_API_KEY", "will not help"),
    ),
    AgentCase(
        "anthropic no key", ANTHROPIC_NO_KEY, "llm_auth", "http_auth", "", ("ANTHROPIC_API_KEY",)
    ),
    AgentCase(
        "anthropic 403",
        ANTHROPIC_FORBIDDEN,
        "llm_auth",
        "http_auth",
        "",
        ("ANTHROPIC_API_KEY", "permission"),
    ),
    AgentCase(
        "anthropic credit",
        ANTHROPIC_CREDIT,
        "llm_quota",
        "quota_exhausted",
        "",
        ("credit balance",),
    ),
    # OpenAI
    AgentCase(
        "openai 429 tpm",
        OPENAI_RATE_LIMITED,
        "rate_limited",
        "rate_limited",
        "",
        ("gpt-4o", "2.008s"),
    ),
    AgentCase(
        "openai quota",
        OPENAI_QUOTA,
        "llm_quota",
        "quota_exhausted",
        "",
        ("insufficient_quota", "will not help"),
    ),
    AgentCase("openai 500", OPENAI_500, "llm_server_error", "server_error", "", ("500",)),
    AgentCase("openai 503", OPENAI_503, "llm_server_error", "server_error", "", ("overloaded",)),
    AgentCase("openai timeout", OPENAI_TIMEOUT, "timeout", "timeout", "", ("timed out",)),
    AgentCase(
        "openai 401", OPENAI_AUTH, "llm_auth", "http_auth", "", ("OPENAI_API_KEY", "will not help")
    ),
    AgentCase("openai no key", OPENAI_NO_KEY, "llm_auth", "http_auth", "", ("OPENAI_API_KEY",)),
    # Google
    AgentCase(
        "google 429",
        GOOGLE_EXHAUSTED,
        "rate_limited",
        "rate_limited",
        "",
        ("RESOURCE_EXHAUSTED", "37 s"),
    ),
    AgentCase("google core 429", GOOGLE_CORE_EXHAUSTED, "rate_limited", "rate_limited", ""),
    AgentCase(
        "google 503",
        GOOGLE_UNAVAILABLE,
        "llm_server_error",
        "server_error",
        "",
        ("503", "overloaded"),
    ),
    AgentCase(
        "google core 503", GOOGLE_CORE_UNAVAILABLE, "llm_server_error", "server_error", "", ("503",)
    ),
    AgentCase("google bad key", GOOGLE_BAD_KEY, "llm_auth", "http_auth", "", ("GOOGLE_API_KEY",)),
    AgentCase(
        "google no credentials",
        GOOGLE_NO_CREDENTIALS,
        "llm_auth",
        "http_auth",
        "",
        ("GOOGLE_APPLICATION_CREDENTIALS",),
    ),
    # HTTP clients
    AgentCase(
        "httpx read timeout",
        "httpx.ReadTimeout: The read operation timed out",
        "timeout",
        "timeout",
        "",
        ("httpx.ReadTimeout",),
    ),
    AgentCase(
        "httpx pool timeout", "httpx.PoolTimeout", "timeout", "timeout", "", ("httpx.PoolTimeout",)
    ),
    AgentCase(
        "requests read timeout", REQUESTS_READ_TIMEOUT, "timeout", "timeout", "", ("ReadTimeout",)
    ),
    AgentCase(
        "requests connect timeout",
        REQUESTS_CONNECT_TIMEOUT,
        "timeout",
        "timeout",
        "",
        ("ConnectTimeout",),
    ),
]
