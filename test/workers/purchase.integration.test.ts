import { describe, expect, it } from 'vitest';
import { bearer, buy, call, createGoods, devToken, eventually, json, purchaseToken, settled, stats } from './helpers';

describe('purchase path', () => {
  it('queues a reservation, then the order lands in Postgres and the result says SUCCESS', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const jwt = await devToken('alice');
    const { status, body } = await buy('alice', goodsId, { jwt });
    expect(status).toBe(202);
    expect(body).toMatchObject({ code: 0, message: 'queued' });
    const requestId = String(body.requestId);

    const result = await eventually(async () => {
      const r = await json<{ status: string; orderId?: string }>(await call(`/api/seckill/result/${requestId}`, { headers: bearer(jwt) }));
      return r.status === 'SUCCESS' ? r : undefined;
    });
    expect(result.orderId).toMatch(new RegExp(`^${goodsId}-\\d+$`));
    const s = await settled(goodsId);
    expect(s).toMatchObject({ totalStock: 3, doRemaining: 2, dbStock: 2, orders: { PENDING_PAYMENT: 1 } });
  });

  it('answers a second purchase by the same shopper with 409 ALREADY_PURCHASED', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    expect((await buy('bob', goodsId)).status).toBe(202);
    const again = await buy('bob', goodsId);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ error: { code: 'ALREADY_PURCHASED' } });
  });

  it('gives the same answer to a retry with the same Idempotency-Key and takes one unit', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const jwt = await devToken('carol');
    const { token, path } = await purchaseToken(jwt, goodsId);
    const send = () =>
      call(`/api/seckill/do/${path}`, {
        method: 'POST',
        headers: { ...bearer(jwt), 'idempotency-key': 'click-1' },
        json: { goodsId, token },
      });
    const answers = await Promise.all([send(), send(), send()]);
    const bodies = await Promise.all(answers.map((r) => json(r)));
    expect(answers.map((r) => r.status)).toEqual([202, 202, 202]);
    expect(new Set(bodies.map((b) => b.requestId)).size).toBe(1);
    const s = await settled(goodsId);
    expect(s.doRemaining).toBe(4);
    expect(s.orders.PENDING_PAYMENT).toBe(1);
  });

  it('refuses a token used twice without a key, and a path of another user', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const dave = await devToken('dave');
    const erin = await devToken('erin');
    const { token, path } = await purchaseToken(dave, goodsId);
    const first = await call(`/api/seckill/do/${path}`, { method: 'POST', headers: bearer(dave), json: { goodsId, token } });
    expect(first.status).toBe(202);
    // Erin replays Dave's token and path.
    const stolen = await call(`/api/seckill/do/${path}`, { method: 'POST', headers: bearer(erin), json: { goodsId, token } });
    expect(stolen.status).toBe(403);
    expect(await json(stolen)).toMatchObject({ error: { code: 'TOKEN_INVALID' } });
    // Erin with her own token but Dave's path.
    const own = await purchaseToken(erin, goodsId);
    const swapped = await call(`/api/seckill/do/${path}`, { method: 'POST', headers: bearer(erin), json: { goodsId, token: own.token } });
    expect(swapped.status).toBe(403);
    const s = await settled(goodsId);
    expect(s.doRemaining).toBe(4);
  });

  it("hides one shopper's result from another", async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const { body } = await buy('frank', goodsId);
    const other = await devToken('grace');
    const res = await call(`/api/seckill/result/${String(body.requestId)}`, { headers: bearer(other) });
    expect(res.status).toBe(404);
  });

  it('answers 410 SOLD_OUT once the stock is gone', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    expect((await buy('h1', goodsId)).status).toBe(202);
    const late = await buy('h2', goodsId);
    expect(late.status).toBe(410);
    expect(late.body).toMatchObject({ error: { code: 'SOLD_OUT' } });
    expect((await stats(goodsId)).doRemaining).toBe(0);
  });

  it('answers a sold-out goods from the hidden path alone, before the body is read', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    // A token taken while there was stock (the token route refuses a sold-out goods).
    const jwt = await devToken('p3');
    const { path } = await purchaseToken(jwt, goodsId);
    expect((await buy('p1', goodsId)).status).toBe(202);
    // The object's SOLD_OUT teaches this isolate that the goods is sold out.
    expect((await buy('p2', goodsId)).status).toBe(410);
    expect(path).toMatch(new RegExp(`^${goodsId}\\.[A-Za-z0-9_-]{32}$`));
    // A body that is not JSON at all: had the route read it, the answer would be 400.
    const unread = await call(`/api/seckill/do/${path}`, {
      method: 'POST',
      headers: { ...bearer(jwt), 'content-type': 'application/json' },
      body: '{not json',
    });
    expect(unread.status).toBe(410);
    expect(await json(unread)).toMatchObject({ error: { code: 'SOLD_OUT' } });
    // A path that names no goods (as paths were issued before) is answered after the body.
    const bare = path.slice(path.indexOf('.') + 1);
    const read = await call(`/api/seckill/do/${bare}`, {
      method: 'POST',
      headers: { ...bearer(jwt), 'content-type': 'application/json' },
      body: '{not json',
    });
    expect(read.status).toBe(400);
    expect((await stats(goodsId)).doRemaining).toBe(0);
  });

  it('takes a path without its goods id as issued before, and refuses a path that names another goods', async () => {
    const a = await createGoods({ stock: 5 });
    const b = await createGoods({ stock: 5 });
    const jwt = await devToken('q1');
    const t = await purchaseToken(jwt, a.goodsId);
    const [named, mac] = t.path.split('.');
    expect(named).toBe(String(a.goodsId));
    // The HMAC alone still buys.
    const bare = await call(`/api/seckill/do/${mac}`, {
      method: 'POST',
      headers: bearer(jwt),
      json: { goodsId: a.goodsId, token: t.token },
    });
    expect(bare.status).toBe(202);
    // Goods b's id in front of goods a's HMAC, and goods a's path with a body about goods b.
    const other = await devToken('q2');
    const forB = await purchaseToken(other, b.goodsId);
    const relabelled = `${a.goodsId}.${forB.path.split('.')[1]}`;
    const wrongPath = await call(`/api/seckill/do/${relabelled}`, {
      method: 'POST',
      headers: bearer(other),
      json: { goodsId: b.goodsId, token: forB.token },
    });
    expect(wrongPath.status).toBe(403);
    expect(await json(wrongPath)).toMatchObject({ error: { code: 'TOKEN_INVALID' } });
    const forA = await purchaseToken(other, a.goodsId);
    const wrongBody = await call(`/api/seckill/do/${forA.path}`, {
      method: 'POST',
      headers: bearer(other),
      json: { goodsId: b.goodsId, token: forB.token },
    });
    expect(wrongBody.status).toBe(403);
    expect(await json(wrongBody)).toMatchObject({ error: { code: 'TOKEN_INVALID' } });
    // With a key the path is checked after sign-in, by the token's own check.
    const keyed = await call(`/api/seckill/do/${relabelled}`, {
      method: 'POST',
      headers: { ...bearer(other), 'idempotency-key': 'relabelled-1' },
      json: { goodsId: b.goodsId, token: forB.token },
    });
    expect(keyed.status).toBe(403);
    const [sa, sb] = [await settled(a.goodsId), await settled(b.goodsId)];
    expect([sa.doRemaining, sb.doRemaining]).toEqual([4, 5]);
  });

  it('answers NOT_STARTED and ENDED outside the window', async () => {
    const soon = await createGoods({ startAt: Date.now() + 3600_000, endAt: Date.now() + 7200_000 });
    const early = await buy('i1', soon.goodsId);
    expect(early.status).toBe(425);
    expect(early.body).toMatchObject({ error: { code: 'NOT_STARTED' } });
  });
});
