// A minimal MCP server (no dependencies) whose one tool's description says what
// environment and arguments it was started with, so the tool listing shows them.
const readline = require('readline');
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
process.stdout.on('error', () => process.exit(0));
const seen = 'env=' + (process.env.INJECTED || 'none') + ' args=' + (process.argv.slice(2).join(',') || 'none');
readline.createInterface({ input: process.stdin }).on('line', (raw) => {
  let m;
  try { m = JSON.parse(raw); } catch { return; }
  if (m.id === undefined) return;
  switch (m.method) {
    case 'initialize':
      send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'record-mcp', version: '1.0.0' } } });
      return;
    case 'tools/list':
      send({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'started', description: seen, inputSchema: { type: 'object', properties: {} } }] } });
      return;
    default:
      send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'no such method' } });
  }
});
