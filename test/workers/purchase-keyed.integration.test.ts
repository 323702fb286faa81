import { env } from 'cloudflare:workers';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { KEYED_GRACE_MS, PURCHASE_TOKEN_TTL_MS } from '../../workers/edge/purchase';
import { issuePurchaseToken } from '../../workers/edge/signed';
import { SOLD_OUT_TRUST_MS } from '../../workers/edge/sold-out';
import { timeOrderedKey, timePrefix } from '../../workers/kernel/time-order';
import { ADMIN, buy, buyOrder, call, createGoods, devToken, json, purchase, setLimits, stockSnapshot, tokenFor } from './helpers';

// A request with an Idempotency-Key may be owed the answer the object gave its key before, so
// the edge lets it through only where that can be so. Everyone else's keyed request (a fresh
// key on a spent token, a token long expired) is answered at the edge and costs no object call.

async function codeOf(res: Response): Promise<string> {
  return res.status === 202 ? 'QUEUED' : (await json<{ error: { code: string } }>(res)).error.code;
}

/** A purchase token that expired `agoMs` ago, as the token route issued it then. */
async function expiredToken(userId: string, goodsId: number, agoMs: number) {
  return issuePurchaseToken(env.TOKEN_SECRET, userId, goodsId, PURCHASE_TOKEN_TTL_MS, Date.now() - PURCHASE_TOKEN_TTL_MS - agoMs);
}

const objectCalls = async (goodsId: number) => (await stockSnapshot(goodsId)).reserveRequests;

beforeAll(async () => {
  await setLimits({ perIpPerSecond: 1000, perUserPerSecond: 1000, banThreshold: 100_000 });
});
afterAll(async () => {
  await setLimits({ perIpPerSecond: 10, perUserPerSecond: 3, banThreshold: 100 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('keyed purchases at the fast path', () => {
  it('after a sell-out, replays of a spent token with fresh keys are answered 410 at the edge', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    expect((await buy('kf-winner', goodsId)).status).toBe(202);
    const jwt = await devToken('kf-bot');
    const t = await tokenFor(jwt, goodsId);
    // The object answers the first keyed attempt: sold out (and the token is spent).
    expect(await codeOf(await purchase(jwt, goodsId, t, { 'idempotency-key': 'kf-0' }))).toBe('SOLD_OUT');
    const before = await objectCalls(goodsId);
    // The clock stands still, so the isolate's trust in that SOLD_OUT cannot run out mid-test.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    const codes: string[] = [];
    for (let i = 1; i <= 6; i++) {
      codes.push(await codeOf(await purchase(jwt, goodsId, t, { 'idempotency-key': `kf-${i}` })));
    }
    expect(codes).toEqual(Array(6).fill('SOLD_OUT'));
    expect(await objectCalls(goodsId)).toBe(before);
  });

  it('still replays the 202 of a keyed purchase that was accepted, after the sell-out', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const jwt = await devToken('kf-lucky');
    const t = await tokenFor(jwt, goodsId);
    const first = await purchase(jwt, goodsId, t, { 'idempotency-key': 'kf-lucky-1' });
    expect(first.status).toBe(202);
    const { requestId } = await json<{ requestId: string }>(first);
    // Someone else finds it sold out: the fast path engages.
    const late = await devToken('kf-late');
    expect(await codeOf(await purchase(late, goodsId, await tokenFor(late, goodsId)))).toBe('SOLD_OUT');
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    const before = await objectCalls(goodsId);
    // The client lost the first answer and retries with its key: it reaches the object and gets it again.
    const retry = await purchase(jwt, goodsId, t, { 'idempotency-key': 'kf-lucky-1' });
    expect(retry.status).toBe(202);
    expect((await json<{ requestId: string }>(retry)).requestId).toBe(requestId);
    expect(await objectCalls(goodsId)).toBe(before + 1);
    // Without its key the same shopper is answered at the edge.
    expect(await codeOf(await purchase(jwt, goodsId, t))).toBe('SOLD_OUT');
    expect(await objectCalls(goodsId)).toBe(before + 1);
  });

  it("a key's replayed SOLD_OUT does not make the edge take a goods whose unit came back for sold out", async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const winner = await buyOrder('kr-winner', goodsId);
    const late = await devToken('kr-late');
    const lateToken = await tokenFor(late, goodsId);
    expect(await codeOf(await purchase(late, goodsId, lateToken, { 'idempotency-key': 'kr-late-1' }))).toBe('SOLD_OUT');
    // The unit comes back, and the edge's memory of the sell-out runs out.
    const cancelled = await call(`/api/orders/${winner.orderId}/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${winner.jwt}` },
    });
    expect(cancelled.status).toBe(200);
    await new Promise((r) => setTimeout(r, SOLD_OUT_TRUST_MS + 100));
    // The late shopper's client retries with its key: the object owes it its old answer.
    expect(await codeOf(await purchase(late, goodsId, lateToken, { 'idempotency-key': 'kr-late-1' }))).toBe('SOLD_OUT');
    // That answer was about then: the next shopper is sent to the object, and buys the unit.
    const next = await devToken('kr-next');
    expect((await purchase(next, goodsId, await tokenFor(next, goodsId))).status).toBe(202);
  });

  it('answers a keyed SOLD_OUT before reading the body, unless the object answered that key', async () => {
    const { goodsId } = await createGoods({ stock: 1 });
    const lucky = await devToken('kb-lucky');
    const won = await tokenFor(lucky, goodsId);
    const late = await devToken('kb-late');
    const held = await tokenFor(late, goodsId);
    const other = await devToken('kb-other');
    const otherToken = await tokenFor(other, goodsId);
    expect((await purchase(lucky, goodsId, won, { 'idempotency-key': 'kb-lucky-1' })).status).toBe(202);
    // Someone else finds it sold out: the isolate knows it.
    expect(await codeOf(await purchase(other, goodsId, otherToken))).toBe('SOLD_OUT');
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    // A body that is not JSON at all: had the route read it, the answer would be 400.
    const notJson = (jwt: string | undefined, path: string, key: string) =>
      call(`/api/seckill/do/${path}`, {
        method: 'POST',
        headers: { ...(jwt ? { authorization: `Bearer ${jwt}` } : {}), 'content-type': 'application/json', 'idempotency-key': key },
        body: '{not json',
      });
    expect(await codeOf(await notJson(late, held.path, 'kb-late-1'))).toBe('SOLD_OUT');
    // The key's request id needs the shopper: no sign-in, no answer but 401.
    expect((await notJson(undefined, held.path, 'kb-late-2')).status).toBe(401);
    // The accepted key may be owed its 202: it goes on to the body (here malformed: 400).
    expect((await notJson(lucky, won.path, 'kb-lucky-1')).status).toBe(400);
    const retry = await purchase(lucky, goodsId, won, { 'idempotency-key': 'kb-lucky-1' });
    expect(retry.status).toBe(202);
  });

  it('refuses at the edge a keyed request whose token expired 10 minutes ago', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const jwt = await devToken('kf-stale');
    const old = await expiredToken('kf-stale', goodsId, 10 * 60_000);
    const before = await objectCalls(goodsId);
    const res = await purchase(jwt, goodsId, old, { 'idempotency-key': 'kf-stale-1' });
    expect(res.status).toBe(403);
    expect(await codeOf(res)).toBe('TOKEN_INVALID');
    expect(await objectCalls(goodsId)).toBe(before);
    // Within the grace it still reaches the object (which may hold an answer for the key).
    const recent = await expiredToken('kf-stale', goodsId, KEYED_GRACE_MS - 30_000);
    expect(await codeOf(await purchase(jwt, goodsId, recent, { 'idempotency-key': 'kf-stale-2' }))).toBe('TOKEN_INVALID');
    expect(await objectCalls(goodsId)).toBe(before + 1);
  });

  it('never lets a keyed request through before the start', async () => {
    const { goodsId } = await createGoods({ startAt: Date.now() + 3_600_000, endAt: Date.now() + 7_200_000 });
    const jwt = await devToken('kf-early');
    const t = await tokenFor(jwt, goodsId);
    const before = await objectCalls(goodsId);
    const res = await purchase(jwt, goodsId, t, { 'idempotency-key': 'kf-early-1' });
    expect(res.status).toBe(425);
    expect(await objectCalls(goodsId)).toBe(before);
  });

  it('lets a keyed request through a pause or the end only while its token is within lifetime and grace', async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const jwt = await devToken('kf-paused');
    expect((await call(`/admin/goods/${goodsId}/pause`, { method: 'POST', headers: ADMIN })).status).toBe(200);
    const before = await objectCalls(goodsId);
    const stale = await expiredToken('kf-paused', goodsId, KEYED_GRACE_MS + 60_000);
    expect(await codeOf(await purchase(jwt, goodsId, stale, { 'idempotency-key': 'kf-p-1' }))).toBe('PAUSED');
    expect(await objectCalls(goodsId)).toBe(before);
    const fresh = await tokenFor(jwt, goodsId);
    expect(await codeOf(await purchase(jwt, goodsId, fresh, { 'idempotency-key': 'kf-p-2' }))).toBe('PAUSED');
    expect(await objectCalls(goodsId)).toBe(before + 1);

    const ended = await createGoods({ startAt: Date.now() - 7_200_000, endAt: Date.now() - 60_000 });
    const endedBefore = await objectCalls(ended.goodsId);
    const endedStale = await expiredToken('kf-paused', ended.goodsId, KEYED_GRACE_MS + 60_000);
    expect(await codeOf(await purchase(jwt, ended.goodsId, endedStale, { 'idempotency-key': 'kf-e-1' }))).toBe('ENDED');
    expect(await objectCalls(ended.goodsId)).toBe(endedBefore);
  });

  it("keeps a key's answer with the shopper page's keys, whose time begins the request id", async () => {
    const { goodsId } = await createGoods({ stock: 5 });
    const jwt = await devToken('kf-v7');
    const at = Date.now() - 1_000;
    const key = timeOrderedKey(at);
    const first = await purchase(jwt, goodsId, await tokenFor(jwt, goodsId), { 'idempotency-key': key });
    expect(first.status).toBe(202);
    const { requestId } = await json<{ requestId: string }>(first);
    expect(requestId.startsWith(`${goodsId}.${timePrefix(at)}`)).toBe(true);
    // A retry with the same key gets the same answer, on a new token too (the id is the key's, not the token's).
    const again = await purchase(jwt, goodsId, await tokenFor(jwt, goodsId), { 'idempotency-key': key });
    expect(again.status).toBe(202);
    expect((await json<{ requestId: string }>(again)).requestId).toBe(requestId);
    // Another shopper's same key is another purchase; the first shopper's next key is refused as a second unit.
    const other = await devToken('kf-v7-other');
    const theirs = await purchase(other, goodsId, await tokenFor(other, goodsId), { 'idempotency-key': key });
    expect(theirs.status).toBe(202);
    expect((await json<{ requestId: string }>(theirs)).requestId).not.toBe(requestId);
    expect(await codeOf(await purchase(jwt, goodsId, await tokenFor(jwt, goodsId), { 'idempotency-key': timeOrderedKey() }))).toBe(
      'ALREADY_PURCHASED',
    );
    expect((await stockSnapshot(goodsId)).remaining).toBe(3);
  });
});
