"""Clean Hints: realistic errors from each language become one actionable, secret-free line."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_hint_cases import AGENT_CASES
from agenttx.core.hints import (
    ARGUMENT_CATEGORIES,
    MAX_INPUT_CHARS,
    TRANSIENT_CATEGORIES,
    Category,
    Hint,
    HintCleaner,
    clean_hint,
    redact,
)
from agenttx.errors import InvalidArgument

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hints.md"


def assert_valid(hint: Hint, max_len: int = 240) -> None:
    """The contract every hint meets, whatever the input."""
    text = hint.text
    assert text.startswith("Hint: ")
    assert len(text) <= max_len
    assert text == " ".join(text.split()), "one line, no runs of whitespace"
    assert text.isprintable()
    assert hint.category in set(Category)
    assert hint.rule
    assert "\n" not in hint.key


def assert_no_frames(hint: Hint) -> None:
    """No trace furniture in the hint of a real trace (any text may quote such words)."""
    for furniture in ("Traceback", "  at ", "\tat ", 'File "', ".java:", ".go:", "goroutine"):
        assert furniture not in hint.text


# --- Realistic traces ---------------------------------------------------------------------------


def py_frames(*calls: tuple[str, int, str, str]) -> str:
    return "".join(
        f'  File "{path}", line {line}, in {func}\n    {code}\n' for path, line, func, code in calls
    )


SITE = "/srv/app/.venv/lib/python3.11/site-packages"

PSYCOPG_FK = (
    "Traceback (most recent call last):\n"
    + py_frames(
        ("/srv/app/agent/tools/billing.py", 88, "create_invoice", "cur.execute(INSERT_SQL, row)"),
        (f"{SITE}/psycopg/cursor.py", 732, "execute", "raise ex.with_traceback(None)"),
    )
    + 'psycopg.errors.ForeignKeyViolation: insert or update on table "invoices" violates '
    'foreign key constraint "invoices_customer_id_fkey"\n'
    'DETAIL:  Key (customer_id)=(c-404) is not present in table "customers".\n\n'
    "The above exception was the direct cause of the following exception:\n\n"
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/runner.py", 41, "run_step", "return await tool(**arguments)"))
    + "agent.errors.ToolError: create_invoice failed\n"
)

JAVA_PG_DELETE = (
    "org.springframework.dao.DataIntegrityViolationException: could not execute statement\n"
    "\tat org.springframework.orm.jpa.vendor.HibernateJpaDialect.convert("
    "HibernateJpaDialect.java:276)\n"
    "\tat com.acme.crm.CustomerService.delete(CustomerService.java:57)\n"
    "Caused by: org.postgresql.util.PSQLException: ERROR: update or delete on table "
    '"customers" violates foreign key constraint "invoices_customer_id_fkey" on table '
    '"invoices"\n'
    '  Detail: Key (id)=(c-1) is still referenced from table "invoices".\n'
    "\tat org.postgresql.core.v3.QueryExecutorImpl.receiveErrorResponse("
    "QueryExecutorImpl.java:2713)\n"
    "\t... 42 more\n"
)

MYSQL_FK = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (f"{SITE}/pymysql/err.py", 143, "raise_mysql_exception", "raise errorclass(errno, errval)")
    )
    + "pymysql.err.IntegrityError: (1452, 'Cannot add or update a child row: a foreign key "
    "constraint fails (`shop`.`orders`, CONSTRAINT `orders_ibfk_1` FOREIGN KEY (`customer_id`) "
    "REFERENCES `customers` (`id`))')\n"
)

SQLITE_FK = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/tools/orders.py", 30, "add_order", "conn.execute(sql, params)"))
    + "sqlite3.IntegrityError: FOREIGN KEY constraint failed\n"
)

PG_UNIQUE = (
    "Traceback (most recent call last):\n"
    + py_frames(
        ("/srv/app/agent/tools/users.py", 19, "create_user", "await conn.execute(q, *args)")
    )
    + "asyncpg.exceptions.UniqueViolationError: duplicate key value violates unique constraint "
    '"users_email_key"\n'
    "DETAIL:  Key (email)=(ada@example.com) already exists.\n"
)

MYSQL_UNIQUE = (
    "com.mysql.cj.jdbc.exceptions.SQLIntegrityConstraintViolationException: Duplicate entry "
    "'ada@example.com' for key 'users.email'\n"
    "\tat com.mysql.cj.jdbc.exceptions.SQLError.createSQLException(SQLError.java:117)\n"
    "\tat com.acme.users.UserRepository.insert(UserRepository.java:88)\n"
)

SQLITE_UNIQUE = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/tools/users.py", 23, "create_user", "conn.execute(INSERT, row)"))
    + "sqlite3.IntegrityError: UNIQUE constraint failed: users.email\n"
)

PG_NOT_NULL = (
    "Traceback (most recent call last):\n"
    + py_frames((f"{SITE}/psycopg/cursor.py", 732, "execute", "raise ex.with_traceback(None)"))
    + 'psycopg.errors.NotNullViolation: null value in column "name" of relation "users" '
    "violates not-null constraint\n"
    "DETAIL:  Failing row contains (u-7, null, ada@example.com).\n"
)

MYSQL_NOT_NULL = (
    "Error: Column 'amount_cents' cannot be null\n"
    "    at Packet.asError (/srv/app/node_modules/mysql2/lib/packets/packet.js:728:17)\n"
    "    at Query.execute (/srv/app/node_modules/mysql2/lib/commands/command.js:29:26)\n"
)

SQLITE_NOT_NULL = "sqlite3.IntegrityError: NOT NULL constraint failed: users.name\n"

PG_MISSING_COLUMN = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (
            f"{SITE}/sqlalchemy/engine/default.py",
            924,
            "do_execute",
            "cursor.execute(statement, parameters)",
        )
    )
    + 'sqlalchemy.exc.ProgrammingError: (psycopg.errors.UndefinedColumn) column "emial" of '
    'relation "users" does not exist\n'
    "LINE 1: INSERT INTO users (id, emial) VALUES ('u-1', 'a@b.c')\n"
    "                               ^\n"
)

MYSQL_MISSING_COLUMN = "(1054, \"Unknown column 'emial' in 'field list'\")"

SQLITE_MISSING_COLUMN = "sqlite3.OperationalError: table users has no column named emial"

PG_MISSING_TABLE = (
    'org.postgresql.util.PSQLException: ERROR: relation "invoice" does not exist\n'
    "  Position: 15\n"
    "\tat org.postgresql.core.v3.QueryExecutorImpl.receiveErrorResponse("
    "QueryExecutorImpl.java:2713)\n"
)

SQLITE_MISSING_TABLE = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/tools/report.py", 12, "report", "rows = conn.execute(SQL)"))
    + "sqlite3.OperationalError: no such table: invoice\n"
)

RECORD_NOT_FOUND = (
    "Traceback (most recent call last):\n"
    + py_frames(
        ("/srv/app/agenttx/tools/builtin/record.py", 132, "record_get", "raise LookupError(...)")
    )
    + 'LookupError: no row with id=c-404 in table "customers"\n'
)

RAILS_NOT_FOUND = (
    "ActiveRecord::RecordNotFound: Couldn't find Customer with 'id'=c-404\n"
    "    from /srv/app/app/controllers/invoices_controller.rb:12:in `create'\n"
    "    from /usr/local/bundle/gems/actionpack-7.1.3/lib/action_controller/metal/"
    "basic_implicit_render.rb:6:in `send_action'\n"
)

SERDE_MISSING_FIELD = (
    "Error: failed to create invoice for order ord-77\n\n"
    "Caused by:\n"
    "    0: could not decode the billing API response\n"
    "    1: missing field `customer_id` at line 1 column 58\n\n"
    "Stack backtrace:\n"
    "   0: anyhow::error::<impl anyhow::Error>::msg\n"
    "             at /usr/local/cargo/registry/src/anyhow-1.0.86/src/error.rs:83:36\n"
    "   1: billing::client::decode\n"
    "             at ./src/client.rs:211:9\n"
    "   2: __libc_start_main\n"
    "   3: _start\n"
)

PYDANTIC_MISSING_FIELD = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (
            "/srv/app/agent/tools/invoices.py",
            17,
            "create",
            "body = InvoiceIn.model_validate(arguments)",
        )
    )
    + "pydantic_core._pydantic_core.ValidationError: 1 validation error for InvoiceIn\n"
    "customer.customer_id\n"
    "  Field required [type=missing, input_value={'name': 'Ada'}, input_type=dict]\n"
    "    For further information visit https://errors.pydantic.dev/2.7/v/missing\n"
)

JSONSCHEMA_MISSING_FIELD = (
    "jsonschema.exceptions.ValidationError: 'customer_id' is a required property\n\n"
    "Failed validating 'required' in schema:\n"
    "    {'type': 'object', 'required': ['customer_id', 'amount_cents']}\n\n"
    "On instance:\n"
    "    {'amount_cents': 12000}\n"
)

KEY_ERROR = (
    "Traceback (most recent call last):\n"
    + py_frames(
        ("/srv/app/agent/runner.py", 41, "run_step", "return tool(**arguments)"),
        (
            "/srv/app/agent/tools/invoices.py",
            29,
            "create_invoice",
            'customer = session["customer_id"]',
        ),
    )
    + "KeyError: 'customer_id'\n"
)

MISSING_ARGUMENT = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/runner.py", 41, "run_step", "return tool(**arguments)"))
    + "TypeError: create_invoice() missing 1 required positional argument: 'customer_id'\n"
)

NONE_ATTRIBUTE = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/tools/mail.py", 8, "send_receipt", "to = customer.email"))
    + "AttributeError: 'NoneType' object has no attribute 'email'\n"
)

NODE_UNDEFINED = (
    "/srv/app/src/routes/invoices.js:41\n"
    "    const total = invoice.lines.reduce((sum, line) => sum + line.amount, 0);\n"
    "                                ^\n\n"
    "TypeError: Cannot read properties of undefined (reading 'lines')\n"
    "    at createInvoice (/srv/app/src/routes/invoices.js:41:33)\n"
    "    at Layer.handle [as handle_request] "
    "(/srv/app/node_modules/express/lib/router/layer.js:95:5)\n"
    "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)\n\n"
    "Node.js v20.11.1\n"
)

JAVA_NPE = (
    "org.springframework.web.util.NestedServletException: Request processing failed; nested "
    "exception is java.lang.IllegalStateException: invoice creation failed\n"
    "\tat org.springframework.web.servlet.FrameworkServlet.processRequest("
    "FrameworkServlet.java:1014)\n"
    "Caused by: java.lang.IllegalStateException: invoice creation failed\n"
    "\tat com.acme.billing.InvoiceService.create(InvoiceService.java:61)\n"
    "\t... 25 more\n"
    'Caused by: java.lang.NullPointerException: Cannot invoke "String.trim()" because '
    '"customer.email" is null\n'
    "\tat com.acme.billing.InvoiceMapper.toEntity(InvoiceMapper.java:33)\n"
    "\t... 40 more\n"
)

JAVA_NPE_LOCAL = (
    'Exception in thread "main" java.lang.NullPointerException: Cannot invoke '
    '"String.length()" because "<local1>" is null\n'
    "\tat com.acme.Main.main(Main.java:5)\n"
)

GO_NIL = (
    "panic: runtime error: invalid memory address or nil pointer dereference\n"
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x6d8f34]\n\n"
    "goroutine 42 [running]:\n"
    "github.com/acme/billing/internal/invoice.(*Service).Create(0x0, {0x8e2f40, 0xc00012c0f0})\n"
    "\t/src/internal/invoice/service.go:120 +0x54\n"
    "net/http.HandlerFunc.ServeHTTP(0xc000180000, {0x8e9a30, 0xc0001c0000}, 0xc000196000)\n"
    "\t/usr/local/go/src/net/http/server.go:2136 +0x29\n"
    "created by net/http.(*Server).Serve in goroutine 1\n"
    "\t/usr/local/go/src/net/http/server.go:3285 +0x4b4\n"
    "exit status 2\n"
)

PY_INVALID_INT = (
    "Traceback (most recent call last):\n"
    + py_frames(
        ("/srv/app/agent/tools/invoices.py", 14, "create", 'amount = int(arguments["amount"])')
    )
    + "ValueError: invalid literal for int() with base 10: '12,50'\n"
)

JAVA_INVALID_INT = (
    'java.lang.NumberFormatException: For input string: "12,50"\n'
    "\tat java.base/java.lang.NumberFormatException.forInputString(NumberFormatException.java:67)\n"
    "\tat java.base/java.lang.Integer.parseInt(Integer.java:668)\n"
)

GO_INVALID_INT = 'strconv.Atoi: parsing "12,50": invalid syntax\nexit status 1\n'

RUST_INVALID_INT = (
    "thread 'main' panicked at src/main.rs:7:41:\n"
    "called `Result::unwrap()` on an `Err` value: ParseIntError { kind: InvalidDigit }\n"
    "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
)

GO_TYPE_MISMATCH = (
    "2024/05/02 10:11:12 decode request: json: cannot unmarshal string into Go struct field "
    "Invoice.amount_cents of type int\n"
)

SERDE_TYPE_MISMATCH = 'Error: invalid type: string "twelve", expected u32 at line 1 column 24\n'

PY_TYPE_MISMATCH = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/tools/invoices.py", 22, "total", "return subtotal + tax"))
    + "TypeError: unsupported operand type(s) for +: 'int' and 'str'\n"
)

JS_NOT_A_FUNCTION = (
    "TypeError: client.invoices.create is not a function\n"
    "    at createInvoice (/srv/app/src/billing.js:12:34)\n"
    "    at async Promise.all (index 0)\n"
)

PATH_ESCAPE = (
    "Traceback (most recent call last):\n"
    + py_frames(
        ("/srv/app/agenttx/tools/builtin/fs.py", 32, "sandbox_path", "raise SandboxError(...)")
    )
    + "agenttx.tools.builtin.fs.SandboxError: path '../../etc/passwd' escapes the sandbox\n"
)

PY_FILE_NOT_FOUND = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/tools/report.py", 9, "load", "with open(path) as fh:"))
    + "FileNotFoundError: [Errno 2] No such file or directory: 'drafts/c-404.json'\n"
)

NODE_FILE_NOT_FOUND = (
    "node:internal/fs/promises:638\n"
    "  return new FileHandle(await PromisePrototypeThen(\n"
    "                        ^\n\n"
    "Error: ENOENT: no such file or directory, open 'drafts/c-404.json'\n"
    "    at async open (node:internal/fs/promises:638:25)\n"
    "    at async Object.readFile (node:internal/fs/promises:1242:14) {\n"
    "  errno: -2,\n"
    "  code: 'ENOENT',\n"
    "  syscall: 'open',\n"
    "  path: 'drafts/c-404.json'\n"
    "}\n"
)

GO_FILE_NOT_FOUND = "2024/05/02 10:11:12 open drafts/c-404.json: no such file or directory\n"

RUST_FILE_NOT_FOUND = (
    "Error: failed to read the draft\n\nCaused by:\n    No such file or directory (os error 2)\n"
)

PERMISSION_DENIED = (
    "Traceback (most recent call last):\n"
    + py_frames(("/srv/app/agent/tools/report.py", 31, "write", "with open(path, 'w') as fh:"))
    + "PermissionError: [Errno 13] Permission denied: '/var/reports/q3.csv'\n"
)

RUST_PERMISSION_DENIED = "Error: Permission denied (os error 13)\n"

RATE_LIMITED = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (
            f"{SITE}/requests/models.py",
            1021,
            "raise_for_status",
            "raise HTTPError(http_error_msg, response=self)",
        )
    )
    + "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: "
    "https://api.crm.example.com/v2/customers/c-1\n"
)

OPENAI_RATE_LIMITED = (
    "openai.RateLimitError: Error code: 429 - {'error': {'message': 'Rate limit reached for "
    "gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29876. Please "
    "try again in 2.5s.', 'type': 'tokens', 'code': 'rate_limit_exceeded'}}\n"
)

HTTP_AUTH = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (
            f"{SITE}/httpx/_models.py",
            761,
            "raise_for_status",
            "raise HTTPStatusError(message, request=request, response=self)",
        )
    )
    + "httpx.HTTPStatusError: Client error '401 Unauthorized' for url "
    "'https://api.crm.example.com/v2/customers'\n"
    "For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/401\n"
)

HTTP_NOT_FOUND = (
    "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
    "https://api.crm.example.com/v2/customers/c-404?expand=invoices\n"
)

HTTP_CLIENT = (
    "AxiosError: Request failed with status code 422\n"
    "    at settle (/srv/app/node_modules/axios/lib/core/settle.js:19:12)\n"
    "    at IncomingMessage.handleStreamEnd "
    "(/srv/app/node_modules/axios/lib/adapters/http.js:589:11)\n"
)

HTTP_SERVER = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (
            f"{SITE}/requests/models.py",
            1021,
            "raise_for_status",
            "raise HTTPError(http_error_msg, response=self)",
        )
    )
    + "requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: "
    "https://api.crm.example.com/v2/customers\n"
)

GRPC_DEADLINE = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (
            f"{SITE}/grpc/_channel.py",
            1030,
            "__call__",
            "return _end_unary_response_blocking(state, call, False, None)",
        )
    )
    + "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
    "\tstatus = StatusCode.DEADLINE_EXCEEDED\n"
    '\tdetails = "Deadline Exceeded"\n'
    '\tdebug_error_string = "UNKNOWN:Error received from peer ipv4:10.0.3.7:50051 '
    '{grpc_message:"Deadline Exceeded", grpc_status:4}"\n'
    ">\n"
)

PG_STATEMENT_TIMEOUT = (
    "psycopg.errors.QueryCanceled: canceling statement due to statement timeout\n"
    'CONTEXT:  while updating tuple (0,12) in relation "invoices"\n'
)

CONNECTION_REFUSED = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (f"{SITE}/psycopg/connection.py", 748, "connect", "raise last_ex.with_traceback(None)")
    )
    + 'psycopg.OperationalError: connection failed: connection to server at "10.0.3.9", '
    "port 5432 failed: Connection refused\n"
    "\tIs the server running on that host and accepting TCP/IP connections?\n"
)

NODE_ECONNREFUSED = (
    "Error: connect ECONNREFUSED 127.0.0.1:6379\n"
    "    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1595:16) {\n"
    "  errno: -111,\n  code: 'ECONNREFUSED',\n  syscall: 'connect',\n"
    "  address: '127.0.0.1',\n  port: 6379\n}\n"
)

GO_DIAL = (
    "2024/05/02 10:11:12 ledger: dial tcp 10.0.3.9:5432: connect: connection refused\n"
    "exit status 1\n"
)

PY_JSON = (
    "Traceback (most recent call last):\n"
    + py_frames(
        (
            "/usr/lib/python3.11/json/decoder.py",
            355,
            "raw_decode",
            'raise JSONDecodeError("Expecting value", s, err.value) from None',
        )
    )
    + "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n"
)

NODE_JSON = (
    "SyntaxError: Unexpected token } in JSON at position 5\n"
    "    at JSON.parse (<anonymous>)\n"
    "    at parseBody (/srv/app/src/server.js:17:21)\n"
)

SERDE_JSON = "Error: expected value at line 1 column 1\n"

GO_JSON = "2024/05/02 10:11:12 decode: invalid character 'x' looking for beginning of value\n"


@dataclass(frozen=True)
class Case:
    name: str
    raw: str
    rule: str
    category: str
    key: str
    says: tuple[str, ...] = ()  # substrings the hint text must contain


CASES = [
    # AgentTx's own failures, in the wording of agenttx.core.refs and the engine
    Case(
        "missing key",
        "unresolved reference ${steps.2.customer_id}: step 2 output has no key 'customer_id' "
        "(keys: id, name)",
        "unresolved_reference",
        "unresolved_reference",
        "customer_id",
        ("${steps.2.customer_id}", "id, name", "step 2"),
    ),
    Case(
        "missing index",
        "unresolved reference ${steps.3.items.5}: step 3 output at 'items' has no index 5 "
        "(it is an array of 2 items)",
        "unresolved_reference",
        "unresolved_reference",
        "items",
        ("index 5",),
    ),
    Case(
        "bad syntax",
        "unresolved reference ${steps.x.id}: bad reference syntax; write ${steps.<id>.<path>} "
        "with a numeric step id and non-empty keys, or $${ for a literal ${",
        "unresolved_reference",
        "unresolved_reference",
        "",
        ("bad syntax", "${steps.<id>.<path>}"),
    ),
    Case(
        "later step",
        "unavailable step reference ${steps.5.id}: step 5 has not completed (current step 3)",
        "unavailable_reference",
        "unavailable_reference",
        "id",
        ("step 5",),
    ),
    Case(
        "unknown tool",
        "unknown tool 'kv.putt'; registered tools: kv.put, kv.get, kv.delete, record.insert",
        "unknown_tool",
        "unknown_tool",
        "",
        ("kv.putt", "kv.put, kv.get"),
    ),
    # SQL
    Case(
        "psycopg fk",
        PSYCOPG_FK,
        "pg_foreign_key",
        "foreign_key",
        "customer_id",
        ("customer_id", "'c-404'", "customers"),
    ),
    Case(
        "jdbc fk delete",
        JAVA_PG_DELETE,
        "pg_foreign_key",
        "foreign_key",
        "id",
        ("still referenced", "invoices"),
    ),
    Case(
        "mysql fk",
        MYSQL_FK,
        "mysql_foreign_key",
        "foreign_key",
        "customer_id",
        ("customer_id", "customers"),
    ),
    Case("sqlite fk", SQLITE_FK, "sqlite_foreign_key", "foreign_key", "", ("foreign key",)),
    Case(
        "pg unique",
        PG_UNIQUE,
        "pg_unique",
        "unique_violation",
        "email",
        ("email", "ada@example.com", "already exists"),
    ),
    Case(
        "mysql unique",
        MYSQL_UNIQUE,
        "mysql_unique",
        "unique_violation",
        "email",
        ("email", "users"),
    ),
    Case(
        "sqlite unique",
        SQLITE_UNIQUE,
        "sqlite_unique",
        "unique_violation",
        "email",
        ("email", "users"),
    ),
    Case("pg not null", PG_NOT_NULL, "pg_not_null", "not_null", "name", ("name", "users")),
    Case(
        "mysql not null",
        MYSQL_NOT_NULL,
        "mysql_not_null",
        "not_null",
        "amount_cents",
        ("amount_cents",),
    ),
    Case("sqlite not null", SQLITE_NOT_NULL, "sqlite_not_null", "not_null", "name", ("users",)),
    Case(
        "pg column",
        PG_MISSING_COLUMN,
        "missing_column",
        "missing_column",
        "emial",
        ("emial", "users"),
    ),
    Case("mysql column", MYSQL_MISSING_COLUMN, "missing_column", "missing_column", "emial"),
    Case("sqlite column", SQLITE_MISSING_COLUMN, "missing_column", "missing_column", "emial"),
    Case("pg table", PG_MISSING_TABLE, "missing_table", "missing_table", "invoice"),
    Case("sqlite table", SQLITE_MISSING_TABLE, "missing_table", "missing_table", "invoice"),
    Case(
        "record.get",
        RECORD_NOT_FOUND,
        "record_not_found",
        "not_found",
        "id",
        ("customers", "'c-404'"),
    ),
    Case("rails", RAILS_NOT_FOUND, "record_not_found", "not_found", "id", ("Customer", "c-404")),
    # Arguments and data shapes
    Case("serde field", SERDE_MISSING_FIELD, "missing_field", "missing_field", "customer_id"),
    Case("pydantic field", PYDANTIC_MISSING_FIELD, "missing_field", "missing_field", "customer_id"),
    Case(
        "json schema field",
        JSONSCHEMA_MISSING_FIELD,
        "missing_field",
        "missing_field",
        "customer_id",
    ),
    Case(
        "builtin tool field",
        "ToolArgumentError: missing field `table`",
        "missing_field",
        "missing_field",
        "table",
    ),
    Case("key error", KEY_ERROR, "key_error", "key_error", "customer_id", ("'customer_id'",)),
    Case(
        "missing argument",
        MISSING_ARGUMENT,
        "missing_argument",
        "missing_argument",
        "customer_id",
        ("create_invoice()", "'customer_id'"),
    ),
    Case(
        "none attribute",
        NONE_ATTRIBUTE,
        "null_attribute",
        "null_attribute",
        "email",
        ("None", "email"),
    ),
    Case(
        "js undefined", NODE_UNDEFINED, "null_attribute", "null_attribute", "lines", ("undefined",)
    ),
    Case(
        "java helpful npe",
        JAVA_NPE,
        "null_pointer",
        "null_pointer",
        "email",
        ("NullPointerException",),
    ),
    Case(
        "java npe local",
        JAVA_NPE_LOCAL,
        "null_pointer",
        "null_pointer",
        "",
        ("NullPointerException",),
    ),
    Case("go nil", GO_NIL, "null_pointer", "null_pointer", "", ("nil pointer",)),
    Case("python int", PY_INVALID_INT, "invalid_integer", "invalid_integer", "", ("'12,50'",)),
    Case("java int", JAVA_INVALID_INT, "invalid_integer", "invalid_integer", "", ("'12,50'",)),
    Case("go int", GO_INVALID_INT, "invalid_integer", "invalid_integer", "", ("'12,50'",)),
    Case("rust int", RUST_INVALID_INT, "invalid_integer", "invalid_integer", ""),
    Case(
        "go unmarshal",
        GO_TYPE_MISMATCH,
        "type_mismatch",
        "type_mismatch",
        "amount_cents",
        ("int", "string"),
    ),
    Case("serde type", SERDE_TYPE_MISMATCH, "type_mismatch", "type_mismatch", "", ("u32",)),
    Case("python operand", PY_TYPE_MISMATCH, "type_mismatch", "type_mismatch", "", ("int", "str")),
    Case(
        "js not a function",
        JS_NOT_A_FUNCTION,
        "type_mismatch",
        "type_mismatch",
        "create",
        ("not a function",),
    ),
    Case(
        "builtin tool type",
        "ToolArgumentError: invalid type: number for field `table`, expected a string",
        "type_mismatch",
        "type_mismatch",
        "table",
        ("a string",),
    ),
    # Files
    Case("sandbox", PATH_ESCAPE, "path_escape", "path_escape", "", ("../../etc/passwd",)),
    Case(
        "python file",
        PY_FILE_NOT_FOUND,
        "file_not_found",
        "file_not_found",
        "",
        ("drafts/c-404.json",),
    ),
    Case(
        "node file",
        NODE_FILE_NOT_FOUND,
        "file_not_found",
        "file_not_found",
        "",
        ("drafts/c-404.json",),
    ),
    Case(
        "go file", GO_FILE_NOT_FOUND, "file_not_found", "file_not_found", "", ("drafts/c-404.json",)
    ),
    Case("rust file", RUST_FILE_NOT_FOUND, "file_not_found", "file_not_found", ""),
    Case(
        "python permission",
        PERMISSION_DENIED,
        "permission_denied",
        "permission_denied",
        "",
        ("/var/reports/q3.csv",),
    ),
    Case("rust permission", RUST_PERMISSION_DENIED, "permission_denied", "permission_denied", ""),
    # Remote services
    Case("requests 429", RATE_LIMITED, "rate_limited", "rate_limited", "", ("rate limit",)),
    Case("openai 429", OPENAI_RATE_LIMITED, "rate_limited", "rate_limited", ""),
    Case("httpx 401", HTTP_AUTH, "http_auth", "http_auth", "", ("401",)),
    Case(
        "requests 404",
        HTTP_NOT_FOUND,
        "http_not_found",
        "http_not_found",
        "",
        ("https://api.crm.example.com/v2/customers/c-404",),
    ),
    Case("axios 422", HTTP_CLIENT, "http_client_error", "http_client", "", ("422",)),
    Case(
        "requests 503",
        HTTP_SERVER,
        "server_error",
        "server_error",
        "",
        ("503", "Service Unavailable"),
    ),
    Case("grpc deadline", GRPC_DEADLINE, "timeout", "timeout", "", ("DEADLINE_EXCEEDED",)),
    Case("pg statement timeout", PG_STATEMENT_TIMEOUT, "timeout", "timeout", ""),
    Case(
        "psycopg refused",
        CONNECTION_REFUSED,
        "connection_failed",
        "connection",
        "",
        ("10.0.3.9", "5432"),
    ),
    Case(
        "node refused",
        NODE_ECONNREFUSED,
        "connection_failed",
        "connection",
        "",
        ("127.0.0.1:6379",),
    ),
    Case("go dial", GO_DIAL, "connection_failed", "connection", "", ("10.0.3.9:5432",)),
    # Malformed input
    Case("python json", PY_JSON, "malformed_json", "malformed_json", "", ("line 1 column 1",)),
    Case(
        "engine args json",
        "invalid arguments JSON: Expecting ',' delimiter: line 1 column 12 (char 11)",
        "malformed_json",
        "malformed_json",
        "",
        ("Expecting ',' delimiter",),
    ),
    Case("node json", NODE_JSON, "malformed_json", "malformed_json", "", ("position 5",)),
    Case("serde json", SERDE_JSON, "malformed_json", "malformed_json", ""),
    Case("go json", GO_JSON, "malformed_json", "malformed_json", "", ("invalid character 'x'",)),
    # Resources and paths
    Case(
        "fs.write on a full disk",
        "Traceback (most recent call last):\n"
        + py_frames(("/srv/app/agenttx/tools/builtin/fs.py", 170, "_finish_write", "raise"))
        + "OSError: [Errno 28] No space left on device (disk full) writing 'notes/a.txt'\n",
        "disk_full",
        "server_error",
        "",
        ("disk is full", "notes/a.txt"),
    ),
    Case(
        "sqlite full",
        "sqlite3.OperationalError: database or disk is full",
        "disk_full",
        "server_error",
        "",
        ("disk is full",),
    ),
    Case(
        "fs.write under a file",
        "NotADirectoryError: [Errno 20] Not a directory: 'plain.txt' is a file, so "
        "'plain.txt/sub.txt' cannot be made",
        "not_a_directory",
        "file_not_found",
        "",
        ("'plain.txt' is a file",),
    ),
    Case(
        "a reference into a staged gateway call's output",
        "staged output ${steps.1.content}: step 1 is a staged call (files.write_file) that runs "
        "only after commit, so its output exists only after commit; read what you need with a "
        "read tool, or use the result after committing",
        "staged_output_reference",
        "unresolved_reference",
        "",
        ("exists only after commit", "files.write_file"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_realistic_error_becomes_its_rule_s_hint(case: Case) -> None:
    hint = clean_hint(case.raw)
    assert (hint.rule, hint.category, hint.key) == (case.rule, case.category, case.key), hint
    assert_valid(hint)
    assert_no_frames(hint)
    for fragment in case.says:
        assert fragment in hint.text, hint.text


def test_every_built_in_rule_has_a_realistic_case() -> None:
    covered = {case.rule for case in CASES} | {case.rule for case in AGENT_CASES}
    assert {rule.id for rule in HintCleaner().rules} == covered


def test_the_hint_names_the_key_and_what_to_do() -> None:
    hint = clean_hint(PSYCOPG_FK)
    assert hint.text == (
        "Hint: customer_id 'c-404' is not in customers (foreign key); "
        "use an existing id or create it first."
    )


def test_hints_are_much_shorter_than_the_raw_errors() -> None:
    long_ones = [case.raw for case in CASES if len(case.raw) > 400]
    reductions = sorted(1 - len(clean_hint(raw).text) / len(raw) for raw in long_ones)
    assert reductions[len(reductions) // 2] > 0.81  # the reference's median


# --- Rule order and categories ------------------------------------------------------------------

RULE_ORDER = [
    "unresolved_reference",
    "unavailable_reference",
    "unknown_tool",
    "unexpected_argument",
    "tool_missing_argument",
    "out_of_range",
    "tool_argument_type",
    "pg_foreign_key",
    "mysql_foreign_key",
    "sqlite_foreign_key",
    "pg_unique",
    "mysql_unique",
    "sqlite_unique",
    "pg_not_null",
    "mysql_not_null",
    "sqlite_not_null",
    "missing_column",
    "missing_table",
    "record_not_found",
    "missing_field",
    "key_error",
    "missing_argument",
    "null_attribute",
    "null_pointer",
    "invalid_integer",
    "type_mismatch",
    "path_escape",
    "file_not_found",
    "permission_denied",
    "llm_auth",
    "llm_quota",
    "llm_server_error",
    "rate_limited",
    "http_auth",
    "http_not_found",
    "http_client_error",
    "server_error",
    "timeout",
    "connection_failed",
    "malformed_json",
    "disk_full",
    "not_a_directory",
    "staged_output_reference",
]


def test_built_in_rules_come_in_the_documented_order() -> None:
    assert [rule.id for rule in HintCleaner().rules] == RULE_ORDER
    documented = re.findall(r"^\| \d+ \| `([a-z_]+)` \|", DOCS.read_text(), re.MULTILINE)
    assert documented == RULE_ORDER


def test_the_first_matching_rule_wins() -> None:
    # A foreign key error wrapped in an HTTP 500: the specific cause is the better hint.
    raw = "HTTPError: 500 Server Error\n" + PSYCOPG_FK
    assert clean_hint(raw).rule == "pg_foreign_key"


def test_transient_and_argument_categories() -> None:
    assert {"timeout", "rate_limited", "connection", "server_error"} == TRANSIENT_CATEGORIES
    assert {"missing_argument", "type_mismatch", "invalid_integer", "missing_field"} <= (
        ARGUMENT_CATEGORIES
    )
    assert "malformed_json" in ARGUMENT_CATEGORIES
    assert not TRANSIENT_CATEGORIES & ARGUMENT_CATEGORIES
    assert set(Category) >= TRANSIENT_CATEGORIES | ARGUMENT_CATEGORIES
    assert clean_hint(GRPC_DEADLINE).transient
    assert clean_hint(CONNECTION_REFUSED).transient
    assert not clean_hint(PSYCOPG_FK).transient
    assert not clean_hint(MISSING_ARGUMENT).transient


# --- The needle prefilter -----------------------------------------------------------------------


def first_matching_rule(line: str) -> str:
    """What the rule table means, tried slowly: every rule in order, a rule with needles only if
    one occurs in the lowercased error, and the first rule with a matching pattern wins.

    ``line`` is one line that starts with no frame furniture, so the patterns see ``"\\n" + line``.
    """
    message = "\n" + line
    low = message.lower()
    for rule in BUILTIN_RULES:
        if rule.needles and not any(needle in low for needle in rule.needles):
            continue
        if any(pattern.regex.search(message) for pattern in rule.patterns):
            return rule.id
    return "fallback"


BUILTIN_RULES = HintCleaner().rules
NEEDLES = sorted({needle for rule in BUILTIN_RULES for needle in rule.needles})
CASE_LINES = sorted({line for case in CASES for line in case.raw.splitlines() if line.strip()})
PATTERN_WORDS = sorted(  # literal text of the patterns: "Bad Gateway", "INVALID_ARGUMENT", …
    {
        word
        for rule in BUILTIN_RULES
        for pattern in rule.patterns
        for word in re.findall(r"[A-Za-z_ ]{4,}", pattern.regex.pattern)
    }
)


def test_the_prefilter_agrees_with_trying_every_rule_in_order() -> None:
    lines = ["E: " + piece for piece in NEEDLES + PATTERN_WORDS]
    lines += ["E: " + " ".join(case.raw.split()) for case in CASES]  # every rule matches one
    for line in lines:
        assert clean_hint(line).rule == first_matching_rule(line), line


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(NEEDLES + PATTERN_WORDS + CASE_LINES) | st.text(max_size=8), max_size=6
    )
)
def test_the_prefilter_never_changes_which_rule_matches(pieces: list[str]) -> None:
    line = "E: " + " ".join(pieces).replace("\r", " ").replace("\n", " ")
    assert clean_hint(line).rule == first_matching_rule(line)


def test_needles_never_change_the_hint_of_a_realistic_error(tmp_path: Path) -> None:
    # The same rules without needles: every rule is tried, in order, on every error.
    builtin = resources.files("agenttx.core.hints").joinpath("hint_rules.toml").read_text("utf-8")
    rules = tmp_path / "no_needles.toml"
    rules.write_text(re.sub(r"(?m)^needles = .*\n", "", builtin))
    every_rule = HintCleaner([rules], include_builtin=False)
    assert [rule.id for rule in every_rule.rules] == RULE_ORDER
    assert not any(rule.needles for rule in every_rule.rules)
    for case in CASES:
        assert clean_hint(case.raw) == every_rule.clean(case.raw), case.name


# --- Input cap ----------------------------------------------------------------------------------

FRAME = '  File "/srv/app/agent/filler.py", line 10, in filler\n    filler()\n'


def test_long_input_keeps_the_head() -> None:
    # Java prints the exception first; the frames after it may run for megabytes.
    raw = JAVA_INVALID_INT + "\tat com.acme.Filler.run(Filler.java:1)\n" * 20_000
    assert len(raw) > 4 * MAX_INPUT_CHARS
    assert clean_hint(raw).rule == "invalid_integer"


def test_long_input_keeps_the_tail() -> None:
    # Python prints the exception last, after the frames.
    raw = "Traceback (most recent call last):\n" + FRAME * 5_000 + "KeyError: 'customer_id'\n"
    assert clean_hint(raw).key == "customer_id"


def test_long_input_drops_the_middle() -> None:
    # Of 256 KiB, the first 16 KiB and the last 48 KiB are read: an error at 100 KiB is not.
    filler = "x" * 99 + "\n"
    raw = filler * 1024 + "KeyError: 'customer_id'\n" + filler * 1600
    hint = clean_hint(raw)
    assert hint.rule == "fallback"
    assert "customer_id" not in hint.text
    assert_valid(hint)


def test_huge_input_is_cleaned_and_valid() -> None:
    hint = clean_hint("a" * 10_000_000)
    assert hint.rule == "fallback"
    assert_valid(hint)


# --- Fallback -----------------------------------------------------------------------------------


def test_fallback_uses_the_deepest_java_cause() -> None:
    raw = (
        "com.acme.billing.SettlementException: settlement failed\n"
        "\tat com.acme.billing.Settler.run(Settler.java:40)\n"
        "Caused by: com.acme.ledger.LedgerMismatchException: ledger total 118.00 does not "
        "match invoice sum 120.00\n"
        "\tat com.acme.ledger.Ledger.check(Ledger.java:77)\n"
        "\t... 12 more\n"
    )
    hint = clean_hint(raw)
    assert (hint.rule, hint.category, hint.key) == ("fallback", "unknown", "")
    assert hint.text == (
        "Hint: LedgerMismatchException: ledger total 118.00 does not match invoice sum 120.00"
    )


def test_fallback_uses_the_last_anyhow_cause() -> None:
    raw = (
        "Error: failed to settle invoice inv-9\n\nCaused by:\n"
        "    0: ledger update failed\n    1: ledger total 118.00 does not match 120.00\n\n"
        "Stack backtrace:\n   0: ledger::settle\n             at ./src/ledger.rs:10:5\n"
    )
    assert clean_hint(raw).text == "Hint: ledger total 118.00 does not match 120.00"


def test_fallback_uses_the_last_python_exception() -> None:
    raw = (
        "Traceback (most recent call last):\n"
        + FRAME * 3
        + "agent.ledger.LedgerMismatchError: ledger total 118.00 does not match 120.00\n"
    )
    assert clean_hint(raw).text == (
        "Hint: LedgerMismatchError: ledger total 118.00 does not match 120.00"
    )


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (
            "thread 'main' panicked at src/ledger.rs:14:9:\nledger total does not match\n"
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
            "Hint: ledger total does not match",
        ),
        (
            "thread 'main' panicked at 'ledger total does not match', src/ledger.rs:14:9\n",
            "Hint: ledger total does not match",
        ),
        (
            "panic: ledger total does not match\n\ngoroutine 1 [running]:\nmain.main()\n"
            "\t/src/main.go:9 +0x1d\nexit status 2\n",
            "Hint: panic: ledger total does not match",
        ),
        (
            "Error: ledger total does not match\n    at settle (/srv/app/ledger.js:3:9)\n",
            "Hint: ledger total does not match",
        ),
        ("the ledger is closed for today", "Hint: the ledger is closed for today"),
        # a downstream server's text: what went wrong comes first, the detail after it
        ("no such key: zzz\nknown keys: color, shape", "Hint: no such key: zzz"),
        (
            "Traceback (most recent call last):\n"
            + FRAME
            + "tools.ledger.LedgerClosed: closed for 2026-10\nsee the runbook\n",
            "Hint: LedgerClosed: closed for 2026-10",
        ),
        ("", "Hint: the tool failed without an error message; check its arguments and retry."),
    ],
    ids=[
        "rust panic",
        "old rust panic",
        "go panic",
        "node error",
        "plain",
        "first line",
        "unknown class",
        "empty",
    ],
)
def test_fallback_message(raw: str, text: str) -> None:
    hint = clean_hint(raw)
    assert (hint.rule, hint.category, hint.text) == ("fallback", "unknown", text)


def test_fallback_never_shows_a_stack_frame() -> None:
    only_frames = "Traceback (most recent call last):\n" + FRAME * 3
    hint = clean_hint(only_frames)
    assert hint.rule == "fallback"
    assert "filler" not in hint.text
    assert_valid(hint)
    # Frames out of place are not picked either: after "Caused by:", or not indented.
    for raw in (
        'Caused by: File "/srv/app/x.py", line 3, in f',
        "LedgerError: totals differ\nat com.acme.Ledger.check(Ledger.java:77)",
        "Error: totals differ\n    at settle (/srv/app/ledger.js:3:9)\nat main (/srv/main.js:1:1)",
    ):
        hint = clean_hint(raw)
        assert_no_frames(hint)
        assert_valid(hint)


# --- Length -------------------------------------------------------------------------------------


def test_long_hints_are_cut_with_an_ellipsis() -> None:
    raw = "agent.errors.ReportError: " + "the quarterly report is incomplete " * 30
    hint = clean_hint(raw)
    assert len(hint.text) <= 240
    assert hint.text.endswith("…")
    assert_valid(hint)


def test_max_len_is_configurable() -> None:
    cleaner = HintCleaner(max_len=60)
    hint = cleaner.clean(PSYCOPG_FK)
    assert len(hint.text) <= 60
    assert hint.text.endswith("…")
    assert hint.key == "customer_id"
    with pytest.raises(InvalidArgument, match="max_len"):
        HintCleaner(max_len=10)


def test_a_long_value_does_not_crowd_out_the_advice() -> None:
    raw = f"KeyError: '{'k' * 500}'"
    hint = clean_hint(raw)
    assert "…" in hint.text
    assert_valid(hint)


# --- Redaction ----------------------------------------------------------------------------------

SECRETS = [
    ("Authorization: Bearer abc.DEF-123_xyz", "abc.DEF-123_xyz", "Authorization: Bearer ***"),
    (
        '"authorization": "Basic dXNlcjpodW50ZXIy"',
        "dXNlcjpodW50ZXIy",
        '"authorization": "Basic ***"',
    ),
    ("retrying with bearer eyJhbGciOi.payload.sig", "eyJhbGciOi", "bearer ***"),
    ("connect(password=hunter2, user=ada)", "hunter2", "password=***"),
    ('{"password": "correct horse battery"}', "correct horse", '"password": "***"'),
    ("api_key=AbC123xyz789", "AbC123xyz789", "api_key=***"),
    ("STRIPE_SECRET=whsec_0123456789", "whsec_0123456789", "STRIPE_SECRET=***"),
    ("session token: tok_9f8e7d6c", "tok_9f8e7d6c", "token: ***"),
    (
        "could not connect to postgresql://ada:hunter2@db.internal:5432/shop",
        "hunter2",
        "postgresql://ada:***@db.internal:5432/shop",
    ),
    ("aws key AKIAIOSFODNN7EXAMPLE leaked", "AKIAIOSFODNN7EXAMPLE", "aws key *** leaked"),
    ("used sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e", "4f9a8b7c6d5e4f3a2b1c", "used ***"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N",
        "jwt ***",
    ),
    ("token ghp_0123456789abcdefghijABCDEFGHIJ012345 rejected", "ghp_0123", "token *** rejected"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7",
        "-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----",
    ),
]


@pytest.mark.parametrize(("text", "secret", "expected"), SECRETS, ids=[s[1][:12] for s in SECRETS])
def test_redact_masks_each_kind_of_secret(text: str, secret: str, expected: str) -> None:
    masked = redact(text)
    assert secret not in masked
    assert expected in masked


@pytest.mark.parametrize(("text", "secret", "expected"), SECRETS, ids=[s[1][:12] for s in SECRETS])
def test_hints_never_show_a_secret(text: str, secret: str, expected: str) -> None:
    for raw in (f"agent.errors.SyncError: {text}", f"KeyError: '{text}'"):
        hint = clean_hint(raw)
        assert secret not in hint.text
        assert secret not in hint.key
        assert_valid(hint)


def test_redact_leaves_ordinary_text_alone() -> None:
    text = (
        "insert or update violates foreign key constraint; Key (customer_id)=(c-404); "
        "max_tokens=100; idempotency_key: wf-3; https://example.com/a?b=c"
    )
    assert redact(text) == text


def test_a_value_shown_with_a_secret_column_is_masked() -> None:
    raw = 'duplicate key value violates unique constraint "users_password_key"\n' + (
        "DETAIL:  Key (password)=(hunter2) already exists."
    )
    hint = clean_hint(raw)
    assert hint.key == "password"
    assert "hunter2" not in hint.text
    assert "'***'" in hint.text


def test_secrets_in_urls_of_http_errors_are_redacted() -> None:
    raw = (
        "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
        "https://ada:hunter2@api.example.com/v2/customers/c-404?api_key=sk-live-4f9a8b7c6d5e4f3a"
    )
    hint = clean_hint(raw)
    assert hint.rule == "http_not_found"
    assert "hunter2" not in hint.text
    assert "sk-live" not in hint.text


# --- User rule files ----------------------------------------------------------------------------

USER_RULES = """
[[rule]]
id = "out_of_stock"
category = "not_found"
needles = ["out of stock"]
key = "sku"
template = "SKU {sku} is out of stock; choose another SKU[ (only {left} left)]."
patterns = ['''OutOfStock: sku (?P<sku>[\\w-]+) is out of stock(?:, (?P<left>\\d+) left)?''']

[[rule]]
id = "key_error"
category = "key_error"
template = "the session has no '{key}'; store it first."
patterns = ['''KeyError: '(?P<key>[^'\\n]+)\'''']
"""


def write(tmp_path: Path, text: str, name: str = "rules.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_user_rules_add_to_and_override_the_built_in_ones(tmp_path: Path) -> None:
    cleaner = HintCleaner([write(tmp_path, USER_RULES)])
    ids = [rule.id for rule in cleaner.rules]
    assert ids[:2] == ["out_of_stock", "key_error"]
    assert ids.count("key_error") == 1  # the user's replaces the built-in one
    assert len(ids) == len(RULE_ORDER) + 1
    assert cleaner.rules[0].source == str(tmp_path / "rules.toml")

    hint = cleaner.clean("Traceback (most recent call last):\nOutOfStock: sku A-7 is out of stock")
    assert hint == Hint(
        "Hint: SKU A-7 is out of stock; choose another SKU.", "not_found", "out_of_stock", "A-7"
    )
    assert cleaner.clean("OutOfStock: sku A-7 is out of stock, 2 left").text.endswith(
        "(only 2 left)."
    )
    assert (
        cleaner.clean(KEY_ERROR).text == "Hint: the session has no 'customer_id'; store it first."
    )
    assert cleaner.clean(PSYCOPG_FK).rule == "pg_foreign_key"  # the rest still works


def test_user_rules_are_tried_before_the_built_in_ones(tmp_path: Path) -> None:
    rules = """
[[rule]]
id = "billing_fk"
category = "foreign_key"
template = "create the customer first."
patterns = ['''invoices_customer_id_fkey''']
"""
    assert HintCleaner([write(tmp_path, rules)]).clean(PSYCOPG_FK).rule == "billing_fk"


def test_only_user_rules(tmp_path: Path) -> None:
    cleaner = HintCleaner([write(tmp_path, USER_RULES)], include_builtin=False)
    assert [rule.id for rule in cleaner.rules] == ["out_of_stock", "key_error"]
    assert cleaner.clean(PSYCOPG_FK).rule == "fallback"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "[[rule]]\nid = 'bad'\ncategory = 'timeout'\ntemplate = 'x'\npatterns = ['(unclosed']",
            "rule 'bad': pattern 1 is not a valid regular expression",
        ),
        (
            "[[rule]]\nid = 'bad'\ncategory = 'timeout'\ntemplate = 'x'\n",
            "rule 'bad': needs 'patterns'",
        ),
        (
            "[[rule]]\ncategory = 'timeout'\ntemplate = 'x'\npatterns = ['x']\n",
            "rule #1: needs an 'id'",
        ),
        (
            "[[rule]]\nid = 'bad'\ncategory = 'slow'\ntemplate = 'x'\npatterns = ['x']\n",
            "rule 'bad': 'category' 'slow' is not one of",
        ),
        (
            "[[rule]]\nid = 'bad'\ncategory = 'timeout'\npatterns = ['x']\n",
            "pattern 1 has no template",
        ),
        (
            "[[rule]]\nid = 'bad'\ncategory = 'timeout'\ntemplate = '{host} is slow'\n"
            "patterns = ['timed out']\n",
            "pattern 1 has no group host",
        ),
        (
            "[[rule]]\nid = 'bad'\ncategory = 'timeout'\ntemplate = 'slow [{host}'\n"
            "patterns = ['timed out']\n",
            "template of pattern 1: an optional part '[' is never closed",
        ),
        (
            "[[rule]]\nid = 'bad'\ncategory = 'timeout'\ntemplate = 'x'\npatterns = ['x']\n"
            "pattern = 'typo'\n",
            "unknown field pattern",
        ),
        (
            "[[rule]]\nid = 'bad'\ncategory = 'timeout'\ntemplate = 'x'\npatterns = ['x']\n"
            "key = 'host'\n",
            "'key' names group 'host', which no pattern has",
        ),
        ("[[rules]]\nid = 'bad'\n", "unknown top-level key rules"),
        ("[[rule]\nid = 'bad'", "not valid TOML"),
    ],
)
def test_a_bad_rule_file_is_rejected_naming_file_rule_and_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidArgument) as info:
        HintCleaner([path])
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_a_rule_id_defined_twice_is_rejected(tmp_path: Path) -> None:
    first = write(tmp_path, USER_RULES, "a.toml")
    second = write(tmp_path, USER_RULES, "b.toml")
    with pytest.raises(InvalidArgument, match=r"'out_of_stock' is already defined in .*a\.toml"):
        HintCleaner([first, second])


def test_a_missing_rule_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot read the file"):
        HintCleaner([tmp_path / "absent.toml"])


# --- Robustness ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "\x00\x01\x02\x7f\x80\x9f",
        bytes(range(256)).decode("latin-1") * 40,
        "\ud800\udfff lone surrogates \udc80",
        "\u2028line\u2029separators\x85and\x0bvertical\x0ctabs\r\n",
        "\n" * 100_000,
        "KeyError: '\ud800'",
        "' is not of type 'integer'\n" * 5_000,
        "Key (" * 20_000,
        "unresolved reference ${steps.1." + "a." * 10_000,
    ],
    ids=[
        "controls",
        "latin1",
        "surrogates",
        "separators",
        "newlines",
        "key surrogate",
        "repeated",
        "open parens",
        "deep path",
    ],
)
def test_garbage_gives_a_valid_hint(raw: str) -> None:
    assert_valid(clean_hint(raw))


FRAGMENTS = [
    "\n",
    '  File "x.py", line 1, in f\n    f()\n',
    "\tat a.B.c(B.java:1)\n",
    "    at f (x.js:1:1)\n",
    "Caused by: ",
    "KeyError: ",
    "'",
    '"',
    "`",
    "(",
    ")",
    "=",
    "Key (",
    ") is not present in table ",
    "already exists",
    "column ",
    "does not exist",
    "TypeError: ",
    "missing field ",
    "required",
    "NoneType",
    'because "',
    '" is null',
    "timed out",
    "429",
    "HTTP 500",
    "status: 404",
    "connect ECONNREFUSED ",
    "Expecting value: line 1 column 1",
    "${steps.",
    "}",
    "password=",
    "Bearer ",
    "postgresql://u:p@h",
    "eyJhbGciOiJIUzI1NiJ9",
    "sk-",
    "AKIA",
    "\x00",
    "é",
    "İ",
]


@settings(max_examples=300, deadline=None)
@given(st.text() | st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8)).map("".join))
def test_any_text_gives_a_valid_hint(raw: str) -> None:
    hint = clean_hint(raw)
    assert_valid(hint)
    assert clean_hint(raw) == hint  # deterministic


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_redact_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_a_cleaner_is_shared_safely_between_threads() -> None:
    raws = [case.raw for case in CASES] * 8
    cleaner = HintCleaner()
    expected = [cleaner.clean(raw) for raw in raws]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(cleaner.clean, raws)) == expected


def test_the_controller_retries_exactly_these_categories() -> None:
    from agenttx.core import controller

    assert controller.DEFAULT_RETRY_CATEGORIES == TRANSIENT_CATEGORIES | ARGUMENT_CATEGORIES
