// Shopper tokens from the shop's own login: HS256 with AUTH_JWT_SECRET, or RS256/ES256
// verified against the key set at AUTH_JWKS_URL (served here by a stubbed fetch).
import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { sign } from 'hono/jwt';
import type { HonoJsonWebKey } from 'hono/utils/jwt/jws';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { clearKeySets, verifyShopperToken } from '../../workers/edge/shopper-jwt';
import worker from '../../workers/index';
import type { ShopperAuthConfig } from '../../workers/kernel/config';
import { AppError } from '../../workers/kernel/errors';

const JWKS_URL = 'https://login.shop.test/.well-known/jwks.json';
const ISSUER = 'https://login.shop.test/';

type KeyPair = { privateJwk: HonoJsonWebKey; publicJwk: HonoJsonWebKey };

async function keyPair(alg: 'ES256' | 'RS256', kid: string): Promise<KeyPair> {
  const params =
    alg === 'ES256'
      ? { name: 'ECDSA', namedCurve: 'P-256' }
      : { name: 'RSASSA-PKCS1-v1_5', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' };
  const pair = (await crypto.subtle.generateKey(params, true, ['sign', 'verify'])) as CryptoKeyPair;
  const privateJwk = (await crypto.subtle.exportKey('jwk', pair.privateKey)) as JsonWebKey;
  const publicJwk = (await crypto.subtle.exportKey('jwk', pair.publicKey)) as JsonWebKey;
  return { privateJwk: { ...privateJwk, alg, kid }, publicJwk: { ...publicJwk, alg, kid, use: 'sig' } };
}

function claims(sub: string, extra: Record<string, unknown> = {}) {
  const now = Math.floor(Date.now() / 1000);
  return { sub, iss: ISSUER, iat: now, exp: now + 600, ...extra };
}

let es: KeyPair;
let rs: KeyPair;
let stranger: KeyPair;
let published: HonoJsonWebKey[];
let jwksStatus: number;
let jwksFetches: number;

beforeEach(async () => {
  es ??= await keyPair('ES256', 'es-1');
  rs ??= await keyPair('RS256', 'rs-1');
  stranger ??= await keyPair('ES256', 'es-unknown');
  published = [es.publicJwk, rs.publicJwk, { kty: 'RSA', kid: 'enc-1', use: 'enc', n: 'x', e: 'AQAB' }];
  jwksStatus = 200;
  jwksFetches = 0;
  clearKeySets();
  const realFetch = globalThis.fetch;
  vi.spyOn(globalThis, 'fetch').mockImplementation(async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url !== JWKS_URL) {
      return realFetch(input, init);
    }
    jwksFetches++;
    return jwksStatus === 200 ? Response.json({ keys: published }) : new Response('upstream down', { status: jwksStatus });
  });
  vi.spyOn(console, 'warn').mockImplementation(() => {});
  vi.spyOn(console, 'error').mockImplementation(() => {});
});

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

const jwksOnly: ShopperAuthConfig = {
  hs256Secret: undefined,
  jwksUrl: JWKS_URL,
  issuer: ISSUER,
  audience: undefined,
  maxLifetimeSeconds: 24 * 3600,
};

/** The login server stops answering: each fetch hangs until its caller gives up. */
function hangJwks(): void {
  const realFetch = globalThis.fetch;
  vi.spyOn(globalThis, 'fetch').mockImplementation((input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url !== JWKS_URL) {
      return realFetch(input, init);
    }
    jwksFetches++;
    return new Promise<Response>((_, reject) => {
      init?.signal?.addEventListener('abort', () => reject(init.signal?.reason));
    });
  });
}

describe('verifyShopperToken with a JWKS', () => {
  it('accepts ES256 and RS256 tokens from the published keys, fetching the set once', async () => {
    expect((await verifyShopperToken(await sign(claims('alice'), es.privateJwk), jwksOnly)).sub).toBe('alice');
    expect((await verifyShopperToken(await sign(claims('bob'), rs.privateJwk), jwksOnly)).sub).toBe('bob');
    expect(jwksFetches).toBe(1);
  });

  it('rejects a key it does not know, refetching at most once a minute for rotated keys', async () => {
    const now = Date.now();
    const forged = await sign(claims('mallory'), stranger.privateJwk);
    await expect(verifyShopperToken(forged, jwksOnly, now)).rejects.toThrow();
    await expect(verifyShopperToken(forged, jwksOnly, now + 1000)).rejects.toThrow();
    expect(jwksFetches).toBe(1);
    // The login rotates to a new key: once the minute has passed, its tokens are accepted.
    published = [...published, stranger.publicJwk];
    await expect(verifyShopperToken(forged, jwksOnly, now + 30_000)).rejects.toThrow();
    expect((await verifyShopperToken(forged, jwksOnly, now + 61_000)).sub).toBe('mallory');
    expect(jwksFetches).toBe(2);
  });

  it('refreshes the key set after ten minutes', async () => {
    const now = Date.now();
    const token = await sign(claims('alice'), es.privateJwk);
    await verifyShopperToken(token, jwksOnly, now);
    await verifyShopperToken(token, jwksOnly, now + 9 * 60_000);
    expect(jwksFetches).toBe(1);
    await verifyShopperToken(token, jwksOnly, now + 11 * 60_000);
    expect(jwksFetches).toBe(2);
  });

  it('enforces expiry, issuer and audience', async () => {
    const past = Math.floor(Date.now() / 1000) - 60;
    await expect(verifyShopperToken(await sign(claims('alice', { exp: past }), es.privateJwk), jwksOnly)).rejects.toThrow();
    await expect(verifyShopperToken(await sign(claims('alice', { iss: 'https://evil.test/' }), es.privateJwk), jwksOnly)).rejects.toThrow();
    const withAudience = { ...jwksOnly, audience: 'seckill' };
    await expect(verifyShopperToken(await sign(claims('alice'), es.privateJwk), withAudience)).rejects.toThrow();
    expect((await verifyShopperToken(await sign(claims('alice', { aud: 'seckill' }), es.privateJwk), withAudience)).sub).toBe('alice');
  });

  it('refuses HS256 tokens when only a JWKS is configured (no algorithm confusion)', async () => {
    const withPublicKeyAsSecret = await sign(claims('mallory'), JSON.stringify(es.publicJwk), 'HS256');
    await expect(verifyShopperToken(withPublicKeyAsSecret, jwksOnly)).rejects.toThrow(/HS256 are not accepted/);
    await expect(verifyShopperToken(await sign(claims('mallory'), 'anything', 'HS256'), jwksOnly)).rejects.toThrow();
  });

  it('answers UNAVAILABLE when the key set cannot be fetched and none is cached', async () => {
    jwksStatus = 502;
    const error = await verifyShopperToken(await sign(claims('alice'), es.privateJwk), jwksOnly).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AppError);
    expect((error as AppError).code).toBe('UNAVAILABLE');
  });

  it('keeps using a stale key set while the login server is down', async () => {
    const now = Date.now();
    const token = await sign(claims('alice'), es.privateJwk);
    await verifyShopperToken(token, jwksOnly, now);
    jwksStatus = 503;
    expect((await verifyShopperToken(token, jwksOnly, now + 20 * 60_000)).sub).toBe('alice');
    expect(jwksFetches).toBe(2);
  });
});

describe('token lifetime', () => {
  const hs: ShopperAuthConfig = {
    ...jwksOnly,
    hs256Secret: 'lifetime-test-secret-0123456789abcdef',
    jwksUrl: undefined,
    issuer: undefined,
  };
  const reason = (p: Promise<unknown>) =>
    p.then(
      () => 'accepted',
      (e: unknown) => (e instanceof AppError ? `${e.code}: ${e.message}` : String(e)),
    );

  it('refuses a token without exp, with a message that says so', async () => {
    const now = Math.floor(Date.now() / 1000);
    expect(await reason(verifyShopperToken(await sign({ sub: 'alice', iat: now }, hs.hs256Secret ?? '', 'HS256'), hs))).toBe(
      'UNAUTHENTICATED: the token has no expiry (exp): sign in again',
    );
    expect(await reason(verifyShopperToken(await sign({ sub: 'alice', iss: ISSUER }, es.privateJwk), jwksOnly))).toMatch(/no expiry/);
  });

  it('refuses a token that lives longer than the configured maximum, counted from iat or from now', async () => {
    const now = Math.floor(Date.now() / 1000);
    const secret = hs.hs256Secret ?? '';
    const day = 24 * 3600;
    expect(await reason(verifyShopperToken(await sign({ sub: 'a', iat: now, exp: now + day }, secret, 'HS256'), hs))).toBe('accepted');
    expect(await reason(verifyShopperToken(await sign({ sub: 'a', iat: now, exp: now + day + 60 }, secret, 'HS256'), hs))).toMatch(
      /lives longer than the 86400 s/,
    );
    // An old iat does not stretch a far exp, and no iat counts from now.
    expect(await reason(verifyShopperToken(await sign({ sub: 'a', iat: now - 3600, exp: now + day }, secret, 'HS256'), hs))).toMatch(
      /lives longer/,
    );
    expect(await reason(verifyShopperToken(await sign({ sub: 'a', exp: now + 2 * day }, secret, 'HS256'), hs))).toMatch(/lives longer/);
    const shorter = { ...hs, maxLifetimeSeconds: 600 };
    expect(await reason(verifyShopperToken(await sign({ sub: 'a', iat: now, exp: now + 900 }, secret, 'HS256'), shorter))).toMatch(/600 s/);
  });

  it('requires iss and aud on HS256 tokens too when they are configured', async () => {
    const now = Math.floor(Date.now() / 1000);
    const strict = { ...hs, issuer: ISSUER, audience: 'seckill' };
    const secret = hs.hs256Secret ?? '';
    const base = { sub: 'a', iat: now, exp: now + 600 };
    expect(await reason(verifyShopperToken(await sign(base, secret, 'HS256'), strict))).not.toBe('accepted');
    expect(await reason(verifyShopperToken(await sign({ ...base, iss: ISSUER }, secret, 'HS256'), strict))).not.toBe('accepted');
    expect(await reason(verifyShopperToken(await sign({ ...base, iss: ISSUER, aud: 'seckill' }, secret, 'HS256'), strict))).toBe(
      'accepted',
    );
  });
});

describe('tokens verified before', () => {
  const hs: ShopperAuthConfig = {
    ...jwksOnly,
    hs256Secret: 'verified-cache-secret-0123456789abcdef',
    jwksUrl: undefined,
    issuer: undefined,
  };
  const hsToken = (claimsOf: Record<string, unknown>) => sign(claimsOf, hs.hs256Secret ?? '', 'HS256');

  it('checks the signature of a token once, then only its expiry and lifetime', async () => {
    const verify = vi.spyOn(crypto.subtle, 'verify');
    const now = Math.floor(Date.now() / 1000);
    const token = await hsToken({ sub: 'again', iat: now, exp: now + 600 });
    for (let i = 0; i < 5; i++) {
      expect((await verifyShopperToken(token, hs)).sub).toBe('again');
    }
    expect(verify).toHaveBeenCalledTimes(1);
    // Past a minute it is checked in full again.
    expect((await verifyShopperToken(token, hs, Date.now() + 61_000)).sub).toBe('again');
    expect(verify).toHaveBeenCalledTimes(2);
  });

  it('refuses a verified token once it has expired', async () => {
    const now = Math.floor(Date.now() / 1000);
    const token = await hsToken({ sub: 'brief', iat: now, exp: now + 5 });
    expect((await verifyShopperToken(token, hs)).sub).toBe('brief');
    vi.useFakeTimers({ toFake: ['Date'], now: (now + 6) * 1000 });
    await expect(verifyShopperToken(token, hs)).rejects.toThrow();
  });

  it('takes nothing verified under one secret for another, and verifies a changed copy on its own', async () => {
    const now = Math.floor(Date.now() / 1000);
    const token = await hsToken({ sub: 'alice', iat: now, exp: now + 600 });
    expect((await verifyShopperToken(token, hs)).sub).toBe('alice');
    const rotated = { ...hs, hs256Secret: 'another-secret-0123456789abcdef-rotated' };
    await expect(verifyShopperToken(token, rotated)).rejects.toThrow();
    const [header, , signature] = token.split('.');
    const forgedPayload = btoa(JSON.stringify({ sub: 'mallory', iat: now, exp: now + 600 }))
      .replace(/=+$/, '')
      .replace(/\+/g, '-')
      .replace(/\//g, '_');
    await expect(verifyShopperToken(`${header}.${forgedPayload}.${signature}`, hs)).rejects.toThrow();
    // The true token still passes.
    await expect(verifyShopperToken(token, hs)).resolves.toMatchObject({ sub: 'alice' });
  });
});

describe('a login server that hangs', () => {
  it('serves the stale key set at once and refreshes it in the background, one fetch at a time', async () => {
    const now = Date.now();
    const token = await sign(claims('alice'), es.privateJwk);
    await verifyShopperToken(token, jwksOnly, now);
    expect(jwksFetches).toBe(1);
    hangJwks();
    const background: Promise<unknown>[] = [];
    const started = Date.now();
    for (let i = 0; i < 5; i++) {
      // Eleven minutes later the set is stale; no answer may wait for the hung server.
      const payload = await verifyShopperToken(token, jwksOnly, now + 11 * 60_000 + i, (p) => background.push(p));
      expect(payload.sub).toBe('alice');
    }
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(jwksFetches).toBe(2);
    expect(background.length).toBe(1);
    // The refresh gives up on its own deadline and the stale set stays in service.
    await Promise.all(background);
    expect((await verifyShopperToken(token, jwksOnly, now + 12 * 60_000)).sub).toBe('alice');
  });
});

describe('shopper routes with AUTH_JWKS_URL', () => {
  // The local secret stays set, so the dev token route keeps working next to the JWKS.
  const jwksEnv = { ...env, AUTH_JWKS_URL: JWKS_URL, AUTH_JWT_ISSUER: ISSUER } as Env;
  const unknownRequest = '/api/seckill/result/999999999.aaaaaaaaaaaaaaaaaaaaaa';

  /** `settle`: also waits for the request's background work (a key set refresh; the metrics flush, about a second). */
  async function get(path: string, token: string, settle = true): Promise<Response> {
    const ctx = createExecutionContext();
    const res = await worker.fetch(
      new Request(`https://sale.shop.test${path}`, { headers: { authorization: `Bearer ${token}` } }),
      jwksEnv,
      ctx,
    );
    if (settle) {
      await waitOnExecutionContext(ctx);
    }
    return res;
  }

  it('lets a JWKS-signed shopper through (404 for an unknown request, not 401)', async () => {
    const res = await get(unknownRequest, await sign(claims('alice'), es.privateJwk));
    expect(res.status).toBe(404);
  });

  it('still accepts HS256 tokens signed with AUTH_JWT_SECRET when both are set', async () => {
    const res = await get(unknownRequest, await sign(claims('alice'), env.AUTH_JWT_SECRET, 'HS256'));
    expect(res.status).toBe(404);
  });

  it('answers 401, saying why, to a token without exp', async () => {
    const noExp = { sub: 'alice', iss: ISSUER, iat: Math.floor(Date.now() / 1000) };
    const res = await get(unknownRequest, await sign(noExp, env.AUTH_JWT_SECRET, 'HS256'));
    expect(res.status).toBe(401);
    expect((await res.json<{ error: { code: string; message: string } }>()).error).toMatchObject({
      code: 'UNAUTHENTICATED',
      message: expect.stringContaining('no expiry (exp)'),
    });
  });

  it('answers 401 to a valid token whose subject is no user id (sign-in checks it as UserId does)', async () => {
    const exp = Math.floor(Date.now() / 1000) + 600;
    for (const sub of ['with space', '', 'x'.repeat(65), 'ключ', 'u-1\n', 42, undefined]) {
      const res = await get(unknownRequest, await sign({ sub, iss: ISSUER, exp }, env.AUTH_JWT_SECRET, 'HS256'), false);
      expect(res.status, JSON.stringify(sub)).toBe(401);
      expect((await res.json<{ error: { code: string; message: string } }>()).error).toMatchObject({
        code: 'UNAUTHENTICATED',
        message: 'the token has no usable subject',
      });
    }
    for (const sub of ['u-1', 'a:b.c_d-e@shop', 'x'.repeat(64)]) {
      expect((await get(unknownRequest, await sign({ sub, iss: ISSUER, exp }, env.AUTH_JWT_SECRET, 'HS256'), false)).status).toBe(404);
    }
  });

  it('answers a shopper at once while the login server hangs, with the keys it has', async () => {
    const token = await sign(claims('alice'), es.privateJwk);
    // The isolate fetched its key set eleven minutes ago: it is stale now.
    await verifyShopperToken(token, { ...jwksOnly, issuer: ISSUER }, Date.now() - 11 * 60_000);
    hangJwks();
    const ctx = createExecutionContext();
    const started = performance.now();
    const res = await worker.fetch(
      new Request(`https://sale.shop.test${unknownRequest}`, { headers: { authorization: `Bearer ${token}` } }),
      jwksEnv,
      ctx,
    );
    const answeredMs = performance.now() - started;
    expect(res.status).toBe(404);
    expect(answeredMs).toBeLessThan(1_000);
    // The refresh went on in the background (waitUntil) and gave up on its own deadline.
    await waitOnExecutionContext(ctx);
    expect(jwksFetches).toBe(2);
  });

  it('answers 401 for a token from an unknown key and 503 when the keys are unreachable', async () => {
    const forged = await get(unknownRequest, await sign(claims('mallory'), stranger.privateJwk));
    expect(forged.status).toBe(401);
    expect((await forged.json<{ error: { code: string } }>()).error.code).toBe('UNAUTHENTICATED');
    clearKeySets();
    jwksStatus = 500;
    const down = await get(unknownRequest, await sign(claims('alice'), es.privateJwk));
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('1');
    expect((await down.json<{ error: { code: string } }>()).error.code).toBe('UNAVAILABLE');
  });
});
