import { describe, expect, it } from 'vitest';
import type { MirrorView } from '../../workers/mirror/client';
import { compareMirror } from '../../workers/mirror/compare';
import { FINAL_TTL_SECONDS, parseResult, QUEUED_TTL_SECONDS } from '../../workers/mirror/keys';
import { deltaOps, emptyDelta, fullOps, goodsOps, isEmptyDelta, type MirrorGoods, pipelines } from '../../workers/mirror/plan';

const goods: MirrorGoods = {
  goodsId: 7,
  activityId: 2001,
  title: 'Phone',
  priceCents: 99900,
  totalStock: 100,
  startAt: 1_000,
  endAt: 2_000,
  paused: false,
  payTimeoutSeconds: 900,
};

describe('mirror key layout', () => {
  it("writes the seed's keys: stock, goods hash, start, end", () => {
    const ops = fullOps({ goods, remaining: 42, holders: [], results: [] });
    expect(ops).toContainEqual({ op: 'set', key: 'seckill:stock:7', value: '42' });
    expect(ops).toContainEqual({ op: 'set', key: 'seckill:start:7', value: '1000' });
    expect(ops).toContainEqual({ op: 'set', key: 'seckill:end:7', value: '2000' });
    expect(ops).toContainEqual(
      expect.objectContaining({ op: 'hset', key: 'seckill:goods:7', fields: expect.objectContaining({ title: 'Phone', paused: '0' }) }),
    );
    // No holders: the users set is deleted, not left from an older sale.
    expect(ops).toContainEqual({ op: 'del', key: 'seckill:users:7' });
  });

  it('rebuilds the users set under a scratch key and renames it over the live one', () => {
    const holders = Array.from({ length: 1_201 }, (_, i) => `u${i}`);
    const ops = fullOps({ goods, remaining: 0, holders, results: [] });
    const users = ops.filter((o) => ('key' in o && o.key.startsWith('seckill:users:7')) || o.op === 'rename');
    expect(users[0]).toEqual({ op: 'del', key: 'seckill:users:7:rebuild' });
    const added = users.flatMap((o) => (o.op === 'sadd' ? o.members : []));
    expect(added).toEqual(holders);
    // Large sets are split over several commands.
    expect(users.filter((o) => o.op === 'sadd').length).toBe(3);
    expect(users.at(-1)).toEqual({ op: 'rename', from: 'seckill:users:7:rebuild', to: 'seckill:users:7' });
  });

  it('writes QUEUED without overwriting a final answer, and final answers with the long TTL', () => {
    const queued = fullOps({ goods, remaining: 1, holders: ['a'], results: [{ requestId: '7.x', userId: 'a', value: 'QUEUED' }] });
    expect(queued).toContainEqual({ op: 'hsetnx', key: 'seckill:result:7.x', field: 'result', value: 'QUEUED' });
    expect(queued).toContainEqual({ op: 'expire', key: 'seckill:result:7.x', seconds: QUEUED_TTL_SECONDS, onlyIfNone: true });
    const done = fullOps({ goods, remaining: 1, holders: ['a'], results: [{ requestId: '7.x', userId: 'a', value: 'SUCCESS:7-1' }] });
    expect(done).toContainEqual({ op: 'hset', key: 'seckill:result:7.x', fields: { result: 'SUCCESS:7-1', userId: 'a' } });
    expect(done).toContainEqual({ op: 'expire', key: 'seckill:result:7.x', seconds: FINAL_TTL_SECONDS });
  });
});

describe('mirror deltas', () => {
  it('coalesces a burst: the last stock, each user once, the last answer per request', () => {
    const d = emptyDelta();
    expect(isEmptyDelta(d)).toBe(true);
    d.stock = 9;
    d.stock = 8;
    d.users.set('a', true);
    d.users.set('b', true);
    d.users.set('b', false);
    d.results.set('7.r', { requestId: '7.r', userId: 'a', value: 'QUEUED' });
    d.results.set('7.r', { requestId: '7.r', userId: 'a', value: 'SUCCESS:7-3' });
    const ops = deltaOps(7, d);
    expect(ops.filter((o) => o.op === 'set')).toEqual([{ op: 'set', key: 'seckill:stock:7', value: '8' }]);
    expect(ops).toContainEqual({ op: 'sadd', key: 'seckill:users:7', members: ['a'] });
    expect(ops).toContainEqual({ op: 'srem', key: 'seckill:users:7', members: ['b'] });
    expect(ops.filter((o) => 'key' in o && o.key === 'seckill:result:7.r')).toEqual([
      { op: 'hset', key: 'seckill:result:7.r', fields: { result: 'SUCCESS:7-3', userId: 'a' } },
      { op: 'expire', key: 'seckill:result:7.r', seconds: FINAL_TTL_SECONDS },
    ]);
  });

  it('splits long command lists into ordered pipelines', () => {
    const ops = fullOps({
      goods,
      remaining: 0,
      holders: [],
      results: Array.from({ length: 300 }, (_, i) => ({ requestId: `7.${i}`, userId: 'u', value: 'FAIL:SOLD_OUT' as const })),
    });
    const batches = pipelines(ops, 200);
    expect(batches.length).toBe(Math.ceil(ops.length / 200));
    expect(batches.flat()).toEqual(ops);
  });
});

describe('mirror results', () => {
  it("reads the seed's result strings and nothing else", () => {
    expect(parseResult('QUEUED')).toEqual({ status: 'QUEUED' });
    expect(parseResult('SUCCESS:7-12')).toEqual({ status: 'SUCCESS', orderId: '7-12' });
    expect(parseResult('FAIL:SOLD_OUT')).toEqual({ status: 'FAIL', reason: 'SOLD_OUT' });
    for (const bad of ['', 'SUCCESS:', 'DONE:1', 'queued', null, 3]) {
      expect(parseResult(bad)).toBeUndefined();
    }
  });
});

describe('mirror comparison', () => {
  const [hash] = goodsOps(goods);
  const fields = hash?.op === 'hset' ? hash.fields : {};
  const view = (over: Partial<MirrorView> = {}): MirrorView => ({ stock: 42, users: 3, goods: { ...fields }, ...over });

  it('finds nothing when the mirror matches the object', () => {
    expect(compareMirror({ goods, remaining: 42, holders: 3 }, view())).toEqual([]);
  });

  it('reports a wrong or missing stock, a wrong holders count and a stale goods field', () => {
    expect(compareMirror({ goods, remaining: 42, holders: 3 }, view({ stock: 40 }))).toEqual([
      { kind: 'mirror_stock', expected: 42, found: 40 },
    ]);
    expect(compareMirror({ goods, remaining: 42, holders: 3 }, view({ stock: null }))).toEqual([
      { kind: 'mirror_stock', expected: 42, found: null },
    ]);
    expect(compareMirror({ goods, remaining: 42, holders: 3 }, view({ users: 5 }))).toEqual([
      { kind: 'mirror_users', expected: 3, found: 5 },
    ]);
    expect(compareMirror({ goods: { ...goods, paused: true }, remaining: 42, holders: 3 }, view())).toEqual([
      { kind: 'mirror_goods', field: 'paused', expected: '1', found: '0' },
    ]);
  });
});
