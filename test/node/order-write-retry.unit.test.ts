// writeOrders runs its one statement again when Postgres aborted it to break a deadlock with a
// concurrent batch (the statement is rolled back whole and idempotent), and only then.
import { describe, expect, it } from 'vitest';
import { type SqlExecutor, writeOrders } from '../../db/orders';
import type { OrderMessage } from '../../workers/kernel/contract';

const message: OrderMessage = {
  v: 1,
  kind: 'reserve',
  requestId: '8.AAAAAAAAAAAAAAAAAAAAAA',
  orderId: '8-a-1',
  orderNo: 'SK8a1',
  userId: 'u-1',
  goodsId: 8,
  activityId: 7,
  priceCents: 990,
  payTimeoutSeconds: 600,
  reservedAt: 1_790_000_000_123,
};

/** An executor that fails with each of `failures` in turn, then answers the message as created. */
function executor(failures: unknown[]): SqlExecutor & { calls: number } {
  const db = {
    calls: 0,
    async execute() {
      const failure = failures[db.calls++];
      if (failure !== undefined) {
        throw failure;
      }
      return { rows: [{ request_id: message.requestId, order_id: message.orderId, outcome: 'CREATED', webhook_id: null }] };
    },
  };
  return db;
}

/** How drizzle reports a Postgres error: the driver's error, with its SQLSTATE, as the cause. */
const failed = (code: string) => Object.assign(new Error('Failed query'), { cause: Object.assign(new Error(code), { code }) });

describe('writeOrders under concurrent writers', () => {
  it('runs the statement again after a deadlock or a serialisation failure, and answers', async () => {
    const db = executor([failed('40P01'), failed('40001')]);
    expect(await writeOrders(db, 8, [message])).toEqual([
      { requestId: message.requestId, ok: true, orderId: message.orderId, created: true },
    ]);
    expect(db.calls).toBe(3);
  });

  it('gives up after three aborted attempts, and never repeats another failure', async () => {
    const deadlocked = executor([failed('40P01'), failed('40P01'), failed('40P01'), failed('40P01')]);
    await expect(writeOrders(deadlocked, 8, [message])).rejects.toMatchObject({ cause: { code: '40P01' } });
    expect(deadlocked.calls).toBe(3);
    const unknownGoods = executor([failed('23503')]);
    await expect(writeOrders(unknownGoods, 8, [message])).rejects.toMatchObject({ cause: { code: '23503' } });
    expect(unknownGoods.calls).toBe(1);
  });
});
