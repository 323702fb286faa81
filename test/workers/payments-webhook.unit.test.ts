import { describe, expect, it } from 'vitest';
import { hmacHex } from '../../workers/kernel/crypto';
import { parseWebhookBody, verifyWebhookSignature } from '../../workers/payments/webhook';

const SECRET = 'unit-webhook-secret-0123456789abcdef';
const BODY = JSON.stringify({
  eventId: 'evt_1',
  paymentId: `pay_${'a'.repeat(22)}`,
  orderId: '7-1',
  status: 'SUCCEEDED',
  amountCents: 100,
});

describe('verifyWebhookSignature', () => {
  it('accepts the hex HMAC-SHA256 of the exact body, in either case', async () => {
    const sig = await hmacHex(SECRET, BODY);
    expect(await verifyWebhookSignature(SECRET, BODY, sig)).toBe(true);
    expect(await verifyWebhookSignature(SECRET, BODY, sig.toUpperCase())).toBe(true);
    expect(await verifyWebhookSignature(SECRET, BODY, ` ${sig} `)).toBe(true);
  });

  it('refuses a missing, malformed, truncated or foreign signature, and any change to the body', async () => {
    const sig = await hmacHex(SECRET, BODY);
    for (const header of [
      undefined,
      '',
      'abc',
      sig.slice(0, 63),
      `${sig}0`,
      `sha256=${sig}`,
      'g'.repeat(64),
      await hmacHex('other-secret-0123456789', BODY),
    ]) {
      expect(await verifyWebhookSignature(SECRET, BODY, header)).toBe(false);
    }
    expect(await verifyWebhookSignature(SECRET, `${BODY} `, sig)).toBe(false);
    expect(await verifyWebhookSignature(SECRET, BODY.replace('100', '101'), sig)).toBe(false);
  });
});

describe('parseWebhookBody', () => {
  it('parses a valid event', () => {
    expect(parseWebhookBody(BODY)).toMatchObject({ ok: true, event: { eventId: 'evt_1', status: 'SUCCEEDED', amountCents: 100 } });
  });

  it('names what is wrong with a bad one', () => {
    expect(parseWebhookBody('{')).toEqual({ ok: false, message: 'the body is not JSON' });
    const cases: [unknown, RegExp][] = [
      [{ ...JSON.parse(BODY), status: 'PAID' }, /status/],
      [{ ...JSON.parse(BODY), amountCents: -1 }, /amountCents/],
      [{ ...JSON.parse(BODY), amountCents: 1.5 }, /amountCents/],
      [{ ...JSON.parse(BODY), orderId: 'x' }, /orderId/],
      [{ ...JSON.parse(BODY), paymentId: 'pay_short' }, /paymentId/],
      [{ ...JSON.parse(BODY), eventId: '' }, /eventId/],
      [[], /body/],
      [null, /body/],
    ];
    for (const [body, message] of cases) {
      const parsed = parseWebhookBody(JSON.stringify(body));
      expect(parsed.ok).toBe(false);
      expect(parsed.ok ? '' : parsed.message).toMatch(message);
    }
  });
});
