import { guardShardByName, guardShardName } from '../../durable-objects/routing';
import { type BanPolicy, GUARD_MAX_SLOWDOWN, type KeyReport } from '../kernel/contract';
import type { NewBan } from '../kernel/guard-book';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import { callWithin } from '../kernel/within';
import { ClientLimiter } from './client-limiter';
import type { WaitUntil } from './group-commit';

// The isolate's limiter, and its accounting sent to the guard shards in the background: at most
// one report round per REPORT_INTERVAL_MS per isolate, kept alive with waitUntil, of at most
// CALLS_PER_ROUND calls (one per shard). A busy isolate has keys on every shard; the shards with
// the busiest keys go first and the rest wait a round or a few (their keys keep counting), so
// the accounting costs the isolate and each shard a bounded number of calls. Nothing here is on
// a shopper's wait except a new ban, which the refused request carries to its shard so the ban
// is listed and spreads at once. In a fleet so large that a shard hears more reports than it
// wants, its replies say how many times less often to report, and the isolate spaces its rounds
// out by the largest factor its last round heard (durable-objects/edge-guard/pace.ts).

/** An isolate reports its accounting at most this often (times the shards' slowdown). */
export const REPORT_INTERVAL_MS = 500;
/** Calls one report round makes at most. */
export const CALLS_PER_ROUND = 16;
/** A shard's keys wait at most this many rounds behind busier ones. */
const MAX_WAIT_ROUNDS = 8;
/** Keys waiting for their round, at most; beyond, the quietest shards' accounting is dropped. */
const MAX_WAITING_KEYS = 20_000;

type Waiting = { keys: KeyReport[]; rounds: number };

/** How soon a shard's batch must go: bans and checks first, then long waits, then the busiest key. */
function urgency(batch: Waiting): number {
  let hits = 0;
  for (const key of batch.keys) {
    if (key.bannedUntil !== undefined || key.check) {
      return Number.POSITIVE_INFINITY;
    }
    hits = Math.max(hits, key.hits);
  }
  return batch.rounds >= MAX_WAIT_ROUNDS ? Number.MAX_SAFE_INTEGER : hits;
}

/**
 * One report round: adds `keys` to what waits per shard, and takes the `maxCalls` most urgent
 * shards' batches to send now; the others wait a round more. Pure (the shard of a key is given).
 */
export function planRound(
  waiting: Map<string, Waiting>,
  keys: readonly KeyReport[],
  shardOf: (id: string) => string,
  maxCalls: number,
): [string, KeyReport[]][] {
  for (const key of keys) {
    const shard = shardOf(key.id);
    const batch = waiting.get(shard);
    if (batch) {
      batch.keys.push(key);
    } else {
      waiting.set(shard, { keys: [key], rounds: 0 });
    }
  }
  const ranked = [...waiting].map(([shard, batch]) => ({ shard, batch, urgency: urgency(batch) })).sort((a, b) => b.urgency - a.urgency);
  const now = ranked.slice(0, maxCalls);
  for (const { shard } of now) {
    waiting.delete(shard);
  }
  let kept = 0;
  for (const { shard, batch } of ranked.slice(maxCalls)) {
    batch.rounds++;
    kept += batch.keys.length;
    if (kept > MAX_WAITING_KEYS) {
      waiting.delete(shard);
    }
  }
  return now.map(({ shard, batch }) => [shard, batch.keys]);
}

const waiting = new Map<string, Waiting>();

/** This isolate's limiter (module scope: it lives as long as the isolate). */
export const limiter = new ClientLimiter();

let lastReportAt = 0;
/** The report rounds under way (0: none): each run of rounds has a number, the newest is the live one. */
let runningRun = 0;
let lastRun = 0;
/** When the run under way last moved on (a round started, or its wait did). */
let runMovedAt = 0;
let policy: BanPolicy | undefined;
/** The largest slowdown the last round's shards asked for. */
let slowdown = 1;

/** Report rounds are this far apart now. */
export function reportIntervalMs(): number {
  return REPORT_INTERVAL_MS * slowdown;
}

/**
 * Makes sure this isolate's accounting goes out soon (under the ban rule `used`, or the last one);
 * never waits on it. One run of rounds at a time: a round starts REPORT_INTERVAL_MS after the
 * last one started, and the run goes on while shards still wait (a busy isolate's do), so a
 * request that comes meanwhile has nothing to start. Each request used to be able to start a
 * round of its own once the interval had passed, and every such round went on for as long as
 * shards waited: under a steady crowd the runs multiplied (331 calls in 3 s where the bound is
 * 112) and the shards heard that many times the calls.
 */
export function scheduleGuardReport(env: Env, used: BanPolicy | undefined, waitUntil: WaitUntil | undefined, now = Date.now()): void {
  policy = used ?? policy;
  // Without an execution context (a direct app.request() call) nothing could keep a report alive.
  if (!waitUntil) {
    return;
  }
  // A run whose invocation was torn down never moves on again; after a few intervals a new run
  // takes over, and the old one, should it wake, stops at its next round.
  if (runningRun !== 0 && now - runMovedAt < STALE_RUN_INTERVALS * reportIntervalMs()) {
    return;
  }
  const run = ++lastRun;
  runningRun = run;
  runMovedAt = now;
  waitUntil(runRounds(env, run, Math.max(0, lastReportAt + reportIntervalMs() - now)));
}

/** A run of rounds silent for this many intervals is taken for torn down. */
const STALE_RUN_INTERVALS = 5;

/** Rounds, reportIntervalMs() apart, until nothing is left to report (or a newer run takes over). */
async function runRounds(env: Env, run: number, firstWaitMs: number): Promise<void> {
  try {
    let wait = firstWaitMs;
    for (;;) {
      if (wait > 0) {
        await sleep(wait);
      }
      if (runningRun !== run) {
        return;
      }
      lastReportAt = runMovedAt = Date.now();
      await sendReport(env);
      if (!policy || (waiting.size === 0 && !limiter.hasPending)) {
        // The finally below ends the run in this same turn: a request after it starts the next run.
        return;
      }
      // Shards still waiting, or counts made during the round: the next round comes whether or
      // not requests arrive to schedule it.
      runMovedAt = Date.now();
      wait = lastReportAt + reportIntervalMs() - runMovedAt;
    }
  } finally {
    runningRun = runningRun === run ? 0 : runningRun;
  }
}

/** Sends what was accounted to each key's shard (one round) and folds the answers in. */
async function sendReport(env: Env): Promise<void> {
  const used = policy;
  if (!used) {
    return;
  }
  const round = planRound(waiting, limiter.takeReport() ?? [], guardShardName, CALLS_PER_ROUND);
  const heard = (await send(env, round, used)).filter((s) => s !== undefined);
  // A round whose calls all failed heard nothing: the pace it had stands.
  if (heard.length > 0) {
    slowdown = Math.min(GUARD_MAX_SLOWDOWN, Math.max(1, ...heard));
  }
}

/**
 * Sends each shard's batch and folds its answer in; the slowdown each shard asked for (undefined
 * where the call failed). The calls go one per turn of the event loop:
 * a call's arguments are serialised when it is made, and a busy isolate's round (a thousand keys
 * and more) made at once held the isolate for 10-17 ms, every shopper's request waiting behind it.
 */
async function send(env: Env, batches: [string, KeyReport[]][], used: BanPolicy): Promise<(number | undefined)[]> {
  const calls: Promise<number | undefined>[] = [];
  for (const [i, [shard, batch]] of batches.entries()) {
    if (i > 0) {
      await sleep(0);
    }
    calls.push(sendBatch(env, shard, batch, used));
  }
  return Promise.all(calls);
}

/** One shard's batch, its answer folded in; the slowdown the shard asked for, or undefined when the call failed. */
async function sendBatch(env: Env, shard: string, batch: KeyReport[], used: BanPolicy): Promise<number | undefined> {
  const sentAt = Date.now();
  try {
    const call = guardShardByName(env, shard).account({ isolate: limiter.isolate, policy: used, keys: batch });
    const reply = await callWithin(call, `guard shard ${shard}`);
    limiter.applyReply(reply, Date.now(), sentAt);
    return reply.slowdown ?? 1;
  } catch (error) {
    // Accounting only: this isolate's own windows still hold; the fleet's view is a round late.
    log.warn('guard.report_failed', { shard, keys: batch.length, error });
    return undefined;
  }
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
  const byShard = new Map<string, KeyReport[]>();
  for (const b of bans) {
    const shard = guardShardName(b.id);
    byShard.set(shard, [...(byShard.get(shard) ?? []), { id: b.id, hits: 0, windows: [], bannedUntil: b.until }]);
  }
  // A ban or two: sent at once, the refused request waits on it.
  await Promise.all([...byShard].map(([shard, batch]) => sendBatch(env, shard, batch, used)));
}
