import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { ERROR_STATUS, type ErrorCode } from '../../workers/kernel/errors';
import { ADMIN, bearer, call, createGoods, devToken, setLimits, settled, tokenFor } from './helpers';

// Whatever arrives, every route answers with the contract's error shape and a 4xx, never a
// 5xx, and no unit of stock moves. First named cases, then fast-check throwing random
// methods, paths, headers and bodies at every route.

let goodsId = 0;
let jwt = '';
/** The fuzzer's shopper holds no order: it may reach every route, but cannot cancel or pay anything real. */
let fuzzJwt = '';
let purchase = { token: '', path: '' };

beforeAll(async () => {
  // Hundreds of requests from one test process in a few seconds: the limits are not on trial here.
  await setLimits({ perIpPerSecond: 100_000, perUserPerSecond: 100_000, banThreshold: 100_000_000 });
  ({ goodsId } = await createGoods({ stock: 5 }));
  jwt = await devToken('hostile-shopper');
  fuzzJwt = await devToken('hostile-fuzzer');
  purchase = await tokenFor(jwt, goodsId);
});

async function expectError(res: Response, status: number, code: ErrorCode): Promise<void> {
  expect(res.status).toBe(status);
  const body = (await res.json()) as { error?: { code?: string; message?: string; requestId?: string } };
  expect(body.error?.code).toBe(code);
  expect(typeof body.error?.message).toBe('string');
  expect(typeof body.error?.requestId).toBe('string');
}

const json = { 'content-type': 'application/json' };

describe('named hostile inputs', () => {
  it('bodies: malformed JSON, wrong types, arrays, other media types, invalid UTF-8, too large', async () => {
    const token = `/api/seckill/goods/${goodsId}/token`;
    const buy = `/api/seckill/do/${purchase.path}`;
    const post = (path: string, body: BodyInit | null, headers: Record<string, string> = json) =>
      call(path, { method: 'POST', headers: { ...bearer(jwt), ...headers }, body });

    await expectError(await post(token, '{"challengeId": "x", "answer": '), 400, 'INVALID_INPUT');
    await expectError(await post(token, '[]'), 400, 'INVALID_INPUT');
    await expectError(await post(token, '"just a string"'), 400, 'INVALID_INPUT');
    await expectError(await post(token, 'null'), 400, 'INVALID_INPUT');
    await expectError(await post(token, '{"challengeId": ["x"], "answer": {}}'), 400, 'INVALID_INPUT');
    await expectError(
      await post(token, '{"challengeId": "x", "answer": "7"}', { 'content-type': 'text/plain' }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
    await expectError(await post(token, '{"challengeId": "x", "answer": "7"}', {}), 415, 'UNSUPPORTED_MEDIA_TYPE');
    await expectError(await post(token, new Uint8Array([0x7b, 0xff, 0xfe, 0x22, 0x7d])), 400, 'INVALID_INPUT');

    for (const goods of [
      true,
      '1e3',
      ' 12',
      1.5,
      -1,
      0,
      Number.MAX_SAFE_INTEGER + 2,
      '9007199254740993',
      null,
      [goodsId],
      { id: goodsId },
    ]) {
      await expectError(await post(buy, JSON.stringify({ goodsId: goods, token: purchase.token })), 400, 'INVALID_INPUT');
    }
    await expectError(await post(buy, JSON.stringify({ goodsId, token: 12345 })), 400, 'INVALID_INPUT');
    await expectError(await post(buy, JSON.stringify({ goodsId, token: 'x'.repeat(5000) })), 400, 'INVALID_INPUT');
    await expectError(await post(buy, JSON.stringify({ goodsId, token: 'x'.repeat(20_000) })), 413, 'PAYLOAD_TOO_LARGE');
    // Judged by its Content-Length before it is read, and counted as it streams when it has none.
    const streamed = (bytes: number) => {
      const chunk = new TextEncoder().encode(`{"goodsId": ${goodsId}, "token": "${'x'.repeat(bytes)}"}`);
      return new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(chunk);
          controller.close();
        },
      });
    };
    await expectError(await post(buy, streamed(20_000)), 413, 'PAYLOAD_TOO_LARGE');
    await expectError(await post(buy, streamed(5_000)), 400, 'INVALID_INPUT');
    await expectError(
      await call(buy, { method: 'POST', headers: { ...bearer(jwt), ...json, 'content-length': '20000' }, body: '{}' }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    await expectError(
      await call('/admin/limits', { method: 'PUT', headers: { ...ADMIN, ...json }, body: `{"perIpPerSecond": ${'9'.repeat(400)}}` }),
      400,
      'INVALID_INPUT',
    );
  });

  it('paths: ids out of range, not numbers, traversal; unknown goods, routes and methods', async () => {
    for (const id of ['9007199254740993', '-1', '0', '1e3', '0x10', `%20${goodsId}`, '..%2F..%2Fadmin', '%00', 'ｇ', '1'.repeat(300)]) {
      await expectError(await call(`/api/seckill/goods/${id}`), 400, 'INVALID_INPUT');
    }
    // The URL parser resolves an encoded dot-dot segment before routing: it can only climb to
    // a route that does not exist.
    await expectError(await call('/api/seckill/goods/%2e%2e'), 404, 'NOT_FOUND');
    await expectError(await call('/api/seckill/goods/%2e%2e/%2e%2e/%2e%2e/admin/limits'), 401, 'UNAUTHENTICATED');
    await expectError(await call('/api/seckill/goods/987654321'), 404, 'NOT_FOUND');
    for (const path of ['..%2F..%2Fadmin%2Flimits', '%00', 'A'.repeat(31), 'A'.repeat(33), `${'A'.repeat(31)}%2F`]) {
      const res = await call(`/api/seckill/do/${path}`, { method: 'POST', headers: { ...bearer(jwt), ...json }, body: '{}' });
      await expectError(res, 400, 'INVALID_INPUT');
    }
    await expectError(await call('/api/seckill/result/not-a-request', { headers: bearer(jwt) }), 400, 'INVALID_INPUT');
    await expectError(await call('/api/seckill/nothing-here'), 404, 'NOT_FOUND');
    await expectError(await call('/api/seckill/goods', { method: 'DELETE' }), 404, 'NOT_FOUND');
    await expectError(await call('/admin/limits', { method: 'PATCH', headers: ADMIN }), 404, 'NOT_FOUND');
    await expectError(await call('/api/seckill/../../admin/limits', { method: 'GET' }), 401, 'UNAUTHENTICATED');
  });

  it('admin goods: dates outside the years 2000-9999 and control characters in the title are 400', async () => {
    const now = Date.now();
    const good = { activityId: 1, title: 'Fine phone', priceCents: 100, stock: 1, startAt: now, endAt: now + 3_600_000 };
    const create = (body: Record<string, unknown>) => call('/admin/goods', { method: 'POST', headers: ADMIN, json: body });
    for (const startAt of [
      -8_000_000_000_000_000,
      -1,
      0,
      Date.UTC(1999, 11, 31, 23, 59, 59),
      '0001-01-01T00:00:00Z',
      '1999-12-31T23:59:59Z',
    ]) {
      await expectError(await create({ ...good, startAt }), 400, 'INVALID_INPUT');
    }
    for (const endAt of [Date.UTC(10_000, 0, 1), 8_640_000_000_000_001, Number.MAX_SAFE_INTEGER, '2024-02-30T00:00:00Z']) {
      await expectError(await create({ ...good, endAt }), 400, 'INVALID_INPUT');
    }
    for (const title of ['nul\u0000here', 'tab\there', 'line\nbreak', 'del\u007f', 'c1\u0085', 'lone \ud800 half', '\u001b[31mred']) {
      const res = await create({ ...good, title });
      await expectError(res, 400, 'INVALID_INPUT');
    }
    // The bounds themselves, and titles in any script, are fine.
    const ok = await create({
      ...good,
      title: 'Phone 📱 限量 Édition',
      startAt: '2000-01-01T00:00:00Z',
      endAt: '9999-12-31T23:59:59.999Z',
    });
    expect(ok.status).toBe(201);
  });

  it('headers: bad Authorization, Idempotency-Key and client address', async () => {
    const buy = (headers: Record<string, string>, token = purchase.token) =>
      call(`/api/seckill/do/${purchase.path}`, {
        method: 'POST',
        headers: { ...json, ...headers },
        body: JSON.stringify({ goodsId, token }),
      });
    await expectError(await buy({}), 401, 'UNAUTHENTICATED');
    await expectError(await buy({ authorization: `Bearer ${'a'.repeat(10_000)}` }), 401, 'UNAUTHENTICATED');
    await expectError(await buy({ authorization: 'Bearer a.b.c' }), 401, 'UNAUTHENTICATED');
    await expectError(await buy({ authorization: `Basic ${btoa('admin:admin')}` }), 401, 'UNAUTHENTICATED');
    await expectError(await buy({ ...bearer(jwt), 'idempotency-key': 'k'.repeat(129) }), 400, 'INVALID_INPUT');
    await expectError(await buy({ ...bearer(jwt), 'idempotency-key': 'caf\u00e9' }), 400, 'INVALID_INPUT');
    await expectError(await buy({ ...bearer(jwt), 'cf-connecting-ip': '999.1.1.1' }), 400, 'INVALID_INPUT');
    await expectError(await buy({ ...bearer(jwt), 'cf-connecting-ip': '<script>' }), 400, 'INVALID_INPUT');
    // Huge headers are Cloudflare's to cut at the edge; here they change nothing.
    await expectError(await buy({ ...bearer(jwt), 'x-filler': 'y'.repeat(60_000) }, 'not-the-token'), 403, 'TOKEN_INVALID');
    // None of it spent the token: it still buys, once.
    expect((await buy(bearer(jwt))).status).toBe(202);
  });
});

const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS'] as const;
type Method = (typeof METHODS)[number];
/** Every route of the Worker with the method it answers. */
const ROUTES: [Method, string][] = [
  ['GET', '/api/health'],
  ['GET', '/api/seckill/goods'],
  ['GET', '/api/seckill/goods/:id'],
  ['POST', '/api/seckill/goods/:id/challenge'],
  ['POST', '/api/seckill/goods/:id/token'],
  ['POST', '/api/seckill/do/:id'],
  ['GET', '/api/seckill/result/:id'],
  ['POST', '/api/seckill/goods/:id/queue'],
  ['GET', '/api/seckill/goods/:id/queue/eyJnIjoxfQ.AAAAAAAAAAAAAAAA'],
  ['GET', '/api/seckill/goods/:id/live'],
  ['GET', '/api/seckill/goods/:id/fairness'],
  ['POST', '/api/dev/token'],
  ['GET', '/api/orders/:id'],
  ['POST', '/api/orders/:id/pay'],
  ['POST', '/api/orders/:id/cancel'],
  ['POST', '/api/payments/callback'],
  ['POST', '/api/payments/sandbox/:id/complete'],
  ['POST', '/admin/goods'],
  ['PUT', '/admin/goods/:id'],
  ['POST', '/admin/goods/:id/prewarm'],
  ['POST', '/admin/goods/:id/pause'],
  ['POST', '/admin/goods/:id/resume'],
  ['GET', '/admin/goods/:id/stats'],
  ['GET', '/admin/limits'],
  ['PUT', '/admin/limits'],
  ['GET', '/admin/limits/bans'],
  ['POST', '/admin/limits/bans/lift'],
  ['GET', '/admin/dead-letters'],
  ['POST', '/admin/dead-letters/redrive'],
  ['POST', '/admin/dead-letters/:id/redrive'],
  // Scoped to one goods: unscoped, each call checks every goods the earlier test files left in
  // scope, seconds each on a busy machine. The cron run in reconcile-repair is unscoped.
  ['POST', '/admin/reconcile?goodsId=:id'],
  ['GET', '/admin/metrics'],
  // Not /admin/webhooks itself: another method there (DELETE) would switch off the endpoint the
  // webhook tests run against; webhooks.integration.test.ts tries its bad input instead.
  ['GET', '/admin/webhooks/deliveries'],
  ['POST', '/admin/webhooks/deliveries/:id/redeliver'],
];

/** Longer than any route takes on a loaded machine; far shorter than the test's timeout. */
const REQUEST_DEADLINE_MS = 15_000;

async function answersWithin(ms: number, what: string, answer: Promise<Response>): Promise<Response> {
  let timer: ReturnType<typeof setTimeout> | null = null;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([answer, deadline]);
  } finally {
    if (timer !== null) {
      clearTimeout(timer);
    }
  }
}

const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 80 });

function segment(): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(String(goodsId)) },
    { weight: 2, arbitrary: fc.constant(purchase.path) },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        '0',
        '-1',
        '1e3',
        '0x10',
        '9007199254740993',
        '99999999999999999999',
        '..',
        '%2e%2e',
        '%00',
        '%zz',
        '%F0%9F%92%A5',
        'ＡＢＣ',
        `${goodsId}-1`,
        `${goodsId}.AAAAAAAAAAAAAAAAAAAAAA`,
        'pay_AAAAAAAAAAAAAAAAAAAAAA',
      ),
    },
    { weight: 1, arbitrary: fc.integer().map(String) },
    { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }).map(encodeURIComponent) },
    { weight: 1, arbitrary: fc.string({ minLength: 200, maxLength: 2000 }).map(encodeURIComponent) },
  );
}

/** Dates at and past what a sale, Postgres and JavaScript can hold, as numbers and as ISO strings. */
function hostileDate(): fc.Arbitrary<unknown> {
  return fc.oneof(
    fc.constantFrom(-8_000_000_000_000_000, 8_640_000_000_000_001, -1, 0, Number.MAX_SAFE_INTEGER, Date.UTC(1999, 11, 31)),
    fc.integer({ min: -8_640_000_000_000_000, max: 8_640_000_000_000_000 }),
    fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
    fc.constantFrom('+275760-09-13T00:00:00.000Z', '0000-01-01T00:00:00Z', '2024-02-30T00:00:00Z', '9999-12-31T23:59:59.999Z'),
    fc.constant(Date.now() + 60_000),
  );
}

/** Titles with control characters, unpaired surrogates and other awkward text. */
function hostileTitle(): fc.Arbitrary<string> {
  return fc.oneof(
    fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
    fc.string({ unit: fc.integer({ min: 0, max: 0x9f }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 20 }),
    fc.constantFrom('a\u0000b', '\ud800', '\udfff\ud800', ' ', 'x'.repeat(201), 'Phone 📱'),
  );
}

/** A new goods' body, valid but for a hostile date or title (or two). */
function goodsBody(): fc.Arbitrary<string> {
  const now = Date.now();
  return fc
    .record({
      activityId: fc.constant(7),
      title: fc.oneof(fc.constant('Fuzzed goods'), hostileTitle()),
      priceCents: fc.constant(100),
      stock: fc.constant(1),
      startAt: fc.oneof(fc.constant(now), hostileDate()),
      endAt: fc.oneof(fc.constant(now + 3_600_000), hostileDate()),
    })
    .map((v) => JSON.stringify(v));
}

function bodyFor(): fc.Arbitrary<BodyInit | undefined> {
  const field = fc.anything({ maxDepth: 1 });
  return fc.oneof(
    { weight: 2, arbitrary: goodsBody() },
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.json({ maxDepth: 3 }) },
    { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)) },
    {
      // Bodies shaped like the real ones, with any value in any field.
      weight: 6,
      arbitrary: fc
        .record(
          {
            goodsId: fc.oneof(fc.constant(goodsId), field),
            token: fc.oneof(fc.constant(purchase.token), field),
            challengeId: field,
            answer: field,
            powNonce: field,
            turnstileToken: field,
            userId: fc.oneof(fc.constant('fuzz-user'), field),
            ip: field,
            perIpPerSecond: field,
            banThreshold: field,
            admissionByGoods: fc.oneof(fc.constant({ [goodsId]: 5 }), field),
            activityId: field,
            title: field,
            priceCents: field,
            stock: field,
            startAt: field,
            endAt: field,
            outcome: fc.oneof(fc.constantFrom('succeed', 'fail', 'hold'), field),
            eventId: field,
            paymentId: field,
            orderId: field,
            status: field,
            amountCents: field,
          },
          { requiredKeys: [] },
        )
        .map((v) => JSON.stringify(v) ?? '{}'),
    },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 200 }) },
    { weight: 1, arbitrary: fc.constantFrom('{'.repeat(5000), `{"token":"${'x'.repeat(20_000)}"}`) },
  );
}

describe('random goods for POST /admin/goods (fast-check)', () => {
  it('creates a goods or answers 400 INVALID_INPUT, never 5xx, for any date and title', async () => {
    await fc.assert(
      fc.asyncProperty(goodsBody(), async (body) => {
        const res = await call('/admin/goods', { method: 'POST', headers: { ...ADMIN, ...json }, body });
        expect([201, 400], `${body} -> ${res.status}`).toContain(res.status);
        if (res.status === 400) {
          expect(((await res.json()) as { error?: { code?: string } }).error?.code).toBe('INVALID_INPUT');
        } else {
          const created = (await res.json()) as { title: string; startAt: string; endAt: string };
          // What was stored reads back: a title without control characters, dates in range.
          expect(created.title).not.toMatch(/[\p{Cc}\p{Cs}]/u);
          expect(Date.parse(created.startAt)).toBeGreaterThanOrEqual(Date.UTC(2000, 0, 1));
          expect(Date.parse(created.endAt)).toBeLessThanOrEqual(Date.UTC(9999, 11, 31, 23, 59, 59, 999));
        }
      }),
      { numRuns: 80, endOnFailure: true },
    );
  });
});

describe('random requests at every route (fast-check)', () => {
  it('never answer 5xx, and every error is in the contract shape', async () => {
    const before = await settled(goodsId);
    const request = fc.record({
      route: fc.constantFrom(...ROUTES),
      otherMethod: fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom(...METHODS) }),
      segment: segment(),
      query: fc.oneof(
        fc.constant(''),
        printable.map((q) => `?${encodeURIComponent(q)}=${encodeURIComponent(q)}`),
        fc.constant('?limit=-5&goodsId=abc&state=zzz'),
      ),
      // Mostly the credentials and media type the route expects, so the input gets past them.
      auth: fc.oneof(
        { weight: 5, arbitrary: fc.constant('matching') },
        { weight: 2, arbitrary: fc.constantFrom('none', 'garbage', 'shopper', 'admin') },
      ),
      contentType: fc.oneof(
        { weight: 4, arbitrary: fc.constant('application/json') },
        {
          weight: 2,
          arbitrary: fc.constantFrom(
            undefined,
            'application/json; charset=utf-8',
            'text/plain',
            'multipart/form-data; boundary=x',
            'application/x-www-form-urlencoded',
          ),
        },
      ),
      idempotencyKey: fc.option(fc.oneof(printable, fc.constant(''), fc.constant('k'.repeat(200))), { nil: undefined }),
      ip: fc.option(fc.oneof(fc.ipV4(), fc.ipV6(), printable), { nil: undefined }),
      signature: fc.option(printable, { nil: undefined }),
      body: bodyFor(),
    });
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const headers = new Headers();
        const auth = r.auth === 'matching' ? (r.route[1].startsWith('/admin') ? 'admin' : 'shopper') : r.auth;
        if (auth === 'shopper') {
          headers.set('authorization', `Bearer ${fuzzJwt}`);
        } else if (auth === 'admin') {
          headers.set('authorization', ADMIN.authorization);
        } else if (auth === 'garbage') {
          headers.set('authorization', 'Bearer eyJhbGciOiJub25lIn0.e30.');
        }
        if (r.contentType) {
          headers.set('content-type', r.contentType);
        }
        if (r.idempotencyKey !== undefined) {
          headers.set('idempotency-key', r.idempotencyKey);
        }
        if (r.ip !== undefined) {
          headers.set('cf-connecting-ip', r.ip);
        }
        if (r.signature !== undefined) {
          headers.set('x-signature', r.signature);
        }
        const method = r.otherMethod ?? r.route[0];
        const route = r.route[1].replace(':id', r.segment);
        const path = route + (route.includes('?') ? r.query.replace('?', '&') : r.query);
        const withBody = method !== 'GET' && method !== 'HEAD';
        // A request that never answers fails here, named, instead of the whole property timing out.
        const res = await answersWithin(
          REQUEST_DEADLINE_MS,
          `${method} ${path}`,
          call(path, { method, headers, ...(withBody && r.body !== undefined ? { body: r.body } : {}) }),
        );
        expect(res.status, `${method} ${path}`).toBeLessThan(500);
        if (res.status >= 400 && method !== 'HEAD') {
          const body = (await res.json()) as { error?: { code?: string; message?: unknown; requestId?: unknown } };
          const code = body.error?.code as ErrorCode | undefined;
          expect(code && ERROR_STATUS[code], `${method} ${path} -> ${JSON.stringify(body)}`).toBe(res.status);
          expect(typeof body.error?.message).toBe('string');
          expect(typeof body.error?.requestId).toBe('string');
        } else {
          await res.arrayBuffer();
        }
      }),
      { numRuns: 400, endOnFailure: true },
    );
    // And not a unit moved: the only valid token was spent above, and the fuzzer's shopper
    // owns no order it could cancel.
    const after = await settled(goodsId);
    expect(after).toMatchObject({ doRemaining: before.doRemaining, dbStock: before.dbStock, consistent: true });
  });
});
