// Durable Object calls counted by class and method (workers/kernel/object-calls.ts,
// /admin/dev/faults/object-calls): who may read and switch them, that one purchase's calls land
// under the classes the purchase reaches, that a delayed call still arrives, and that stubs made
// while counting is off are the runtime's own.
import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it } from 'vitest';
import { goodsStock, roomShard } from '../../durable-objects/routing';
import type { ObjectCallsView } from '../../workers/kernel/object-calls';
import { objectClassOf } from '../../workers/kernel/object-calls';
import { ADMIN, buy, call, createGoods, json, settled, stockSnapshot } from './helpers';

const CALLS = '/admin/dev/faults/object-calls';

async function setCalls(body: Record<string, unknown>): Promise<ObjectCallsView> {
  const res = await call(CALLS, { method: 'PUT', headers: ADMIN, json: body });
  expect(res.status).toBe(200);
  return json<ObjectCallsView>(res);
}

async function readCalls(): Promise<ObjectCallsView> {
  const res = await call(CALLS, { headers: ADMIN });
  expect(res.status).toBe(200);
  return json<ObjectCallsView>(res);
}

afterEach(async () => {
  await setCalls({ watch: false, delayMs: 0, reset: true });
});

describe('object-call accounting', () => {
  it('needs the admin token and refuses settings it does not know', async () => {
    expect((await call(CALLS)).status).toBe(401);
    expect((await call(CALLS, { method: 'PUT', json: { watch: true } })).status).toBe(401);
    for (const body of [{ delayMs: -1 }, { delayMs: 10_001 }, { watch: 'yes' }, { reset: false }, { count: true }]) {
      const res = await call(CALLS, { method: 'PUT', headers: ADMIN, json: body });
      expect(res.status).toBe(400);
      expect((await json<{ error: { code: string; requestId: string } }>(res)).error).toMatchObject({ code: 'INVALID_INPUT' });
    }
    expect(await readCalls()).toMatchObject({ watch: false, delayMs: 0, counts: {} });
  });

  it('counts a purchase under the stock object and the guard shards', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    await setCalls({ watch: true, reset: true });
    expect((await buy('calls-1', goodsId)).status).toBe(202);
    const { counts } = await readCalls();
    expect(counts.GoodsStock?.reserveMany).toEqual({ calls: 1, items: 1 });
    expect(Object.values(counts.EdgeGuard ?? {}).reduce((n, c) => n + c.calls, 0)).toBeGreaterThan(0);
    // Zeroed on request.
    expect((await setCalls({ reset: true })).counts).toEqual({});
    expect(await settled(goodsId)).toMatchObject({ doRemaining: 4, orders: { PENDING_PAYMENT: 1 } });
  });

  it('counts a consumer call one request however many results it carries, and an edge batch one per item', async () => {
    const goods = { id: 987_003, locationHint: null };
    await setCalls({ watch: true, reset: true });
    const stub = goodsStock(env, goods);
    await stub.settle([
      { requestId: '987003.aaaaaaaaaaaaaaaaaaaaaa', ok: false, reason: 'SOLD_OUT' },
      { requestId: '987003.bbbbbbbbbbbbbbbbbbbbbb', ok: false, reason: 'SOLD_OUT' },
    ]);
    await stub.reserveMany(goods.id, []);
    const { counts } = await readCalls();
    expect(counts.GoodsStock?.settle).toEqual({ calls: 1, items: 1 });
    expect(counts.GoodsStock?.reserveMany).toEqual({ calls: 1, items: 0 });
  });

  it('delays every call it counts and still delivers it', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    expect(await setCalls({ watch: true, delayMs: 20, reset: true })).toMatchObject({ watch: true, delayMs: 20 });
    expect((await buy('calls-delay-1', goodsId)).status).toBe(202);
    expect((await stockSnapshot(goodsId)).remaining).toBe(4);
    expect((await readCalls()).counts.GoodsStock?.reserveMany?.calls).toBe(1);
  });

  it('leaves stubs alone while off, and passes a watched stub’s id through', async () => {
    const goods = { id: 987_001, locationHint: null };
    const plain = goodsStock(env, goods);
    await setCalls({ watch: true });
    const watched = goodsStock(env, goods);
    expect(watched.id.equals(plain.id)).toBe(true);
    const seen = await watched.snapshot();
    expect((await readCalls()).counts).toEqual({ GoodsStock: { snapshot: { calls: 1, items: 1 } } });
    await setCalls({ reset: true });
    expect(await plain.snapshot()).toEqual(seen);
    await setCalls({ watch: false });
    expect(await goodsStock(env, goods).snapshot()).toEqual(seen);
    expect((await readCalls()).counts).toEqual({});
  });

  it('sends fetch, a method of the stub itself, through a watched stub', async () => {
    await setCalls({ watch: true, reset: true });
    const res = await roomShard(env, { id: 987_002, locationHint: null }, 0).fetch(new Request('https://room.test/live'));
    expect(res).toBeInstanceOf(Response);
    await res.body?.cancel();
    expect((await readCalls()).counts).toEqual({ WaitingRoom: { fetch: { calls: 1, items: 1 } } });
  });

  it('names the class of every object routing makes', () => {
    expect(objectClassOf('goods:7')).toBe('GoodsStock');
    expect(objectClassOf('guard:3')).toBe('EdgeGuard');
    expect(objectClassOf('config:limits')).toBe('EdgeGuard');
    expect(objectClassOf('limits')).toBe('LimitsStore');
    expect(objectClassOf('gate:7')).toBe('AdmissionGate');
    expect(objectClassOf('room:7:12')).toBe('WaitingRoom');
    expect(objectClassOf('room:7:hub')).toBe('WaitingRoom hub');
    expect(objectClassOf('metrics')).toBe('Metrics');
  });
});
