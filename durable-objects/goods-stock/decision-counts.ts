import type { ReserveItem, ReserveOutcome } from '../../workers/kernel/contract';
import { count } from '../../workers/metrics/registry';

/**
 * Counts a batch's decisions by outcome, and the units it accepted (a reservation of 2 counts 2):
 * summed over the batch first, so a batch of purchases adds to each of its few series once.
 */
export function countDecisions(goodsId: number, items: ReserveItem[], outcomes: ReserveOutcome[]): void {
  let units = 0;
  const byOutcome = new Map<string, number>();
  for (const [i, o] of outcomes.entries()) {
    units += o.ok && !o.replay ? (items[i]?.quantity ?? 1) : 0;
    const outcome = o.replay ? 'replay' : o.ok ? 'accepted' : o.reason.toLowerCase();
    byOutcome.set(outcome, (byOutcome.get(outcome) ?? 0) + 1);
  }
  const goods_id = String(goodsId);
  for (const [outcome, n] of byOutcome) {
    count('seckill_reservations_total', { goods_id, outcome }, n);
  }
  if (units > 0) {
    count('seckill_units_reserved_total', { goods_id }, units);
  }
}
