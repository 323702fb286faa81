// Where the Worker's CPU time goes during a phase (`npm run bench -- --profile`): V8's sampling
// profiler over the inspector protocol, on the isolate that runs the Worker and its Durable
// Objects. The raw profile is saved as .cpuprofile (open it in Chrome DevTools > Performance);
// the summary lists functions by self time and by inclusive time.
import { once } from 'node:events';
import WebSocket from 'ws';
import { round } from '../load/metrics.mjs';

/** The inspector target of the user Worker in Miniflare's list. */
const USER_WORKER = 'core:user:';
const SAMPLING_INTERVAL_US = 200;

/** Connects to the Worker's isolate; `start()` then `stop()` returns one phase's profile. */
export async function connectProfiler(port) {
  const targets = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
  const target = targets.find((t) => t.id === USER_WORKER);
  if (!target) {
    throw new Error(`no inspector target ${USER_WORKER} (found ${targets.map((t) => t.id).join(', ')})`);
  }
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await once(ws, 'open');
  let nextId = 1;
  const pending = new Map();
  ws.on('message', (data) => {
    const message = JSON.parse(String(data));
    const waiter = message.id !== undefined ? pending.get(message.id) : undefined;
    if (waiter) {
      pending.delete(message.id);
      if (message.error) {
        waiter.reject(new Error(message.error.message));
      } else {
        waiter.resolve(message.result);
      }
    }
  });
  const send = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: SAMPLING_INTERVAL_US });
  return {
    start: () => send('Profiler.start'),
    async stop() {
      const { profile } = await send('Profiler.stop');
      return profile;
    },
    close: () => ws.close(),
  };
}

function frameKey(node) {
  const { functionName, url, lineNumber } = node.callFrame;
  const file = url ? url.slice(url.lastIndexOf('/') + 1) : '';
  return `${functionName || '(anonymous)'}${file ? ` ${file}:${lineNumber + 1}` : ''}`;
}

/**
 * Self and inclusive time per function (a function counted once per sample however deep it
 * recurses), the share of samples the isolate was idle, and the top `top` entries of each list.
 */
export function summarizeProfile(profile, top = 20) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) {
    for (const c of n.children ?? []) {
      parent.set(c, n.id);
    }
  }
  const self = new Map();
  const total = new Map();
  let all = 0;
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? SAMPLING_INTERVAL_US;
    all += us;
    const leaf = byId.get(id);
    if (!leaf) {
      return;
    }
    const leafKey = frameKey(leaf);
    self.set(leafKey, (self.get(leafKey) ?? 0) + us);
    const seen = new Set();
    for (let n = leaf; n; n = byId.get(parent.get(n.id))) {
      const key = frameKey(n);
      if (!seen.has(key)) {
        seen.add(key);
        total.set(key, (total.get(key) ?? 0) + us);
      }
    }
  });
  const list = (map) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .filter(([key]) => key !== '(root)')
      .slice(0, top)
      .map(([fn, us]) => ({ fn, ms: round(us / 1000), pct: round((100 * us) / Math.max(all, 1)) }));
  const idle = self.get('(idle)') ?? 0;
  return {
    sampledMs: round(all / 1000),
    busyPct: round((100 * (all - idle)) / Math.max(all, 1)),
    self: list(self),
    inclusive: list(total),
  };
}
