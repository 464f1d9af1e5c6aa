#!/usr/bin/env node
// An MCP server that keeps its state where programs usually do, with no flags: a file under
// os.homedir(), one under each XDG base directory, and one in its working directory. Its
// one tool, "remember", writes them and says where each went or why it failed.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const home = os.homedir();
const places = {
  home: path.join(home, '.homewriter', 'state.json'),
  config: path.join(process.env.XDG_CONFIG_HOME || path.join(home, '.config'), 'homewriter', 'config.json'),
  data: path.join(process.env.XDG_DATA_HOME || path.join(home, '.local', 'share'), 'homewriter', 'data.json'),
  state: path.join(process.env.XDG_STATE_HOME || path.join(home, '.local', 'state'), 'homewriter', 'log.json'),
  cache: path.join(process.env.XDG_CACHE_HOME || path.join(home, '.cache'), 'homewriter', 'cache.json'),
};
function remember() {
  const out = {};
  for (const [k, p] of Object.entries(places)) {
    try {
      fs.mkdirSync(path.dirname(p), { recursive: true });
      fs.writeFileSync(p, JSON.stringify({ remembered: k }));
      out[k] = 'ok ' + p;
    } catch (e) {
      out[k] = 'failed ' + p + ': ' + e.code;
    }
  }
  return out;
}
readline.createInterface({ input: process.stdin }).on('line', (raw) => {
  let m;
  try { m = JSON.parse(raw); } catch { return; }
  if (m.id === undefined) return;
  switch (m.method) {
    case 'initialize':
      send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'homewriter', version: '1.0.0' } } });
      return;
    case 'tools/list':
      send({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'remember', description: 'Remembers.', inputSchema: { type: 'object', properties: {} } }] } });
      return;
    case 'tools/call': {
      const r = remember();
      const failed = Object.values(r).some((v) => v.startsWith('failed'));
      send({ jsonrpc: '2.0', id: m.id, result: { isError: failed, content: [{ type: 'text', text: JSON.stringify(r) }] } });
      return;
    }
  }
  send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'method not found: ' + m.method } });
});
