#!/usr/bin/env node
// The official TypeScript MCP client against `fledge serve --mcp`: node ts_client.mjs
// <fledge binary> <json array of fledge args> <json array of calls [{name, arguments}]>.
// Prints one JSON object: the listed tool names and each call's result (or error).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [fledge, argsJSON, callsJSON] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: fledge,
  args: JSON.parse(argsJSON),
  env: process.env,
  stderr: 'inherit',
});
// FLEDGE_TEST_ROOTS (a JSON array of file:// URIs): the client offers these MCP roots, as
// an editor offers the folder it has open.
const roots = process.env.FLEDGE_TEST_ROOTS ? JSON.parse(process.env.FLEDGE_TEST_ROOTS) : null;
const client = new Client({ name: 'fledge-ts-test', version: '1.0.0' }, roots ? { capabilities: { roots: { listChanged: true } } } : undefined);
if (roots) {
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: roots.map((uri) => ({ uri })) }));
}
await client.connect(transport);
const listed = await client.listTools();
const out = { server: client.getServerVersion(), tools: listed.tools.map((t) => ({ name: t.name, inputSchema: t.inputSchema })), calls: [] };
for (const call of JSON.parse(callsJSON) || []) {
  try {
    // abortAfterMs: the client gives up on the call (notifications/cancelled to fledge).
    const { abortAfterMs, ...params } = call;
    const options = abortAfterMs ? { signal: AbortSignal.timeout(abortAfterMs) } : undefined;
    out.calls.push(await client.callTool(params, undefined, options));
  } catch (e) {
    out.calls.push({ thrown: String(e && e.message ? e.message : e) });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
