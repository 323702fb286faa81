// A batch of reservations (one isolate's group commit) is read once and written once, but must
// decide exactly as the same reservations sent one call at a time: each item sees the tokens,
// units and keyed answers of the items before it in the batch.
import { describe, expect, it } from 'vitest';
import type { ReserveItem, ReserveOutcome } from '../../workers/kernel/contract';
import { settled, stockObject, stockSnapshot } from './helpers';
import { changeAllowlist, createRulesGoods, liveUnitsByUser } from './rules-helpers';

/** The scenario's items for one goods: the same shoppers, tokens and keys whatever the goods. */
function scenario(goodsId: number): ReserveItem[] {
  const at = Date.now() + 60_000;
  const it = (n: number, userId: string, extra: Partial<ReserveItem> = {}): ReserveItem => ({
    requestId: `${goodsId}.${String(n).padStart(22, 'b')}`,
    userId,
    tokenId: `batch-token-${goodsId}-${n}`,
    tokenExpiresAt: at,
    keyed: false,
    ...extra,
  });
  const bobKeyed = it(4, 'bob', { keyed: true });
  const fayKeyed = it(11, 'fay', { keyed: true });
  const erinExpired = it(8, 'erin', { keyed: true, tokenExpiresAt: Date.now() - 1 });
  return [
    it(1, 'alice'),
    it(2, 'alice'), // a second unit: the limit is 2
    it(3, 'alice'), // a third: LIMIT_REACHED
    bobKeyed,
    bobKeyed, // the same key again in the same batch: the first answer, no second unit
    it(6, 'carl', { tokenId: `batch-shared-${goodsId}` }),
    it(7, 'dan', { tokenId: `batch-shared-${goodsId}` }), // a token carl just spent
    erinExpired, // TOKEN_INVALID, and not remembered...
    { ...erinExpired, tokenExpiresAt: at, tokenId: `batch-token-${goodsId}-9` }, // ...so its key buys with a good token: the last unit
    it(10, 'gus', { quantity: 2 }), // SOLD_OUT
    fayKeyed, // SOLD_OUT, remembered
    fayKeyed, // its replay
    it(12, 'alice'), // still LIMIT_REACHED
  ];
}

/** An outcome without what names the goods (its order id's prefix, its request id). */
function shape(o: ReserveOutcome): Record<string, unknown> {
  if (o.ok) {
    return { ok: true, replay: o.replay, order: o.orderId.slice(o.orderId.indexOf('-') + 1) };
  }
  return { ok: false, replay: o.replay, reason: o.reason, remaining: o.remaining };
}

describe('GoodsStock batches', () => {
  it('decide a batch as the same reservations one call at a time, and write the same rows', async () => {
    const batched = await createRulesGoods({ stock: 5, perUserLimit: 2 });
    const single = await createRulesGoods({ stock: 5, perUserLimit: 2 });
    const inOneCall = await stockObject(batched.goodsId).reserveMany(batched.goodsId, scenario(batched.goodsId));
    const oneByOne: ReserveOutcome[] = [];
    for (const item of scenario(single.goodsId)) {
      oneByOne.push(...(await stockObject(single.goodsId).reserveMany(single.goodsId, [item])));
    }
    expect(inOneCall.map(shape)).toEqual(oneByOne.map(shape));
    // What the scenario means, so both answering the same wrong way cannot pass.
    expect(inOneCall.map((o) => (o.ok ? (o.replay ? 'replay' : 'ok') : `${o.reason}${o.replay ? ' replay' : ''}`))).toEqual([
      'ok',
      'ok',
      'LIMIT_REACHED',
      'ok',
      'replay',
      'ok',
      'TOKEN_INVALID',
      'TOKEN_INVALID',
      'ok',
      'SOLD_OUT',
      'SOLD_OUT',
      'SOLD_OUT replay',
      'LIMIT_REACHED',
    ]);
    const bob = inOneCall[3];
    expect(bob?.ok && inOneCall[4]?.ok && inOneCall[4].orderId === bob.orderId).toBe(true);

    for (const { goodsId } of [batched, single]) {
      const s = await settled(goodsId);
      expect(s).toMatchObject({ doRemaining: 0, dbStock: 0, orders: { PENDING_PAYMENT: 5 } });
      expect(Object.fromEntries(await liveUnitsByUser(goodsId))).toEqual({ alice: 2, bob: 1, carl: 1, erin: 1 });
      const snap = await stockSnapshot(goodsId);
      expect(snap).toMatchObject({ remaining: 0, queued: 0, confirmed: 5 });
    }
    // The spent tokens are spent for later calls too, and the remembered refusal answers again.
    const [again] = await stockObject(batched.goodsId).reserveMany(batched.goodsId, [scenario(batched.goodsId)[10] as ReserveItem]);
    expect(again).toMatchObject({ ok: false, reason: 'SOLD_OUT', replay: true });
  });

  it('checks an allowlist for every shopper of a batch, and the same shopper twice', async () => {
    const { goodsId } = await createRulesGoods({ stock: 10, eligibility: 'allowlist', perUserLimit: 2 });
    expect((await changeAllowlist(goodsId, { add: ['ann', 'ben'] })).status).toBe(200);
    const at = Date.now() + 60_000;
    const items = ['ann', 'zed', 'ben', 'ann', 'ann', 'yan'].map((userId, n) => ({
      requestId: `${goodsId}.${String(n).padStart(22, 'a')}`,
      userId,
      tokenId: `allow-token-${goodsId}-${n}`,
      tokenExpiresAt: at,
      keyed: false,
    }));
    const outcomes = await stockObject(goodsId).reserveMany(goodsId, items);
    expect(outcomes.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['ok', 'NOT_ELIGIBLE', 'ok', 'ok', 'LIMIT_REACHED', 'NOT_ELIGIBLE']);
    await settled(goodsId);
    expect(Object.fromEntries(await liveUnitsByUser(goodsId))).toEqual({ ann: 2, ben: 1 });
  });
});
