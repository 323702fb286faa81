import { expect } from 'vitest';
import { ADMIN, bearer, call, devToken, json } from './helpers';

// Helpers of the waiting-room tests: goods with a queue, joining, the live channel.

export type QueueOptions = {
  mode: 'off' | 'auto' | 'always';
  admitPerSecond?: number;
  preQueueSeconds?: number;
  passSeconds?: number;
  shards?: number;
};

export type TicketAnswer = {
  ticket: string;
  ticketId: string;
  state: 'WAITING' | 'ADMITTED' | 'SOLD_OUT' | 'EXPIRED';
  position: number;
  etaSeconds: number;
  remaining: number;
  orderKey: string | null;
  preQueue: boolean;
  round: number | null;
  pass?: string;
  expiresAt?: string;
  drawAt?: string;
  queue: string;
  result?: { requestId: string; status: string; orderId?: string; reason?: string };
};

export type LiveEvent = { type: string; [field: string]: unknown };

/** Creates a goods with a waiting room through the admin API. */
export async function createQueuedGoods(options: {
  stock: number;
  queue: QueueOptions;
  startAt?: number;
  endAt?: number;
}): Promise<{ goodsId: number; queue: QueueOptions }> {
  const now = Date.now();
  const res = await call('/admin/goods', {
    method: 'POST',
    headers: ADMIN,
    json: {
      activityId: 3001,
      title: 'Queued phone',
      priceCents: 100,
      stock: options.stock,
      startAt: options.startAt ?? now - 1000,
      // Short sales: a room stops its background work once its sale is over, so it does not
      // weigh on the test files that run after this one.
      endAt: options.endAt ?? Math.max(now, options.startAt ?? now) + 120_000,
      queue: options.queue,
    },
  });
  expect(res.status).toBe(201);
  return json(res);
}

/** A shopper: their JWT. */
export async function shopper(userId: string): Promise<{ userId: string; jwt: string }> {
  return { userId, jwt: await devToken(userId) };
}

export async function join(jwt: string, goodsId: number): Promise<{ status: number; body: TicketAnswer }> {
  const res = await call(`/api/seckill/goods/${goodsId}/queue`, { method: 'POST', headers: bearer(jwt) });
  return { status: res.status, body: await json<TicketAnswer>(res) };
}

export async function ticketNow(goodsId: number, ticket: string): Promise<TicketAnswer> {
  const res = await call(`/api/seckill/goods/${goodsId}/queue/${ticket}`);
  expect(res.status).toBe(200);
  return json<TicketAnswer>(res);
}

/** A live connection and every event it has received, in order. */
export type Live = {
  ws: WebSocket;
  events: LiveEvent[];
  /** The first event (from `from` on) that passes `match`, waiting up to `timeoutMs`. */
  next(match: (e: LiveEvent) => boolean, timeoutMs?: number, from?: number): Promise<LiveEvent>;
  close(): void;
};

/** Opens the live channel with a ticket, or with the JWT (`join`: joining the line as it opens, `?join=1`). */
export async function openLive(goodsId: number, auth: { ticket: string } | { jwt: string; join?: boolean }): Promise<Live> {
  const headers: Record<string, string> = { upgrade: 'websocket' };
  let path = `/api/seckill/goods/${goodsId}/live`;
  if ('ticket' in auth) {
    path += `?ticket=${encodeURIComponent(auth.ticket)}`;
  } else {
    headers['sec-websocket-protocol'] = `seckill-live, jwt.${auth.jwt}`;
    path += auth.join ? '?join=1' : '';
  }
  const res = await call(path, { headers });
  expect(res.status).toBe(101);
  const ws = res.webSocket;
  if (!ws) {
    throw new Error('no WebSocket in the 101 answer');
  }
  const events: LiveEvent[] = [];
  const waiters = new Set<() => void>();
  ws.accept();
  ws.addEventListener('message', (m) => {
    events.push(JSON.parse(String(m.data)) as LiveEvent);
    for (const w of waiters) {
      w();
    }
  });
  return {
    ws,
    events,
    next(match, timeoutMs = 20_000, from = 0) {
      return new Promise((resolve, reject) => {
        const look = () => {
          const found = events.slice(from).find(match);
          if (found) {
            waiters.delete(look);
            clearTimeout(timer);
            resolve(found);
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(look);
          reject(new Error(`no matching live event within ${timeoutMs} ms; got ${JSON.stringify(events.slice(-5))}`));
        }, timeoutMs);
        waiters.add(look);
        look();
      });
    },
    close() {
      try {
        ws.close(1000, 'done');
      } catch {
        // already closed
      }
    },
  };
}

/** Challenge, then a purchase token with the admission pass (or without one): the token step's answer. */
export async function tokenWithPass(jwt: string, goodsId: number, pass: string | undefined): Promise<Response> {
  const chRes = await call(`/api/seckill/goods/${goodsId}/challenge`, { method: 'POST', headers: bearer(jwt) });
  expect(chRes.status).toBe(200);
  const ch = await json<{ challengeId: string; prompt: string }>(chRes);
  const [a, b] = ch.prompt.match(/\d+/g)?.map(Number) ?? [];
  return call(`/api/seckill/goods/${goodsId}/token`, {
    method: 'POST',
    headers: { ...bearer(jwt), ...(pass ? { 'x-admission-pass': pass } : {}) },
    json: { challengeId: ch.challengeId, answer: String((a ?? 0) + (b ?? 0)) },
  });
}

/** An admitted shopper's purchase: token with the pass, then the hidden path. Every step's status. */
export async function buyWithPass(jwt: string, goodsId: number, pass: string): Promise<{ statuses: number[]; requestId?: string }> {
  const tok = await tokenWithPass(jwt, goodsId, pass);
  if (tok.status !== 200) {
    return { statuses: [tok.status] };
  }
  const { token, path } = await json<{ token: string; path: string }>(tok);
  const res = await call(`/api/seckill/do/${path}`, { method: 'POST', headers: bearer(jwt), json: { goodsId, token } });
  const body = await json<{ requestId?: string }>(res);
  return { statuses: [200, res.status], ...(body.requestId ? { requestId: body.requestId } : {}) };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
