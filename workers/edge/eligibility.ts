import { type Standing, shopperStanding } from '../../db/allowlist';
import { dbOptions, httpDb } from '../../db/client';
import type { GoodsRow } from '../../db/goods';
import type { Config } from '../kernel/config';
import { AppError } from '../kernel/errors';
import { listedAtEdge } from './allowlist-copies';
import type { WaitUntil } from './group-commit';

// The sale rules the edge checks before the goods' object does: the allowlist and the activity's
// one live order, not asked of the goods' object, so the token route and the waiting room's join
// do not funnel every shopper into the one object the sale itself runs on. The allowlist is read
// from the isolate's copy of the list (allowlist-copies.ts) once it has one, so a crowd's joins
// and ticket requests do not each ask Postgres either; the activity rule, and the allowlist until
// the copy is there, ask Postgres over SQL over HTTP (one indexed statement, no session). The
// object checks the allowlist again where the unit is taken, and Postgres' unique index is the
// activity rule's final guard.

/** The standing of a shopper of whom only the list is in question (no units held, no order elsewhere). */
function listedOnly(listed: boolean): Standing {
  return { listed, held: 0, elsewhere: false };
}

/** Whether a goods has a rule only Postgres can check before the purchase (open, per-goods sales have none). */
export function hasEdgeRules(goods: Pick<GoodsRow, 'eligibility' | 'limitScope'>): boolean {
  return goods.eligibility === 'allowlist' || goods.limitScope === 'activity';
}

/** The shopper's standing for a goods (read only when it has edge rules; otherwise what an open sale implies). */
export async function standingOf(config: Config, goods: GoodsRow, userId: string): Promise<Standing> {
  if (!hasEdgeRules(goods)) {
    return listedOnly(true);
  }
  return shopperStanding(httpDb(dbOptions(config)), goods, userId);
}

/**
 * A shopper's standing before a goods' sale starts, without Postgres where it can be had: nobody
 * holds a unit of a goods whose sale has not started and whose stock is whole (its object refuses
 * a purchase before the start), so only the allowlist is in question, and the isolate's copy of
 * it answers (an open goods: nothing is). Undefined after the start, for stock not whole (a unit
 * held, however that came about), for the activity rule (other goods' orders) and while the
 * isolate has no copy: the caller asks Postgres.
 */
export function standingBeforeSale(
  config: Config,
  goods: GoodsRow,
  userId: string,
  waitUntil: WaitUntil | undefined,
  now = Date.now(),
): Standing | undefined {
  if (goods.limitScope === 'activity' || now >= goods.startAt.getTime() || goods.stock !== goods.totalStock) {
    return undefined;
  }
  const listed = goods.eligibility === 'allowlist' ? listedAtEdge(config, goods, userId, waitUntil, now) : true;
  return listed === undefined ? undefined : listedOnly(listed);
}

/** 403 NOT_ELIGIBLE for a shopper not on an allowlist goods' list; 409 LIMIT_REACHED for a live order elsewhere in an activity-scoped sale. */
export function refuseIneligible(goods: GoodsRow, standing: Standing): void {
  if (goods.eligibility === 'allowlist' && !standing.listed) {
    throw new AppError('NOT_ELIGIBLE');
  }
  if (goods.limitScope === 'activity' && standing.elsewhere) {
    throw new AppError('LIMIT_REACHED', 'you already hold an order in this promotion: one per shopper across its goods');
  }
}

/**
 * The checks above in one call, for the token route and the waiting room's join: an allowlist
 * goods of per-goods limits answers from the isolate's copy of its list when it has one
 * (`waitUntil` lets a missing copy load in the background), anything else asks Postgres.
 */
export async function requireEligible(config: Config, goods: GoodsRow, userId: string, waitUntil: WaitUntil | undefined): Promise<void> {
  if (!hasEdgeRules(goods)) {
    return;
  }
  const listed = goods.limitScope === 'activity' ? undefined : listedAtEdge(config, goods, userId, waitUntil);
  refuseIneligible(goods, listed === undefined ? await standingOf(config, goods, userId) : listedOnly(listed));
}
