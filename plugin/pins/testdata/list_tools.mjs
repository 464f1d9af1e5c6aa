#!/usr/bin/env node
// Lists an MCP server's tools as fledge pins them: node list_tools.mjs <program> [args...]
// starts the server over stdio, speaks just enough of MCP (initialize, initialized,
// tools/list with its pages) and prints {"instructions", "tools": [{name, description,
// inputSchema}]} as JSON. No SDK, so any version of any server can be listed alike.
import { spawn } from 'node:child_process';
import readline from 'node:readline';

const [program, ...args] = process.argv.slice(2);
const child = spawn(program, args, { stdio: ['pipe', 'pipe', 'ignore'] });
const pending = new Map();
let next = 1;
const request = (method, params) => new Promise((resolve, reject) => {
  const id = next++;
  pending.set(id, { resolve, reject });
  child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
});
readline.createInterface({ input: child.stdout }).on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id !== undefined && pending.has(m.id) && m.method === undefined) {
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.error) p.reject(new Error(JSON.stringify(m.error))); else p.resolve(m.result);
  } else if (m.id !== undefined && m.method !== undefined) {
    // A request from the server (roots, sampling): refused, as a client offering nothing does.
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'not offered' } }) + '\n');
  }
});
const timer = setTimeout(() => { console.error('timed out'); child.kill('SIGKILL'); process.exit(2); }, 60000);
try {
  const init = await request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'fledge-pin-churn', version: '1' } });
  child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
  const tools = [];
  let cursor;
  do {
    const r = await request('tools/list', cursor ? { cursor } : {});
    tools.push(...r.tools.map((t) => ({ name: t.name, description: t.description || '', inputSchema: t.inputSchema })));
    cursor = r.nextCursor;
  } while (cursor);
  process.stdout.write(JSON.stringify({ instructions: init.instructions || '', tools }) + '\n');
  clearTimeout(timer);
  child.kill('SIGTERM');
  process.exit(0);
} catch (e) {
  console.error(String(e));
  child.kill('SIGKILL');
  process.exit(1);
}
