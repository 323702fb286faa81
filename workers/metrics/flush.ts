import { allMetricsShards, METRICS_SHARDS, metricsShard } from '../../durable-objects/routing';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import { hasPending, type MetricsDelta, mergeDeltas, restoreDelta, takeDelta } from './registry';

/** An isolate ships its deltas at most this often (plus once per scrape). */
export const FLUSH_INTERVAL_MS = 1_000;

let lastFlushAt = 0;
/** When the pending delayed flush was scheduled (0: none). */
let delayedSince = 0;
let inFlight = 0;
/** This isolate's metrics shard, drawn at its first flush (random values are not allowed at module scope): isolates spread evenly over the shards. */
let shard: number | undefined;

/** Ships this isolate's pending deltas now. A failed send puts them back for the next try. */
export async function flushMetrics(env: Env): Promise<void> {
  const delta = takeDelta();
  if (!delta) {
    return;
  }
  lastFlushAt = Date.now();
  await send(env, delta);
}

async function send(env: Env, delta: MetricsDelta): Promise<void> {
  inFlight++;
  try {
    shard ??= (crypto.getRandomValues(new Uint32Array(1))[0] ?? 0) % METRICS_SHARDS;
    await metricsShard(env, shard).add(delta);
  } catch (error) {
    restoreDelta(delta);
    log.warn('metrics.flush_failed', { error });
  } finally {
    inFlight--;
  }
}

/**
 * Called at the end of every invocation: ships now if the last flush is a second old,
 * otherwise makes sure one delayed flush is pending in this isolate, so counts never sit
 * here for long and a burst of requests costs one RPC a second.
 */
export function scheduleMetricsFlush(env: Env, waitUntil: (p: Promise<unknown>) => void): void {
  if (!hasPending()) {
    return;
  }
  const wait = lastFlushAt + FLUSH_INTERVAL_MS - Date.now();
  if (wait <= 0) {
    waitUntil(flushMetrics(env));
    return;
  }
  // A delayed flush whose invocation was torn down never clears the mark; stop trusting it.
  if (delayedSince > Date.now() - 5 * FLUSH_INTERVAL_MS) {
    return;
  }
  delayedSince = Date.now();
  waitUntil(
    sleep(wait).then(() => {
      delayedSince = 0;
      return flushMetrics(env);
    }),
  );
}

/**
 * Before reading the totals: waits (on its own timer, never on another request's promise)
 * for sends already under way in this isolate, then ships what is left.
 */
export async function flushBeforeRead(env: Env, maxWaitMs = 1_000): Promise<void> {
  const deadline = Date.now() + maxWaitMs;
  while (inFlight > 0 && Date.now() < deadline) {
    await sleep(5);
  }
  await flushMetrics(env);
}

/** The totals of every isolate: each metrics shard's, summed. */
export async function metricsTotals(env: Env): Promise<MetricsDelta> {
  return mergeDeltas(await Promise.all(allMetricsShards(env).map((s) => s.totals())));
}
