import type { RoomGoods } from '../../workers/kernel/waiting-room';
import type { Reported, Stock } from './hub-rules';
import { keyValue, LEAD_MARGIN_MS } from './rules';

// What the coordinator measures of the room itself, pure: how long a shopper with nobody ahead
// waits for their round (the front lag), how late the shards let shoppers in after a round's
// time, and the purchases its free units would count twice because their shards had not heard
// of them when they last reported.

/** How much of the front lag one round's measurement moves (an average over the last few rounds). */
const FRONT_LAG_WEIGHT = 0.3;

/**
 * The front lag after a round at `at` that admitted `keys`: the time from a shopper's join to
 * their round for a line that holds nobody back, measured where the round shows it. Only a
 * round that admitted every key it could see, after a decision that did the same, measures it:
 * its keys waited for the reports, the decision and the round's lead, none of them for the rate.
 * The wait counts from the join time in each arrival key (pre-queue keys carry none). It was a
 * constant of half a tick for the report, half for the decision, and a tick and LEAD_MARGIN_MS
 * for the round, but a decision passes only keys below every shard's horizon, about a tick
 * behind with many shards, and ticks run late on a busy machine: the bench's queue phase let
 * shoppers in about 1 s later than promised along the whole of a short line. admissionLagMs
 * now counts the shards; this measure, the machine.
 */
export function frontLag(
  previous: number | null,
  keys: readonly string[],
  at: number,
  drainedBefore: boolean,
  tickMs: number,
): number | null {
  if (!drainedBefore) {
    return previous;
  }
  let sum = 0;
  let n = 0;
  for (const k of keys) {
    const { kind, value } = keyValue(k);
    if (kind === '1') {
      sum += at - value;
      n++;
    }
  }
  if (n === 0) {
    return previous;
  }
  // Within a round's lead and a few ticks: a clock that jumped does not set every promise.
  return towards(previous, Math.min(4 * tickMs + LEAD_MARGIN_MS, Math.max(tickMs + LEAD_MARGIN_MS, sum / n)), FRONT_LAG_WEIGHT);
}

/** How much of the lateness one report moves: every busy shard reports once a tick, so a few ticks' worth. */
const LATE_WEIGHT = 0.1;

/**
 * How late the shards let shoppers in after their round's time, lately, with one more report's
 * figure (the mean over the shoppers its shard let in since its report before) folded in. A
 * shard hears of a round in its next report's reply, and admits on its alarm: a busy one does
 * either late, and every shopper it lets in waits that much more than the round. Folded as each
 * report comes, not at decisions: a shard that let in one shopper says so in one report only.
 */
export function lateness(previous: number | null, lateMs: number, tickMs: number): number {
  return towards(previous, Math.min(2 * tickMs, Math.max(0, lateMs)), LATE_WEIGHT);
}

/** A running measure moved `weight` of the way to a new reading (the reading itself when there was none), in whole ms. */
function towards(previous: number | null, measured: number, weight: number): number {
  return Math.round(previous === null ? measured : previous + (measured - previous) * weight);
}

/**
 * Purchases the stock object has confirmed whose shards had not heard of them when they last
 * reported: each such shopper still counts as outstanding there, and their unit is no longer in
 * the stock's `remaining + queued`, so the free units count them twice. In a wave of purchases
 * that held the last shoppers of a line whose stock equals its crowd for seconds (628
 * confirmations in one decision's second, the free units at -229 with 380 waiting). A shard
 * reports how many of its admitted shoppers it has heard bought, in the same report as its
 * outstanding ones, so each purchase is in one of the two; the confirmed orders of shoppers
 * the room let in (the stock object counts those whose token was issued against a pass:
 * `admittedConfirmed`) less every shard's `bought` is then the purchases counted twice, or fewer
 * (an order released since counts on the shards' side only, as does one whose token was got
 * while an `auto` room's line was off). That holds where each such order is a single unit (one
 * unit a shopper), counted by every stock shard (`exact`), with every shard of a build that
 * reports `bought`. A stock object before that count: every confirmed order, which only a room
 * that is always on can take for its shoppers'. Never more than the confirmations of the settle
 * window, which such purchases are.
 */
export function heardLate(
  stock: Stock | undefined,
  goods: RoomGoods,
  reports: readonly Reported[],
  bought: Record<string, number>,
  settledLately: number,
): number {
  if (!stock?.exact || goods.unitsPerShopper !== 1 || reports.some((r) => r.bought === undefined)) {
    return 0;
  }
  const ofTheRoom = stock.admittedConfirmed ?? (goods.mode === 'always' ? stock.confirmed : undefined);
  if (ofTheRoom === undefined) {
    return 0;
  }
  const heard = Object.values(bought).reduce((a, b) => a + b, 0);
  return Math.max(0, Math.min(ofTheRoom - heard, settledLately));
}

/** Each shard's latest `bought`: the ones kept, updated by the reports that carry one. */
export function latestBought(kept: Record<string, number>, reports: readonly Reported[]): Record<string, number> {
  const bought = { ...kept };
  for (const r of reports) {
    if (r.bought !== undefined) {
      bought[String(r.shard)] = r.bought;
    }
  }
  return bought;
}
