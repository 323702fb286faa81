// Bad input a load test mixes into the traffic: each kind is one request a broken client or a
// prober could send. The contract says every one of them gets a clear 4xx, never a 5xx, never a
// hang, and never an accepted purchase.
import { randomBytes } from 'node:crypto';
import { read } from './contract.ts';
import type { Answer, HttpClient } from './http-client.ts';

type Context = { http: HttpClient; goodsId: number; jwt: string };

const randomPath = () => randomBytes(24).toString('base64url').slice(0, 32);
const bearer = (jwt: string) => ({ authorization: `Bearer ${jwt}` });

export const MALFORMED_KINDS: Record<string, (ctx: Context) => Promise<Answer>> = {
  'no-auth': ({ http, goodsId }) => http.post(`/api/seckill/do/${randomPath()}`, { json: { goodsId, token: 'x' } }),
  'bad-jwt': ({ http, goodsId }) =>
    http.post(`/api/seckill/do/${randomPath()}`, { headers: { authorization: 'Bearer not.a.jwt' }, json: { goodsId, token: 'x' } }),
  'bad-json': ({ http, jwt }) =>
    http.post(`/api/seckill/do/${randomPath()}`, {
      headers: { ...bearer(jwt), 'content-type': 'application/json' },
      body: '{"goodsId": 1, "token": ',
    }),
  'wrong-types': ({ http, jwt }) =>
    http.post(`/api/seckill/do/${randomPath()}`, { headers: bearer(jwt), json: { goodsId: '1e3', token: 42 } }),
  'forged-token': ({ http, jwt, goodsId }) =>
    http.post(`/api/seckill/do/${randomPath()}`, {
      headers: { ...bearer(jwt), 'idempotency-key': randomPath() },
      json: { goodsId, token: `${randomPath()}.${randomPath()}` },
    }),
  'bad-path': ({ http, jwt, goodsId }) =>
    http.post('/api/seckill/do/..%2F..%2Fadmin', { headers: bearer(jwt), json: { goodsId, token: 'x' } }),
  oversized: ({ http, jwt, goodsId }) =>
    http.post(`/api/seckill/do/${randomPath()}`, { headers: bearer(jwt), json: { goodsId, token: 'x'.repeat(20_000) } }),
  'wrong-content-type': ({ http, jwt, goodsId }) =>
    http.post(`/api/seckill/do/${randomPath()}`, {
      headers: { ...bearer(jwt), 'content-type': 'text/plain' },
      body: JSON.stringify({ goodsId, token: 'x' }),
    }),
  'bad-idempotency-key': ({ http, jwt, goodsId }) =>
    http.post(`/api/seckill/do/${randomPath()}`, {
      headers: { ...bearer(jwt), 'idempotency-key': 'k'.repeat(200) },
      json: { goodsId, token: 'x' },
    }),
  'bad-goods-id': ({ http, jwt }) => http.post('/api/seckill/goods/abc/challenge', { headers: bearer(jwt) }),
  'unknown-goods': ({ http, jwt }) => http.post('/api/seckill/goods/987654321987/challenge', { headers: bearer(jwt) }),
  'bad-request-id': ({ http, jwt }) => http.get('/api/seckill/result/not-a-request-id', { headers: bearer(jwt) }),
  'wrong-answer': async ({ http, jwt, goodsId }) => {
    const challenge = await http.post(`/api/seckill/goods/${goodsId}/challenge`, { headers: bearer(jwt) });
    const challengeId = read.challenge(challenge.json)?.challengeId;
    if (challenge.status !== 200 || challengeId === undefined) {
      return challenge;
    }
    return http.post(`/api/seckill/goods/${goodsId}/token`, {
      headers: bearer(jwt),
      json: { challengeId, answer: '-1' },
    });
  },
};

const KINDS = Object.keys(MALFORMED_KINDS);

/** Sends one malformed request of a random kind; returns the kind and the answer. */
export async function sendMalformed(ctx: Context): Promise<{ kind: string; answer: Answer; refused: boolean }> {
  const kind = KINDS[Math.floor(Math.random() * KINDS.length)] ?? 'no-auth';
  const send = MALFORMED_KINDS[kind];
  if (!send) {
    throw new Error(`no malformed request of kind ${kind}`);
  }
  const answer = await send(ctx);
  return { kind, answer, refused: answer.status >= 400 && answer.status < 500 };
}
