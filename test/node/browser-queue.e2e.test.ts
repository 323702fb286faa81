// The waiting room in headless Chromium against the running dev stack: shoppers in a queued
// sale follow their place on the live channel, get admitted, buy and hear the result there
// without a single polling request; a dropped channel resumes; the dashboard shows the queue
// and switches its mode.
import { existsSync } from 'node:fs';
import type { Page, WebSocketRoute } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { adminCall, createGoods, joinQueue, statsWhen } from './browser-api';
import { answerCaptcha, browserSuite, goodsCard, signIn, text, visit, WAIT } from './browser-page';
import { CHROMIUM, type Stack, screenshot } from './browser-stack';

const HAVE_CHROMIUM = existsSync(CHROMIUM);
if (!HAVE_CHROMIUM) {
  console.warn(`browser-queue.e2e: skipped, ${CHROMIUM} is missing (apt-get install -y chromium)`);
}

/** Admission can take a few of the room's one-second ticks. */
const ADMIT = { timeout: 30_000, interval: 100 };

/**
 * The requests a page makes that a client without the live channel would poll with, its joins
 * through the join route, and the live channels it opened.
 */
function countPolls(page: Page): { ticket: string[]; result: string[]; joins: string[]; sockets: string[] } {
  const seen = { ticket: [] as string[], result: [] as string[], joins: [] as string[], sockets: [] as string[] };
  page.on('websocket', (ws) => seen.sockets.push(ws.url()));
  page.on('request', (req) => {
    const url = new URL(req.url());
    if (req.method() === 'POST' && /^\/api\/seckill\/goods\/\d+\/queue$/.test(url.pathname)) {
      seen.joins.push(url.pathname);
    }
    if (req.method() === 'GET' && /^\/api\/seckill\/goods\/\d+\/queue\/./.test(url.pathname)) {
      seen.ticket.push(url.pathname);
    }
    if (url.pathname.startsWith('/api/seckill/result/')) {
      seen.result.push(url.pathname);
    }
  });
  return seen;
}

/** Every place in line the page showed, as the test watched it (a MutationObserver in the page). */
async function recordPlaces(page: Page): Promise<() => Promise<string[]>> {
  await page.evaluate(() => {
    const target = document.getElementById('line-position');
    const seen: string[] = [];
    (window as unknown as { seenPlaces: string[] }).seenPlaces = seen;
    if (target) {
      new MutationObserver(() => {
        const t = (target.textContent ?? '').trim();
        if (t && seen[seen.length - 1] !== t) {
          seen.push(t);
        }
      }).observe(target, { childList: true, characterData: true, subtree: true });
    }
  });
  return () => page.evaluate(() => (window as unknown as { seenPlaces: string[] }).seenPlaces);
}

function placeNumber(shown: string): number {
  return Number(shown.match(/\d+/)?.[0] ?? Number.NaN);
}

describe.skipIf(!HAVE_CHROMIUM)('the waiting room in Chromium', () => {
  let stack: Stack;
  const pages = browserSuite((s) => {
    stack = s;
  });

  it('two shoppers see their place move, get admitted, buy and hear the result live with no polling', async () => {
    // One admission a second and ten shoppers already in line (they never buy): the pages'
    // places have to move for several seconds before their turn.
    const sale = await createGoods(stack, { stock: 20, title: 'Queued phone', queue: { mode: 'always', admitPerSecond: 1 } });
    for (let i = 0; i < 10; i++) {
      await joinQueue(stack, `q-ahead-${i}`, sale.goodsId);
    }

    const shoppers = await Promise.all(
      ['alice', 'bob'].map(async (userId) => {
        const page = await pages.open();
        const polls = countPolls(page);
        await visit(page, `${stack.baseUrl}/?goods=${sale.goodsId}`);
        await expect.poll(() => text(page, '#goods-title'), WAIT).toBe('Queued phone');
        const places = await recordPlaces(page);
        await signIn(page, userId);
        return { userId, page, polls, places };
      }),
    );
    const [alice, bob] = shoppers;
    if (!alice || !bob) {
      throw new Error('two shoppers expected');
    }
    for (const s of shoppers) {
      await expect.poll(() => text(s.page, '#line-conn'), WAIT).toBe('Live');
      // Joined as the live channel opened: one connection, no request to the join route.
      expect(s.polls.joins).toEqual([]);
      expect(s.polls.sockets.filter((u) => u.includes('/live?join=1'))).toHaveLength(1);
      await expect.poll(() => text(s.page, '#line-position'), WAIT).toMatch(/^Your place: \d+$/);
      expect(await text(s.page, '#line-eta')).toMatch(/^About \d+ s to go$/);
      expect(await text(s.page, '#buy-label')).toBe('Waiting in line');
      expect(await s.page.locator('#buy').getAttribute('aria-disabled')).toBe('true');
    }
    await screenshot(alice.page, 'shopper-queue-position', { docs: true });

    for (const s of shoppers) {
      await expect.poll(() => text(s.page, '#line-state'), ADMIT).toBe('It is your turn! Answer the check and buy.');
      const places = (await s.places()).map(placeNumber);
      // The place went down as the shoppers ahead were let in, never up.
      expect(places.length, `${s.userId} saw ${places.join(', ')}`).toBeGreaterThan(1);
      expect(places).toEqual([...places].sort((a, b) => b - a));
      expect(await text(s.page, '#buy-label')).toBe('Buy now');
    }
    await answerCaptcha(alice.page);
    await screenshot(alice.page, 'shopper-queue-admitted', { docs: true });

    for (const s of shoppers) {
      await answerCaptcha(s.page);
      await s.page.locator('#buy').click();
    }
    for (const s of shoppers) {
      await s.page.locator('#order').waitFor({ state: 'visible', timeout: 30_000 });
      expect(await text(s.page, '#status')).toBe('Success! Your order is placed.');
      expect({ ticket: s.polls.ticket, result: s.polls.result }, s.userId).toEqual({ ticket: [], result: [] });
    }
    const after = await statsWhen(stack, sale.goodsId, (s) => expect(s.orders.PENDING_PAYMENT).toBe(2));
    expect(after.doRemaining).toBe(18);
  });

  it('a dropped live channel polls while down, reconnects, and the result still arrives on it', async () => {
    const sale = await createGoods(stack, { stock: 3, title: 'Dropped phone', queue: { mode: 'always', admitPerSecond: 5 } });
    const page = await pages.open();
    const polls = countPolls(page);
    // The live channel passes through the test: it can be cut, and refused while `down`.
    let down = false;
    const routes: WebSocketRoute[] = [];
    await page.routeWebSocket(/\/live\?/, (ws) => {
      if (down) {
        void ws.close({ code: 1011, reason: 'refused by the test' });
        return;
      }
      routes.push(ws);
      ws.connectToServer();
    });
    await visit(page, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(page, 'dora');
    await expect.poll(() => text(page, '#line-state'), ADMIT).toBe('It is your turn! Answer the check and buy.');
    await expect.poll(() => text(page, '#line-conn'), WAIT).toBe('Live');
    expect(polls.ticket).toEqual([]);

    down = true;
    await Promise.all(routes.splice(0).map((ws) => ws.close({ code: 1001, reason: 'cut by the test' })));
    await expect.poll(() => text(page, '#line-conn'), WAIT).toBe('Reconnecting…');
    // While down the page reads its ticket over HTTP instead.
    await expect.poll(() => polls.ticket.length, WAIT).toBeGreaterThan(0);
    expect(await text(page, '#line-state')).toBe('It is your turn! Answer the check and buy.');

    down = false;
    await expect.poll(() => text(page, '#line-conn'), { timeout: 30_000, interval: 100 }).toBe('Live');
    const polledWhileDown = polls.ticket.length;

    await answerCaptcha(page);
    await page.locator('#buy').click();
    await page.locator('#order').waitFor({ state: 'visible', timeout: 30_000 });
    expect(await text(page, '#status')).toBe('Success! Your order is placed.');
    // Reconnected: no more polling, and the result came on the channel.
    expect(polls.ticket).toHaveLength(polledWhileDown);
    expect(polls.result).toEqual([]);
  });

  it('the dashboard shows the queue and switches its mode', async () => {
    const sale = await createGoods(stack, { stock: 20, title: 'Dashboard queue', queue: { mode: 'always', admitPerSecond: 1 } });
    // Forty in line at one admission a second: some are still waiting when the dashboard first
    // reads the line, however long the page takes to load on a busy machine (six were all
    // admitted before it did, once).
    await Promise.all(Array.from({ length: 40 }, (_, i) => joinQueue(stack, `d-wait-${i}`, sale.goodsId)));
    const page = await pages.open({ viewport: { width: 1280, height: 900 } });
    await visit(page, `${stack.baseUrl}/admin`);
    await page.locator('#admin-token').fill(stack.adminToken);
    await page.locator('#admin-token').press('Enter');
    const { card, field } = await goodsCard(page, sale.goodsId);
    const mode = (m: string) => card.locator(`button[data-mode="${m}"]`);

    await expect.poll(async () => Number(await field('queueWaiting')), ADMIT).toBeGreaterThan(0);
    expect(await field('queueRate')).toMatch(/^\d+$/);
    expect(await field('queueLastEta')).toMatch(/^\d+ s$/);
    // The room's default shard count, some of them reporting the forty in line.
    expect(await field('queueShards')).toMatch(/^[1-9]\d* of 32$/);
    expect(await field('queueActive')).toBe('Line on');
    // The room's measured delays: how late its shards let shoppers in is measured from the first
    // admission; the front's wait only from a round that let in everyone it could see, which a
    // line at one a second does not have (a dash).
    await expect.poll(() => field('queueLate'), ADMIT).toMatch(/^\d+ ms$|^\d+\.\d s$/);
    expect(await field('queueFrontLag')).toMatch(/^–$|^\d+ ms$|^\d+\.\d s$/);
    expect(await mode('always').getAttribute('aria-pressed')).toBe('true');
    await card.scrollIntoViewIfNeeded();
    await screenshot(page, 'dashboard-queue', { docs: true });

    const settingsOf = async () => {
      const res = await adminCall<{ queueSettings?: { mode: string; admitPerSecond?: number } }>(
        stack,
        `/admin/goods/${sale.goodsId}/stats`,
      );
      return res.body.queueSettings;
    };
    await mode('auto').click();
    await expect.poll(() => text(page, '#dash-status'), WAIT).toBe(`Sale ${sale.goodsId}: waiting room Auto.`);
    expect(await mode('auto').getAttribute('aria-pressed')).toBe('true');
    // The switch changed the mode and kept the rest of the settings.
    await expect.poll(settingsOf, WAIT).toEqual({ mode: 'auto', admitPerSecond: 1 });

    await mode('off').click();
    await expect.poll(settingsOf, WAIT).toEqual({ mode: 'off', admitPerSecond: 1 });
    await expect.poll(() => card.locator('[data-field="queueFigures"]').isHidden(), WAIT).toBe(true);
  });
});
