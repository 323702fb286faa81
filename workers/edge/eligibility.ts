import { type Standing, shopperStanding } from '../../db/allowlist';
import { dbOptions, httpDb, SHOPPER_STATEMENT_MS } from '../../db/client';
import type { GoodsRow } from '../../db/goods';
import type { Config } from '../kernel/config';
import { AppError } from '../kernel/errors';
import { count } from '../metrics/registry';
import { listedAtEdge } from './allowlist-copies';
import type { WaitUntil } from './group-commit';
import { type Holding, holdingAtEdge, unitsHeldAtEdge } from './holders-copies';

// The sale rules the edge checks before the goods' object does: the allowlist and the activity's
// one live order, not asked of the goods' object, so the token route and the waiting room's join
// do not funnel every shopper into the one object the sale itself runs on. Nor, once the isolate
// has them, Postgres: the allowlist is read from the isolate's copy of the list
// (allowlist-copies.ts), the activity's live orders from its copy of who holds one and a
// per-goods sale's units from its copy of who holds how many (holders-copies.ts), so a crowd's
// joins, ticket requests and page loads do not each ask it.
// Until the copies are there the shopper's statement answers (one indexed statement over SQL over
// HTTP, no session). The object checks the allowlist again where the unit is taken, and
// Postgres' unique index is the activity rule's final guard.

/** The standing of a shopper of whom only the list is in question (no units held, no order elsewhere). */
function listedOnly(listed: boolean): Standing {
  return { listed, held: 0, elsewhere: false };
}

/** Whether a goods has a rule only Postgres can check before the purchase (open, per-goods sales have none). */
export function hasEdgeRules(goods: Pick<GoodsRow, 'eligibility' | 'limitScope'>): boolean {
  return goods.eligibility === 'allowlist' || goods.limitScope === 'activity';
}

/** What the edge's copies say of a shopper: on the list, and their live order in the goods' activity (`activity` scope). */
type CopiesSay = { listed: boolean; holding: Holding | null };

/**
 * The isolate's copies' answer for the goods' rules: the allowlist's (allowlist-copies.ts) and
 * the activity's holders (holders-copies.ts); undefined when either the goods needs has none
 * that may answer yet. Both are asked, so each starts its load or renewal as needed.
 */
function copiesSay(config: Config, goods: GoodsRow, userId: string, waitUntil: WaitUntil | undefined, now: number): CopiesSay | undefined {
  const listed = goods.eligibility === 'allowlist' ? listedAtEdge(config, goods, userId, waitUntil, now) : true;
  const holding = goods.limitScope === 'activity' ? holdingAtEdge(config, goods.activityId, userId, waitUntil, now) : null;
  return listed === undefined || holding === undefined ? undefined : { listed, holding };
}

/**
 * A shopper's standing, without Postgres where the isolate's copies can give it: an `activity`
 * goods' holders copy knows the units the shopper holds (their one live order of the activity),
 * a per-goods sale's the sum of theirs; nobody holds a unit of a goods whose sale has not
 * started and whose stock is whole (its object refuses a purchase before the start), so its
 * copy is not read then. Undefined where a copy it needs is missing: the caller asks Postgres.
 */
export function standingAtEdge(
  config: Config,
  goods: GoodsRow,
  userId: string,
  waitUntil: WaitUntil | undefined,
  now = Date.now(),
): Standing | undefined {
  const say = copiesSay(config, goods, userId, waitUntil, now);
  if (!say) {
    return undefined;
  }
  if (goods.limitScope === 'activity') {
    const { holding } = say;
    return {
      listed: say.listed,
      held: holding?.goodsId === goods.id ? holding.quantity : 0,
      elsewhere: holding !== null && holding.goodsId !== goods.id,
    };
  }
  if (now < goods.startAt.getTime() && goods.stock === goods.totalStock) {
    return listedOnly(say.listed);
  }
  const held = unitsHeldAtEdge(config, goods.id, userId, waitUntil, now);
  return held === undefined ? undefined : { listed: say.listed, held, elsewhere: false };
}

/**
 * The page's standing of a shopper: from the isolate's copies where they tell it all, else (or
 * when `fresh`: the shopper's own order just changed, which the copies may not have yet)
 * Postgres' statement.
 */
export async function pageStanding(
  config: Config,
  goods: GoodsRow,
  userId: string,
  waitUntil: WaitUntil | undefined,
  fresh = false,
): Promise<Standing> {
  const atEdge = fresh ? undefined : standingAtEdge(config, goods, userId, waitUntil);
  countCheck(goods, atEdge !== undefined);
  return atEdge ?? (await shopperStanding(httpDb(dbOptions(config), SHOPPER_STATEMENT_MS), goods, userId));
}

/** Counts a check of the goods' rules by what answered it (`seckill_edge_rule_checks_total`). */
function countCheck(goods: GoodsRow, atEdge: boolean): void {
  const activity = goods.limitScope === 'activity';
  const rule = goods.eligibility === 'allowlist' ? (activity ? 'allowlist_activity' : 'allowlist') : activity ? 'activity' : 'units_held';
  count('seckill_edge_rule_checks_total', { rule, answered_by: atEdge ? 'edge' : 'postgres' });
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
 * The checks above in one call, for the token route and the waiting room's join: from the
 * isolate's copies when they have them (`waitUntil` lets a missing or old one load in the
 * background), else from Postgres.
 */
export async function requireEligible(config: Config, goods: GoodsRow, userId: string, waitUntil: WaitUntil | undefined): Promise<void> {
  if (!hasEdgeRules(goods)) {
    return;
  }
  const say = copiesSay(config, goods, userId, waitUntil, Date.now());
  countCheck(goods, say !== undefined);
  refuseIneligible(
    goods,
    say
      ? { listed: say.listed, held: 0, elsewhere: say.holding !== null && say.holding.goodsId !== goods.id }
      : await shopperStanding(httpDb(dbOptions(config), SHOPPER_STATEMENT_MS), goods, userId),
  );
}
