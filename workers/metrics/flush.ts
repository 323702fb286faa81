import { allMetricsShards, METRICS_SHARDS, metricsShard } from '../../durable-objects/routing';
import { isolateId } from '../kernel/isolate-id';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import { callWithin, UPKEEP_CALL_MS } from '../kernel/within';
import { hasPending, type MetricsDelta, mergeDeltas, takeDelta } from './registry';

/** An isolate ships its deltas at most this often (plus once per scrape). */
export const FLUSH_INTERVAL_MS = 1_000;

/**
 * Which flush a delta is: the sending isolate's name and its count of flushes. A shard counts a
 * flush once (the highest `seq` it counted per isolate), so a flush sent again after a call that
 * did not answer in time counts once whether the first call landed or not.
 */
export type FlushId = { isolate: string; seq: number };

export type ShipperIo = {
  /** The counts gathered since the last take (undefined: none). */
  take(): MetricsDelta | undefined;
  /** Sends one flush to its shard. */
  send(delta: MetricsDelta, from: FlushId): Promise<void>;
  isolate(): string;
};

/**
 * An isolate's flushes, one at a time. A flush whose call fails or does not answer within
 * `deadlineMs` stays this isolate's next one, under the same id, until a shard takes it; the
 * counts gathered meanwhile go in the flush after it. Without the deadline a shard that never
 * answered held the isolate's flushes, and the invocation waiting on them, for good; without the
 * id a flush given up and sent again would have counted twice when the first call landed late.
 */
export class MetricsShipper {
  private seq = 0;
  /** The flush a shard has not confirmed: sent again before anything new. */
  private unconfirmed: { delta: MetricsDelta; from: FlushId } | undefined;
  /** When the send under way began (0: none). */
  private sendingSince = 0;

  constructor(
    private readonly io: ShipperIo,
    private readonly deadlineMs = UPKEEP_CALL_MS,
  ) {}

  /** True while a flush its shard has not confirmed waits to be sent again. */
  get owes(): boolean {
    return this.unconfirmed !== undefined;
  }

  /**
   * A send is under way. A mark older than the deadline belongs to an invocation torn down
   * before its `finally` ran (a send that is alive ends by the deadline): it is not trusted.
   */
  busy(now = Date.now()): boolean {
    return this.sendingSince > now - this.deadlineMs - 1_000;
  }

  /** Ships the unconfirmed flush, then what has gathered since. A failed send stays unconfirmed. */
  async ship(): Promise<void> {
    if (this.busy()) {
      return;
    }
    this.sendingSince = Date.now();
    try {
      if (this.unconfirmed) {
        await this.sendOnce(this.unconfirmed);
        this.unconfirmed = undefined;
      }
      const delta = this.io.take();
      if (!delta) {
        return;
      }
      this.seq++;
      this.unconfirmed = { delta, from: { isolate: this.io.isolate(), seq: this.seq } };
      await this.sendOnce(this.unconfirmed);
      this.unconfirmed = undefined;
    } catch (error) {
      log.warn('metrics.flush_failed', { error });
    } finally {
      this.sendingSince = 0;
    }
  }

  /** Waits (on its own timer, never on another request's promise) up to `maxWaitMs` for a send under way, then ships. */
  async shipAfterWait(maxWaitMs: number): Promise<void> {
    const deadline = Date.now() + maxWaitMs;
    while (this.busy() && Date.now() < deadline) {
      await sleep(5);
    }
    await this.ship();
  }

  private sendOnce(flush: { delta: MetricsDelta; from: FlushId }): Promise<void> {
    return callWithin(this.io.send(flush.delta, flush.from), 'the metrics shard', this.deadlineMs);
  }
}

let lastFlushAt = 0;
/** When the pending delayed flush was scheduled (0: none). */
let delayedSince = 0;
/** This isolate's metrics shard, drawn at its first flush (random values are not allowed at module scope): isolates spread evenly over the shards. */
let shard: number | undefined;

const shipper = (env: Env) =>
  new MetricsShipper({
    take: takeDelta,
    isolate: isolateId,
    send: (delta, from) => {
      shard ??= (crypto.getRandomValues(new Uint32Array(1))[0] ?? 0) % METRICS_SHARDS;
      return metricsShard(env, shard).add(delta, from);
    },
  });
let isolateShipper: MetricsShipper | undefined;

/**
 * Ships this isolate's pending deltas now. Where a send is already under way, waits up to
 * `maxWaitMs` for it first (0: leaves the counts to the next flush).
 */
export async function flushMetrics(env: Env, maxWaitMs = 0): Promise<void> {
  // The env is the same binding set for every invocation of an isolate.
  isolateShipper ??= shipper(env);
  lastFlushAt = Date.now();
  await isolateShipper.shipAfterWait(maxWaitMs);
}

/**
 * Called at the end of every invocation: ships now if the last flush is a second old,
 * otherwise makes sure one delayed flush is pending in this isolate, so counts never sit
 * here for long and a burst of requests costs one RPC a second.
 */
export function scheduleMetricsFlush(env: Env, waitUntil: (p: Promise<unknown>) => void): void {
  if (!hasPending() && !isolateShipper?.owes) {
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

/** Before reading the totals: waits up to `maxWaitMs` for a send already under way in this isolate, then ships what is left. */
export function flushBeforeRead(env: Env, maxWaitMs = 1_000): Promise<void> {
  return flushMetrics(env, maxWaitMs);
}

/** The totals of every isolate: each metrics shard's, summed. */
export async function metricsTotals(env: Env): Promise<MetricsDelta> {
  return mergeDeltas(await Promise.all(allMetricsShards(env).map((s) => s.totals())));
}
