// The running system for the browser tests: `npm run dev` (scripts/dev.ts: Postgres, bridges,
// `wrangler dev`) on a free port with throw-away state, and headless Chromium.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { type Browser, type BrowserContext, type BrowserContextOptions, chromium, type Page } from 'playwright-core';
import { freePort } from '../../scripts/lib/free-port.ts';
import { tsNode } from '../../scripts/lib/run-ts.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const CHROMIUM = '/usr/bin/chromium';
export const SCREENSHOTS = join(ROOT, 'test-results/screenshots');
/** The README's pictures; rewritten only when UPDATE_SCREENSHOTS=1. */
export const DOC_SCREENSHOTS = join(ROOT, 'docs/screenshots');
/**
 * A Redis database of its own, so the mirror's keys never meet another test's: one per vitest
 * worker (VITEST_POOL_ID counts from 1), as two browser files may run side by side.
 */
const REDIS_DB = 13 - ((Number(process.env.VITEST_POOL_ID) || 1) - 1);

/** KEY="value" lines, as scripts/dev.ts reads them. */
function devVars(): Record<string, string> {
  const file = existsSync(join(ROOT, '.dev.vars')) ? join(ROOT, '.dev.vars') : join(ROOT, '.dev.vars.example');
  const vars: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = line.match(/^\s*([A-Za-z0-9_]+)\s*=\s*"?(.*?)"?\s*$/);
    if (m?.[1]) {
      vars[m[1]] = m[2] ?? '';
    }
  }
  return vars;
}

/** The part of `pg` used here (the package ships no types). */
type PgClient = { connect(): Promise<void>; query(sql: string): Promise<unknown>; end(): Promise<void> };
const pg = createRequire(import.meta.url)('pg') as { Client: new (options: { connectionString: string }) => PgClient };

/** A fresh database on the server of `serverUrl` (dropped at the end). */
async function freshDatabase(serverUrl: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `edge_seckill_browser_${Date.now()}_${randomBytes(3).toString('hex')}`;
  const run = async (sql: string) => {
    const client = new pg.Client({ connectionString: serverUrl });
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end();
    }
  };
  await run(`CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => run(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
}

/** The Redis URL for the mirror, on its own (emptied) database; '' turns the mirror off. */
async function mirrorRedis(testRedisUrl: string | undefined): Promise<string> {
  if (!testRedisUrl) {
    return '';
  }
  const url = new URL(testRedisUrl);
  url.pathname = `/${REDIS_DB}`;
  const redis = new Redis(url.toString(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    await redis.flushdb();
  } finally {
    redis.disconnect();
  }
  return url.toString();
}

export type Stack = {
  baseUrl: string;
  adminToken: string;
  databaseKind: 'embedded' | 'postgres';
  mirror: boolean;
  logs(): string;
  stop(): Promise<void>;
};

/**
 * Starts the dev stack and resolves once it serves requests. Postgres is a fresh database
 * on TEST_DATABASE_URL's server when set, else an embedded PGlite in a temporary directory;
 * the Redis mirror is on when TEST_REDIS_URL is set.
 */
export async function startStack(): Promise<Stack> {
  const port = await freePort();
  const temp = mkdtempSync(join(tmpdir(), 'edge-seckill-browser-'));
  const cleanups: Array<() => Promise<void>> = [async () => rmSync(temp, { recursive: true, force: true })];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: String(port),
    // Two stacks start side by side (two files at a time): each its own inspector, not both 9229.
    INSPECTOR_PORT: String(await freePort()),
    PGLITE_DIR: join(temp, 'pglite'),
    DEV_PERSIST_DIR: join(temp, 'wrangler-state'),
    REDIS_URL: await mirrorRedis(process.env.TEST_REDIS_URL),
    // The pages are tested on a quiet sale: no reconciliation run lands in the middle of one.
    DEV_CRON: 'off',
  };
  delete env.DATABASE_URL;
  if (process.env.TEST_DATABASE_URL) {
    const db = await freshDatabase(process.env.TEST_DATABASE_URL);
    cleanups.push(db.drop);
    env.DATABASE_URL = db.url;
  }

  let output = '';
  const child: ChildProcess = spawn(...tsNode(join(ROOT, 'scripts/dev.ts')), {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group, so a stuck stack can be ended as a whole by its id.
    detached: true,
  });
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-200_000);
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const timer = setTimeout(() => {
        // The dev script stops its children on SIGTERM; if it hangs, end its group by id.
        if (child.pid !== undefined) {
          try {
            process.kill(-child.pid, 'SIGKILL');
          } catch {
            // Already gone.
          }
        }
      }, 20_000);
      await exited;
      clearTimeout(timer);
    }
    for (const cleanup of cleanups.reverse()) {
      await cleanup().catch(() => {});
    }
  };

  const ready = await new Promise<boolean>((resolve) => {
    // About 20 s alone; a loaded CI machine beside two other stacks has taken several times that.
    const timer = setTimeout(() => resolve(false), 240_000);
    const check = () => {
      if (output.includes('[dev] edge-seckill is running at')) {
        clearTimeout(timer);
        resolve(true);
      }
    };
    child.stdout?.on('data', check);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
  if (!ready) {
    await stop();
    throw new Error(`the dev stack did not start:\n${output.slice(-5000)}`);
  }
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    adminToken: devVars().ADMIN_TOKEN ?? 'dev-admin-token',
    databaseKind: env.DATABASE_URL ? 'postgres' : 'embedded',
    mirror: Boolean(env.REDIS_URL),
    logs: () => output,
    stop,
  };
}

/**
 * Headless Chromium as the toolchain notes describe. Playwright gives every launch a fresh
 * temporary profile (its own --user-data-dir) and removes it on close.
 */
export async function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** A fresh browser context (its own storage), like a second shopper on another device. */
export function newShopper(browser: Browser, options: BrowserContextOptions = {}): Promise<BrowserContext> {
  return browser.newContext({ viewport: { width: 1100, height: 900 }, locale: 'en-US', timezoneId: 'UTC', ...options });
}

/**
 * Writes a full-page screenshot to test-results/screenshots. With `docs` and
 * UPDATE_SCREENSHOTS=1 it also refreshes the README's picture (the visible part only, to
 * keep the committed PNG small).
 */
export async function screenshot(page: Page, name: string, options: { docs?: boolean } = {}): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
  if (options.docs && process.env.UPDATE_SCREENSHOTS === '1') {
    mkdirSync(DOC_SCREENSHOTS, { recursive: true });
    const target = join(DOC_SCREENSHOTS, `${name}.png`);
    await page.evaluate(() => window.scrollTo(0, 0));
    const png = await page.screenshot();
    // pngquant (apt-get install pngquant) shrinks them to about a third, when it is there.
    const quantized = spawnSync('pngquant', ['--quality=70-90', '--speed', '1', '--force', '--output', target, '-'], { input: png });
    if (quantized.status !== 0) {
      writeFileSync(target, png);
    }
  }
}
