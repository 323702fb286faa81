import type { GoodsRow } from '../../db/goods';
import type { StockSnapshot } from '../kernel/contract';
import type { GoodsStatus, GoodsView } from '../kernel/views';
import { opensAt, readQueueSettings } from '../kernel/waiting-room';

/** The goods' waiting room as the page needs it: the mode, and when the doors open. */
function queueView(row: GoodsRow): GoodsView['queue'] {
  const q = readQueueSettings(row.queue);
  if (q.mode === 'off') {
    return { mode: 'off' };
  }
  return {
    mode: q.mode,
    opensAt: new Date(opensAt({ startAt: row.startAt.getTime(), preQueueSeconds: q.preQueueSeconds ?? 0 })).toISOString(),
  };
}

/** The contract's goods shape. */
export function goodsView(
  row: GoodsRow,
  snapshot: StockSnapshot | undefined,
  remainingOverride: number | undefined,
  now: number,
): GoodsView {
  const remaining = remainingOverride ?? snapshot?.remaining ?? row.stock;
  const paused = snapshot?.paused ?? row.status === 1;
  const startAt = row.startAt.getTime();
  const endAt = row.endAt.getTime();
  let status: GoodsStatus = 'ON_SALE';
  if (now >= endAt) {
    status = 'ENDED';
  } else if (remaining <= 0) {
    status = 'SOLD_OUT';
  } else if (paused) {
    status = 'PAUSED';
  } else if (now < startAt) {
    status = 'UPCOMING';
  }
  return {
    goodsId: row.id,
    activityId: row.activityId,
    title: row.title,
    imageUrl: row.imageUrl,
    priceCents: row.priceCents,
    totalStock: row.totalStock,
    remaining,
    startAt: row.startAt.toISOString(),
    endAt: row.endAt.toISOString(),
    status,
    payTimeoutSeconds: row.payTimeoutSeconds,
    serverTime: new Date(now).toISOString(),
    perUserLimit: row.perUserLimit,
    limitScope: row.limitScope,
    eligibility: row.eligibility,
    queue: queueView(row),
  };
}
