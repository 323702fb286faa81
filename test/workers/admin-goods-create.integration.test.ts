// POST /admin/goods with an Idempotency-Key: the same create sent again, one after the other or
// at once, answers the goods the first one made (`Idempotent-Replayed: true`) and never makes a
// second goods or resets the first one's stock; the key with other settings is 409 CONFLICT; a
// create without a key makes a goods each time, as before.
import { describe, expect, it } from 'vitest';
import { ADMIN, buyOrder, call, json, stats } from './helpers';

type Created = { goodsId: number; title: string; remaining: number; totalStock: number; prewarmed?: boolean };

let serial = 0;

/** A create body with a title no other test uses. */
function goodsBody(overrides: Record<string, unknown> = {}) {
  const now = Date.now();
  serial++;
  return {
    activityId: 7001,
    title: `Keyed create ${serial} ${now}`,
    priceCents: 1999,
    stock: 3,
    startAt: now - 1000,
    endAt: now + 3600_000,
    ...overrides,
  };
}

function create(body: unknown, key?: string) {
  return call('/admin/goods', {
    method: 'POST',
    headers: { ...ADMIN, ...(key === undefined ? {} : { 'idempotency-key': key }) },
    json: body,
  });
}

async function goodsTitled(title: string): Promise<number[]> {
  const listed = await json<{ goodsId: number; title: string }[]>(await call('/api/seckill/goods'));
  return listed.filter((g) => g.title === title).map((g) => g.goodsId);
}

describe('creating a goods with an Idempotency-Key', () => {
  it('answers the same create sent again with the goods it made, and makes no second one', async () => {
    const body = goodsBody();
    const first = await create(body, 'launch-1');
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const made = await json<Created>(first);
    const again = await create(body, 'launch-1');
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await json<Created>(again)).toMatchObject({ goodsId: made.goodsId, title: body.title, remaining: 3 });
    expect(await goodsTitled(body.title)).toEqual([made.goodsId]);
  });

  it('keeps what the goods sold when the create comes again', async () => {
    const body = goodsBody({ stock: 2 });
    const made = await json<Created>(await create(body, 'launch-sold'));
    await buyOrder('keyed-create-buyer', made.goodsId);
    const again = await create(body, 'launch-sold');
    expect(again.status).toBe(201);
    expect(await json<Created>(again)).toMatchObject({ goodsId: made.goodsId, totalStock: 2, remaining: 1 });
    expect(await stats(made.goodsId)).toMatchObject({ totalStock: 2, doRemaining: 1, dbStock: 1, consistent: true });
  });

  it('makes one goods of the same create sent several times at once', async () => {
    const body = goodsBody();
    const answers = await Promise.all([1, 2, 3, 4].map(() => create(body, 'launch-race')));
    expect(answers.map((r) => r.status)).toEqual([201, 201, 201, 201]);
    const ids = await Promise.all(answers.map(async (r) => (await json<Created>(r)).goodsId));
    expect(new Set(ids).size).toBe(1);
    expect(answers.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(3);
    expect(await goodsTitled(body.title)).toEqual([ids[0]]);
  });

  it('takes the same settings in another order as the same create', async () => {
    const body = goodsBody();
    const made = await json<Created>(await create(body, 'launch-order'));
    const reversed = Object.fromEntries(Object.entries(body).reverse());
    const again = await create(reversed, 'launch-order');
    expect(again.status).toBe(201);
    expect((await json<Created>(again)).goodsId).toBe(made.goodsId);
  });

  it('refuses the key with other settings with 409 CONFLICT, and makes nothing', async () => {
    const body = goodsBody();
    const made = await json<Created>(await create(body, 'launch-conflict'));
    const other = { ...goodsBody(), title: `${body.title} (other)` };
    const res = await create(other, 'launch-conflict');
    expect(res.status).toBe(409);
    const error = (await json<{ error: { code: string; message: string; requestId: string } }>(res)).error;
    expect(error).toMatchObject({ code: 'CONFLICT', requestId: expect.any(String) });
    expect(error.message).toContain(`goods ${made.goodsId}`);
    expect(await goodsTitled(other.title)).toEqual([]);
    // The key's own request still answers its goods.
    expect((await json<Created>(await create(body, 'launch-conflict'))).goodsId).toBe(made.goodsId);
  });

  it('makes a goods for each create without a key, and refuses a malformed key', async () => {
    const body = goodsBody();
    expect((await create(body)).status).toBe(201);
    expect((await create(body)).status).toBe(201);
    expect(await goodsTitled(body.title)).toHaveLength(2);
    for (const key of ['', 'has space', 'x'.repeat(129)]) {
      const res = await create(goodsBody(), key);
      expect(res.status, JSON.stringify(key)).toBe(400);
      expect((await json<{ error: { code: string } }>(res)).error.code).toBe('INVALID_INPUT');
    }
  });
});
