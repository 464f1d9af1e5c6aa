#!/usr/bin/env node
// The official TypeScript MCP client, connected to `fledge serve --mcp`, watching the tool
// list change under it: node ts_listchanged.mjs <fledge binary> <json array of fledge args>
// <tool to call>.
//
// It lists the tools, calls the tool, and waits (at most 15 s) for
// notifications/tools/list_changed, then lists again and prints one JSON line:
// {"before": [...], "call": {...}, "notified": bool, "after": [...]}. Then, for each line
// read on stdin, it waits for one more notification (counted from the end of the previous
// step, so one that came meanwhile counts), lists again and prints {"notified", "after"}.
// End of stdin closes the client.
import readline from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [fledge, argsJSON, toolName] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: fledge, args: JSON.parse(argsJSON), env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'fledge-ts-listchanged', version: '1.0.0' });
let notified = 0;
let waiters = [];
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
  notified++;
  const w = waiters;
  waiters = [];
  w.forEach((f) => f());
});
// waitPast resolves true once more than n notifications came, false after 15 s.
function waitPast(n) {
  if (notified > n) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), 15000);
    waiters.push(() => { clearTimeout(t); resolve(notified > n); });
  });
}
const tools = async () => (await client.listTools()).tools.map((t) => ({ name: t.name, description: t.description }));
const print = (o) => process.stdout.write(JSON.stringify(o) + '\n');

await client.connect(transport);
const before = await tools();
const capabilities = client.getServerCapabilities();
// fledge adds its tools once the client is initialized: a notification of that may follow
// the first listing. Let it pass before counting.
await new Promise((r) => setTimeout(r, 500));
let mark = notified;
let call;
try {
  call = await client.callTool({ name: toolName, arguments: {} });
} catch (e) {
  call = { thrown: String(e && e.message ? e.message : e) };
}
let got = await waitPast(mark);
mark = notified;
print({ capabilities, before, call, notified: got, after: await tools() });
for await (const _ of readline.createInterface({ input: process.stdin })) {
  got = await waitPast(mark);
  mark = notified;
  print({ notified: got, after: await tools() });
}
await client.close();
