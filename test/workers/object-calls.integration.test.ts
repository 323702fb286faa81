// Durable Object calls counted by class and method (workers/kernel/object-calls.ts,
// /admin/dev/faults/object-calls): who may read and switch them, that one purchase's calls land
// under the classes the purchase reaches, that a delayed call still arrives, and that stubs made
// while counting is off are the runtime's own.
import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it } from 'vitest';
import { goodsStock, roomShard } from '../../durable-objects/routing';
import type { ObjectCallsView } from '../../workers/kernel/object-calls';
import { objectClassOf } from '../../workers/kernel/object-calls';
import {
  ADMIN,
  bearer,
  buy,
  buyOrder,
  call,
  createGoods,
  devToken,
  eventually,
  json,
  mirrorRedis,
  setFaults,
  settled,
  stockSnapshot,
} from './helpers';

const CALLS = '/admin/dev/faults/object-calls';

async function setCalls(body: Record<string, unknown>): Promise<ObjectCallsView> {
  const res = await call(CALLS, { method: 'PUT', headers: ADMIN, json: body });
  expect(res.status).toBe(200);
  return json<ObjectCallsView>(res);
}

async function faultsOn(body: Record<string, number>): Promise<void> {
  expect((await setFaults(body)).status).toBe(200);
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
    // Only this goods' class: an earlier test's purchases may still report to the guard shards.
    expect((await readCalls()).counts.GoodsStock).toEqual({ snapshot: { calls: 1, items: 1 } });
    await setCalls({ reset: true });
    expect(await plain.snapshot()).toEqual(seen);
    await setCalls({ watch: false });
    expect(await goodsStock(env, goods).snapshot()).toEqual(seen);
    expect((await readCalls()).counts.GoodsStock).toBeUndefined();
  });

  it('sends fetch, a method of the stub itself, through a watched stub', async () => {
    await setCalls({ watch: true, reset: true });
    const res = await roomShard(env, { id: 987_002, locationHint: null }, 0).fetch(new Request('https://room.test/live'));
    expect(res).toBeInstanceOf(Response);
    await res.body?.cancel();
    // The fetch alone: a room of an earlier test may still be asked for its results meanwhile.
    expect((await readCalls()).counts.WaitingRoom?.fetch).toEqual({ calls: 1, items: 1 });
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

  // Last: its purchases' background reports to the guard shards may land after it ends.
  it('asks the stock object for a result while it is QUEUED, and once for a final one', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const jwt = await devToken('calls-result-1');
    // The object's sends to the order queue fail, so the answer stays QUEUED while the test looks.
    await faultsOn({ queueSendFails: 60 });
    try {
      const { status, body } = await buy('calls-result-1', goodsId, { jwt });
      expect(status).toBe(202);
      const path = `/api/seckill/result/${String(body.requestId)}`;
      const redis = mirrorRedis();
      if (redis) {
        // The object writes its answer to the mirror after it answered.
        await eventually(async () => ((await redis.get(`seckill:result:${String(body.requestId)}`)) === 'QUEUED' ? true : undefined));
      }
      await setCalls({ watch: true, reset: true });
      for (let i = 0; i < 3; i++) {
        expect(await json(await call(path, { headers: bearer(jwt) }))).toMatchObject({ status: 'QUEUED' });
      }
      // With the mirror on, the mirror answers QUEUED (the object wrote it there); off, the object does, each time.
      expect((await readCalls()).counts.GoodsStock?.result).toEqual(redis ? undefined : { calls: 3, items: 3 });
    } finally {
      await faultsOn({ queueSendFails: 0 });
    }
    await settled(goodsId);
    const path = `/api/seckill/result/${(await buyOrder('calls-result-2', goodsId)).requestId}`;
    const jwt2 = await devToken('calls-result-2');
    await setCalls({ watch: true, reset: true });
    const answers = [];
    for (let i = 0; i < 4; i++) {
      answers.push(await json(await call(path, { headers: bearer(jwt2) })));
    }
    expect(answers.every((a) => a.status === 'SUCCESS' && typeof a.orderId === 'string')).toBe(true);
    // buyOrder read SUCCESS already: none of the four reached the object.
    expect((await readCalls()).counts.GoodsStock?.result).toBeUndefined();
    // Still the owner's alone.
    expect((await call(path, { headers: bearer(jwt) })).status).toBe(404);
  });
});
