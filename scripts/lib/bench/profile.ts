// Where the Worker's CPU time goes during a phase (`npm run bench -- --profile`): V8's sampling
// profiler over the inspector protocol, on the isolate that runs the Worker and its Durable
// Objects. The raw profile is saved as .cpuprofile (open it in Chrome DevTools > Performance);
// the summary lists functions by self time and by inclusive time.
import { once } from 'node:events';
import WebSocket from 'ws';
import { round } from '../load/metrics.ts';

/** V8's CPU profile (Profiler.stop), as far as the summary reads it. */
export type CpuProfile = {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
  samples: number[];
  timeDeltas: number[];
};
export type ProfileEntry = { fn: string; ms: number; pct: number };
export type ProfileSummary = { sampledMs: number; busyPct: number; self: ProfileEntry[]; inclusive: ProfileEntry[] };
export type Profiler = {
  start(): Promise<unknown>;
  stop(): Promise<CpuProfile>;
  /**
   * Starts V8's sampling heap profiler, counting what the collections took too; with `liveOnly`,
   * only what is still alive when it stops (what a phase holds), sampled every `intervalBytes`.
   */
  startAllocations(options?: { liveOnly?: boolean; intervalBytes?: number }): Promise<unknown>;
  /** Stops it: the bytes the isolate allocated since startAllocations (V8's estimate from its samples), and the profile. */
  stopAllocations(): Promise<{ bytes: number; profile: HeapProfile }>;
  /** Bytes alive in the isolate's heap after a full collection (what an object's memory limit counts). */
  heapUsedAfterGc(): Promise<number>;
  close(): void;
};

/** The sampling heap profiler's tree, as far as the sums read it. */
export type HeapNode = { selfSize: number; callFrame?: { url: string; lineNumber: number }; children?: HeapNode[] };
/** V8's sampling heap profile (HeapProfiler.stopSampling); saved as .heapprofile, which DevTools opens. */
export type HeapProfile = { head: HeapNode };

/** Bytes in a sampling heap profile's tree: each node's selfSize is V8's estimate for its site. */
export function heapBytes(node: HeapNode): number {
  let bytes = node.selfSize;
  for (const child of node.children ?? []) {
    bytes += heapBytes(child);
  }
  return bytes;
}

/** One sample per this many bytes allocated, on average (V8's default). */
const HEAP_SAMPLING_INTERVAL_BYTES = 32 * 1024;

/** An inspector protocol message: a reply to one of ours (`id`), or an event. */
type InspectorMessage = { id?: number; result?: unknown; error?: { message: string } };

/** The inspector target of the user Worker in Miniflare's list. */
const USER_WORKER = 'core:user:';
const SAMPLING_INTERVAL_US = 200;

/** Connects to the Worker's isolate; `start()` then `stop()` returns one phase's profile. */
export async function connectProfiler(port: number): Promise<Profiler> {
  // The inspector's own list (workerd's, on this machine).
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as { id: string; webSocketDebuggerUrl: string }[];
  const target = targets.find((t) => t.id === USER_WORKER);
  if (!target) {
    throw new Error(`no inspector target ${USER_WORKER} (found ${targets.map((t) => t.id).join(', ')})`);
  }
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await once(ws, 'open');
  let nextId = 1;
  const pending = new Map<number, { resolve: (result: unknown) => void; reject: (error: Error) => void }>();
  ws.on('message', (data) => {
    const message: InspectorMessage = JSON.parse(String(data));
    const waiter = message.id !== undefined ? pending.get(message.id) : undefined;
    if (waiter && message.id !== undefined) {
      pending.delete(message.id);
      if (message.error) {
        waiter.reject(new Error(message.error.message));
      } else {
        waiter.resolve(message.result);
      }
    }
  });
  const send = (method: string, params: Record<string, unknown> = {}) =>
    new Promise<unknown>((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: SAMPLING_INTERVAL_US });
  return {
    start: () => send('Profiler.start'),
    async stop() {
      // Profiler.stop answers { profile }.
      const { profile } = (await send('Profiler.stop')) as { profile: CpuProfile };
      return profile;
    },
    startAllocations: ({ liveOnly = false, intervalBytes = HEAP_SAMPLING_INTERVAL_BYTES } = {}) =>
      send('HeapProfiler.startSampling', {
        samplingInterval: intervalBytes,
        includeObjectsCollectedByMajorGC: !liveOnly,
        includeObjectsCollectedByMinorGC: !liveOnly,
      }),
    async stopAllocations() {
      const { profile } = (await send('HeapProfiler.stopSampling')) as { profile: HeapProfile };
      return { bytes: heapBytes(profile.head), profile };
    },
    async heapUsedAfterGc() {
      await send('HeapProfiler.collectGarbage');
      const { usedSize } = (await send('Runtime.getHeapUsage')) as { usedSize: number };
      return usedSize;
    },
    close: () => ws.close(),
  };
}

function frameKey(node: CpuProfile['nodes'][number]): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const file = url ? url.slice(url.lastIndexOf('/') + 1) : '';
  return `${functionName || '(anonymous)'}${file ? ` ${file}:${lineNumber + 1}` : ''}`;
}

/**
 * Self and inclusive time per function (a function counted once per sample however deep it
 * recurses), the share of samples the isolate was idle, and the top `top` entries of each list.
 */
export function summarizeProfile(profile: CpuProfile, top = 20): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) {
    for (const c of n.children ?? []) {
      parent.set(c, n.id);
    }
  }
  const self = new Map<string, number>();
  const total = new Map<string, number>();
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
    const seen = new Set<string>();
    for (let n: CpuProfile['nodes'][number] | undefined = leaf; n; n = byId.get(parent.get(n.id) ?? -1)) {
      const key = frameKey(n);
      if (!seen.has(key)) {
        seen.add(key);
        total.set(key, (total.get(key) ?? 0) + us);
      }
    }
  });
  const list = (map: Map<string, number>): ProfileEntry[] =>
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
