// The sale rules on the shopper page in headless Chromium against the running dev stack: a
// quantity picker that counts down the units a shopper holds, and an allowlist sale that tells
// a shopper who is not on the list before it starts and keeps them from buying.
import { existsSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { allowShoppers, askToken, buyViaApi, createGoods, statsWhen } from './browser-api';
import { answerCaptcha, browserSuite, signIn, text, visit, WAIT } from './browser-page';
import { CHROMIUM, type Stack, screenshot } from './browser-stack';

const HAVE_CHROMIUM = existsSync(CHROMIUM);
if (!HAVE_CHROMIUM) {
  console.warn(`browser-rules.e2e: skipped, ${CHROMIUM} is missing (apt-get install -y chromium)`);
}

/** The units the page's picker offers. */
const choices = (page: Page) => page.locator('#quantity option').allTextContents();

/** The purchase requests' bodies a page sends. */
function purchaseBodies(page: Page): unknown[] {
  const seen: unknown[] = [];
  page.on('request', (req) => {
    if (req.url().includes('/api/seckill/do/')) {
      seen.push(req.postDataJSON());
    }
  });
  return seen;
}

describe.skipIf(!HAVE_CHROMIUM)('the sale rules in Chromium', () => {
  let stack: Stack;
  const pages = browserSuite((s) => {
    stack = s;
  });

  it('a shopper picks 2 of a limit of 3, the order counts both; the picker then offers only 1 more', async () => {
    const sale = await createGoods(stack, { title: 'Trail runners, pair', stock: 10, priceCents: 12_500, perUserLimit: 3 });
    const page = await pages.open();
    const bodies = purchaseBodies(page);
    await visit(page, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await expect.poll(() => text(page, '#goods-price'), WAIT).toContain('125.00');
    await signIn(page, 'quinn');
    await page.locator('#quantity-row').waitFor({ state: 'visible', timeout: 15_000 });
    await expect.poll(() => choices(page), WAIT).toEqual(['1', '2', '3']);
    expect(await text(page, '#quantity-hint')).toBe('Up to 3 per shopper.');
    await page.locator('#quantity').selectOption('2');
    await answerCaptcha(page);
    await screenshot(page, 'shopper-quantity', { docs: true });

    await page.locator('#buy').click();
    await page.locator('#order').waitFor({ state: 'visible', timeout: 20_000 });
    await expect.poll(() => text(page, '#order-units'), WAIT).toBe('2');
    expect(await text(page, '#order-amount')).toContain('250.00');
    expect(bodies).toEqual([expect.objectContaining({ goodsId: sale.goodsId, quantity: 2 })]);

    // The shopper holds 2 of 3: the form stays beside the order, offering the last one.
    await expect.poll(() => choices(page), WAIT).toEqual(['1']);
    expect(await text(page, '#quantity-hint')).toBe('You hold 2; up to 3 per shopper.');
    expect(await page.locator('#buy-form').isVisible()).toBe(true);
    await answerCaptcha(page);
    await page.locator('#buy').click();
    await expect.poll(() => text(page, '#order-units'), { timeout: 20_000 }).toBe('1');
    expect(await text(page, '#order-amount')).toContain('125.00');
    expect(bodies).toHaveLength(2);
    expect(bodies[1]).toEqual(expect.objectContaining({ quantity: 1 }));
    // All 3 held: nothing more to buy here.
    await expect.poll(() => page.locator('#buy-form').isHidden(), WAIT).toBe(true);

    // Two orders, three units (the stats count units).
    const after = await statsWhen(stack, sale.goodsId, (s) => expect(s.orders.PENDING_PAYMENT).toBe(3));
    expect(after.doRemaining).toBe(7);
    expect(after.consistent).toBe(true);
  });

  it('a quantity above what is left is refused whole, the page says how many are left and offers no more', async () => {
    const sale = await createGoods(stack, { title: 'Pressed vinyl, first run', stock: 3, perUserLimit: 3 });
    const page = await pages.open();
    await visit(page, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(page, 'tess');
    await expect.poll(() => choices(page), WAIT).toEqual(['1', '2', '3']);
    await page.locator('#quantity').selectOption('3');
    await answerCaptcha(page);

    // The page's stock reads are held back (a slow network), so it still offers 3 when
    // another shopper takes one unit.
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    await page.route(`${stack.baseUrl}/api/seckill/goods/${sale.goodsId}`, async (route) => {
      await gate;
      await route.continue();
    });
    await buyViaApi(stack, 'uma', sale.goodsId);
    const answers: number[] = [];
    page.on('response', (res) => {
      if (res.url().includes('/api/seckill/do/')) {
        answers.push(res.status());
      }
    });
    await page.locator('#buy').click();
    await expect.poll(() => text(page, '#alert'), WAIT).toBe('Only 2 left: pick 2 or fewer.');
    expect(answers).toEqual([410]);
    // Refused whole, not sold out: the sale stays on and the picker comes down to what is left.
    expect(await text(page, '#goods-badge')).toBe('On sale');
    release();
    await expect.poll(() => choices(page), WAIT).toEqual(['1', '2']);
    const after = await statsWhen(stack, sale.goodsId, (s) => expect(s.orders.PENDING_PAYMENT).toBe(1));
    expect(after.doRemaining).toBe(2);
  });

  it('an allowlist sale tells an outsider before it starts and keeps them out; a listed shopper buys', async () => {
    const sale = await createGoods(stack, {
      title: 'Members-only console',
      stock: 3,
      // Far enough ahead that the outsider's page is read before the start on a loaded machine
      // (12 s was not always: a CI run signed in and read the notice after it).
      startAt: Date.now() + 25_000,
      eligibility: 'allowlist',
    });
    await allowShoppers(stack, sale.goodsId, ['rosa']);

    const outsider = await pages.open();
    await visit(outsider, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(outsider, 'sam');
    await expect
      .poll(() => text(outsider, '#eligibility'), WAIT)
      .toBe('You are not on the list for this sale: only invited shoppers can buy.');
    expect(await text(outsider, '#goods-badge')).toBe('Coming soon');
    await screenshot(outsider, 'shopper-not-eligible', { docs: true });

    const listed = await pages.open();
    await visit(listed, `${stack.baseUrl}/?goods=${sale.goodsId}`);
    await signIn(listed, 'rosa');
    await expect.poll(() => text(listed, '#goods-badge'), { timeout: 45_000 }).toBe('On sale');
    expect(await listed.locator('#eligibility').isHidden()).toBe(true);
    await answerCaptcha(listed);
    await listed.locator('#buy').click();
    await listed.locator('#order').waitFor({ state: 'visible', timeout: 20_000 });
    await expect.poll(() => text(listed, '#order-status'), WAIT).toBe('Awaiting payment');

    // Once the sale is on, the outsider still cannot buy: no captcha, an inactive button, and
    // the server refuses them a token all the same.
    await expect.poll(() => text(outsider, '#goods-badge'), WAIT).toBe('On sale');
    expect(await outsider.locator('#buy').getAttribute('aria-disabled')).toBe('true');
    expect(await outsider.locator('#captcha').isHidden()).toBe(true);
    expect(await outsider.locator('#eligibility').isVisible()).toBe(true);
    expect(await askToken(stack, 'sam', sale.goodsId)).toEqual({ status: 403, code: 'NOT_ELIGIBLE' });

    const after = await statsWhen(stack, sale.goodsId, (s) => expect(s.orders.PENDING_PAYMENT).toBe(1));
    expect(after.doRemaining).toBe(2);
  });
});
