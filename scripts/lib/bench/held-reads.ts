// Held result reads at a crowd's scale (`GET /api/seckill/result/:requestId?wait=N`): without the
// Redis mirror every accepted shopper's page keeps one read open in its stock shard until the
// order is written. The phase holds `--held-reads` of them in one shard at once, with the order
// consumer paused, and measures what each costs the isolate's heap (an object's memory limit is
// what bounds them: MAX_HELD_READS is that bound) and how soon the orders' commit answers them
// all once the consumer runs again.

import { readdirSync, readFileSync } from 'node:fs';
import { MAX_HELD_READS } from '../../../durable-objects/goods-stock/result-waiters.ts';
import { heldReadTimeoutMs, resultReadPath } from '../../../web/src/shopper/pacing.ts';
import { MAX_RESULT_WAIT_SECONDS } from '../../../workers/kernel/contract.ts';
import { type Answer, httpClient } from '../load/http-client.ts';
import { type Percentiles, percentiles, round } from '../load/metrics.ts';
import type { BenchContext, CheckedGoods } from './context.ts';
import { bundleModules, classOfFile } from './objects.ts';
import { type HeapNode, heapBytes } from './profile.ts';
import { pool } from './room.ts';

/** The memory Cloudflare gives one isolate, in which an object keeps its held reads. */
const ISOLATE_MEMORY_BYTES = 128 * 1024 * 1024;
/** Purchases and reads sent at once while the crowd is made. */
const SEND_CONCURRENCY = 50;
/** How long the object may take to hold every read before the phase goes on with what it holds. */
const HOLD_TIMEOUT_MS = 15_000;
/** The heap sampler's interval while the reads are held: fine enough for a few thousand reads' worth. */
const LIVE_SAMPLING_BYTES = 4 * 1024;

export type HeldReadsPhase = {
  reads: number;
  /** The most the goods' stock shard reported holding at once. */
  held: number;
  /** The isolate's live heap after a full collection: before the reads, while they were held, after they were answered. */
  heapMb: { before: number; holding: number; after: number };
  /** Heap a held read costs: the Worker's request and the object's holder, one isolate here. */
  heapBytesPerRead: number | null;
  /**
   * The object's part of that (what its isolate keeps on Cloudflare, where the Worker runs in
   * another), from the heap sampler's live bytes per held read: allocated under the stock
   * object's code; under the Worker's (its request, Hono's context, the call on its way out);
   * and by the runtime with no code of the bundle on the stack (a call's arguments and promises
   * on either side), which the object's part is counted with to be safe.
   */
  sampledBytesPerRead: { object: number; worker: number; runtime: number } | null;
  /** workerd's resident memory per held read (the sockets and requests outside the heap too), when it can be read. */
  rssBytesPerRead: number | null;
  /** Held reads whose object part fits in one isolate's 128 MB, beside the object's bound. */
  readsPer128Mb: number | null;
  maxHeldReads: number;
  /** From the consumer's resumption to each read's final answer. */
  answeredAfterResume: Percentiles;
  /** Every read's last answer: SUCCESS or FAIL, still QUEUED (its wait ran out first), or another status. */
  outcomes: Record<string, number>;
  allFinal: boolean;
};

type Side = 'object' | 'worker' | 'runtime';

/**
 * Live sampled bytes of a heap profile by side: under a frame of the stock object's code (the
 * outermost decides: the call's entry into the object), under other code of the bundle, or
 * with none of the bundle's code on the stack.
 */
function liveBytesBySide(root: HeapNode, moduleOf: (line: number) => string | undefined): Record<Side, number> {
  const sides: Record<Side, number> = { object: 0, worker: 0, runtime: 0 };
  const walk = (node: HeapNode, side: Side) => {
    let here = side;
    const file = node.callFrame?.url.endsWith('.js') === true ? moduleOf(node.callFrame.lineNumber) : undefined;
    if (file !== undefined && side !== 'object') {
      here = classOfFile(file) === 'GoodsStock' ? 'object' : 'worker';
    }
    sides[here] += node.selfSize;
    for (const child of node.children ?? []) {
      walk(child, here);
    }
  };
  walk(root, 'runtime');
  return sides;
}

/** workerd's resident set (bytes) among this process's children, or undefined where /proc cannot tell. */
function workerdRss(): number | undefined {
  try {
    let total = 0;
    for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      if (/^Name:\s+workerd$/m.test(status) && new RegExp(`^PPid:\\s+${process.pid}$`, 'm').test(status)) {
        total += Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1] ?? 0) * 1024;
      }
    }
    return total > 0 ? total : undefined;
  } catch {
    return undefined;
  }
}

const resultStatus = (answer: Answer): string => {
  const status = (answer.json as { status?: unknown } | undefined)?.status;
  return answer.status === 200 && typeof status === 'string' ? status : `HTTP ${answer.status}`;
};

/**
 * `--held-reads` shoppers buy one unit each of a goods of one shard while the order consumer is
 * paused, then each opens its held read at once; the phase measures the isolate's heap with all
 * of them held, resumes the consumer and times every read's final answer.
 */
export async function heldReadsPhase(c: BenchContext): Promise<{ result: HeldReadsPhase; goods: CheckedGoods[] }> {
  const reads = c.o.heldReads;
  c.say(`Held result reads: ${reads} shoppers' reads held in one stock shard at once, the consumer paused...`);
  const goods = await c.admin.createGoods({ stock: reads, title: 'Bench: held result reads' });
  const shoppers = await c.minter.tokens(await c.minter.users('held', reads), goods.goodsId);
  const accepted = new Set<string>();
  // A socket per held read, beside the run's own client.
  const http = httpClient(c.url, {
    maxSockets: reads + SEND_CONCURRENCY,
    headers: c.clientHeaders,
    timeoutMs: heldReadTimeoutMs(MAX_RESULT_WAIT_SECONDS),
  });
  // Paused for longer than the phase can take; resumed below.
  await c.pauseConsumer(300);
  try {
    const bought: { requestId: string; jwt: string }[] = [];
    await pool(shoppers, SEND_CONCURRENCY, async (s) => {
      const answer = await http.post(`/api/seckill/do/${s.path}`, {
        headers: { authorization: `Bearer ${s.jwt}` },
        json: { goodsId: goods.goodsId, token: s.token },
      });
      const requestId = (answer.json as { requestId?: string } | undefined)?.requestId;
      if (answer.status === 202 && requestId) {
        accepted.add(requestId);
        bought.push({ requestId, jwt: s.jwt });
      }
    });
    const moduleOf = await bundleModules(c.scriptPath);
    const heapBefore = await c.profiler.heapUsedAfterGc();
    const rssBefore = workerdRss();
    await c.profiler.startAllocations({ liveOnly: true, intervalBytes: LIVE_SAMPLING_BYTES });
    let resumedAt = Number.POSITIVE_INFINITY;
    const answeredMs: number[] = [];
    const outcomes: Record<string, number> = {};
    const answers = bought.map(async (b) => {
      const answer = await http.get(resultReadPath(b.requestId, MAX_RESULT_WAIT_SECONDS), {
        headers: { authorization: `Bearer ${b.jwt}` },
      });
      const status = resultStatus(answer);
      outcomes[status] = (outcomes[status] ?? 0) + 1;
      if (status === 'SUCCESS' || status === 'FAIL') {
        // An answer before the consumer resumed (none is expected) counts as at once.
        answeredMs.push(Math.max(0, Date.now() - resumedAt));
      }
    });
    let held = 0;
    const holdBy = Date.now() + HOLD_TIMEOUT_MS;
    while (held < bought.length && Date.now() < holdBy) {
      held = Math.max(held, (await c.admin.stats(goods.goodsId)).heldResultReads ?? 0);
      await new Promise((r) => setTimeout(r, 100));
    }
    const heapHolding = await c.profiler.heapUsedAfterGc();
    const rssHolding = workerdRss();
    const { profile } = await c.profiler.stopAllocations();
    const sides = liveBytesBySide(profile.head, moduleOf);
    resumedAt = Date.now();
    await c.pauseConsumer(0);
    await Promise.all(answers);
    const heapAfter = await c.profiler.heapUsedAfterGc();
    const perRead = (from: number | undefined, to: number | undefined) =>
      held > 0 && from !== undefined && to !== undefined ? round((to - from) / held) : null;
    const heapBytesPerRead = perRead(heapBefore, heapHolding);
    const sampledBytesPerRead =
      held > 0 && heapBytes(profile.head) > 0
        ? { object: round(sides.object / held), worker: round(sides.worker / held), runtime: round(sides.runtime / held) }
        : null;
    const objectBytes = (sampledBytesPerRead?.object ?? 0) + (sampledBytesPerRead?.runtime ?? 0);
    const mb = (bytes: number) => round(bytes / 1024 / 1024, 1);
    return {
      result: {
        reads: bought.length,
        held,
        heapMb: { before: mb(heapBefore), holding: mb(heapHolding), after: mb(heapAfter) },
        heapBytesPerRead,
        sampledBytesPerRead,
        rssBytesPerRead: perRead(rssBefore, rssHolding),
        readsPer128Mb: objectBytes > 0 ? Math.floor(ISOLATE_MEMORY_BYTES / objectBytes) : null,
        maxHeldReads: MAX_HELD_READS,
        answeredAfterResume: percentiles(answeredMs),
        outcomes,
        allFinal: answeredMs.length === bought.length && bought.length === reads,
      },
      goods: [{ name: 'held result reads', goodsId: goods.goodsId, accepted }],
    };
  } finally {
    await c.pauseConsumer(0);
    http.close();
  }
}
