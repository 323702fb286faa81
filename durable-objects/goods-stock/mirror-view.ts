import type { ReserveItem, ReserveOutcome } from '../../workers/kernel/contract';
import type { MirrorExpectation } from '../../workers/mirror/compare';
import { FINAL_TTL_SECONDS } from '../../workers/mirror/keys';
import type { MirrorFullState, MirrorGoods } from '../../workers/mirror/plan';
import type { MirrorSync } from '../../workers/mirror/sync';
import type { Sale, StockStorage } from './storage';

// The plain data the Redis mirror library is given: read from the object's committed state in
// one synchronous step, so it is one consistent picture.

/** The goods' settings as the mirror's goods hash holds them. */
export function mirrorGoods(sale: Sale, title: string): MirrorGoods {
  return {
    goodsId: sale.goodsId,
    activityId: sale.activityId,
    title,
    priceCents: sale.priceCents,
    totalStock: sale.totalStock,
    startAt: sale.startAt,
    endAt: sale.endAt,
    paused: sale.paused,
    payTimeoutSeconds: sale.payTimeoutSeconds,
  };
}

/** What the mirror should hold, for comparing. */
export function mirrorExpectation(store: StockStorage, sale: Sale, title: string, stockPart?: string): MirrorExpectation {
  const e = { goods: mirrorGoods(sale, title), remaining: sale.remaining, holders: store.tally().holders };
  return stockPart === undefined ? e : { ...e, stockPart };
}

/** Everything the mirror holds, for a full rewrite. */
export function mirrorFullState(store: StockStorage, sale: Sale, title: string, now: number, stockPart?: string): MirrorFullState {
  const state = {
    goods: mirrorGoods(sale, title),
    remaining: sale.remaining,
    holders: store.holderIds(),
    results: store.recentResults(now - FINAL_TTL_SECONDS * 1000),
  };
  return stockPart === undefined ? state : { ...state, stockPart };
}

/** Notes a batch's accepted reservations (holders, QUEUED answers, the stock) for the next mirror write. */
export function noteAccepted(mirror: MirrorSync, sale: Sale, items: ReserveItem[], outcomes: ReserveOutcome[]): void {
  outcomes.forEach((o, i) => {
    const userId = items[i]?.userId;
    if (o.ok && !o.replay && userId !== undefined) {
      mirror.noteUser(userId, true);
      mirror.noteResult({ requestId: o.requestId, userId, value: 'QUEUED' });
    }
  });
  mirror.noteStock(sale.remaining);
}
