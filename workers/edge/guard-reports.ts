import { guardShardByName, guardShardName } from '../../durable-objects/routing';
import type { BanPolicy, KeyReport } from '../kernel/contract';
import type { NewBan } from '../kernel/guard-book';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import { ClientLimiter } from './client-limiter';
import type { WaitUntil } from './group-commit';

// The isolate's limiter, and its accounting sent to the guard shards in the background: at most
// one report per REPORT_INTERVAL_MS per isolate, one call per shard that owns a reported key,
// kept alive with waitUntil. Nothing here is on a shopper's wait except a new ban, which the
// refused request carries to its shard so the ban is listed and spreads at once.

/** An isolate reports its accounting at most this often. */
export const REPORT_INTERVAL_MS = 500;

/** This isolate's limiter (module scope: it lives as long as the isolate). */
export const limiter = new ClientLimiter();

let lastReportAt = 0;
/** When the pending delayed report was scheduled (0: none). */
let delayedSince = 0;
let policy: BanPolicy | undefined;

/** Makes sure this isolate's accounting goes out soon (under the ban rule `used`, or the last one); never waits on it. */
export function scheduleGuardReport(env: Env, used: BanPolicy | undefined, waitUntil: WaitUntil | undefined, now = Date.now()): void {
  policy = used ?? policy;
  // Without an execution context (a direct app.request() call) nothing could keep a report alive.
  if (!waitUntil) {
    return;
  }
  const wait = lastReportAt + REPORT_INTERVAL_MS - now;
  if (wait <= 0) {
    lastReportAt = now;
    waitUntil(sendReport(env));
    return;
  }
  // A delayed report whose invocation was torn down never clears the mark; stop trusting it.
  if (delayedSince > now - 5 * REPORT_INTERVAL_MS) {
    return;
  }
  delayedSince = now;
  waitUntil(
    sleep(wait).then(() => {
      delayedSince = 0;
      lastReportAt = Date.now();
      return sendReport(env);
    }),
  );
}

/** Sends what was accounted to each key's shard and folds the answers in. */
async function sendReport(env: Env): Promise<void> {
  const keys = limiter.takeReport();
  const used = policy;
  if (!keys || !used) {
    return;
  }
  await sendToShards(env, keys, used);
}

async function sendToShards(env: Env, keys: KeyReport[], used: BanPolicy): Promise<void> {
  const byShard = new Map<string, KeyReport[]>();
  for (const key of keys) {
    const shard = guardShardName(key.id);
    const list = byShard.get(shard);
    if (list) {
      list.push(key);
    } else {
      byShard.set(shard, [key]);
    }
  }
  await Promise.all(
    [...byShard].map(async ([shard, batch]) => {
      const sentAt = Date.now();
      try {
        const reply = await guardShardByName(env, shard).account({ isolate: limiter.isolate, policy: used, keys: batch });
        limiter.applyReply(reply, Date.now(), sentAt);
      } catch (error) {
        // Accounting only: this isolate's own windows still hold; the fleet's view is a round late.
        log.warn('guard.report_failed', { shard, keys: batch.length, error });
      }
    }),
  );
}

/**
 * Carries bans this isolate just decided to their shards (awaited by the refused request, so an
 * operator lists them and other isolates learn them from their next report). A shard that cannot
 * be reached is logged: this isolate enforces the ban regardless.
 */
export async function spreadBans(env: Env, bans: readonly NewBan[], used: BanPolicy): Promise<void> {
  if (bans.length === 0) {
    return;
  }
  await sendToShards(
    env,
    bans.map((b) => ({ id: b.id, hits: 0, windows: [], bannedUntil: b.until })),
    used,
  );
}
