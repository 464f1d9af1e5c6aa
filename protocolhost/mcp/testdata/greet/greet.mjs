#!/usr/bin/env node
// A fledge-v1 plugin whose commands declare typed args: fledge passes them as
// --name=value / --flag on argv (the init message's args).
import readline from 'node:readline';

const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const rl = readline.createInterface({ input: process.stdin });
let init = null;

rl.on('line', (raw) => {
  let m;
  try { m = JSON.parse(raw); } catch { return; }
  if (!init) { init = m; return run(); }
  if (m.id === 'q1' && m.type === 'response') { send({ type: 'output', text: 'answer: ' + m.value + '\n' }); process.exit(0); }
  if (m.type === 'cancel') { process.stderr.write('greet: cancelled (' + m.reason + ')\n'); process.exit(3); }
});

function run() {
  const opts = {};
  for (const a of init.args) {
    const mm = /^--([^=]+)(?:=(.*))?$/.exec(a);
    if (mm) opts[mm[1]] = mm[2] === undefined ? true : mm[2];
  }
  if (init.command === 'greet') {
    let text = 'Hello, ' + opts.name + '!';
    if (opts.shout) text = text.toUpperCase();
    const n = Number(opts.times || 1);
    send({ type: 'output', text: Array(n).fill(text).join('\n') + '\n' });
    process.exit(0);
  }
  if (init.command === 'ask') {
    send({ type: 'prompt', id: 'q1', message: 'Favourite colour?' });
  }
}
