import { COPY_READ_MS, dbOptions, httpDb } from '../../db/client';
import { type HoldersRead, readActivityHolders, readGoodsHolders } from '../../db/holders';
import type { SqlExecutor } from '../../db/orders';
import type { Config } from '../kernel/config';
import { log } from '../kernel/log';
import { fingerprint, fingerprintIndex } from './allowlist-copies';
import type { WaitUntil } from './group-commit';
import { applyChanges, decode, EMPTY, encode, type Holders, UNITS } from './holders-merge';
import { type CopyName, countRenewal, dropShared, readSharedBytes, sharedKey, writeSharedBytes } from './shared-copies';

// Who holds live orders, at the edge, so a crowd's requests do not each ask Postgres: of an
// `activity`-scoped sale, the rule's one live order per shopper across the activity's goods (the
// joins, ticket requests and page loads check it); of a per-goods sale under way, the units each
// shopper holds (the page's eligibility tells them, and how many more they may buy). An isolate
// keeps, per activity or goods, who holds what: sorted 53-bit fingerprints of the user ids (as
// allowlist-copies.ts) and beside each the goods and units held (an activity's one order, a
// goods' sum). A copy answers while its read is under ANSWER_MS old; from RENEW_MS one request
// renews it in the background: from the data center's copy when another isolate has read
// Postgres within RENEW_MS, else by reading what changed since its own read (an index on the
// activity or goods and the change time; the whole list again every WHOLE_MS) and leaving the
// result as the data center's copy. Postgres then hears about one read a second per data center
// and activity or goods, of the orders that changed, not one statement a shopper.
//
// A copy is a second or two behind Postgres, which is itself behind the orders' queue: a shopper
// it does not know of yet is let through as one the statement did not know of would be, and the
// objects and Postgres' unique index settle it (one order, the other refused); a goods' page
// shows a purchase a second or two after Postgres has it. While Postgres is away (the renewals
// failing, or one under way for LATE_RENEWAL_MS) a copy answers up to OUTAGE_ANSWER_MS old.
// Where the copy is missing, too old or over MAX_HOLDERS, the shopper's statement answers.

/** From this age a request renews its isolate's copy, in the background. */
const RENEW_MS = 1_000;
/** Up to this age a copy answers while it renews; older, the shoppers' statements answer. */
const ANSWER_MS = 5_000;
/**
 * While its renewals fail (Postgres away), a copy answers up to this age: Postgres' orders do
 * not change while it is away (the consumer cannot write them either), so the copy is what a
 * statement would say, and the sale goes on at the edge instead of answering 503. Longer than
 * any outage the orders' queue and the objects' outboxes ride out.
 */
const OUTAGE_ANSWER_MS = 30 * 60_000;
/**
 * A renewal under way for longer than this counts as failing: the copy answers on as while
 * Postgres is away, before its ANSWER_MS has run out (a renewal starts at RENEW_MS of age). A
 * Postgres that takes a read and never answers (a server hung, not refusing) had left the copy
 * silent after ANSWER_MS and every shopper's statement waiting. The read itself goes on (up to
 * COPY_READ_MS, db/client.ts): a slow one on a busy server is not cut short.
 */
const LATE_RENEWAL_MS = ANSWER_MS - RENEW_MS - 1_000;
/**
 * Past this a renewal still counted under way is one whose invocation was torn down before it
 * landed (a live one has failed at its statement's deadline by then, and set failingSince).
 */
const LOST_RENEWAL_MS = COPY_READ_MS + LATE_RENEWAL_MS;
/** A renewal reads the changes stamped since its base's read less this: writes committed after that read but stamped before it. */
const OVERLAP_MS = 2_000;
/** A renewal reads the whole list when its base is older than this (the changes since would be most of it). */
const BASE_MS = 10_000;
/** And at least this often, whatever the changes it may have missed (a change stamped by a clock far behind). */
const WHOLE_MS = 60_000;
/**
 * Above this many holders an activity's or goods' shoppers ask Postgres each (the copy would be
 * 16 MB in every isolate); looked at again after WHOLE_MS.
 */
const MAX_HOLDERS = 1_000_000;
/**
 * A goods' copy is read from nothing (or from a base too old for the changes: a whole read) only
 * once the isolate has been asked this many times within DEMAND_WINDOW_MS: a page loaded now and
 * then (after the sale, a goods nobody watches) is cheaper answered by its statements than by a
 * whole read of its holders a load. An activity's rule is asked by a sale's crowd: read at once.
 */
export const LOAD_AFTER_ASKS = 10;
const DEMAND_WINDOW_MS = 5_000;
/** Holders an isolate keeps over all its copies; the copies renewed longest ago go first. */
const MAX_KEPT_HOLDERS = 2_000_000;
/** The data center keeps a copy this long (past BASE_MS no renewal builds on it, but while Postgres is away a new isolate answers from it). */
const SHARED_KEEP_SECONDS = OUTAGE_ANSWER_MS / 1000;
/** How long a renewing isolate's mark holds the data center's others back. */
const RENEWING_MARK_SECONDS = 5;
/** The body of a renewing mark (only its presence is read). */
const RENEWING = new Uint8Array([1]);

/** What a copy is of: an activity's holders or a goods'. */
type Scope = { copy: Extract<CopyName, 'activity_holders' | 'goods_holders'>; id: number };

/** The copy's reader: an activity's orders, or a goods' shoppers' sums. */
const READERS: Record<Scope['copy'], (db: SqlExecutor, id: number, since: number | null, max: number) => Promise<HoldersRead>> = {
  activity_holders: readActivityHolders,
  goods_holders: readGoodsHolders,
};

/** Where an isolate keeps a copy, per database. */
function keyOf(config: Config, scope: Scope): string {
  return `${config.databaseUrl}|${scope.copy}|${scope.id}`;
}

/** The data center's name for a copy. */
function sharedName(config: Config, scope: Scope): Promise<string> {
  return sharedKey(config.databaseUrl, `${scope.copy === 'activity_holders' ? 'activity' : 'goods'}-holders/${scope.id}`);
}

/**
 * What an isolate keeps of an activity or goods: its copy, when a request last went to renew it,
 * the read time a copy must be after (an order cancelled here), since when its renewals have
 * failed (0: the last one did not), and the asks counted toward a whole read (LOAD_AFTER_ASKS).
 */
type Kept = {
  copy: Holders | undefined;
  renewingSince: number;
  notBefore: number;
  failingSince: number;
  /** Renewals under way, and since when one has been (0: none). */
  inFlight: number;
  inFlightSince: number;
  asks: number;
  asksSince: number;
};
/** Per database and activity or goods, in the order their copies were last renewed. */
const kept = new Map<string, Kept>();

/** What an isolate keeps of an activity or goods before its first copy (or after a cancel at `notBefore`). */
function nothingKept(notBefore = 0): Kept {
  return { copy: undefined, renewingSince: 0, notBefore, failingSince: 0, inFlight: 0, inFlightSince: 0, asks: 0, asksSince: 0 };
}

/** A shopper's live order in an activity, as a copy has it. */
export type Holding = { goodsId: number; quantity: number };

/**
 * The shopper's live order in the activity, from this isolate's copy: null for none, undefined
 * when the isolate has no copy that may answer (the caller asks Postgres). A copy from RENEW_MS
 * old, or none, starts its renewal here, in the background (`waitUntil`), one per isolate and
 * activity at a time: no shopper waits on it.
 */
export function holdingAtEdge(
  config: Config,
  activityId: number,
  userId: string,
  waitUntil: WaitUntil | undefined,
  now = Date.now(),
): Holding | null | undefined {
  return heldIn(config, { copy: 'activity_holders', id: activityId }, userId, waitUntil, now);
}

/**
 * The units the shopper holds of a per-goods sale in live orders, from this isolate's copy (0 for
 * none); undefined when the isolate has no copy that may answer, renewed as holdingAtEdge's.
 */
export function unitsHeldAtEdge(
  config: Config,
  goodsId: number,
  userId: string,
  waitUntil: WaitUntil | undefined,
  now = Date.now(),
): number | undefined {
  const holding = heldIn(config, { copy: 'goods_holders', id: goodsId }, userId, waitUntil, now);
  return holding === undefined ? undefined : (holding?.quantity ?? 0);
}

/** The shopper's holding in the scope's copy (null: none; undefined: no copy that may answer), its renewal started as due. */
function heldIn(config: Config, scope: Scope, userId: string, waitUntil: WaitUntil | undefined, now: number): Holding | null | undefined {
  const key = keyOf(config, scope);
  let mine = kept.get(key);
  if (!mine) {
    mine = nothingKept();
    kept.set(key, mine);
  }
  const copy = mine.copy;
  // A copy too large to keep is looked at again only every WHOLE_MS: each look reads the whole list.
  const renewAfter = copy && !copy.fingerprints ? WHOLE_MS : RENEW_MS;
  if (waitUntil && (!copy || now - copy.at >= renewAfter) && now - mine.renewingSince >= RENEW_MS && worthReading(mine, scope, now)) {
    mine.renewingSince = now;
    const renewing = mine;
    if (renewing.inFlight++ === 0) {
      renewing.inFlightSince = now;
    }
    const landed = () => {
      if (--renewing.inFlight === 0) {
        renewing.inFlightSince = 0;
      }
    };
    waitUntil(
      // Failed or done, the next may start a RENEW_MS after this one's start.
      renew(config, scope, key)
        .finally(landed)
        .then(
          (renewed) => {
            if (renewed) {
              renewing.failingSince = 0;
            }
          },
          (error: unknown) => {
            if (renewing.failingSince === 0) {
              // Once a stretch of failures: they come every second while Postgres is away.
              renewing.failingSince = Date.now();
              log.warn(`${scope.copy}.renew_failed`, { [scope.copy === 'activity_holders' ? 'activityId' : 'goodsId']: scope.id, error });
            }
          },
        ),
    );
  }
  const underWay = mine.inFlightSince > 0 ? now - mine.inFlightSince : 0;
  const late = underWay > LATE_RENEWAL_MS && underWay < LOST_RENEWAL_MS;
  const answersFor = mine.failingSince > 0 || late ? OUTAGE_ANSWER_MS : ANSWER_MS;
  if (!copy?.fingerprints || !copy.holdings || now - copy.at >= answersFor) {
    return undefined;
  }
  const i = fingerprintIndex(copy.fingerprints, fingerprint(userId));
  if (i < 0) {
    return null;
  }
  const holding = copy.holdings[i] as number;
  return { goodsId: Math.floor(holding / UNITS), quantity: holding % UNITS };
}

/**
 * Whether a renewal due is worth its read: one from a recent base, an activity's, or a goods'
 * whose page is busy here (LOAD_AFTER_ASKS).
 */
function worthReading(mine: Kept, scope: Scope, now: number): boolean {
  if (scope.copy === 'activity_holders' || (mine.copy?.fingerprints && now - mine.copy.at < BASE_MS)) {
    return true;
  }
  if (now - mine.asksSince >= DEMAND_WINDOW_MS) {
    mine.asksSince = now;
    mine.asks = 0;
  }
  mine.asks++;
  return mine.asks >= LOAD_AFTER_ASKS;
}

/**
 * Renews the scope's copy: the data center's when it is under RENEW_MS old; else, unless
 * another isolate of the data center is reading Postgres for it (its mark), Postgres' changes
 * since the newest copy at hand (or the whole list), which then become the data center's copy.
 * True when the copy is now from a read within RENEW_MS; false when another isolate is reading;
 * a read that fails throws, after taking the data center's copy if it is newer than this
 * isolate's (a new isolate while Postgres is away answers from it).
 */
async function renew(config: Config, scope: Scope, key: string): Promise<boolean> {
  const name = await sharedName(config, scope);
  const here = kept.get(key);
  const mine = here?.copy;
  // A copy read before an order was cancelled here is no base (the cancel may be older than its overlap reaches).
  const shared = usable(decode(await readSharedBytes(name)), here?.notBefore ?? 0);
  const base = shared && (!mine || shared.asOf > mine.asOf) ? shared : mine;
  if (base && base !== mine && Date.now() - base.at < RENEW_MS) {
    countRenewal(scope.copy, 'data_center');
    adopt(key, base);
    return true;
  }
  const mark = `${name}/renewing`;
  if (await readSharedBytes(mark)) {
    if (base && base !== mine) {
      adopt(key, base);
    }
    return false;
  }
  await writeSharedBytes(mark, RENEWING, RENEWING_MARK_SECONDS);
  try {
    const next = await readFromPostgres(config, scope, base).catch((error: unknown) => {
      countRenewal(scope.copy, 'failed');
      if (base && base !== mine) {
        adopt(key, base);
      }
      throw error;
    });
    countRenewal(scope.copy, 'postgres');
    if (adopt(key, next)) {
      await writeSharedBytes(name, encode(next), SHARED_KEEP_SECONDS);
    }
    return true;
  } finally {
    await dropShared(mark);
  }
}

/** The copy after Postgres' changes since `base` (when it is recent and whole-read within WHOLE_MS), else the whole list. */
async function readFromPostgres(config: Config, scope: Scope, base: Holders | undefined): Promise<Holders> {
  const db = httpDb(dbOptions(config), COPY_READ_MS);
  const read = (since: number | null) => READERS[scope.copy](db, scope.id, since, MAX_HOLDERS);
  const at = Date.now();
  if (base?.fingerprints && base.holdings && at - base.at < BASE_MS && base.asOf - base.wholeAt < WHOLE_MS) {
    const changed = await read(base.asOf - OVERLAP_MS);
    if (changed.changes) {
      const merged = applyChanges(base.fingerprints, base.holdings, changed.changes);
      if (merged.fingerprints.length <= MAX_HOLDERS) {
        return { asOf: changed.asOf, wholeAt: base.wholeAt, at, ...merged };
      }
    }
  }
  const whole = await read(null);
  if (!whole.changes) {
    return { asOf: whole.asOf, wholeAt: whole.asOf, at, fingerprints: null, holdings: null };
  }
  return { asOf: whole.asOf, wholeAt: whole.asOf, at, ...applyChanges(EMPTY, EMPTY, whole.changes) };
}

/**
 * Keeps `copy` as the activity's or goods', unless it was read before an order cancelled here (`notBefore`)
 * or is older than the one kept; then drops the copies renewed longest ago while all of them hold
 * more than MAX_KEPT_HOLDERS. Whether it was kept.
 */
function adopt(key: string, copy: Holders): boolean {
  const mine = kept.get(key) ?? nothingKept();
  if (!usable(copy, mine.notBefore) || (mine.copy && mine.copy.asOf > copy.asOf)) {
    return false;
  }
  mine.copy = copy;
  kept.delete(key);
  kept.set(key, mine);
  let total = 0;
  for (const k of kept.values()) {
    total += k.copy?.fingerprints?.length ?? 0;
  }
  for (const [k, v] of kept) {
    if (total <= MAX_KEPT_HOLDERS || k === key) {
      break;
    }
    kept.delete(k);
    total -= v.copy?.fingerprints?.length ?? 0;
  }
  return true;
}

/** `copy` unless it was read at or before `notBefore` (an order cancelled in this isolate then). */
function usable(copy: Holders | undefined, notBefore: number): Holders | undefined {
  return copy && copy.at > notBefore ? copy : undefined;
}

/**
 * Forgets the copy of the order's activity (`activity` scope) or goods here and in the data
 * center (the order cancelled in this request: its shopper may buy again at once), and keeps out
 * any copy read before now, so the shopper's next request asks Postgres until a renewal after the
 * cancel.
 */
export async function forgetHoldersOf(config: Config, order: { limitScope: string; activityId: number; goodsId: number }): Promise<void> {
  const scope: Scope =
    order.limitScope === 'activity' ? { copy: 'activity_holders', id: order.activityId } : { copy: 'goods_holders', id: order.goodsId };
  kept.set(keyOf(config, scope), nothingKept(Date.now()));
  await dropShared(await sharedName(config, scope));
}

/** Forgets this isolate's copies (tests: an isolate that has not read any). */
export function forgetHoldersCopies(): void {
  kept.clear();
}
