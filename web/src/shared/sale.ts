// A sale's state on a given clock, shared by the shopper page and the dashboard.

export type SaleState = 'UPCOMING' | 'ON_SALE' | 'PAUSED' | 'SOLD_OUT' | 'ENDED';

/**
 * The sale's state at the server's `now`: the server's status is a snapshot of when it
 * answered, but the window opens and closes on the clock without another request.
 */
export function saleState(goods: { status: string; remaining: number; startAt: number; endAt: number }, now: number): SaleState {
  if (now >= goods.endAt || goods.status === 'ENDED') {
    return 'ENDED';
  }
  if (goods.remaining <= 0) {
    return 'SOLD_OUT';
  }
  if (goods.status === 'PAUSED') {
    return 'PAUSED';
  }
  return now < goods.startAt ? 'UPCOMING' : 'ON_SALE';
}
