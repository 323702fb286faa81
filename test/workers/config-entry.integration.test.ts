// A Worker deployed with a bad configuration: every entry (HTTP, queue, cron) refuses to
// work, the log names the variable, and shoppers see a generic 500 without internals.
import {
  createExecutionContext,
  createMessageBatch,
  createScheduledController,
  getQueueResult,
  waitOnExecutionContext,
} from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterEach, describe, expect, it, vi } from 'vitest';
import worker from '../../workers/index';

function strong(seed: number): string {
  return Array.from({ length: 64 }, (_, i) => '0123456789abcdef'[(i * 7 + seed * 5) % 16]).join('');
}

/** The test Worker's bindings with a deployed environment's settings. */
function deployedEnv(environment: 'staging' | 'production', overrides: Record<string, string | undefined> = {}): Env {
  return {
    ...env,
    ENVIRONMENT: environment,
    DEV_MODE: 'false',
    AUTH_JWT_SECRET: strong(1),
    ADMIN_TOKEN: strong(2),
    TOKEN_SECRET: strong(3),
    PAYMENT_WEBHOOK_SECRET: strong(4),
    DATABASE_URL: 'postgres://app:pw@ep-quiet-sun-123456.eu-central-1.aws.neon.tech/neondb?sslmode=require',
    PG_WS_PROXY: '',
    TURNSTILE_SECRET_KEY: `0x4AAAAAAA${strong(5).slice(0, 25)}`,
    TURNSTILE_SITE_KEY: '0x4AAAAAAAB1cD2eF3gH4iJ5',
    UPSTASH_REDIS_REST_URL: '',
    UPSTASH_REDIS_REST_TOKEN: '',
    ...overrides,
  } as Env;
}

/** Captures the Worker's structured error log lines. */
function errorLog(): { events: () => Record<string, unknown>[] } {
  const spy = vi.spyOn(console, 'error').mockImplementation(() => {});
  return {
    events: () =>
      spy.mock.calls.flatMap(([line]) => {
        try {
          return [JSON.parse(String(line)) as Record<string, unknown>];
        } catch {
          return [];
        }
      }),
  };
}

async function fetchWith(e: Env, path: string, init: RequestInit = {}): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`https://sale.shop.test${path}`, init), e, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('a production Worker missing a secret', () => {
  const broken = deployedEnv('production', { ADMIN_TOKEN: undefined });

  it.each([
    ['GET', '/api/health'],
    ['GET', '/api/seckill/goods'],
    ['POST', '/api/seckill/goods/1/challenge'],
    ['GET', '/admin/metrics'],
  ])('answers %s %s with a generic 500 and logs the variable', async (method, path) => {
    const log = errorLog();
    const res = await fetchWith(broken, path, { method });
    expect(res.status).toBe(500);
    const body = await res.json<{ error: { code: string; message: string; requestId: string } }>();
    expect(body.error.code).toBe('INTERNAL');
    expect(body.error.message).toBe('the service is misconfigured');
    expect(body.error.requestId).not.toBe('');
    expect(JSON.stringify(body)).not.toMatch(/ADMIN_TOKEN|SECRET/);
    const logged = log.events().find((e) => e.event === 'config.invalid');
    expect(logged?.requestId).toBe(body.error.requestId);
    expect(logged?.issues).toEqual(expect.arrayContaining(['ADMIN_TOKEN: is required']));
  });

  it('holds queue messages back with a long delay instead of burning their retries', async () => {
    const log = errorLog();
    for (const [queue, delaySeconds] of [
      ['seckill-orders-production', 900],
      ['seckill-order-timeouts-production', 900],
      ['seckill-dlq-production', 43_200],
    ] as const) {
      const batch = createMessageBatch(queue, [{ id: 'm1', timestamp: new Date(), attempts: 1, body: { v: 1 } }]);
      // getQueueResult does not report a batch retry's delay; watch the call instead.
      const retryAll = vi.spyOn(batch, 'retryAll');
      const ctx = createExecutionContext();
      await worker.queue(batch, broken, ctx);
      const result = await getQueueResult(batch, ctx);
      expect(result.outcome).toBe('ok');
      expect(result.retryBatch).toEqual({ retry: true });
      expect(retryAll).toHaveBeenCalledWith({ delaySeconds });
      expect(result.ackAll).toBe(false);
      expect(result.explicitAcks).toEqual([]);
    }
    const logged = log.events().filter((e) => e.event === 'config.invalid');
    expect(logged).toHaveLength(3);
    expect(logged[0]?.issues).toEqual(expect.arrayContaining(['ADMIN_TOKEN: is required']));
  });

  it('fails the cron run, naming the variable', async () => {
    const log = errorLog();
    const ctx = createExecutionContext();
    worker.scheduled(createScheduledController({ cron: '* * * * *' }), broken, ctx);
    await expect(waitOnExecutionContext(ctx)).rejects.toThrow(/ADMIN_TOKEN: is required/);
    const logged = log.events().find((e) => e.event === 'cron.failed');
    expect(JSON.stringify(logged)).toContain('ADMIN_TOKEN: is required');
  });
});

describe('a production Worker with dev defaults', () => {
  it('refuses them and names each one', async () => {
    const log = errorLog();
    const res = await fetchWith(
      deployedEnv('production', { AUTH_JWT_SECRET: env.AUTH_JWT_SECRET, DEV_MODE: 'true', DATABASE_URL: env.DATABASE_URL }),
      '/api/health',
    );
    expect(res.status).toBe(500);
    const issues = log.events().find((e) => e.event === 'config.invalid')?.issues;
    const names = (Array.isArray(issues) ? issues : []).map((i) => String(i).split(':')[0]);
    expect(names).toEqual(expect.arrayContaining(['AUTH_JWT_SECRET', 'DEV_MODE', 'DATABASE_URL']));
  });
});

describe('a well-configured staging Worker', () => {
  const staging = deployedEnv('staging');

  it('serves', async () => {
    const res = await fetchWith(staging, '/api/health');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ok: true });
  });

  it('does not issue dev tokens even in a bundle that contains the route', async () => {
    const res = await fetchWith(staging, '/api/dev/token', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ userId: 'mallory' }),
    });
    expect(res.status).toBe(404);
    expect(await res.text()).not.toContain('token"');
  });
});
