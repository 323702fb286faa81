// The HS256 verification shoppers' tokens go through, held against hono/jwt's verify() (which
// it replaced on the purchase path): every token below must be accepted or refused by both.
import { sign, verify } from 'hono/jwt';
import { describe, expect, it } from 'vitest';
import { hmacKey, toBase64Url } from '../../workers/kernel/crypto';
import { clearJwtHeaders, JwtInvalid, signedWithHs256, verifyHs256 } from '../../workers/kernel/jwt-hs256';

const SECRET = 'the-shops-login-secret-0123456789';
const ISS = 'https://login.shop.test/';
const AUD = 'edge-seckill';

const b64 = (text: string) => toBase64Url(new TextEncoder().encode(text));
const nowSeconds = () => Math.floor(Date.now() / 1000);

/** A token with this header and payload, signed with SECRET over exactly those two segments. */
async function forge(header: unknown, payload: unknown, secret = SECRET): Promise<string> {
  const head = `${b64(JSON.stringify(header))}.${b64(JSON.stringify(payload))}`;
  const key = await crypto.subtle.importKey('raw', new TextEncoder().encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const signature = new Uint8Array(await crypto.subtle.sign('HMAC', key, new TextEncoder().encode(head)));
  return `${head}.${toBase64Url(signature)}`;
}

async function tokens(): Promise<Record<string, string>> {
  const now = nowSeconds();
  const good = { sub: 'u-1', iss: ISS, aud: AUD, iat: now - 5, exp: now + 600 };
  const signed = await sign(good, SECRET);
  const [header, payload, signature] = signed.split('.') as [string, string, string];
  const alg = { alg: 'HS256', typ: 'JWT' };
  return {
    signed,
    'typ omitted': await forge({ alg: 'HS256' }, good),
    'typ application/jwt': await forge({ alg: 'HS256', typ: 'application/JWT' }, good),
    'audience in a list': await forge(alg, { ...good, aud: ['other', AUD] }),
    'padded signature': `${signed}=`,
    'other secret': await sign(good, 'another-secret-of-the-same-length!'),
    'payload swapped': `${header}.${b64(JSON.stringify({ ...good, sub: 'u-2' }))}.${signature}`,
    'signature cut': `${header}.${payload}.${signature.slice(0, -2)}`,
    'signature with +': `${header}.${payload}.${signature.slice(0, -1)}+`,
    'alg none': `${b64(JSON.stringify({ alg: 'none', typ: 'JWT' }))}.${payload}.`,
    'alg HS512': await forge({ alg: 'HS512', typ: 'JWT' }, good),
    'alg RS256': await forge({ alg: 'RS256', typ: 'JWT' }, good),
    'typ other': await forge({ alg: 'HS256', typ: 'JOSE+JSON' }, good),
    'crit header': await forge({ alg: 'HS256', typ: 'JWT', crit: ['exp'] }, good),
    'header not JSON': `${b64('{alg')}.${payload}.${signature}`,
    'header an array': await forge([alg], good),
    'payload not JSON': await forge(alg, 'plain'),
    'payload a number': await forge(alg, 42),
    expired: await forge(alg, { ...good, exp: now - 10 }),
    'exp a string': await forge(alg, { ...good, exp: String(now + 600) }),
    'not before': await forge(alg, { ...good, nbf: now + 300 }),
    'nbf passed': await forge(alg, { ...good, nbf: now - 300 }),
    'issued in the future': await forge(alg, { ...good, iat: now + 300 }),
    'other issuer': await forge(alg, { ...good, iss: 'https://evil.test/' }),
    'no issuer': await forge(alg, { ...good, iss: undefined }),
    'other audience': await forge(alg, { ...good, aud: 'someone-else' }),
    'no audience': await forge(alg, { ...good, aud: undefined }),
    'two parts': `${header}.${payload}`,
    'four parts': `${signed}.${signature}`,
    empty: '',
  };
}

describe('verifyHs256', () => {
  it('accepts and refuses exactly the tokens hono/jwt verify() accepts and refuses, with the same payload', async () => {
    const key = await hmacKey(SECRET);
    let accepted = 0;
    for (const [name, token] of Object.entries(await tokens())) {
      clearJwtHeaders();
      const reference = await verify(token, SECRET, { alg: 'HS256', iss: ISS, aud: AUD }).then(
        (payload) => ({ ok: true, payload }),
        () => ({ ok: false }),
      );
      const ours = await verifyHs256(token, key, { iss: ISS, aud: AUD }, Date.now()).then(
        (payload) => ({ ok: true, payload }),
        (error: unknown) => {
          expect(error, name).toBeInstanceOf(JwtInvalid);
          return { ok: false };
        },
      );
      expect(ours, name).toEqual(reference);
      accepted += ours.ok ? 1 : 0;
    }
    // The good ones: signed, typ omitted, typ application/jwt, audience in a list, padded signature, nbf passed.
    expect(accepted).toBe(6);
  });

  it('checks the time claims against the time it is given', async () => {
    const key = await hmacKey(SECRET);
    const token = await forge({ alg: 'HS256' }, { sub: 'u-1', nbf: 1_000, exp: 2_000 });
    await expect(verifyHs256(token, key, {}, 999_000)).rejects.toThrow(/nbf/);
    await expect(verifyHs256(token, key, {}, 1_500_000)).resolves.toMatchObject({ sub: 'u-1' });
    await expect(verifyHs256(token, key, {}, 2_000_000)).rejects.toThrow(/exp/);
  });

  it('reads a header once: a refused header stays refused, and the next token under an accepted one is still checked in full', async () => {
    clearJwtHeaders();
    const key = await hmacKey(SECRET);
    const good = { sub: 'u-1', exp: nowSeconds() + 60 };
    const first = await forge({ alg: 'HS256', typ: 'JWT' }, good);
    expect(signedWithHs256(first)).toBe(true);
    await expect(verifyHs256(first, key, {}, Date.now())).resolves.toMatchObject(good);
    const sameHeaderOtherSecret = await forge({ alg: 'HS256', typ: 'JWT' }, good, 'not-the-secret');
    await expect(verifyHs256(sameHeaderOtherSecret, key, {}, Date.now())).rejects.toThrow(/signature/);
    const none = await forge({ alg: 'none' }, good);
    expect(signedWithHs256(none)).toBe(false);
    expect(signedWithHs256(none)).toBe(false);
    await expect(verifyHs256(none, key, {}, Date.now())).rejects.toThrow(/HS256/);
  });
});
