// The shop's webhooks end to end: the Worker runs from its deployable bundle under Miniflare
// and delivers to a real HTTP receiver on this machine, which checks every signature. A small
// sale makes every event (created, paid, closed, refunded); the receiver refuses the first
// attempts, then is down for longer than the first retries, and still gets every event, each
// under one id; the delivery log and the stats agree; turning the events off stops them.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/lib/free-port.ts';
import { startWorkerStack } from '../../scripts/lib/miniflare-stack.ts';

type Stack = Awaited<ReturnType<typeof startWorkerStack>>;
type Json = Record<string, unknown>;
type Received = {
  id: string;
  timestamp: string;
  body: string;
  verified: boolean;
  event: { id: string; type: string; data: { order: Json } };
};

const SECRET = 'e2e-webhook-secret-0123456789';

/** What the shop's side does with a delivery (docs/operations.md shows the same check). */
function verify(secret: string, req: IncomingMessage, body: string): boolean {
  const id = String(req.headers['webhook-id'] ?? '');
  const timestamp = String(req.headers['webhook-timestamp'] ?? '');
  const signature = String(req.headers['webhook-signature'] ?? '');
  const expected = `v1=${createHmac('sha256', secret).update(`${id}.${timestamp}.${body}`).digest('hex')}`;
  const fresh = Math.abs(Date.now() / 1000 - Number(timestamp)) < 300;
  return fresh && signature.length === expected.length && timingSafeEqual(Buffer.from(signature), Buffer.from(expected));
}

/** The shop's receiver: records every request; refuses the first `refuseFirst` attempts of each event. */
function receiver(port: number) {
  const received: Received[] = [];
  const attempts = new Map<string, number>();
  /** Distinct events answered 2xx. */
  const delivered = new Set<string>();
  let refuseFirst = 0;
  let server: Server | undefined;
  return {
    received,
    set refuseFirst(n: number) {
      refuseFirst = n;
    },
    delivered,
    async start() {
      server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          const id = String(req.headers['webhook-id'] ?? '');
          const entry = {
            id,
            timestamp: String(req.headers['webhook-timestamp'] ?? ''),
            body,
            verified: verify(SECRET, req, body),
            event: JSON.parse(body) as Received['event'],
          };
          received.push(entry);
          const n = (attempts.get(id) ?? 0) + 1;
          attempts.set(id, n);
          if (n <= refuseFirst || !entry.verified) {
            res.writeHead(500).end('not yet');
            return;
          }
          delivered.add(id);
          res.writeHead(204).end();
        });
      });
      server.listen(port, '127.0.0.1');
      await once(server, 'listening');
    },
    async stop() {
      if (server) {
        server.closeAllConnections();
        await new Promise((r) => server?.close(r));
        server = undefined;
      }
    },
  };
}

async function until<T>(check: () => Promise<T | undefined | false>, timeoutMs = 60_000, intervalMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`condition not met within ${timeoutMs} ms`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

describe('webhooks to the shop', () => {
  let stack: Stack;
  let shop: ReturnType<typeof receiver>;
  let hookUrl: string;

  const call = async (path: string, init: { method?: string; headers?: Record<string, string>; json?: unknown } = {}) => {
    const res = await fetch(`${stack.url}${path}`, {
      method: init.method ?? 'GET',
      headers: { ...(init.json === undefined ? {} : { 'content-type': 'application/json' }), ...init.headers },
      body: init.json === undefined ? undefined : JSON.stringify(init.json),
    });
    const text = await res.text();
    return { status: res.status, body: (text.startsWith('{') || text.startsWith('[') ? JSON.parse(text) : {}) as Json };
  };
  const admin = () => ({ authorization: `Bearer ${stack.adminToken}` });
  const deliveries = async (query: string) =>
    (await call(`/admin/webhooks/deliveries?${query}`, { headers: admin() })).body.deliveries as {
      id: string;
      type: string;
      orderId: string;
      status: string;
      attempts: number;
    }[];

  /** A shopper buys one unit and waits for the order. */
  async function buyOrder(userId: string, goodsId: number) {
    const jwt = String((await call('/api/dev/token', { method: 'POST', json: { userId } })).body.token);
    const auth = { authorization: `Bearer ${jwt}` };
    const ch = (await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: auth })).body;
    const [a, b] = String(ch.prompt).match(/\d+/g)?.map(Number) ?? [];
    const tok = (
      await call(`/api/seckill/goods/${goodsId}/token`, {
        method: 'POST',
        headers: auth,
        json: { challengeId: ch.challengeId, answer: String((a ?? 0) + (b ?? 0)) },
      })
    ).body;
    const res = await call(`/api/seckill/do/${String(tok.path)}`, { method: 'POST', headers: auth, json: { goodsId, token: tok.token } });
    expect(res.status).toBe(202);
    const orderId = await until(async () => {
      const r = (await call(`/api/seckill/result/${String(res.body.requestId)}`, { headers: auth })).body;
      return r.status === 'SUCCESS' ? String(r.orderId) : undefined;
    });
    return { orderId, auth };
  }

  const cancel = async (o: { orderId: string; auth: Record<string, string> }) =>
    expect((await call(`/api/orders/${o.orderId}/cancel`, { method: 'POST', headers: o.auth })).status).toBe(200);
  const pay = async (o: { orderId: string; auth: Record<string, string> }, outcome: 'succeed' | 'hold') => {
    const res = await call(`/api/orders/${o.orderId}/pay`, { method: 'POST', headers: o.auth, json: { outcome } });
    expect(res.status).toBe(200);
    return String(res.body.paymentId);
  };

  beforeAll(async () => {
    const port = await freePort();
    hookUrl = `http://127.0.0.1:${port}/hooks`;
    shop = receiver(port);
    await shop.start();
    // Short retries, so an outage longer than the first few fits in seconds.
    stack = await startWorkerStack({
      databaseUrl: process.env.TEST_DATABASE_URL,
      bindings: { RETRY_BACKOFF_BASE_SECONDS: '1', RETRY_BACKOFF_CAP_SECONDS: '2' },
    });
    expect((await call('/admin/limits', { method: 'PUT', headers: admin(), json: { perIpPerSecond: 10_000 } })).status).toBe(200);
  }, 180_000);

  afterAll(async () => {
    await stack?.close();
    await shop?.stop();
  });

  it('refuses a bad endpoint with 400 in the contract shape', async () => {
    for (const body of [
      { url: 'https://user:pw@shop.test/hooks', secret: SECRET, events: ['order.paid'] },
      { url: hookUrl, secret: SECRET, events: ['order.sent'] },
      { url: hookUrl, secret: 'short', events: ['order.paid'] },
      { url: 'mailto:shop@shop.test', secret: SECRET, events: [] },
    ]) {
      const res = await call('/admin/webhooks', { method: 'PUT', headers: admin(), json: body });
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'INVALID_INPUT', message: expect.any(String), requestId: expect.any(String) });
    }
  });

  it('delivers every event of a sale, signed, retried under one id, through an outage', async () => {
    const put = await call('/admin/webhooks', {
      method: 'PUT',
      headers: admin(),
      json: { url: hookUrl, secret: SECRET, events: ['order.created', 'order.paid', 'order.closed', 'order.refunded'] },
    });
    expect(put.status).toBe(200);
    expect(JSON.stringify(put.body)).not.toContain(SECRET);
    const now = Date.now();
    const goods = await call('/admin/goods', {
      method: 'POST',
      headers: admin(),
      json: { activityId: 15, title: 'Webhook drill', priceCents: 990, stock: 5, startAt: now - 1000, endAt: now + 3600_000 },
    });
    expect(goods.status).toBe(201);
    const goodsId = Number(goods.body.goodsId);

    // The shop refuses the first two attempts of every event.
    shop.refuseFirst = 2;
    const paid = await buyOrder('wh-paid', goodsId);
    const cancelled = await buyOrder('wh-cancel', goodsId);
    const late = await buyOrder('wh-late', goodsId);
    await pay(paid, 'succeed');
    await cancel(cancelled);
    const latePayment = await pay(late, 'hold');
    await cancel(late);
    const completed = await call(`/api/payments/sandbox/${latePayment}/complete`, { method: 'POST', headers: late.auth, json: {} });
    expect(completed.status).toBe(200);
    const expected = [
      `evt_${paid.orderId}_created`,
      `evt_${paid.orderId}_paid`,
      `evt_${cancelled.orderId}_created`,
      `evt_${cancelled.orderId}_closed`,
      `evt_${late.orderId}_created`,
      `evt_${late.orderId}_closed`,
      `evt_${late.orderId}_refunded`,
    ].sort();
    await until(async () => expected.every((id) => shop.delivered.has(id)));
    for (const id of expected) {
      const attempts = shop.received.filter((r) => r.id === id);
      // Refused twice, delivered on the third: the same id and the same bytes every time.
      expect(attempts.length).toBe(3);
      expect(new Set(attempts.map((a) => a.body)).size).toBe(1);
      expect(attempts.every((a) => a.verified && a.event.id === id)).toBe(true);
    }
    const byId = new Map(shop.received.map((r) => [r.id, r.event]));
    expect(byId.get(`evt_${paid.orderId}_paid`)).toMatchObject({
      type: 'order.paid',
      data: { order: { orderId: paid.orderId, goodsId, userId: 'wh-paid', status: 'PAID', priceCents: 990 } },
    });
    expect(byId.get(`evt_${cancelled.orderId}_closed`)).toMatchObject({ type: 'order.closed', data: { order: { status: 'CANCELLED' } } });
    expect(byId.get(`evt_${late.orderId}_refunded`)).toMatchObject({ type: 'order.refunded', data: { order: { status: 'REFUNDED' } } });

    // The shop goes away for longer than the first retries; what happens meanwhile waits for it.
    shop.refuseFirst = 0;
    await shop.stop();
    const during = await buyOrder('wh-outage', goodsId);
    await cancel(during);
    const outageIds = [`evt_${during.orderId}_created`, `evt_${during.orderId}_closed`];
    await until(async () => {
      const log = await deliveries(`orderId=${during.orderId}`);
      return log.length === 2 && log.every((d) => d.status === 'PENDING' && d.attempts >= 3);
    });
    await shop.start();
    await until(async () => outageIds.every((id) => shop.delivered.has(id)));

    // The log and the stats agree with what the shop got.
    const all = [...expected, ...outageIds].sort();
    await until(async () => (await deliveries(`goodsId=${goodsId}&status=DELIVERED`)).length === all.length);
    const log = await deliveries(`goodsId=${goodsId}&limit=500`);
    expect(log.map((d) => d.id).sort()).toEqual(all);
    expect(log.every((d) => d.status === 'DELIVERED')).toBe(true);
    const stats = (await call(`/admin/goods/${goodsId}/stats`, { headers: admin() })).body;
    expect(stats.webhooks).toEqual({ pending: 0, delivered: all.length, failed: 0 });
    expect([...shop.delivered].filter((id) => all.includes(id)).sort()).toEqual(all);

    // A redelivery sends the same event again, under its id.
    const again = await call(`/admin/webhooks/deliveries/${expected[0]}/redeliver`, { method: 'POST', headers: admin() });
    expect(again.status).toBe(200);
    const before = shop.received.filter((r) => r.id === expected[0]).length;
    await until(async () => shop.received.filter((r) => r.id === expected[0]).length === before + 1);
    await until(async () => (await deliveries(`orderId=${expected[0]?.split('_')[1]}`)).every((d) => d.status === 'DELIVERED'));

    // Turned off: a change writes no event, so none is sent.
    expect(
      (await call('/admin/webhooks', { method: 'PUT', headers: admin(), json: { url: hookUrl, secret: SECRET, events: [] } })).status,
    ).toBe(200);
    const quiet = await buyOrder('wh-quiet', goodsId);
    await cancel(quiet);
    expect(await deliveries(`orderId=${quiet.orderId}`)).toEqual([]);
    expect(shop.received.some((r) => r.event.data.order.orderId === quiet.orderId)).toBe(false);
    const config = (await call('/admin/webhooks', { headers: admin() })).body;
    expect(config).toMatchObject({ url: hookUrl, events: [], enabled: false, deliveries: { pending: 0, failed: 0 } });
  });
});
