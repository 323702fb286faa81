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

  it("writes the seed's plain result string and its owner beside it; QUEUED never overwrites, finals keep the long TTL", () => {
    const queued = fullOps({ goods, remaining: 1, holders: ['a'], results: [{ requestId: '7.x', userId: 'a', value: 'QUEUED' }] });
    const seconds = QUEUED_TTL_SECONDS;
    expect(queued.slice(-2)).toEqual([
      { op: 'setex', key: 'seckill:result:7.x', value: 'QUEUED', seconds, onlyIfAbsent: true },
      { op: 'setex', key: 'seckill:result-owner:7.x', value: 'a', seconds, onlyIfAbsent: true },
    ]);
    const done = fullOps({ goods, remaining: 1, holders: ['a'], results: [{ requestId: '7.x', userId: 'a', value: 'SUCCESS:7-1' }] });
    expect(done.slice(-2)).toEqual([
      { op: 'setex', key: 'seckill:result:7.x', value: 'SUCCESS:7-1', seconds: FINAL_TTL_SECONDS, onlyIfAbsent: false },
      { op: 'setex', key: 'seckill:result-owner:7.x', value: 'a', seconds: FINAL_TTL_SECONDS, onlyIfAbsent: false },
    ]);
    // No hash anywhere under a result key (a seed tool's GET would answer WRONGTYPE).
    expect(done.filter((o) => o.op === 'hset' && o.key.startsWith('seckill:result'))).toEqual([]);
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
    expect(ops.filter((o) => 'key' in o && o.key.endsWith(':7.r'))).toEqual([
      { op: 'setex', key: 'seckill:result:7.r', value: 'SUCCESS:7-3', seconds: FINAL_TTL_SECONDS, onlyIfAbsent: false },
      { op: 'setex', key: 'seckill:result-owner:7.r', value: 'a', seconds: FINAL_TTL_SECONDS, onlyIfAbsent: false },
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
    expect(batches.flat()).toEqual(ops);
    expect(batches.every((b) => b.length <= 201)).toBe(true);
    // Every answer travels with its owner: no pipeline starts with an owner or ends with a bare answer.
    for (const b of batches) {
      const first = b[0];
      const last = b.at(-1);
      expect(first?.op === 'setex' && first.key.startsWith('seckill:result-owner:')).toBe(false);
      expect(last?.op === 'setex' && last.key.startsWith('seckill:result:')).toBe(false);
    }
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
