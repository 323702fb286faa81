// The webhook sender's pure decisions: where a delivery may go, how it is signed, and what
// one attempt's result makes of it.
import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY_SCHEDULE } from '../../workers/kernel/retry-schedule';
import { webhookSignature } from '../../workers/kernel/webhook-signature';
import { WEBHOOK_GIVE_UP_MS, webhookBody, webhookEventId, webhookUrlProblem } from '../../workers/kernel/webhooks';
import { decide } from '../../workers/queue/webhooks';

describe('webhookUrlProblem', () => {
  it.each([
    ['https://shop.test/hooks', false, undefined],
    ['https://shop.test:8443/hooks?k=v', false, undefined],
    ['http://shop.test/hooks', true, undefined],
    ['http://shop.test/hooks', false, 'must use https'],
    ['ftp://shop.test/hooks', true, 'must use https or http'],
    ['javascript:alert(1)', true, 'must use https or http'],
    ['https://u:p@shop.test/hooks', false, 'must not carry credentials (the signature authenticates the sender)'],
    ['https://u@shop.test/hooks', false, 'must not carry credentials (the signature authenticates the sender)'],
    ['https://shop.test/hooks#x', false, 'must not have a fragment'],
    ['shop.test/hooks', false, 'must be an absolute URL'],
  ])('%s (http allowed: %s) -> %s', (url, allowHttp, problem) => {
    expect(webhookUrlProblem(url, allowHttp)).toBe(problem);
  });
});

describe('signing', () => {
  it('signs "{id}.{timestamp}.{body}" with HMAC-SHA256, as v1=<hex>', async () => {
    // Computed independently: printf '%s' 'evt_1-1_paid.1700000000.{}' | openssl dgst -sha256 -hmac 'secret-0123456789'
    expect(await webhookSignature('secret-0123456789', 'evt_1-1_paid', 1_700_000_000, '{}')).toBe(
      'v1=8048c2182222da473ec53d62693e8da8b4d30325bfef7d8e01bd8a51f88bc4a5',
    );
  });

  it('gives each order and event type one id, and the same body every time', () => {
    expect(webhookEventId('order.refunded', '12-34')).toBe('evt_12-34_refunded');
    const event = { id: 'evt_12-34_paid', type: 'order.paid', createdAt: new Date(0), payload: { order: { orderId: '12-34' } } };
    expect(webhookBody(event)).toBe(webhookBody({ ...event }));
    expect(JSON.parse(webhookBody(event))).toEqual({
      id: 'evt_12-34_paid',
      type: 'order.paid',
      createdAt: '1970-01-01T00:00:00.000Z',
      data: { order: { orderId: '12-34' } },
    });
  });
});

describe('decide', () => {
  const now = Date.UTC(2026, 0, 1);
  const row = (attempts: number, sinceMs: number) => ({ attempts, retrySince: new Date(now - sinceMs) });
  const refused = { ok: false as const, statusCode: 500, error: 'the shop answered 500' };

  it('a 2xx is delivered', () => {
    expect(decide(row(1, 0), { ok: true, statusCode: 204 }, now, DEFAULT_RETRY_SCHEDULE)).toEqual({ kind: 'delivered', statusCode: 204 });
  });

  it('a failure is tried again after a doubling wait, capped', () => {
    const waits = [1, 2, 3, 9, 20].map((attempts) => {
      const d = decide(row(attempts, 0), refused, now, DEFAULT_RETRY_SCHEDULE);
      return d.kind === 'retry' ? (d.nextAttemptAt - now) / 1000 : d.kind;
    });
    expect(waits).toEqual([1, 2, 4, 256, 300]);
  });

  it('gives up once the next try would fall past the window', () => {
    const inside = decide(row(50, WEBHOOK_GIVE_UP_MS - 301_000), refused, now, DEFAULT_RETRY_SCHEDULE);
    expect(inside.kind).toBe('retry');
    const past = decide(row(50, WEBHOOK_GIVE_UP_MS - 299_000), refused, now, DEFAULT_RETRY_SCHEDULE);
    expect(past).toEqual({ kind: 'failed', statusCode: 500, error: 'the shop answered 500' });
  });

  it('an event that is off fails at once', () => {
    const off = { ok: false as const, statusCode: null, error: 'webhooks are off for order.paid', final: true };
    expect(decide(row(1, 0), off, now, DEFAULT_RETRY_SCHEDULE).kind).toBe('failed');
  });
});
