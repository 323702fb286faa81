// `npm run dev` fires the cron schedule by itself, as production's trigger does: the firing
// loop against a stand-in Worker (a local HTTP server that records every /__scheduled call),
// its settings, and its schedule against wrangler.toml's.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { unstable_readConfig } from 'wrangler';
import { DEV_SCHEDULE, devCronNotice, devCronSettings, msUntilNext, startDevCron } from '../../scripts/lib/dev-cron.ts';
import { freePort } from '../../scripts/lib/free-port.ts';

const configPath = fileURLToPath(new URL('../../wrangler.toml', import.meta.url));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A stand-in Worker that answers /__scheduled as wrangler dev does and records each call. */
async function fakeWorker(): Promise<{ url: string; calls: { path: string; cron: string | null }[]; server: Server }> {
  const calls: { path: string; cron: string | null }[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://worker');
    calls.push({ path: url.pathname, cron: url.searchParams.get('cron') });
    res.writeHead(url.pathname === '/__scheduled' ? 200 : 404, { 'content-type': 'text/plain' }).end('Ran scheduled event');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls, server };
}

const stops: (() => void)[] = [];
afterEach(() => {
  for (const stop of stops.splice(0)) {
    stop();
  }
});

describe('the dev cron', () => {
  it('fires GET /__scheduled with the schedule on every interval, one line each, until stopped', async () => {
    const worker = await fakeWorker();
    stops.push(() => worker.server.close());
    const lines: string[] = [];
    const cron = startDevCron({ url: worker.url, intervalMs: 200, say: (line) => lines.push(line) });
    stops.push(() => cron.stop());
    // Three firings at 200 ms take 0.6 s; a loaded CI machine once fitted only two into a fixed
    // second, so the test waits for them (up to 10 s) rather than for a set time.
    for (const until = Date.now() + 10_000; worker.calls.length < 3 && Date.now() < until; ) {
      await sleep(50);
    }
    await sleep(200);
    cron.stop();
    // A firing already on its way at the stop may still reach the Worker (under load, after the
    // stop returned) and says its line when its answer comes; none starts after the stop.
    await sleep(500);
    const fired = worker.calls.length;
    expect(fired).toBeGreaterThanOrEqual(3);
    expect(worker.calls.every((c) => c.path === '/__scheduled' && c.cron === '* * * * *')).toBe(true);
    expect(lines).toHaveLength(fired);
    // Still stopped: at 200 ms a firing, another half second would have brought two more.
    await sleep(500);
    expect(worker.calls).toHaveLength(fired);
    expect(lines).toHaveLength(fired);
    expect(lines[0]).toMatch(/^cron \d\d:\d\d:\d\d: 200 Ran scheduled event \(\d+ ms\)$/);
  });

  it('says so when the Worker cannot be reached, and keeps firing', async () => {
    const lines: string[] = [];
    const cron = startDevCron({ url: `http://127.0.0.1:${await freePort()}`, intervalMs: 200, say: (line) => lines.push(line) });
    stops.push(() => cron.stop());
    await sleep(700);
    cron.stop();
    expect(lines.length).toBeGreaterThanOrEqual(2);
    expect(lines[0]).toMatch(/^cron \d\d:\d\d:\d\d: not delivered \(fetch failed: ECONNREFUSED\)$/);
  });

  it('fires on the minute, as Cloudflare does, not a minute after the start', () => {
    const minute = 60_000;
    const start = Date.UTC(2026, 11, 1, 12, 30, 17, 250);
    expect(msUntilNext(start, minute)).toBe(42_750);
    expect(msUntilNext(Date.UTC(2026, 11, 1, 12, 31), minute)).toBe(minute);
    expect(msUntilNext(start, 1_000)).toBe(750);
  });

  it('is on by default, once a minute, and DEV_CRON=off turns it off', () => {
    expect(devCronSettings({})).toEqual({ on: true, intervalMs: 60_000 });
    for (const off of ['off', 'OFF', '0', 'false', 'no']) {
      expect(devCronSettings({ DEV_CRON: off }), off).toEqual({ on: false });
    }
    expect(devCronSettings({ DEV_CRON: 'on', DEV_CRON_INTERVAL_MS: '1500' })).toEqual({ on: true, intervalMs: 1500 });
    for (const bad of ['abc', '10', '1.5', '-1']) {
      expect(() => devCronSettings({ DEV_CRON_INTERVAL_MS: bad }), bad).toThrow(/DEV_CRON_INTERVAL_MS must be an integer/);
    }
    expect(devCronNotice({ on: true, intervalMs: 60_000 }, 'http://127.0.0.1:8787')).toContain('every minute, on the minute');
    expect(devCronNotice({ on: false }, 'http://127.0.0.1:8787')).toContain('GET http://127.0.0.1:8787/__scheduled?cron=*+*+*+*+*');
  });

  it.each(['', 'staging', 'production'])('fires the schedule wrangler.toml gives production (%s)', (env) => {
    const config = unstable_readConfig({ config: configPath, env: env || undefined }, { hideWarnings: true });
    const crons: string[] = config.triggers.crons ?? [];
    expect(crons).toEqual([DEV_SCHEDULE]);
  });
});
