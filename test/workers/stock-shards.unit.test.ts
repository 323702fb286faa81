import { describe, expect, it } from 'vitest';
import { coalesceMs, SEND_COALESCE_MS } from '../../durable-objects/goods-stock/outbox';
import type { StockSnapshot } from '../../workers/kernel/contract';
import { firstSeqOf, leaseChunk, SHARD_SEQ_SPAN, shardOf, shardOfOrderId, shardStocks, sumSnapshots } from '../../workers/kernel/shards';
import { compareMirror } from '../../workers/mirror/compare';
import { deltaOps, emptyDelta, fullOps, type MirrorGoods } from '../../workers/mirror/plan';

const snap = (over: Partial<StockSnapshot>): StockSnapshot => ({
  goodsId: 9,
  initialized: true,
  totalStock: 100,
  remaining: 0,
  startAt: 1,
  endAt: 2,
  paused: false,
  queued: 0,
  confirmed: 0,
  refused: 0,
  oldestQueuedAt: null,
  outboxPending: 0,
  oldestOutboxAt: null,
  mirrorStaleSince: null,
  reserveRequests: 0,
  ...over,
});

describe('shard choice and order ids', () => {
  it('a user always lands on the same shard, users spread over all shards, one shard is shard 0', () => {
    expect(shardOf('alice', 8)).toBe(shardOf('alice', 8));
    expect(shardOf('alice', 1)).toBe(0);
    const hits = new Array(16).fill(0);
    for (let i = 0; i < 3200; i++) {
      hits[shardOf(`user-${i}`, 16)]++;
    }
    expect(Math.min(...hits)).toBeGreaterThan(100);
  });

  it("reads an order id's shard back, and shard 0 keeps the sequence a one-shard goods always had", () => {
    expect(firstSeqOf(0)).toBe(1);
    expect(shardOfOrderId('7-1')).toBe(0);
    expect(shardOfOrderId('7-999999')).toBe(0);
    expect(shardOfOrderId(`7-${firstSeqOf(5) + 41}`)).toBe(5);
    expect(shardOfOrderId(`7-${63 * SHARD_SEQ_SPAN + 1}`)).toBe(63);
    expect(shardOfOrderId('nonsense')).toBe(0);
  });

  it('leases half the stock spread over the shards, at least one unit', () => {
    expect(leaseChunk(10_000, 16)).toBe(313);
    expect(leaseChunk(3, 8)).toBe(1);
  });
});

describe('snapshots across shards', () => {
  it('adds units and backlog, takes the oldest ages, and lists each shard', () => {
    const shards = [
      snap({ remaining: 5, queued: 1, confirmed: 2, oldestQueuedAt: 50, goodsRemaining: 99, shard: 0, shards: 3 }),
      undefined,
      snap({ remaining: 3, confirmed: 4, outboxPending: 2, oldestOutboxAt: 40, oldestQueuedAt: 30, shard: 2, shards: 3 }),
    ];
    const total = sumSnapshots(shards);
    expect(total).toMatchObject({
      remaining: 8,
      queued: 1,
      confirmed: 6,
      outboxPending: 2,
      oldestQueuedAt: 30,
      oldestOutboxAt: 40,
      shards: 3,
    });
    expect(total?.goodsRemaining).toBeUndefined();
    expect(shardStocks(shards)).toEqual([
      { shard: 0, remaining: 5, queued: 1, confirmed: 2 },
      { shard: 1, remaining: 0, queued: 0, confirmed: 0 },
      { shard: 2, remaining: 3, queued: 0, confirmed: 4 },
    ]);
    expect(sumSnapshots([undefined, snap({ remaining: 1 })])).toBeUndefined();
    const one = snap({ remaining: 7 });
    expect(sumSnapshots([one])).toBe(one);
  });
});

describe('the mirror of a sharded goods', () => {
  const goods: MirrorGoods = {
    goodsId: 9,
    activityId: 1,
    title: 't',
    priceCents: 1,
    totalStock: 100,
    startAt: 1,
    endAt: 2,
    paused: false,
    payTimeoutSeconds: 900,
  };

  it('a shard writes its part of the stock (the total is their sum) and only adds holders', () => {
    const d = emptyDelta();
    d.stock = 4;
    expect(deltaOps(9, d, '3')).toContainEqual({
      op: 'stockpart',
      key: 'seckill:stock:9',
      parts: 'seckill:stock:9:shards',
      field: '3',
      value: '4',
    });
    expect(deltaOps(9, d)).toContainEqual({ op: 'set', key: 'seckill:stock:9', value: '4' });
    const full = fullOps({ goods, remaining: 2, holders: ['a'], results: [], stockPart: '3' });
    expect(full.map((o) => o.op)).not.toContain('rename');
    expect(full.map((o) => o.op)).not.toContain('del');
    expect(full).toContainEqual({ op: 'sadd', key: 'seckill:users:9', members: ['a'] });
  });

  it("compares a shard's part, not the total, and not the shared holders count", () => {
    const view = { stock: 10, users: 7, goods: {}, part: 4 };
    const found = compareMirror({ goods, remaining: 4, holders: 1, stockPart: '2' }, view);
    expect(found.filter((f) => f.kind !== 'mirror_goods')).toEqual([]);
    expect(compareMirror({ goods, remaining: 5, holders: 1, stockPart: '2' }, view)).toContainEqual({
      kind: 'mirror_stock',
      expected: 5,
      found: 4,
    });
  });
});

describe("a shard's send wait", () => {
  it("is one object's wait times the shards, at most ten times it", () => {
    expect(coalesceMs(1)).toBe(SEND_COALESCE_MS);
    expect(coalesceMs(0)).toBe(SEND_COALESCE_MS);
    expect(coalesceMs(8)).toBe(8 * SEND_COALESCE_MS);
    expect(coalesceMs(64)).toBe(10 * SEND_COALESCE_MS);
  });
});
