import { describe, expect, it } from 'vitest';
import { eventually, stats } from './helpers';
import { createQueuedGoods, join, openLive, shopper, sleep, tokenWithPass } from './room-helpers';

describe('queue mode auto', () => {
  it('lets shoppers straight through while it is quiet, holds a line while demand exceeds the rate, and lets go once it is empty', async () => {
    const { goodsId } = await createQueuedGoods({ stock: 100, queue: { mode: 'auto', admitPerSecond: 3, passSeconds: 60 } });
    let n = 0;
    const tokenStatus = async () => (await tokenWithPass((await shopper(`auto-${n++}`)).jwt, goodsId, undefined)).status;

    // Quiet: no line, no pass needed; joining admits at once (round 0: outside the line).
    expect(await tokenStatus()).toBe(200);
    const quiet = await join((await shopper('auto-quiet')).jwt, goodsId);
    expect(quiet.body).toMatchObject({ state: 'ADMITTED', round: 0 });
    expect(quiet.body.pass).toBeDefined();

    // A rush: far more token requests than 3 a second. The room turns its line on by itself.
    await Promise.all(Array.from({ length: 15 }, () => tokenStatus()));
    await eventually(async () => ((await tokenStatus()) === 403 ? true : undefined), 10_000);
    expect((await stats(goodsId)) as unknown as { queue: { active: boolean } }).toMatchObject({ queue: { active: true } });

    // Now a shopper waits in line and is admitted in turn.
    const waiting = await shopper('auto-waiting');
    const joined = await join(waiting.jwt, goodsId);
    expect(joined.body.state).toBe('WAITING');
    const live = await openLive(goodsId, { ticket: joined.body.ticket });
    const admitted = await live.next((e) => e.type === 'admitted', 10_000);
    expect(Number(admitted.round)).toBeGreaterThan(0);
    expect((await tokenWithPass(waiting.jwt, goodsId, String(admitted.pass))).status).toBe(200);
    live.close();

    // The rush is over and the line is empty: after a few quiet seconds, no pass is needed again.
    await sleep(4_000);
    await eventually(async () => {
      await sleep(1_000);
      return (await tokenStatus()) === 200 ? true : undefined;
    }, 20_000);
  }, 60_000);
});
