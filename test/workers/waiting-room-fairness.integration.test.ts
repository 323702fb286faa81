import { describe, expect, it } from 'vitest';
import { drawOrder, seedHashOf, shuffleKey } from '../../durable-objects/waiting-room/rules';
import { call, eventually, json } from './helpers';
import { createQueuedGoods, join, shopper, type TicketAnswer, ticketNow } from './room-helpers';

type Fairness = { seedHash: string; seed?: string; rule?: string };

describe('a fair start', () => {
  it('shuffles the pre-queue at the start by the committed seed, reproducibly, and queues later arrivals behind', async () => {
    const startAt = Date.now() + 4_000;
    const { goodsId } = await createQueuedGoods({
      stock: 50,
      queue: { mode: 'always', admitPerSecond: 4, preQueueSeconds: 60 },
      startAt,
    });
    const fairness = async () => json<Fairness>(await call(`/api/seckill/goods/${goodsId}/fairness`));

    // Before the start: the commitment only.
    const committed = await fairness();
    expect(committed.seedHash).toMatch(/^[0-9a-f]{64}$/);
    expect(committed.seed).toBeUndefined();

    const early: TicketAnswer[] = [];
    for (let i = 0; i < 20; i++) {
      const { status, body } = await join((await shopper(`early-${i}`)).jwt, goodsId);
      expect(status).toBe(200);
      expect(body).toMatchObject({ state: 'WAITING', preQueue: true, orderKey: null });
      expect(body.drawAt).toBe(new Date(startAt).toISOString());
      early.push(body);
    }
    // Who clicked first does not matter: everyone in the pre-queue waits for the draw.
    expect((await fairness()).seed).toBeUndefined();

    await new Promise((r) => setTimeout(r, Math.max(0, startAt - Date.now()) + 100));
    const late: TicketAnswer[] = [];
    for (let i = 0; i < 3; i++) {
      late.push((await join((await shopper(`late-${i}`)).jwt, goodsId)).body);
    }

    // After the start: the seed, whose hash is the commitment, and the rule.
    const revealed = await eventually(async () => {
      const f = await fairness();
      return f.seed ? f : undefined;
    });
    expect(revealed.seedHash).toBe(committed.seedHash);
    expect(await seedHashOf(revealed.seed ?? '')).toBe(committed.seedHash);
    expect(revealed.rule).toMatch(/SHA-256\(seed \|\| ticketId\)/);

    // Everyone admitted, about 4 a second.
    const final = await eventually(async () => {
      const all = await Promise.all([...early, ...late].map((t) => ticketNow(goodsId, t.ticket)));
      return all.every((t) => t.state === 'ADMITTED') ? all : undefined;
    }, 30_000);
    const finalEarly = final.slice(0, early.length);
    const finalLate = final.slice(early.length);

    // Anyone can recompute the draw from the seed and the ticket ids.
    const seed = revealed.seed ?? '';
    for (const t of finalEarly) {
      expect(t.orderKey).toBe(await shuffleKey(seed, t.ticketId));
    }
    const drawn = await drawOrder(
      seed,
      finalEarly.map((t) => t.ticketId),
    );
    const byKey = [...finalEarly].sort((a, b) => ((a.orderKey ?? '') < (b.orderKey ?? '') ? -1 : 1)).map((t) => t.ticketId);
    expect(byKey).toEqual(drawn);
    // The draw is not the join order (20 shoppers: a shuffle that kept it has odds 1 in 20!).
    expect(drawn).not.toEqual(early.map((t) => t.ticketId));

    // Admitted in the drawn order: rounds never go back along it; later arrivals after all of it.
    const roundOf = new Map(final.map((t) => [t.ticketId, t.round ?? -1]));
    const rounds = drawn.map((id) => roundOf.get(id) ?? -1);
    expect(rounds.every((r, i) => r >= 1 && (i === 0 || r >= (rounds[i - 1] ?? 0)))).toBe(true);
    // Over several rounds: a decision admits what the rate accrued since the one before, up to
    // two ticks' worth (8), so a busy machine's late decisions make fewer, larger rounds.
    expect(new Set(rounds).size).toBeGreaterThanOrEqual(Math.ceil(early.length / 8));
    const lastEarly = Math.max(...rounds);
    for (const t of finalLate) {
      expect((t.orderKey ?? '') > (byKey.length ? (finalEarly.find((e) => e.ticketId === byKey.at(-1))?.orderKey ?? '') : '')).toBe(true);
      expect(t.round ?? 0).toBeGreaterThanOrEqual(lastEarly);
    }
  }, 60_000);
});
