import { runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { ACCEPTED_KEYED_WINDOW_MS, type ReserveItem } from '../../workers/kernel/contract';
import { createGoods, stockObject } from './helpers';

// What the goods' object remembers of keyed purchases (sent with an Idempotency-Key): nothing
// for a forged or spent token, and, in every SOLD_OUT answer, the keyed purchases it accepted in
// the last minutes, so the edge lets only those retries past its sold-out fast path.

let seq = 0;
function item(goodsId: number, userId: string, overrides: Partial<ReserveItem> = {}): ReserveItem {
  seq++;
  return {
    requestId: `${goodsId}.${String(seq).padStart(22, 'y')}`,
    userId,
    tokenId: `keyed-token-${seq}`,
    tokenExpiresAt: Date.now() + 60_000,
    keyed: true,
    ...overrides,
  };
}

function reservationRows(goodsId: number): Promise<number> {
  return runInDurableObject(
    stockObject(goodsId),
    (_i, state) => state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM reservation').one().n,
  );
}

async function restart(goodsId: number) {
  await runInDurableObject(stockObject(goodsId), (_instance, state) => state.abort('restarted by the test')).catch(() => undefined);
  return stockObject(goodsId);
}

describe('keyed purchases at the goods object', () => {
  it('stores nothing for a keyed request whose token is invalid, and answers its retry the same way', async () => {
    const { goodsId } = await createGoods({ stock: 2 });
    const stub = stockObject(goodsId);
    const expired = item(goodsId, 'forger', { tokenExpiresAt: Date.now() - 1 });
    const spent = item(goodsId, 'spender');
    expect((await stub.reserveMany(goodsId, [spent]))[0]).toMatchObject({ ok: true });
    const before = await reservationRows(goodsId);
    const replayOfSpent = item(goodsId, 'other', { tokenId: spent.tokenId });
    const first = await stub.reserveMany(goodsId, [expired, replayOfSpent]);
    expect(first).toMatchObject([
      { ok: false, reason: 'TOKEN_INVALID', replay: false },
      { ok: false, reason: 'TOKEN_INVALID', replay: false },
    ]);
    expect(await reservationRows(goodsId)).toBe(before);
    // Not remembered: the retry is decided afresh, and refused the same way.
    expect((await stub.reserveMany(goodsId, [expired]))[0]).toMatchObject({ ok: false, reason: 'TOKEN_INVALID', replay: false });
    // Other keyed refusals are still remembered for their retries.
    const second = item(goodsId, 'spender');
    expect((await stub.reserveMany(goodsId, [second]))[0]).toMatchObject({ ok: false, reason: 'ALREADY_PURCHASED', replay: false });
    expect((await stub.reserveMany(goodsId, [second]))[0]).toMatchObject({ ok: false, reason: 'ALREADY_PURCHASED', replay: true });
    expect(await reservationRows(goodsId)).toBe(before + 1);
  });

  it('names in a SOLD_OUT answer the keyed purchases it accepted within the window, also after a restart', async () => {
    const { goodsId } = await createGoods({ stock: 3 });
    const stub = stockObject(goodsId);
    const a = item(goodsId, 'ka');
    const b = item(goodsId, 'kb', { keyed: false });
    const c = item(goodsId, 'kc');
    expect((await stub.reserveMany(goodsId, [a, b, c])).every((o) => o.ok)).toBe(true);
    const [late, lateToo] = await stub.reserveMany(goodsId, [item(goodsId, 'kd'), item(goodsId, 'ke', { keyed: false })]);
    expect(late).toMatchObject({ ok: false, reason: 'SOLD_OUT', acceptedKeyed: [a.requestId, c.requestId], acceptedKeyedTruncated: false });
    expect(lateToo).toMatchObject({ ok: false, reason: 'SOLD_OUT', acceptedKeyed: [a.requestId, c.requestId] });
    // Other refusals carry no list.
    const [again] = await stub.reserveMany(goodsId, [item(goodsId, 'ka')]);
    expect(again).toMatchObject({ ok: false, reason: 'ALREADY_PURCHASED' });
    expect(again && 'acceptedKeyed' in again).toBe(false);

    // A new instance rebuilds the list from storage; a purchase older than the window drops out.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec(
        'UPDATE reservation SET created_at = ? WHERE request_id = ?',
        Date.now() - ACCEPTED_KEYED_WINDOW_MS - 1000,
        a.requestId,
      );
    });
    const fresh = await restart(goodsId);
    const [afterRestart] = await fresh.reserveMany(goodsId, [item(goodsId, 'kf')]);
    expect(afterRestart).toMatchObject({ ok: false, reason: 'SOLD_OUT', acceptedKeyed: [c.requestId], acceptedKeyedTruncated: false });
  });
});
