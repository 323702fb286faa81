// The shopper page and the ops dashboard in headless Chromium against the running dev stack
// (scripts/dev.ts: wrangler dev, Postgres, queues, Durable Objects), as shoppers and an
// operator use them. Screenshots go to test-results/screenshots/.
import { existsSync } from 'node:fs';
import type { BrowserContextOptions } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { keyTimeMs } from '../../workers/kernel/time-order.ts';
import { buyViaApi, createGoods, eventually, goods, limits, stats, statsWhen } from './browser-api';
import { answerCaptcha, browserSuite, goodsCard, seconds, signIn, text, visit, WAIT } from './browser-page';
import { CHROMIUM, type Stack, screenshot } from './browser-stack';

const HAVE_CHROMIUM = existsSync(CHROMIUM);
if (!HAVE_CHROMIUM) {
  console.warn(`browser-pages.e2e: skipped, ${CHROMIUM} is missing (apt-get install -y chromium)`);
}

describe.skipIf(!HAVE_CHROMIUM)('the pages in Chromium', () => {
  let stack: Stack;
  const pages = browserSuite((s) => {
    stack = s;
  });
  /** A page in a fresh context (its own storage): another shopper, another device. */
  const open = (options?: BrowserContextOptions) => pages.open(options);

  it('a shopper buys the last unit with the keyboard and pays; the next shopper sees sold out', async () => {
    const sale = await createGoods(stack, { stock: 2, imageUrl: `${stack.baseUrl}/img/sample-phone.svg` });
    await buyViaApi(stack, 'carol', sale.goodsId);

    const alice = await open();
    const served = await visit(alice, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    // The page runs under its Content-Security-Policy (a violation would be a console error).
    expect(served?.headers()['content-security-policy']).toContain("script-src 'self'");
    await expect.poll(() => text(alice, '#goods-title'), WAIT).toBe('Aurora X phone, 256 GB');
    await expect.poll(() => text(alice, '#stock-pct'), WAIT).toBe('Remaining 50%');
    expect(await text(alice, '#stock-count')).toBe('1 of 2 left');
    expect(await text(alice, '#buy-label')).toBe('Sign in to buy');
    await signIn(alice, 'alice');
    await answerCaptcha(alice);
    // A goods with no waiting room and no sale rules shows none of their parts.
    for (const part of ['#line', '#quantity-row', '#eligibility']) {
      expect(await alice.locator(part).isHidden(), part).toBe(true);
    }
    await screenshot(alice, 'shopper-before-buying');

    // The page asks for its result with `?wait=10`: without the mirror the stock object holds
    // that one request until the order is written, so the whole wait is one request.
    const resultPolls: string[] = [];
    alice.on('request', (req) => {
      if (req.url().includes('/api/seckill/result/')) {
        resultPolls.push(req.url());
      }
    });
    // Enter in the answer field submits the form: the whole purchase works from the keyboard.
    await alice.locator('#captcha-answer').press('Enter');
    await expect.poll(() => text(alice, '#status'), WAIT).toMatch(/^Queued/);
    await alice.locator('#order').waitFor({ state: 'visible', timeout: 20_000 });
    expect(await text(alice, '#status')).toBe('Success! Your order is placed.');
    expect(resultPolls.length).toBeGreaterThan(0);
    expect(resultPolls.every((url) => url.endsWith('?wait=10'))).toBe(true);
    if (!stack.mirror) {
      expect(resultPolls).toHaveLength(1);
    }
    await expect.poll(() => text(alice, '#order-status'), WAIT).toBe('Awaiting payment');
    expect(seconds(`00:${await text(alice, '#pay-countdown')}`)).toBeGreaterThan(14 * 60);
    expect(await alice.evaluate(() => document.activeElement?.id)).toBe('order-title');
    expect(await alice.locator('#buy-form').isHidden()).toBe(true);
    await screenshot(alice, 'shopper-order');

    await alice.locator('#pay').click();
    await expect.poll(() => text(alice, '#order-status'), { timeout: 20_000 }).toBe('Paid');
    expect(await text(alice, '#order-message')).toBe('Payment received. Thank you!');
    expect(await alice.locator('#order-actions').isHidden()).toBe(true);
    await screenshot(alice, 'shopper-paid', { docs: true });

    const after = await stats(stack, sale.goodsId);
    expect(after.doRemaining).toBe(0);
    expect(after.orders.PAID).toBe(1);
    expect(after.orders.PENDING_PAYMENT).toBe(1);

    // A reload shows the same order (remembered for this shopper and sale).
    await alice.reload();
    await expect.poll(() => text(alice, '#order-status'), WAIT).toBe('Paid');

    const bob = await open();
    await visit(bob, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(bob, 'bob');
    await expect.poll(() => text(bob, '#goods-badge'), WAIT).toBe('Sold out');
    expect(await text(bob, '#buy-label')).toBe('Sold out');
    expect(await bob.locator('#buy').getAttribute('aria-disabled')).toBe('true');
    expect(await text(bob, '#stock-pct')).toBe('Remaining 0%');
    expect(await bob.locator('#order').isHidden()).toBe(true);
    await screenshot(bob, 'shopper-sold-out');
  });

  it('a shopper whose page still showed stock is told the sale sold out', async () => {
    const sale = await createGoods(stack, { stock: 1 });
    const dave = await open();
    await visit(dave, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(dave, 'dave');
    await answerCaptcha(dave);
    expect(await text(dave, '#stock-pct')).toBe('Remaining 100%');

    await buyViaApi(stack, 'erin', sale.goodsId);
    const answers: number[] = [];
    dave.on('response', (res) => {
      if (res.url().includes('/api/seckill/do/')) {
        answers.push(res.status());
      }
    });
    await dave.locator('#buy').click();
    await expect.poll(() => text(dave, '#alert'), WAIT).toBe('Sold out. Every unit has been taken.');
    expect(answers).toEqual([410]);
    expect(await text(dave, '#buy-label')).toBe('Sold out');
    expect(await text(dave, '#stock-pct')).toBe('Remaining 0%');
  });

  it('a double click sends one purchase request and makes one order', async () => {
    const sale = await createGoods(stack, { stock: 5 });
    const page = await open();
    const purchases: string[] = [];
    const keys: (string | undefined)[] = [];
    page.on('request', (req) => {
      if (req.url().includes('/api/seckill/do/')) {
        purchases.push(req.url());
        keys.push(req.headers()['idempotency-key']);
      }
    });
    await visit(page, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(page, 'frank');
    await answerCaptcha(page);

    await page.locator('#buy').dblclick();
    // Greyed out with a spinner at once, and deaf to more clicks while the purchase is in flight.
    expect(await page.locator('#buy').getAttribute('aria-disabled')).toBe('true');
    expect(await page.locator('#buy').getAttribute('class')).toContain('is-busy');
    await page.locator('#buy').click({ force: true });
    await page.locator('#order').waitFor({ state: 'visible', timeout: 20_000 });

    expect(purchases).toHaveLength(1);
    // The page's key carries its time (UUID version 7), so the request id derived from it sorts by time.
    expect(keyTimeMs(keys[0] ?? '')).toBeGreaterThan(Date.now() - 120_000);
    const after = await eventually(async () => {
      const s = await stats(stack, sale.goodsId);
      expect(s.orders.PENDING_PAYMENT).toBe(1);
      return s;
    });
    expect(after.doRemaining).toBe(4);
  });

  it('a busy answer to the ticket request is sent again with the same answer: one click still buys', async () => {
    const sale = await createGoods(stack, { stock: 5 });
    const page = await open();
    const tokenPath = `${stack.baseUrl}/api/seckill/goods/${sale.goodsId}/token`;
    const bodies: unknown[] = [];
    // The first ticket request meets a busy sale (as the server answers it before the challenge
    // is spent); the server never sees it, so the same answer is good for the next one.
    await page.route(tokenPath, async (route) => {
      bodies.push(route.request().postDataJSON());
      if (bodies.length === 1) {
        await route.fulfill({
          status: 503,
          headers: { 'content-type': 'application/json', 'retry-after': '1' },
          body: JSON.stringify({ error: { code: 'BUSY', message: 'the sale is busy, please retry', requestId: 'busy-1' } }),
        });
        return;
      }
      await route.continue();
    });
    await visit(page, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(page, 'gwen');
    await answerCaptcha(page);
    // Every status line the page shows, as it shows it (a poll from here could miss one under load).
    await page.evaluate(() => {
      const status = document.getElementById('status');
      const seen: string[] = [];
      Object.assign(window, { seenStatus: seen });
      if (status) {
        new MutationObserver(() => seen.push(status.textContent ?? '')).observe(status, {
          childList: true,
          characterData: true,
          subtree: true,
        });
      }
    });
    await page.locator('#buy').click();
    await page.locator('#order').waitFor({ state: 'visible', timeout: 20_000 });
    const shown = await page.evaluate(() => (window as unknown as { seenStatus: string[] }).seenStatus);
    expect(shown).toContain('The sale is very busy: trying again in 1 s…');
    expect(bodies).toHaveLength(2);
    expect(bodies[1]).toEqual(bodies[0]);
    expect(await text(page, '#alert')).toBe('');
    const after = await statsWhen(stack, sale.goodsId, (s) => expect(s.orders.PENDING_PAYMENT).toBe(1));
    expect(after.doRemaining).toBe(4);
  });

  it('a ticket request still busy after three tries asks for a new question, and the next answer buys', async () => {
    const sale = await createGoods(stack, { stock: 5 });
    const page = await open();
    const tokenPath = `${stack.baseUrl}/api/seckill/goods/${sale.goodsId}/token`;
    let busy = true;
    let sent = 0;
    await page.route(tokenPath, async (route) => {
      sent++;
      if (busy) {
        await route.fulfill({
          status: 503,
          headers: { 'content-type': 'application/json', 'retry-after': '1' },
          body: JSON.stringify({
            error: { code: 'UNAVAILABLE', message: 'a part of the service is restarting or busy, please retry', requestId: 'busy' },
          }),
        });
        return;
      }
      await route.continue();
    });
    await visit(page, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(page, 'hugo');
    await answerCaptcha(page);
    await page.locator('#buy').click();
    await expect
      .poll(() => text(page, '#alert'), { timeout: 20_000 })
      .toBe('The sale is very busy. Please answer the new question and press the button again.');
    expect(sent).toBe(3);
    expect(await page.locator('#order').isHidden()).toBe(true);

    busy = false;
    await answerCaptcha(page);
    await page.locator('#buy').click();
    await page.locator('#order').waitFor({ state: 'visible', timeout: 20_000 });
    expect(sent).toBe(4);
    await statsWhen(stack, sale.goodsId, (s) => expect(s.orders.PENDING_PAYMENT).toBe(1));
  });

  it('the countdown follows the server clock when the device clock is wrong', async () => {
    // Far enough ahead that both pages are signed in and read before the start on a loaded machine.
    const AHEAD_S = 25;
    const startAt = Date.now() + AHEAD_S * 1000;
    const sale = await createGoods(stack, { stock: 3, startAt });

    // Three hours slow: a page on the device clock would show 03:00:25 and never open.
    const slow = await open();
    await slow.clock.install({ time: Date.now() - 3 * 3600_000 });
    await visit(slow, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(slow, 'grace');
    await expect.poll(() => text(slow, '#countdown-label'), WAIT).toBe('Starts in');
    const left = seconds(await text(slow, '#countdown'));
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(AHEAD_S);
    // The page shows the server's time of day (UTC here), not the device's.
    const shownOfDay = seconds(await text(slow, '#server-time'));
    const nowOfDay = Math.floor((Date.now() % 86_400_000) / 1000);
    expect(Math.abs(((((shownOfDay - nowOfDay + 43_200) % 86_400) + 86_400) % 86_400) - 43_200)).toBeLessThanOrEqual(3);
    expect(await text(slow, '#buy-label')).toBe('Not started yet');

    // Two hours fast: a page on the device clock would think the sale began long ago.
    const fast = await open();
    await fast.clock.install({ time: Date.now() + 2 * 3600_000 });
    await visit(fast, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await expect.poll(() => text(fast, '#countdown-label'), WAIT).toBe('Starts in');
    expect(seconds(await text(fast, '#countdown'))).toBeLessThanOrEqual(AHEAD_S);
    expect(await text(fast, '#goods-badge')).toBe('Coming soon');
    await screenshot(fast, 'shopper-countdown');

    // The slow device opens the sale at the server's start second, not three hours late.
    await expect.poll(() => text(slow, '#buy-label'), { timeout: (AHEAD_S + 8) * 1000, interval: 200 }).toBe('Buy now');
    expect(Date.now()).toBeGreaterThanOrEqual(startAt - 1_000);
    expect(await slow.locator('#buy').getAttribute('aria-disabled')).toBe('false');
    expect(await text(slow, '#countdown-label')).toBe('Ends in');
    expect((await goods(stack, sale.goodsId)).status).toBe('ON_SALE');
  });

  it('fits a phone screen and speaks Chinese, with a switch to English', async () => {
    const sale = await createGoods(stack, { stock: 10, title: '极光 X 手机 256GB', imageUrl: `${stack.baseUrl}/img/sample-phone.svg` });
    const page = await open({ viewport: { width: 390, height: 844 }, locale: 'zh-CN', timezoneId: 'Asia/Shanghai' });
    // From the list of sales to the sale's page.
    await visit(page, `${stack.baseUrl}/`);
    await page.getByRole('link', { name: '极光 X 手机 256GB' }).click();
    await page.waitForURL(`${stack.baseUrl}/?goods=${sale.goodsId}`);
    await expect.poll(() => text(page, '#goods-badge'), WAIT).toBe('抢购中');
    expect(await text(page, '#buy-label')).toBe('登录后抢购');
    expect(await text(page, '#stock-pct')).toBe('剩余 100%');
    expect(await page.evaluate(() => document.documentElement.lang)).toBe('zh-CN');
    await signIn(page, 'heidi');
    await answerCaptcha(page);
    expect(await text(page, '#buy-label')).toBe('立即抢购');
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await screenshot(page, 'shopper-phone-zh', { docs: true });

    await page.locator('#lang').click();
    expect(await text(page, '#buy-label')).toBe('Buy now');
    expect(await text(page, '#lang')).toBe('中文');
    expect(await page.evaluate(() => document.documentElement.lang)).toBe('en');
    // The stock bar and the live regions are there for screen readers.
    expect(await page.locator('#stock-bar').getAttribute('aria-valuetext')).toBe('Remaining 100%');
    expect(await page.locator('#status').getAttribute('aria-live')).toBe('polite');
    expect(await page.locator('#alert').getAttribute('role')).toBe('alert');
  });

  it('the dashboard shows a sale live and pauses and resumes it', async () => {
    const sale = await createGoods(stack, { stock: 10, title: 'Dashboard phone' });
    await buyViaApi(stack, 'ivan', sale.goodsId);
    await buyViaApi(stack, 'judy', sale.goodsId);
    const sharded = await createGoods(stack, { stock: 40, title: 'Dashboard sharded phone', shards: 4 });
    await buyViaApi(stack, 'lena', sharded.goodsId);

    const page = await open({ viewport: { width: 1280, height: 900 } });
    await visit(page, `${stack.baseUrl}/admin`);
    await page.locator('#admin-token').fill('wrong-token');
    await page.locator('#admin-token').press('Enter');
    await expect.poll(() => text(page, '#login-error'), WAIT).toBe('The admin token was not accepted.');
    await page.locator('#admin-token').fill(stack.adminToken);
    await page.locator('#admin-token').press('Enter');

    const { card, field } = await goodsCard(page, sale.goodsId);
    await expect.poll(() => field('doRemaining'), { timeout: 10_000 }).toBe('8');
    expect(await field('dbStock')).toBe('8');
    expect(await field('mirrorStock')).toBe(stack.mirror ? '8' : 'off');
    expect(await field('consistent')).toBe('Consistent');
    // Nobody is waiting on a result: the stats' count of reads the shards hold, shown as a number.
    expect(await field('heldResultReads')).toBe('0');
    expect(await card.locator('[data-field="orders"] tr', { hasText: 'Pending payment' }).locator('td').textContent()).toBe('2');
    expect(await field('status')).toBe('On sale');
    // One stock shard is the goods' object itself: no shard table.
    expect(await card.locator('[data-field="shardsBox"]').isHidden()).toBe(true);
    // A sharded goods: a row per shard, adding up to the goods' total.
    const shardCard = await goodsCard(page, sharded.goodsId);
    await expect.poll(() => shardCard.field('doRemaining'), { timeout: 10_000 }).toBe('39');
    const rows = shardCard.card.locator('[data-field="shardRows"] tr');
    expect(await rows.locator('th').allTextContents()).toEqual(['#0', '#1', '#2', '#3']);
    const column = async (i: number) => (await rows.locator(`td:nth-of-type(${i})`).allTextContents()).map(Number);
    expect((await column(1)).reduce((a, b) => a + b, 0)).toBe(39);
    expect((await column(2)).reduce((a, b) => a + b, 0) + (await column(3)).reduce((a, b) => a + b, 0)).toBe(1);
    await expect.poll(() => card.locator('svg[data-field="chart"] polyline').count(), { timeout: 10_000 }).toBe(1);
    // A sale while the page is open shows up within a refresh or two.
    await buyViaApi(stack, 'ken', sale.goodsId);
    await expect.poll(() => field('doRemaining'), { timeout: 10_000 }).toBe('7');
    // Postgres' count follows once the consumer has written the order (a refresh later on a busy machine).
    await expect.poll(() => field('dbStock'), { timeout: 10_000 }).toBe('7');

    await card.locator('[data-action="toggle-pause"]').click();
    await expect.poll(() => field('status'), WAIT).toBe('Paused');
    expect(await text(page, '#dash-status')).toBe(`Sale ${sale.goodsId} paused.`);
    expect(await card.locator('[data-action="toggle-pause"]').textContent()).toBe('Resume');
    expect((await goods(stack, sale.goodsId)).status).toBe('PAUSED');
    // Request outcomes per second, from two scrapes of /admin/metrics.
    await expect.poll(() => page.locator('#traffic-rows tr').count(), { timeout: 10_000 }).toBeGreaterThan(0);
    // What the edge asked its sources: a goods page read renews its stock figure (kept a second).
    const sources = async () => {
      await goods(stack, sale.goodsId);
      return page.locator('#edge-sources-rows th').allTextContents();
    };
    await expect.poll(sources, { timeout: 10_000, interval: 500 }).toContain('page_stock');
    await screenshot(page, 'dashboard', { docs: true });

    await card.locator('[data-action="toggle-pause"]').click();
    await expect.poll(() => field('status'), WAIT).toBe('On sale');
    expect((await goods(stack, sale.goodsId)).status).toBe('ON_SALE');

    await page.locator('#reconcile').click();
    await expect.poll(() => text(page, '#dash-status'), WAIT).toMatch(/^Reconciliation finished: \d+ sale\(s\) checked, 0 discrepancies/);
    expect(await page.locator('#reconcile-report').textContent()).toContain(`"goodsId": ${sale.goodsId}`);

    // The traffic switch: the form shows the live limits and saves a change.
    await page.locator('#limits-title').click();
    const perUser = page.locator('#limits-form input[name="perUserPerSecond"]');
    await expect.poll(() => perUser.inputValue(), WAIT).toBe(String((await limits(stack)).perUserPerSecond));
    await perUser.fill('5');
    await page.locator('#limits-form button[type="submit"]').click();
    await expect.poll(() => text(page, '#limits-status'), WAIT).toBe('Limits saved.');
    expect((await limits(stack)).perUserPerSecond).toBe(5);
    await perUser.fill('3');
    await page.locator('#limits-form button[type="submit"]').click();
    await expect.poll(async () => (await limits(stack)).perUserPerSecond, WAIT).toBe(3);
  });
});
