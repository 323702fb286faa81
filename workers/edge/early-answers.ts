import { guardShardByName, guardShardName } from '../../durable-objects/routing';
import type { AnsweredCount, BanPolicy } from '../kernel/contract';
import type { Limits } from '../kernel/limits';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import { banPolicy, checkLocalBans, rememberBan } from './client-guard';
import type { WaitUntil } from './group-commit';

// The purchase route answers a closed or sold-out sale before the limits (so the flood after a
// sell-out costs no object call), which used to mean that hammering it never counted toward a
// ban. Each such answer is counted here, in the isolate, and the counts go to the client keys'
// guard shards in the background, batched, at most about once a second per isolate: a client
// hammering a closed sale is banned like any other, and its answers still cost no object call.

/** An isolate reports its counts at most this often. */
export const REPORT_INTERVAL_MS = 1_000;
/** Distinct keys counted between two reports; beyond that, new keys wait for the next round. */
const MAX_KEYS = 10_000;

let counts = new Map<string, number>();
let lastReportAt = 0;
/** When the pending delayed report was scheduled (0: none). */
let delayedSince = 0;
let policy: BanPolicy | undefined;

/**
 * Before an answer from the isolate's copies: refuses a client already known to be banned, then
 * counts the answer for `ids` (the client's address key, and its shopper key once signed in) and
 * makes sure a report goes out. Never waits on the report.
 */
export function countEarlyAnswer(env: Env, ids: string[], limits: Limits, waitUntil: WaitUntil | undefined, now = Date.now()): void {
  if (ids.length === 0) {
    return;
  }
  checkLocalBans(ids, now);
  for (const id of ids) {
    const n = counts.get(id);
    if (n !== undefined) {
      counts.set(id, n + 1);
    } else if (counts.size < MAX_KEYS) {
      counts.set(id, 1);
    }
  }
  policy = banPolicy(limits);
  scheduleReport(env, waitUntil, now);
}

function scheduleReport(env: Env, waitUntil: WaitUntil | undefined, now: number): void {
  // Without an execution context (a direct app.request() call) nothing could keep a report alive.
  if (!waitUntil) {
    return;
  }
  const wait = lastReportAt + REPORT_INTERVAL_MS - now;
  if (wait <= 0) {
    waitUntil(report(env));
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
      return report(env);
    }),
  );
}

/** Sends what was counted to each key's shard and remembers the bans they answer with. */
async function report(env: Env): Promise<void> {
  const taken = counts;
  const used = policy;
  if (taken.size === 0 || !used) {
    return;
  }
  counts = new Map();
  lastReportAt = Date.now();
  const byShard = new Map<string, AnsweredCount[]>();
  for (const [id, hits] of taken) {
    const shard = guardShardName(id);
    byShard.set(shard, [...(byShard.get(shard) ?? []), { id, hits }]);
  }
  await Promise.all(
    [...byShard].map(async ([shard, batch]) => {
      try {
        const bans = await guardShardByName(env, shard).noteAnswered(batch, used);
        const at = Date.now();
        for (const ban of bans) {
          rememberBan(ban.id, at + ban.retryAfterMs, at);
        }
      } catch (error) {
        // Counts toward a ban only: losing one round lets a hammering client a second longer.
        log.warn('guard.report_failed', { shard, keys: batch.length, error });
      }
    }),
  );
}

/** Forgets counts not yet reported (tests). */
export function clearEarlyAnswers(): void {
  counts = new Map();
  lastReportAt = 0;
  delayedSince = 0;
}
