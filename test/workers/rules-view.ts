// A reservation's view of the goods' object's state, as plain data, for the rules' unit tests.
import type { ReservationView, SaleState } from '../../durable-objects/goods-stock/rules';

export const NOW = 1_800_000_000_000;

export type ViewState = { prior?: string[]; used?: string[]; holders?: string[]; units?: number; allowed?: boolean };

/** A sale on now with 10 of 10 units, one per shopper, open to all, changed by `sale`; holders hold one unit, or `units`. */
export function reservationView(sale: Partial<SaleState> = {}, state: ViewState = {}): ReservationView {
  return {
    sale: {
      totalStock: 10,
      remaining: 10,
      startAt: NOW - 1000,
      endAt: NOW + 1000,
      paused: false,
      perUserLimit: 1,
      limitScope: 'goods',
      eligibility: 'open',
      ...sale,
    },
    prior: (id) => (state.prior?.includes(id) ? { orderId: `1-${id}`, reason: null, released: false } : undefined),
    tokenUsed: (t) => state.used?.includes(t) ?? false,
    userUnits: (u) => state.units ?? (state.holders?.includes(u) ? 1 : 0),
    allowed: () => state.allowed ?? true,
  };
}
