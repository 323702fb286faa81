// The order consumer measured on its own, beside its floor:
//
// - consumer: a backlog of orders written straight to the order queue with Miniflare's queue
//   producer, in order packs of BACKLOG_PACK_ORDERS as a goods' object sends them, while the
//   consumer is paused (the dev switch `consumerPaused`: its first batch waits, unacked), then
//   timed from the pause's end until every order is a row in Postgres. The sends decode in the
//   same workerd thread as the consumer runs on, so a backlog sent while it drains measured the
//   sender as much as the consumer; without the switch it is timed from the first send;
// - floor: the same rows, as many per statement as the consumer's statements hold, as plain
//   multi-row INSERTs from Node with `pg` into the same database (a copy of the orders table
//   with the same indexes), one statement at a time, as Miniflare hands the consumer one batch
//   at a time.
import { randomBytes } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import type { Miniflare } from 'miniflare';
import pg from 'pg';
import type { OrderMessage, OrderPack } from '../../../workers/kernel/contract.ts';
import type { Goods } from '../load/contract.ts';
import type { HttpClient } from '../load/http-client.ts';
import { type Percentiles, percentiles, round } from '../load/metrics.ts';
import type { SqlHttpTiming } from '../sql-http.ts';
import type { WorkerLogLine } from './stack.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One order-queue batch as Miniflare logged it. */
export type QueueBatch = { at: number; queue: string; acked: number; size: number; ms: number };

/** The Worker's `orders.batch` log line: where one consumer batch spent its time. */
type BatchLine = { groups: number; totalMs: number; writeMs: number; notifyMs: number; flushMs: number };

/**
 * `paused`: the backlog was all queued before the consumer started on it, and `ms` counts from
 * then; otherwise from the first send, with the sends going on beside the consumer.
 */
export type Drained = { orders: number; ms: number; ordersPerSec: number; sendMs: number; maxAhead: number; paused: boolean };
export type ConsumerRun = Drained & { breakdown: ReturnType<typeof breakdownOf> };

/**
 * Messages are produced ahead of the consumer but never more than this many unconsumed:
 * Miniflare's local queue keeps a workerd timer per message in flight, and workerd allows
 * 10,000 of them.
 */
const MAX_AHEAD = 4_000;
/**
 * Packs per sendBatch: about 200 KB, under the queue's 256 KB a sendBatch. Each sendBatch from
 * this process costs a round trip into workerd: with 10 packs a call the backlog took as long to
 * send as to consume, and the phase measured the sender.
 */
const SEND_BATCH = 40;
/**
 * Orders per pack in the backlog: what a goods' object sends from one flush of its outbox
 * (every SEND_COALESCE_MS, 10 ms) while it accepts 2,000 reservations a second.
 */
export const BACKLOG_PACK_ORDERS = 20;
/** Rows per INSERT of the floor: what one consumer batch of 100 packs writes per statement (ORDERS_PER_STATEMENT, 2,000). */
export const INSERT_FLOOR_ROWS = Math.min(2_000, 100 * BACKLOG_PACK_ORDERS);

/** Order messages for a goods, in the shape the goods' object writes to its outbox. */
export function orderMessages(goods: Goods, count: number): OrderMessage[] {
  const now = Date.now();
  const run = randomBytes(4).toString('hex');
  return Array.from({ length: count }, (_, i) => ({
    v: 1 as const,
    kind: 'reserve' as const,
    requestId: `${goods.goodsId}.${run}${i.toString(36).padStart(14, '0')}`,
    orderId: `${goods.goodsId}-${i + 1}`,
    orderNo: `B${goods.goodsId}${String(i + 1).padStart(8, '0')}${run}`,
    userId: `backlog-${run}-${i}`,
    goodsId: goods.goodsId,
    activityId: goods.activityId,
    priceCents: goods.priceCents,
    payTimeoutSeconds: 900,
    reservedAt: now,
  }));
}

/**
 * Where the consumer's time goes, batch by batch, while `run` goes on: the Worker's own
 * `orders.batch` log line (its write to Postgres, the object's settle with the payment
 * timeouts, the metrics flush, the whole handler) and each SQL-over-HTTP request the local
 * bridge answered (the whole request, the wait for a warm connection, the statement).
 */
async function consumerBreakdown(run: () => Promise<Drained>): Promise<ConsumerRun> {
  const batches: BatchLine[] = [];
  const requests: SqlHttpTiming[] = [];
  // Published by this process's own bench stack and SQL bridge (stack.ts, sql-http.ts).
  const onLine = (message: unknown) => {
    const { event, line } = message as WorkerLogLine;
    if (event === 'orders.batch') {
      batches.push(JSON.parse(line));
    }
  };
  const onRequest = (message: unknown) => requests.push(message as SqlHttpTiming);
  diagnostics.subscribe('edge-seckill:worker-log', onLine);
  diagnostics.subscribe('edge-seckill:sql-http', onRequest);
  try {
    const result = await run();
    return { ...result, breakdown: breakdownOf(batches, requests) };
  } finally {
    diagnostics.unsubscribe('edge-seckill:worker-log', onLine);
    diagnostics.unsubscribe('edge-seckill:sql-http', onRequest);
  }
}

function breakdownOf(batches: BatchLine[], requests: SqlHttpTiming[]) {
  const stat = <T>(list: T[], value: (x: T) => number): Percentiles => percentiles(list.map(value));
  const worker = batches.filter((b) => b.groups > 0);
  return {
    // Date.now() in workerd moves only across I/O, so these are whole milliseconds.
    worker: {
      batches: worker.length,
      totalMs: stat(worker, (b) => b.totalMs),
      writeMs: stat(worker, (b) => b.writeMs),
      notifyMs: stat(worker, (b) => b.notifyMs),
      flushMs: stat(worker, (b) => b.flushMs),
      otherMs: stat(worker, (b) => b.totalMs - b.writeMs - b.notifyMs - b.flushMs),
    },
    sqlHttp: {
      requests: requests.length,
      ms: stat(requests, (r) => r.ms),
      waitMs: stat(requests, (r) => r.waitMs),
      queryMs: stat(requests, (r) => r.queryMs),
      failed: requests.filter((r) => r.status !== 200).length,
    },
  };
}

/**
 * Orders written so far: the units the goods' row gave up (the consumer takes them in the same
 * transaction as it inserts the orders). One row read, where a count of the orders would scan
 * a growing index every 10 ms and take Postgres's time from the consumer it measures.
 */
async function countOrders(client: pg.Client, goodsId: number): Promise<number> {
  const { rows } = await client.query<{ n: number }>('SELECT (total_stock - stock)::int AS n FROM seckill_goods WHERE id = $1', [goodsId]);
  return rows[0]?.n ?? 0;
}

type Backlog = {
  mf: Miniflare;
  databaseUrl: string;
  goodsId: number;
  messages: OrderMessage[];
  timeoutMs?: number;
  /** Pauses the order consumer for `seconds` (0: resumes it); without it the backlog is sent while the consumer drains it. */
  pauseConsumer?: (seconds: number) => Promise<void>;
};

/** Longest the consumer is paused while the backlog is sent: a run that fails halfway does not leave it held. */
const PAUSE_S = 120;

/** The Worker's `consumerPaused` switch (PUT /admin/dev/faults, dev builds with DEV_MODE). */
export function consumerPause(http: HttpClient, token: string) {
  return async (seconds: number): Promise<void> => {
    const answer = await http.put('/admin/dev/faults', {
      headers: { authorization: `Bearer ${token}` },
      json: { consumerPaused: seconds },
    });
    if (answer.status !== 200) {
      throw new Error(`pausing the order consumer: HTTP ${answer.status} ${answer.body.slice(0, 200)}`);
    }
  };
}

/** Feeds `messages` to the order queue and waits until they are all orders. */
export function measureConsumer(options: Backlog): Promise<ConsumerRun> {
  return consumerBreakdown(() => drainBacklog(options));
}

async function drainBacklog({ mf, databaseUrl, goodsId, messages, timeoutMs = 300_000, pauseConsumer }: Backlog): Promise<Drained> {
  const queue = await mf.getQueueProducer<OrderPack>('ORDER_QUEUE');
  const packs: OrderPack[] = [];
  for (let i = 0; i < messages.length; i += BACKLOG_PACK_ORDERS) {
    packs.push({ v: 1, kind: 'reserve-pack', goodsId, orders: messages.slice(i, i + BACKLOG_PACK_ORDERS) });
  }
  // Paused only when the whole backlog fits under the queue's timer limit.
  const paused = pauseConsumer !== undefined && packs.length <= MAX_AHEAD;
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    if (paused) {
      await pauseConsumer(PAUSE_S);
    }
    const sendStarted = performance.now();
    let started = sendStarted;
    const deadline = Date.now() + timeoutMs;
    // Counted in orders; the queue's limit is in messages (packs).
    let sent = 0;
    let sentPacks = 0;
    let done = 0;
    let maxAhead = 0;
    try {
      while (sentPacks < packs.length) {
        done = await countOrders(client, goodsId);
        maxAhead = Math.max(maxAhead, sent - done);
        if (!paused && (sent - done) / BACKLOG_PACK_ORDERS > MAX_AHEAD - 100 * SEND_BATCH) {
          await sleep(10);
        } else {
          for (let k = 0; k < 100 && sentPacks < packs.length; k++) {
            const chunk = packs.slice(sentPacks, sentPacks + SEND_BATCH);
            await queue.sendBatch(chunk.map((body) => ({ body, contentType: 'json' })));
            sentPacks += chunk.length;
            sent += chunk.reduce((n, p) => n + p.orders.length, 0);
          }
        }
        if (Date.now() > deadline) {
          throw new Error(`the consumer wrote ${done} of ${messages.length} orders in ${timeoutMs / 1000} s`);
        }
      }
    } finally {
      if (paused) {
        started = performance.now();
        await pauseConsumer(0);
      }
    }
    const sendMs = performance.now() - sendStarted;
    maxAhead = Math.max(maxAhead, sent - done);
    while (done < messages.length) {
      if (Date.now() > deadline) {
        throw new Error(`the consumer wrote ${done} of ${messages.length} orders in ${timeoutMs / 1000} s`);
      }
      await sleep(10);
      done = await countOrders(client, goodsId);
    }
    const ms = performance.now() - started;
    return { orders: done, ms: round(ms), ordersPerSec: round((done / ms) * 1000), sendMs: round(sendMs), maxAhead, paused };
  } finally {
    await client.end();
  }
}

/**
 * The same rows as plain multi-row INSERTs, `batchSize` per statement, into a copy of the
 * orders table (same columns, defaults and indexes), which is dropped afterwards.
 */
export async function measureInsertFloor({
  databaseUrl,
  messages,
  batchSize,
}: {
  databaseUrl: string;
  messages: OrderMessage[];
  batchSize: number;
}) {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const table = `bench_insert_floor_${randomBytes(3).toString('hex')}`;
  try {
    await client.query(`CREATE TABLE ${table} (LIKE seckill_order INCLUDING ALL)`);
    const statementMs: number[] = [];
    const started = performance.now();
    for (let i = 0; i < messages.length; i += batchSize) {
      const rows = messages.slice(i, i + batchSize);
      const params: (string | number | Date)[] = [];
      const tuples = rows.map((m, j) => {
        params.push(m.orderId, m.orderNo, m.requestId, m.userId, m.goodsId, m.activityId, m.priceCents, new Date(m.reservedAt));
        params.push(new Date(m.reservedAt + m.payTimeoutSeconds * 1000));
        const b = j * 9;
        return `($${b + 1},$${b + 2},$${b + 3},$${b + 4},$${b + 5},$${b + 6},$${b + 7},$${b + 8},$${b + 9})`;
      });
      const t = performance.now();
      await client.query(
        `INSERT INTO ${table} (id, order_no, request_id, user_id, goods_id, activity_id, price_cents, reserved_at, pay_deadline) VALUES ${tuples.join(',')}`,
        params,
      );
      statementMs.push(performance.now() - t);
    }
    const ms = performance.now() - started;
    return {
      rows: messages.length,
      batchSize,
      ms: round(ms),
      rowsPerSec: round((messages.length / ms) * 1000),
      statement: percentiles(statementMs),
    };
  } finally {
    await client.query(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
    await client.end();
  }
}

type InsertFloor = Awaited<ReturnType<typeof measureInsertFloor>>;

/** Two runs of the INSERT floor as one: rows and time added up, each statement percentile the slower of the two. */
export function combineInsertFloors(a: InsertFloor, b: InsertFloor) {
  const ms = a.ms + b.ms;
  const slower = (k: keyof Percentiles) => {
    const [x, y] = [a.statement[k], b.statement[k]];
    return x === null ? y : y === null ? x : Math.max(x, y);
  };
  return {
    rows: a.rows + b.rows,
    batchSize: a.batchSize,
    ms: round(ms),
    rowsPerSec: round(((a.rows + b.rows) / ms) * 1000),
    statement: { p50Ms: slower('p50Ms'), p90Ms: slower('p90Ms'), p99Ms: slower('p99Ms'), maxMs: slower('maxMs'), meanMs: slower('meanMs') },
    runs: [a.rowsPerSec, b.rowsPerSec],
  };
}

/** Summary of Miniflare's order-queue batches between two instants. */
export function batchSummary(batches: QueueBatch[], from = 0, to = Number.POSITIVE_INFINITY) {
  const inWindow = batches.filter((b) => b.at >= from && b.at <= to);
  const messages = inWindow.reduce((n, b) => n + b.size, 0);
  const busyMs = inWindow.reduce((n, b) => n + b.ms, 0);
  return {
    batches: inWindow.length,
    messages,
    meanSize: inWindow.length ? round(messages / inWindow.length) : null,
    retried: inWindow.reduce((n, b) => n + (b.size - b.acked), 0),
    ...percentiles(inWindow.map((b) => b.ms)),
    /** Messages per second of consumer time (what one batch at a time can reach). */
    messagesPerBusySec: busyMs ? round((messages / busyMs) * 1000) : null,
  };
}
