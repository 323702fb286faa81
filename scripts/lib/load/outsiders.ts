// Shoppers off an allowlist sale's list: each answers its challenge and asks for a purchase
// token, which the deployment must refuse with 403 NOT_ELIGIBLE. They go before the buyers,
// while the goods has stock (once it is sold out, the token route answers SOLD_OUT first).
import { type Answer, type HttpClient, outcomeKey } from './http-client.ts';
import { type Counts, recorder, type StepSummary } from './metrics.ts';
import { challengeAnswer, type Shopper } from './shoppers.ts';

/** The outcome every outsider's token request must have. */
export const OUTSIDER_REFUSAL = '403 NOT_ELIGIBLE';

/** Sends every outsider through challenge and token, `concurrency` at a time; the token step's outcomes. */
export async function runOutsiders(
  http: HttpClient,
  goodsId: number,
  outsiders: Shopper[],
  { concurrency, turnstileToken }: { concurrency: number; turnstileToken?: string | undefined },
): Promise<StepSummary> {
  const tokens = recorder();
  let next = 0;
  async function worker() {
    while (next < outsiders.length) {
      const shopper = outsiders[next++];
      if (!shopper) {
        return;
      }
      const headers = { authorization: `Bearer ${shopper.jwt}` };
      const challenge = await http.post(`/api/seckill/goods/${goodsId}/challenge`, { headers });
      let answer: Answer = challenge;
      if (challenge.status === 200) {
        const body = await challengeAnswer(challenge.json, { turnstileToken });
        if (body.error) {
          throw new Error(body.error);
        }
        answer = await http.post(`/api/seckill/goods/${goodsId}/token`, { headers, json: body.body });
      }
      tokens.record(answer.ms, outcomeKey(answer));
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, outsiders.length)) }, worker));
  return tokens.summary();
}

/** How many outsiders were not refused NOT_ELIGIBLE. */
export function outsidersLetThrough(outcomes: Counts): number {
  return Object.entries(outcomes).reduce((n, [k, v]) => n + (k === OUTSIDER_REFUSAL ? 0 : v), 0);
}
