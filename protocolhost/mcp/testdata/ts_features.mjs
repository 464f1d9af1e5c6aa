#!/usr/bin/env node
// The official TypeScript MCP client against `fledge serve --mcp` in front of the official
// everything server: node ts_features.mjs <fledge binary> <json array of fledge args>
// <plugin name>, or node ts_features.mjs <http URL of fledge serve --mcp --listen> <bearer
// token> <plugin name>. It offers sampling and elicitation (canned answers), walks every MCP
// feature through fledge, and prints one JSON object of what it saw.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const [fledge, argsJSON, plugin] = process.argv.slice(2);
const tool = (n) => `plugin_${plugin}_${n}`;
const transport = fledge.startsWith('http')
  ? new StreamableHTTPClientTransport(new URL(fledge), { requestInit: { headers: { Authorization: `Bearer ${argsJSON}` } } })
  : new StdioClientTransport({ command: fledge, args: JSON.parse(argsJSON), env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'fledge-ts-features', version: '1.0.0' }, { capabilities: { sampling: {}, elicitation: { form: {} } } });
const out = { sampled: [], elicited: [], logs: [], updated: [], errors: {} };
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  out.sampled.push(req.params.messages.length);
  return { model: 'canned-model', role: 'assistant', content: { type: 'text', text: 'canned answer from the client' } };
});
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  out.elicited.push(req.params.message);
  return { action: 'accept', content: { name: 'Ada Lovelace' } };
});
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { out.logs.push({ level: n.params.level, logger: n.params.logger }); });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { out.updated.push(n.params.uri); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function step(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out.errors[name] = String(e && e.message ? e.message : e);
  }
}

await client.connect(transport);
out.capabilities = client.getServerCapabilities();
await step('ping', async () => { await client.ping(); return true; });
await step('tools', async () => (await client.listTools()).tools.map((t) => ({ name: t.name, title: t.title, outputSchema: t.outputSchema, annotations: t.annotations })));
await step('prompts', async () => (await client.listPrompts()).prompts);
await step('resources', async () => {
  const all = [];
  let cursor;
  for (let i = 0; i < 50; i++) {
    const page = await client.listResources(cursor ? { cursor } : {});
    all.push(...page.resources.map((r) => r.uri));
    if (!page.nextCursor) break;
    cursor = page.nextCursor;
  }
  return all;
});
await step('templates', async () => (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate));
await step('simplePrompt', async () => client.getPrompt({ name: tool('simple-prompt') }));
await step('argsPrompt', async () => client.getPrompt({ name: tool('args-prompt'), arguments: { city: 'Lyon' } }));
await step('resourcePrompt', async () => client.getPrompt({ name: tool('resource-prompt'), arguments: { resourceType: 'Text', resourceId: '3' } }));
await step('complete', async () => client.complete({ ref: { type: 'ref/prompt', name: tool('completable-prompt') }, argument: { name: 'department', value: 'E' } }));
await step('readListed', async () => client.readResource({ uri: out.resources[0] }));
await step('readTemplated', async () => client.readResource({ uri: `fledge:${plugin}/demo://resource/dynamic/text/7` }));
await step('readForeign', async () => client.readResource({ uri: 'demo://resource/dynamic/text/7' }));
await step('structured', async () => client.callTool({ name: tool('get-structured-content'), arguments: { location: 'Chicago' } }));
await step('image', async () => client.callTool({ name: tool('get-tiny-image'), arguments: {} }));
await step('links', async () => client.callTool({ name: tool('get-resource-links'), arguments: { count: 2 } }));
await step('embedded', async () => client.callTool({ name: tool('get-resource-reference'), arguments: { resourceType: 'Text', resourceId: 2 } }));
await step('annotated', async () => client.callTool({ name: tool('get-annotated-message'), arguments: { messageType: 'error', includeImage: true } }));
// The link a tool gave is read through fledge as given.
await step('readLink', async () => {
  const link = (out.links?.content || []).find((c) => c.type === 'resource_link');
  return client.readResource({ uri: link.uri });
});
// Logging: the level set through fledge reaches the server; its messages come back named.
await step('setLevel', async () => { await client.setLoggingLevel('debug'); return true; });
await step('logOn', async () => client.callTool({ name: tool('toggle-simulated-logging'), arguments: {} }));
await sleep(3500);
await step('logOff', async () => client.callTool({ name: tool('toggle-simulated-logging'), arguments: {} }));
// Subscriptions: an update of a subscribed resource comes back wrapped.
const subURI = `fledge:${plugin}/demo://resource/dynamic/text/1`;
await step('subscribe', async () => { await client.subscribeResource({ uri: subURI }); return true; });
await step('updatesOn', async () => client.callTool({ name: tool('toggle-subscriber-updates'), arguments: {} }));
for (let i = 0; i < 40 && out.updated.length === 0; i++) await sleep(250);
await step('unsubscribe', async () => { await client.unsubscribeResource({ uri: subURI }); return true; });
await step('updatesOff', async () => client.callTool({ name: tool('toggle-subscriber-updates'), arguments: {} }));
// Progress of a long-running call, with the client's own token.
out.progress = [];
await step('longRun', async () => client.callTool({ name: tool('trigger-long-running-operation'), arguments: { duration: 2, steps: 4 } }, undefined,
  { onprogress: (p) => out.progress.push(p), timeout: 60000 }));
// Cancellation of a call in flight: the client gives up after 1.5 s of a 30 s operation.
const t0 = Date.now();
await step('cancelled', async () => client.callTool({ name: tool('trigger-long-running-operation'), arguments: { duration: 30, steps: 30 } }, undefined,
  { signal: AbortSignal.timeout(1500) }));
out.cancelledAfterMs = Date.now() - t0;
// After the cancellation the server still answers.
await step('afterCancel', async () => client.callTool({ name: tool('echo'), arguments: { message: 'still here' } }));
await step('sampling', async () => client.callTool({ name: tool('trigger-sampling-request'), arguments: { prompt: 'say hi', maxTokens: 20 } }));
await step('elicitation', async () => client.callTool({ name: tool('trigger-elicitation-request'), arguments: {} }));
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
