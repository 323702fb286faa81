import type { WriteResult } from '../../db/orders';
import { roomShard, roomShardOf } from '../../durable-objects/routing';
import type { GoodsPlacement, OrderMessage } from '../kernel/contract';
import { log } from '../kernel/log';
import { sleep } from '../kernel/sleep';
import { ROOM_SHARDS, type ShopperResult } from '../kernel/waiting-room';

/**
 * Tells the shoppers' waiting-room shards what became of their purchases, right after the
 * goods' object has settled them: one call per shard the batch touches, off the purchase path.
 * Each shard pushes the result to its shopper's live connection (with or without a queue). A
 * failure is only logged: the result route still answers, and the batch must not be retried
 * for a notification.
 */
export async function tellShoppers(env: Env, goods: GoodsPlacement, orders: OrderMessage[], results: WriteResult[]): Promise<void> {
  const userOf = new Map(orders.map((o) => [o.requestId, o.userId]));
  const byShard = new Map<number, ShopperResult[]>();
  const shards = goods.roomShards ?? ROOM_SHARDS;
  for (const r of results) {
    const userId = userOf.get(r.requestId);
    if (!userId) {
      continue;
    }
    const shard = roomShardOf(userId, shards);
    const list = byShard.get(shard) ?? [];
    list.push(
      r.ok
        ? { userId, requestId: r.requestId, status: 'SUCCESS', orderId: r.orderId }
        : { userId, requestId: r.requestId, status: 'FAIL', reason: r.reason },
    );
    byShard.set(shard, list);
  }
  // One call per turn of the event loop: a call's list is serialised when it is made, and a
  // batch of 2,000 results told at once held the isolate (and, on one machine, the purchases
  // beside it) for over 10 ms.
  const calls: Promise<unknown>[] = [];
  for (const [shard, list] of byShard) {
    if (calls.length > 0) {
      await sleep(0);
    }
    calls.push(
      roomShard(env, goods, shard)
        .results(list)
        .catch((error: unknown) => log.warn('room.results_failed', { goodsId: goods.id, shard, results: list.length, error })),
    );
  }
  await Promise.all(calls);
}
