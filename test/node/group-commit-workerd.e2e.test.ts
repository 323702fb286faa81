// The edge's group commit (workers/edge/group-commit.ts) across real requests in workerd, where
// each request of a crowd is one call and its answer comes in a batch another request sent. Unit
// tests run every call inside one request and cannot see what workerd does between requests: it
// cancels as hung a request that waits on a promise another request settles (every request here
// but the first, when waiters awaited their answers), and when such waiters also kept a timer of
// their own to stay alive, 22 to 34 of the bench's 17,000 to 27,000 purchases a run still failed,
// as "I/O on behalf of a different request". Hence waiters that poll their own slots.
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { Log, LogLevel, Miniflare } from 'miniflare';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

// Each request runs one call through a GroupCommit whose batches go to a Durable Object that
// takes 2 ms over each, then reads its own request body: only code running as that request may.
const WORKER = `
import { DurableObject } from 'cloudflare:workers';
import { GroupCommit } from './workers/edge/group-commit';

export class Target extends DurableObject {
  async many(items) {
    await scheduler.wait(2);
    return items.map((n) => n * 10);
  }
}

const outcomes = { answered: 0, wrong: 0, failed: 0, batches: 0 };
const gc = new GroupCommit({
  maxBatch: 128,
  maxInFlight: 2,
  waitLimitMs: 10000,
  send: (_lane, calls) => {
    outcomes.batches++;
    return calls[0].env.TARGET.get(calls[0].env.TARGET.idFromName('one')).many(calls.map((c) => c.n));
  },
});
let next = 0;

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    if (url.pathname === '/outcomes') {
      return Response.json(outcomes);
    }
    const n = ++next;
    try {
      const out = await gc.run('one', { env, n }, (p) => ctx.waitUntil(p));
      // The request's own body, read after the wait: only this request's code may read it.
      const body = await request.text();
      outcomes[out === n * 10 && body === request.headers.get('x-body') ? 'answered' : 'wrong']++;
      return new Response(String(out));
    } catch (error) {
      outcomes.failed++;
      return new Response(String(error), { status: 503 });
    }
  },
};
`;

let mf: Miniflare;
let url: URL;

beforeAll(async () => {
  const bundled = await build({
    stdin: { contents: WORKER, resolveDir: root, loader: 'js', sourcefile: 'group-commit-worker.js' },
    bundle: true,
    format: 'esm',
    write: false,
    external: ['cloudflare:workers'],
  });
  mf = new Miniflare({
    modules: true,
    script: bundled.outputFiles[0]?.text ?? '',
    compatibilityDate: '2026-04-20',
    compatibilityFlags: ['nodejs_compat'],
    durableObjects: { TARGET: 'Target' },
    log: new Log(LogLevel.ERROR),
  });
  url = await mf.ready;
}, 60_000);

afterAll(async () => {
  await mf?.dispose();
});

/** `total` requests, `concurrency` at a time; the statuses and bodies of those that were not 200. */
async function crowd(path: string, total: number, concurrency: number) {
  let sent = 0;
  const bad: string[] = [];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (sent < total) {
        const body = `shopper ${++sent}`;
        const res = await fetch(new URL(path, url), { method: 'POST', body, headers: { 'x-body': body } });
        const text = await res.text();
        if (res.status !== 200) {
          bad.push(`${res.status} ${text.slice(0, 120)}`);
        }
      }
    }),
  );
  return bad;
}

describe('group commit across requests in workerd', () => {
  it('answers every request of a crowd with its own answer, in batches, each request going on as itself', async () => {
    const before = await (await fetch(new URL('/outcomes', url))).json();
    const bad = await crowd('/', 3_000, 100);
    const after = (await (await fetch(new URL('/outcomes', url))).json()) as typeof before;
    expect(bad).toEqual([]);
    expect(after.answered - before.answered).toBe(3_000);
    expect(after.wrong).toBe(0);
    // Batched: far fewer calls to the object than requests.
    expect(after.batches - before.batches).toBeLessThan(1_500);
  }, 60_000);
});
