import type { ReserveItem, ReserveOutcome } from '../../workers/kernel/contract';
import { count } from '../../workers/metrics/registry';

/** Counts a batch's decisions by outcome, and the units it accepted (a reservation of 2 counts 2). */
export function countDecisions(goodsId: number, items: ReserveItem[], outcomes: ReserveOutcome[]): void {
  let units = 0;
  for (const [i, o] of outcomes.entries()) {
    units += o.ok && !o.replay ? (items[i]?.quantity ?? 1) : 0;
    count('seckill_reservations_total', {
      goods_id: String(goodsId),
      outcome: o.replay ? 'replay' : o.ok ? 'accepted' : o.reason.toLowerCase(),
    });
  }
  if (units > 0) {
    count('seckill_units_reserved_total', { goods_id: String(goodsId) }, units);
  }
}
