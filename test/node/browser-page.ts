// What the browser tests do on a page: sign in, answer the captcha, read a field, and watch
// every page for uncaught errors and requests still in flight when a test ends.
import type { Browser, BrowserContext, BrowserContextOptions, Page, Request, Response } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, expect, onTestFailed } from 'vitest';
import { launchChromium, newShopper, type Stack, startStack } from './browser-stack';

/** How long a page may take to show what a test waits for (CI machines are busy). */
export const WAIT = { timeout: 15_000 };

/** Seconds in an `HH:MM:SS` countdown. */
export function seconds(text: string): number {
  const m = text.trim().match(/^(\d+):(\d\d):(\d\d)$/);
  if (!m) {
    throw new Error(`not a countdown: ${text}`);
  }
  return Number(m[1]) * 3600 + Number(m[2]) * 60 + Number(m[3]);
}

/**
 * Opens `url` and waits for it to load. The dev stack (`wrangler dev`) once left a page's script
 * unanswered for the whole 30 s of a navigation on a busy machine, where Cloudflare serves the
 * assets in production: a first load that times out is logged and loaded again, as a shopper
 * would reload; a second one fails the test.
 */
export async function visit(page: Page, url: string): Promise<Response | null> {
  try {
    return await page.goto(url, { timeout: 20_000 });
  } catch (error) {
    if (!(error instanceof Error && error.name === 'TimeoutError')) {
      throw error;
    }
    console.warn(`loading ${url} timed out (${error.message.split('\n')[0]}); loading it again`);
    return page.goto(url, { timeout: 30_000 });
  }
}

/** Signs in with the local user-id form and waits for the page to show it. */
export async function signIn(page: Page, userId: string): Promise<void> {
  await page.locator('#user-id').fill(userId);
  await page.locator('#user-id').press('Enter');
  await expect.poll(() => page.locator('#who').textContent(), WAIT).toContain(userId);
}

/** Reads the built-in challenge ("3 + 4 = ?") off the page and types the answer. */
export async function answerCaptcha(page: Page): Promise<void> {
  const input = page.locator('#captcha-answer');
  await input.waitFor({ state: 'visible' });
  const label = (await page.locator('#captcha-label').textContent()) ?? '';
  const [a = 0, b = 0] = label.match(/\d+/g)?.map(Number) ?? [];
  await input.fill(String(a + b));
}

export const text = (page: Page, selector: string) =>
  page
    .locator(selector)
    .textContent()
    .then((t) => (t ?? '').trim());

/** A sale's card on the dashboard (signed in already), and a reader of its `data-field`s. */
export async function goodsCard(page: Page, goodsId: number) {
  const card = page.locator(`article[data-goods-id="${goodsId}"]`);
  await card.waitFor({ state: 'visible', timeout: 15_000 });
  const field = (name: string) =>
    card
      .locator(`[data-field="${name}"]`)
      .textContent()
      .then((t) => (t ?? '').trim());
  return { card, field };
}

/**
 * The pages of one test file: each in a fresh context (its own storage: another shopper,
 * another device), watched for uncaught errors and console errors, closed after each test.
 */
export class Pages {
  /** Uncaught errors and console errors of every page, checked after each test. */
  readonly problems: string[] = [];
  /** Answers of 500 or more the pages had, with their bodies: told when a test fails, not a failure. */
  private readonly serverErrors: string[] = [];
  /** Requests the pages have in flight, so a test ends once its pages are quiet. */
  private readonly inFlight = new Set<Request>();
  private readonly contexts: BrowserContext[] = [];
  private readonly opened: Page[] = [];

  constructor(private readonly browser: () => Browser) {}

  /**
   * What each page of the test showed when it failed: its address, whether its sign-in form and
   * page error were shown, who it was signed in as, its status and alert lines, what its storage
   * held, its requests still in flight and every answer of 500 or more it had (with the body: the
   * error's code and message say which part failed). A step that waits for an element names the
   * element, not why the page never showed it.
   */
  async describe(): Promise<string> {
    const lines = await Promise.all(
      this.opened.map((page, i) =>
        page
          .evaluate(() => ({
            url: location.href,
            login: document.getElementById('login')?.hidden,
            who: document.getElementById('who')?.textContent,
            pageError: document.getElementById('page-error')?.textContent,
            status: document.getElementById('status')?.textContent,
            alert: document.getElementById('alert')?.textContent,
            storage: [...Object.keys(localStorage), ...Object.keys(sessionStorage)],
            ready: document.readyState,
          }))
          .then((state) => `page ${i + 1}: ${JSON.stringify(state)}`)
          .catch((error: unknown) => `page ${i + 1}: unreadable (${error instanceof Error ? error.message : String(error)})`),
      ),
    );
    const pending = [...this.inFlight].map((r) => `${r.method()} ${r.url()}`);
    return [...lines, `in flight: ${pending.join(', ') || 'none'}`, ...this.problems, ...this.serverErrors].join('\n');
  }

  async open(options?: BrowserContextOptions): Promise<Page> {
    const context = await newShopper(this.browser(), options);
    this.contexts.push(context);
    const page = await context.newPage();
    this.opened.push(page);
    page.on('request', (request) => this.inFlight.add(request));
    page.on('requestfinished', (request) => this.inFlight.delete(request));
    page.on('requestfailed', (request) => this.inFlight.delete(request));
    page.on('pageerror', (error) => this.problems.push(`pageerror: ${error.message}`));
    page.on('response', (response) => {
      if (response.status() >= 500) {
        const request = response.request();
        void response
          .text()
          .catch(() => '(no body)')
          .then((body) =>
            this.serverErrors.push(`answer ${response.status()} to ${request.method()} ${response.url()}: ${body.slice(0, 300)}`),
          );
      }
    });
    page.on('console', (message) => {
      // A refused request (410, 429...) is logged by Chromium too; those are expected here.
      if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) {
        this.problems.push(`console: ${message.text()}`);
      }
    });
    return page;
  }

  /**
   * Closes every page, preferably between requests. Chromium does not always report the end
   * of a request (one answered from its cache as the page navigates away), so a request still
   * listed after a few seconds is named and the pages are closed anyway: the server takes a
   * shopper who hangs up mid-request in its stride, and the tests' own assertions catch a hung
   * one. Then no page may have had a problem.
   */
  async closeAll(): Promise<void> {
    const quiet = await expect
      .poll(() => this.inFlight.size, { timeout: 5_000, interval: 20 })
      .toBe(0)
      .then(() => true)
      .catch(() => false);
    if (!quiet) {
      console.warn(
        `closing pages with requests listed as in flight: ${[...this.inFlight].map((r) => `${r.method()} ${r.url()}`).join(', ')}`,
      );
    }
    await Promise.all(this.contexts.splice(0).map((c) => c.close()));
    this.opened.length = 0;
    this.inFlight.clear();
    this.serverErrors.length = 0;
    expect(this.problems).toEqual([]);
  }
}

/**
 * The hooks of a browser test file: the dev stack and Chromium started once (handed to `use`),
 * the pages closed and checked after each test, the stack's log printed when one fails.
 */
export function browserSuite(use: (stack: Stack, browser: Browser) => void): Pages {
  let stack: Stack | undefined;
  let browser: Browser | undefined;
  const pages = new Pages(() => {
    if (!browser) {
      throw new Error('Chromium is not running');
    }
    return browser;
  });
  beforeAll(async () => {
    stack = await startStack();
    browser = await launchChromium();
    use(stack, browser);
  }, 300_000);
  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  }, 60_000);
  beforeEach(() => {
    pages.problems.length = 0;
    onTestFailed(() => {
      console.log(`--- dev stack output (last lines) ---\n${stack?.logs().slice(-4000)}`);
    });
  });
  afterEach(async ({ task }) => {
    // Before the pages close: what they showed when the test failed.
    if (task.result?.state === 'fail') {
      console.log(`--- the pages ---\n${await pages.describe()}`);
    }
    await pages.closeAll();
  });
  return pages;
}
