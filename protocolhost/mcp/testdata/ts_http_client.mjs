#!/usr/bin/env node
// The official TypeScript MCP client over Streamable HTTP: node ts_http_client.mjs <url>
// <bearer token> <json array of calls [{name, arguments}]>. Prints one JSON object: the
// listed tool names and each call's result (or error).
// FLEDGE_TEST_ROOTS (a JSON array of file:// URIs): the roots the client offers.
// FLEDGE_TEST_HOLD_MS: the session stays open this long after its calls (to overlap others).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, token, callsJSON] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const roots = process.env.FLEDGE_TEST_ROOTS ? JSON.parse(process.env.FLEDGE_TEST_ROOTS) : null;
const client = new Client({ name: 'fledge-ts-http-test', version: '1.0.0' }, roots ? { capabilities: { roots: { listChanged: true } } } : undefined);
if (roots) {
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: roots.map((uri) => ({ uri })) }));
}
await client.connect(transport);
const listed = await client.listTools();
const out = { server: client.getServerVersion(), sessionId: transport.sessionId, tools: listed.tools.map((t) => ({ name: t.name, inputSchema: t.inputSchema })), calls: [] };
for (const call of JSON.parse(callsJSON) || []) {
  try {
    out.calls.push(await client.callTool(call));
  } catch (e) {
    out.calls.push({ thrown: String(e && e.message ? e.message : e) });
  }
}
const hold = Number(process.env.FLEDGE_TEST_HOLD_MS || 0);
if (hold > 0) await new Promise((r) => setTimeout(r, hold));
await transport.terminateSession();
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
