import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { goodsStock, roomHub, roomShardOf, stockShardOf } from '../../durable-objects/routing';
import type { Stock } from '../../durable-objects/waiting-room/hub-rules';
import { askObjectReset, resetName } from '../../workers/kernel/dev-faults';
import { ROOM_SHARDS, type RoomGoods } from '../../workers/kernel/waiting-room';
import { ADMIN, bearer, buy, call, createGoods, eventually, json, stockObject } from './helpers';
import { buyWithPass, createQueuedGoods, join, type Live, openLive, shopper, sleep, type TicketAnswer, ticketNow } from './room-helpers';

// A goods' own room shard count (`queue.shards`): where its shoppers land, what the consumer
// tells, and when the count may change.

type GoodsAnswer = { goodsId: number; queue: { mode: string; admitPerSecond?: number; shards?: number } };

async function put(
  goodsId: number,
  queue: Record<string, unknown>,
): Promise<{ status: number; body: GoodsAnswer & { error?: { code: string } } }> {
  const res = await call(`/admin/goods/${goodsId}`, { method: 'PUT', headers: ADMIN, json: { queue } });
  return { status: res.status, body: await json(res) };
}

async function create(
  queue: Record<string, unknown>,
  startAt = Date.now() - 1000,
): Promise<{ status: number; body: GoodsAnswer & { error?: { code: string } } }> {
  const res = await call('/admin/goods', {
    method: 'POST',
    headers: ADMIN,
    json: { activityId: 3101, title: 'Sharded room', priceCents: 100, stock: 5, startAt, endAt: startAt + 120_000, queue },
  });
  return { status: res.status, body: await json(res) };
}

async function roomStats(goodsId: number): Promise<{ shards: number; shardsReporting: number; admitted: number; joined: number }> {
  const res = await call(`/admin/goods/${goodsId}/stats`, { headers: ADMIN });
  expect(res.status).toBe(200);
  return (await json<{ queue: { shards: number; shardsReporting: number; admitted: number; joined: number } }>(res)).queue;
}

/** The room's stats once they count `admitted` admissions (or as they are after 30 s): they add up the shards' reports, each a tick behind the tickets it counts. */
async function roomStatsCounting(goodsId: number, admitted: number) {
  return eventually(async () => {
    const r = await roomStats(goodsId);
    return r.admitted === admitted && r;
  }).catch(() => roomStats(goodsId));
}

describe('a waiting room with its own shard count', () => {
  it('puts every shopper on the shard of a room of 3, admits them, and brings each result to its channel', async () => {
    const { goodsId } = await createQueuedGoods({ stock: 6, queue: { mode: 'always', admitPerSecond: 20, passSeconds: 60, shards: 3 } });
    // Shoppers whose shard in a room of 3 is not their shard in a room of ROOM_SHARDS: routing by
    // the default count anywhere (the edge, the consumer's result calls) sends them elsewhere.
    const users: string[] = [];
    for (let i = 0; users.length < 6; i++) {
      const u = `room3-${i}`;
      if (roomShardOf(u, 3) !== roomShardOf(u, ROOM_SHARDS)) {
        users.push(u);
      }
    }
    expect(new Set(users.map((u) => roomShardOf(u, 3))).size).toBeGreaterThan(1);
    const shoppers = await Promise.all(users.map(shopper));
    const lives: Live[] = await Promise.all(shoppers.map((s) => openLive(goodsId, { jwt: s.jwt, join: true })));
    const joined = await Promise.all(lives.map((l) => l.next((e) => e.type === 'joined')));
    for (const j of joined) {
      expect(j).toMatchObject({ state: expect.stringMatching(/^(WAITING|ADMITTED)$/) });
    }
    // A polling client reaches the same shard with its ticket.
    const polled = await ticketNow(goodsId, String(joined[0]?.ticket));
    expect(polled.ticketId).toBe(joined[0]?.ticketId);

    const admitted = await Promise.all(lives.map((l) => l.next((e) => e.type === 'admitted', 20_000)));
    const bought = await Promise.all(shoppers.map((s, i) => buyWithPass(s.jwt, goodsId, String(admitted[i]?.pass))));
    for (const b of bought) {
      expect(b.statuses).toEqual([200, 202]);
    }
    // The consumer tells each shopper's shard in the room of 3: every result reaches its channel.
    const results = await Promise.all(lives.map((l) => l.next((e) => e.type === 'result', 20_000)));
    results.forEach((r, i) => {
      expect(r).toMatchObject({ status: 'SUCCESS', requestId: bought[i]?.requestId });
    });
    // Their tokens said the room let them in, and the stock object counts their orders so (told
    // after the settle, so counted by now).
    expect(await stockObject(goodsId).snapshot()).toMatchObject({ confirmed: 6, admittedConfirmed: 6 });

    const room = await roomStatsCounting(goodsId, 6);
    expect(room.shards).toBe(3);
    expect(room.shardsReporting).toBeGreaterThan(0);
    expect(room.shardsReporting).toBeLessThanOrEqual(3);
    expect(room.joined).toBe(6);
    expect(room.admitted).toBe(6);
    for (const l of lives) {
      l.close();
    }
  });

  it('takes 1-128 shards that can carry the rate, and refuses the rest with 400', async () => {
    for (const queue of [
      { mode: 'always', shards: 0 },
      { mode: 'always', shards: 129 },
      { mode: 'always', shards: 1.5 },
      { mode: 'always', shards: '4' },
      // 500 admissions a second per shard at most.
      { mode: 'always', shards: 2, admitPerSecond: 1001 },
      // The default rate (500) on one shard is fine; 501 is not.
      { mode: 'always', shards: 1, admitPerSecond: 501 },
    ]) {
      const { status, body } = await create(queue);
      expect({ queue, status, code: body.error?.code }).toEqual({ queue, status: 400, code: 'INVALID_INPUT' });
    }
    const ok = await create({ mode: 'always', shards: 2, admitPerSecond: 1000 });
    expect(ok.status).toBe(201);
    expect(ok.body.queue).toEqual({ mode: 'always', shards: 2, admitPerSecond: 1000 });
    expect((await roomStats(ok.body.goodsId)).shards).toBe(2);
  });

  it('keeps the count a PUT leaves out, changes it before the room opens, and refuses a change once it is open', async () => {
    // Before the room opens (the sale starts in a minute, no pre-queue).
    const later = await create({ mode: 'always', shards: 4 }, Date.now() + 60_000);
    expect(later.status).toBe(201);
    const id = later.body.goodsId;
    let r = await put(id, { mode: 'always', admitPerSecond: 100 });
    expect(r.status).toBe(200);
    expect(r.body.queue).toEqual({ mode: 'always', admitPerSecond: 100, shards: 4 });
    r = await put(id, { mode: 'auto', shards: 8 });
    expect(r.status).toBe(200);
    expect(r.body.queue).toEqual({ mode: 'auto', shards: 8 });

    // A pre-queue opens the room before the start: the count is fixed from then on.
    const preQueued = await create({ mode: 'always', shards: 4, preQueueSeconds: 600 }, Date.now() + 60_000);
    r = await put(preQueued.body.goodsId, { mode: 'always', shards: 8, preQueueSeconds: 600 });
    expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 409, code: 'SALE_STARTED' });

    // An open room.
    const open = await create({ mode: 'always', shards: 4 });
    const openId = open.body.goodsId;
    r = await put(openId, { mode: 'auto', admitPerSecond: 300 });
    expect(r.status).toBe(200);
    expect(r.body.queue).toEqual({ mode: 'auto', admitPerSecond: 300, shards: 4 });
    r = await put(openId, { mode: 'always', shards: 2 });
    expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 409, code: 'SALE_STARTED' });
    // The kept count must carry a new rate: 4 shards take at most 2,000 a second.
    r = await put(openId, { mode: 'always', admitPerSecond: 2001 });
    expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 400, code: 'INVALID_INPUT' });
    // Naming the count it has is no change.
    r = await put(openId, { mode: 'always', shards: 4 });
    expect(r.status).toBe(200);
    expect((await roomStats(openId)).shards).toBe(4);

    // A goods made before the setting (no count: ROOM_SHARDS) keeps that count once open.
    const plain = await create({ mode: 'always' });
    r = await put(plain.body.goodsId, { mode: 'always', shards: 16 });
    expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 409, code: 'SALE_STARTED' });
    r = await put(plain.body.goodsId, { mode: 'always', shards: ROOM_SHARDS });
    expect(r.status).toBe(200);
    expect((await roomStats(plain.body.goodsId)).shards).toBe(ROOM_SHARDS);
  });

  it("reads a sharded goods' reservations and orders from every stock shard, not shard 0's scaled up", async () => {
    const { goodsId } = await createGoods({ stock: 8, shards: 4 });
    const placement = { id: goodsId, locationHint: null, shards: 4 };
    // Four buyers, none on stock shard 0: shard 0's own figures scaled up would read no orders.
    const buyers: string[] = [];
    for (let i = 0; buyers.length < 4; i++) {
      const u = `sharded-orders-${i}`;
      if (stockShardOf(placement, u) !== 0) {
        buyers.push(u);
      }
    }
    for (const u of buyers) {
      expect((await buy(u, goodsId)).status).toBe(202);
    }
    const goods: RoomGoods = {
      goodsId,
      locationHint: null,
      startAt: 0,
      endAt: Date.now() + 60_000,
      paused: false,
      mode: 'always',
      admitPerSecond: 10,
      preQueueSeconds: 0,
      passSeconds: 60,
      shards: 4,
    };
    type Hub = { hub(): { readStock(g: RoomGoods): Promise<Stock | undefined> } };
    const read = () => runInDurableObject(roomHub(env, placement), (instance) => (instance as unknown as Hub).hub().readStock(goods));
    // Once the consumer has confirmed them: the goods' own count, exact.
    const stock = await eventually(async () => {
      const s = await read();
      return s && s.confirmed === 4 && s.queued === 0 ? s : undefined;
    });
    // Bought without the room's pass (this goods holds no line): none of them the room's shoppers.
    expect(stock).toMatchObject({ confirmed: 4, queued: 0, exact: true, admittedConfirmed: 0 });
    const zero = await goodsStock(env, placement, 0).snapshot();
    expect(zero?.confirmed).toBe(0);
  });
});

describe('a waiting room whose objects are thrown away mid-line', () => {
  async function reset(
    goodsId: number,
    objects: string[],
  ): Promise<{ status: number; body: { reset?: boolean; error?: { code: string } } }> {
    const res = await call('/admin/dev/faults/reset', { method: 'POST', headers: ADMIN, json: { goodsId, objects } });
    return { status: res.status, body: await json(res) };
  }

  it('keeps every ticket and admission, lets everyone in once in the line order, and sells every unit', async () => {
    const n = 12;
    const { goodsId } = await createQueuedGoods({ stock: n, queue: { mode: 'always', admitPerSecond: 3, passSeconds: 60, shards: 3 } });
    const shoppers = await Promise.all(Array.from({ length: n }, (_, i) => shopper(`room-reset-${i}`)));
    expect(new Set(shoppers.map((s) => roomShardOf(s.userId, 3))).size).toBe(3);
    const tickets: TicketAnswer[] = [];
    for (const s of shoppers) {
      tickets.push((await join(s.jwt, goodsId)).body);
    }
    const poll = () => Promise.all(tickets.map((t) => ticketNow(goodsId, t.ticket)));
    const admitted = (views: TicketAnswer[]) => views.filter((v) => v.state === 'ADMITTED');
    // Mid-line: some let in, the rest waiting (3 a second: the whole line takes about 4 s).
    const before = await eventually(async () => {
      const views = await poll();
      return admitted(views).length >= 3 && views;
    });
    expect(admitted(before).length).toBeLessThan(n);

    // The last shopper in line holds the live channel.
    const lastTicket = tickets[n - 1] as TicketAnswer;
    const live = await openLive(goodsId, { ticket: lastTicket.ticket });
    const dropped = new Promise<number>((resolve) => live.ws.addEventListener('close', (e) => resolve(e.code)));
    await live.next((e) => e.type === 'position');
    // Every shard of the room and its coordinator start again from their storage.
    expect(await reset(goodsId, ['room'])).toEqual({ status: 200, body: { goodsId, objects: ['room'], reset: true } });
    const after = await poll();
    after.forEach((view, i) => {
      expect(view).toMatchObject({ ticketId: tickets[i]?.ticketId, orderKey: tickets[i]?.orderKey });
    });
    // The channel dropped with its shard's instance, as a crash drops it (the page opens it
    // again with its ticket): the shard that started again takes it and lets the shopper in on it.
    expect(await Promise.race([dropped, sleep(5_000).then(() => 'still open')])).toBe(1006);
    const again = await openLive(goodsId, { ticket: lastTicket.ticket });
    expect((await again.next(() => true)).type).toMatch(/^(position|admitted)$/);
    // An admission made before stands, in its round.
    for (const was of admitted(before)) {
      expect(after.find((v) => v.ticketId === was.ticketId)).toMatchObject({ state: 'ADMITTED', round: was.round });
    }
    // The line goes on: everyone in, each once, in the order of their keys (the rounds never go back).
    const done = await eventually(
      async () => {
        const views = await poll();
        return admitted(views).length === n && views;
      },
      30_000,
      250,
    );
    expect(await again.next((e) => e.type === 'admitted')).toMatchObject({ pass: done[n - 1]?.pass });
    again.close();
    const rounds = [...done].sort((a, b) => ((a.orderKey ?? '') < (b.orderKey ?? '') ? -1 : 1)).map((v) => v.round ?? 0);
    expect(rounds.every((r, i) => i === 0 || r >= (rounds[i - 1] ?? r))).toBe(true);
    const room = await roomStatsCounting(goodsId, n);
    expect({ joined: room.joined, admitted: room.admitted }).toEqual({ joined: n, admitted: n });

    // The room and the stock objects once more, then every shopper buys with their pass.
    expect((await reset(goodsId, ['stock', 'room'])).body.reset).toBe(true);
    const bought = await Promise.all(shoppers.map((s, i) => buyWithPass(s.jwt, goodsId, String(done[i]?.pass))));
    for (const b of bought) {
      expect(b.statuses).toEqual([200, 202]);
    }
    // Each result reaches its ticket, from shards that started again since they admitted it.
    await eventually(
      async () => {
        const views = await poll();
        return views.every((v, i) => v.result?.status === 'SUCCESS' && v.result.requestId === bought[i]?.requestId);
      },
      30_000,
      250,
    );
    expect(await stockObject(goodsId).snapshot()).toMatchObject({ remaining: 0, confirmed: n });
  });

  it("answers 503 UNAVAILABLE when the shopper's shard restarts under the call, and the same ticket at the next", async () => {
    const { goodsId } = await createQueuedGoods({ stock: 3, queue: { mode: 'always', admitPerSecond: 1, shards: 3 } });
    const s = await shopper('shard-restarts-under-the-call');
    const own = resetName(goodsId, { room: roomShardOf(s.userId, 3) });
    const unavailable = async (res: Response) => {
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(await json(res)).toMatchObject({ error: { code: 'UNAVAILABLE', requestId: expect.any(String) } });
    };
    // The join: the shard's instance goes as the call reaches it (a deploy, an eviction).
    let taken = askObjectReset(own);
    await unavailable(await call(`/api/seckill/goods/${goodsId}/queue`, { method: 'POST', headers: bearer(s.jwt) }));
    expect(taken()).toBe(true);
    const first = await join(s.jwt, goodsId);
    expect(first.status).toBe(200);
    // A poll of the ticket: the same, then the ticket as it was.
    taken = askObjectReset(own);
    await unavailable(await call(`/api/seckill/goods/${goodsId}/queue/${first.body.ticket}`));
    expect(taken()).toBe(true);
    expect(await ticketNow(goodsId, first.body.ticket)).toMatchObject({ ticketId: first.body.ticketId, orderKey: first.body.orderKey });
    expect((await join(s.jwt, goodsId)).body.ticketId).toBe(first.body.ticketId);
  });

  it('refuses a room reset of a goods without a room, with the contract error', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    expect(await reset(goodsId, ['room'])).toMatchObject({ status: 400, body: { error: { code: 'INVALID_INPUT' } } });
    for (const objects of [[], ['hub'], ['stock', 'stock', 'room']]) {
      expect((await reset(goodsId, objects)).status).toBe(400);
    }
  });
});
