// The official TypeScript MCP SDK's Client against AgentTx: tools/list, then every call of
// every_tool.json, over stdio or streamable HTTP. The SDK checks what the server sends the
// way TypeScript hosts do: the tools/list result against its zod schemas (every property
// schema an object), and each tools/call result's structuredContent against the tool's
// outputSchema (ajv), refusals (isError) too. This script only records what happened and
// prints one JSON object on stdout; tests/interop/test_interop_ts_sdk.py judges it.
//
//   node ts_sdk_client.mjs SDK_DIR SCENARIO stdio COMMAND [ARG ...]
//   node ts_sdk_client.mjs SDK_DIR SCENARIO http URL
//
// SDK_DIR is the installed package (node_modules/@modelcontextprotocol/sdk): the pinned
// install lives in a cache outside the tree, so it is imported by path.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, scenarioPath, transportKind, ...target] = process.argv.slice(2);

async function sdk(module) {
  return import(pathToFileURL(join(sdkDir, "dist", "esm", module)).href);
}

const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");

function transport() {
  if (transportKind === "stdio") {
    const [command, ...args] = target;
    // The whole environment, as pytest gave it (the SDK passes only a few variables by
    // default); the server's log lines go to this process's stderr.
    return new StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
  }
  if (transportKind === "http") {
    return new StreamableHTTPClientTransport(new URL(target[0]));
  }
  throw new Error(`unknown transport ${transportKind}`);
}

// {"$saved": "NAME.field"} → that field of the result saved as NAME; anything else as is.
function resolve(value, saved) {
  if (Array.isArray(value)) {
    return value.map((v) => resolve(v, saved));
  }
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0] === "$saved") {
      const [name, field] = value.$saved.split(".");
      if (!(name in saved) || !(field in saved[name])) {
        throw new Error(`nothing saved as ${value.$saved}`);
      }
      return saved[name][field];
    }
    return Object.fromEntries(keys.map((k) => [k, resolve(value[k], saved)]));
  }
  return value;
}

function describe(error) {
  return { name: error?.constructor?.name ?? "Error", code: error?.code, message: String(error?.message ?? error) };
}

const report = { sdk: JSON.parse(readFileSync(join(sdkDir, "package.json"), "utf8")).version };
const client = new Client({ name: "agenttx-interop-ts", version: "1.0.0" });
try {
  await client.connect(transport());
  report.server = client.getServerVersion();
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  report.tools = tools.map((t) => ({ name: t.name, annotations: t.annotations ?? null }));
  report.calls = [];
  const saved = {};
  const scenario = JSON.parse(readFileSync(scenarioPath, "utf8"));
  for (const step of scenario.calls) {
    const call = { tool: step.tool, expect: step.expect ?? "any" };
    report.calls.push(call);
    try {
      const result = await client.callTool({ name: step.tool, arguments: resolve(step.arguments, saved) });
      const content = result.structuredContent ?? null;
      call.isError = result.isError === true;
      call.ok = content?.ok ?? null;
      call.code = content?.error?.code ?? null;
      call.text = (result.content ?? []).map((c) => c.text ?? "").join("\n").slice(0, 500);
      if (step.save !== undefined) {
        saved[step.save] = content ?? {};
      }
    } catch (error) {
      call.error = describe(error); // the SDK refused the result (or the call failed)
    }
  }
} catch (error) {
  report.error = describe(error); // connect or tools/list: nothing past it can run
} finally {
  await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(report) + "\n");
