// The shopper flow under load. `concurrency` virtual shoppers share the work:
//
//   prepare  POST .../challenge, answer it, POST .../token  -> a ready shopper (token + hidden path)
//   buy      POST /api/seckill/do/:path with an Idempotency-Key (maybe sent twice: a retry)
//   follow   GET /api/seckill/result/:requestId?wait=N until SUCCESS or FAIL, one follow per
//            accepted purchase, as each shopper page follows its own (on a client of its own)
//
// Purchase tokens live 60 s, so they are never made far ahead: before the doors open the
// shoppers of the first wave (`lookahead` of them) answer their challenge, as a crowd waiting
// on the page does; then every virtual shopper buys when a ready shopper is waiting and
// prepares the next one otherwise, so no more than `lookahead` tokens are ever waiting and
// none waits longer than it takes to send the purchases in front of it. A token that got
// older than TOKEN_MAX_AGE_MS anyway (a very slow deployment) is dropped and prepared again.

import { heldReadTimeoutMs, resultReadPath } from '../../../web/src/shopper/pacing.ts';
import { timeOrderedKey } from '../../../workers/kernel/time-order.ts';
import { type Result, read } from './contract.ts';
import { type Answer, type HttpClient, outcomeKey } from './http-client.ts';
import { sendMalformed } from './malformed.ts';
import { type Counts, type Recorder, recorder, type StepSummary } from './metrics.ts';
import { sameAnswer } from './replay.ts';
import { type Attempt, attemptPlan, challengeAnswer, type Shopper } from './shoppers.ts';

const TOKEN_MAX_AGE_MS = 40_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const bearer = (jwt: string) => ({ authorization: `Bearer ${jwt}` });

export type LoadOptions = {
  http: HttpClient;
  /**
   * The accepted purchases' result reads go out on this client: a held read keeps its socket for
   * up to its wait, and must not take one a purchase needs.
   */
  resultHttp: HttpClient;
  goodsId: number;
  shoppers: Shopper[];
  concurrency: number;
  durationS?: number | undefined;
  requests?: number | undefined;
  duplicates: number;
  retries: number;
  malformed: number;
  /** Units each purchase asks for (1: the body names none, as before sale rules). */
  quantity: number;
  lookahead: number;
  /** Each result read asks the server to hold a QUEUED answer this long for the final one (`?wait=`); 0: plain reads. */
  resultWaitS: number;
  /** A result read starts this long after the one before it was sent (at once after a held read that took longer). */
  pollIntervalMs: number;
  settleTimeoutMs: number;
  turnstileToken?: string | undefined;
  onTick?: (progress: Progress) => void;
};

export type Progress = {
  elapsedS: number;
  requests: number;
  attempts: number;
  inFlight: number;
  ready: number;
  purchases: Counts;
  accepted: number;
  /** Accepted purchases whose result is not final yet. */
  unresolved: number;
};

/** An accepted purchase and what its result reads said. */
export type AcceptedPurchase = {
  requestId: string;
  userId: string;
  status: Result['status'];
  orderId?: string | undefined;
  reason?: string | undefined;
};

export type Idempotency = { retries: number; notCompared: number; mismatches: number; examples: { first: string; again: string }[] };

export type StepName = 'challenge' | 'token' | 'purchase' | 'retry' | 'result' | 'malformed';

export type LoadResult = {
  startedAt: string;
  preparedFirstWaveMs: number;
  loadMs: number;
  requests: number;
  attempts: number;
  steps: Record<StepName, StepSummary>;
  malformedByKind: Record<string, Counts>;
  accepted: AcceptedPurchase[];
  acceptedJwts: Map<string, string>;
  idempotency: Idempotency;
};

/** A shopper with a purchase token, waiting to buy. */
type Ready = Attempt & { token: string; path: string; at: number; key: string };
type Pending = AcceptedPurchase & { jwt: string };

/** How long a result read may take before it is counted a timeout: a held one its wait, then the page's grace. */
export function resultReadTimeoutMs(waitS: number, timeoutMs: number): number {
  return waitS > 0 ? Math.max(timeoutMs, heldReadTimeoutMs(waitS)) : timeoutMs;
}

/** Runs the load and returns what every request answered. */
export async function runShopperLoad(o: LoadOptions): Promise<LoadResult> {
  const steps: Record<StepName, Recorder> = {
    challenge: recorder(),
    token: recorder(),
    purchase: recorder(),
    retry: recorder(),
    result: recorder(),
    malformed: recorder(),
  };
  const malformedByKind: Record<string, Counts> = {};
  const accepted = new Map<string, Pending>();
  const idempotency: Idempotency = { retries: 0, notCompared: 0, mismatches: 0, examples: [] };
  const ready: Ready[] = [];
  // Every accepted purchase's follow, until its result is final or the settle deadline passes.
  const following = new Set<Promise<void>>();
  // Follows waiting out the interval before their next read, woken when the deadline is set.
  const pausing = new Set<() => void>();
  let unresolved = 0;
  let settleUntil = Number.POSITIVE_INFINITY;
  let preparing = 0;
  let inFlight = 0;
  let openedAt = 0;
  let closedAt = 0;
  let requests = 0;
  let attemptsDone = 0;

  const record = (step: StepName, answer: Answer): Answer => {
    requests++;
    steps[step].record(answer.ms, outcomeKey(answer));
    return answer;
  };
  const send = async (step: StepName, fn: () => Promise<Answer>): Promise<Answer> => {
    inFlight++;
    try {
      return record(step, await fn());
    } finally {
      inFlight--;
    }
  };

  async function prepare(slot: Attempt): Promise<void> {
    const { shopper } = slot;
    const challenge = await send('challenge', () =>
      o.http.post(`/api/seckill/goods/${o.goodsId}/challenge`, { headers: bearer(shopper.jwt) }),
    );
    if (challenge.status !== 200) {
      attemptsDone++;
      return;
    }
    const answer = await challengeAnswer(challenge.json, { turnstileToken: o.turnstileToken });
    if (answer.error) {
      throw new Error(answer.error);
    }
    const token = await send('token', () =>
      o.http.post(`/api/seckill/goods/${o.goodsId}/token`, { headers: bearer(shopper.jwt), json: answer.body }),
    );
    const issued = read.purchaseToken(token.json);
    if (token.status === 200 && issued) {
      ready.push({ ...slot, token: issued.token, path: issued.path, at: Date.now(), key: timeOrderedKey() });
    } else {
      attemptsDone++;
    }
  }

  async function buy(slot: Ready): Promise<void> {
    const init = {
      headers: { ...bearer(slot.shopper.jwt), 'idempotency-key': slot.key },
      json: { goodsId: o.goodsId, token: slot.token, ...(o.quantity !== 1 ? { quantity: o.quantity } : {}) },
    };
    const first = await send('purchase', () => o.http.post(`/api/seckill/do/${slot.path}`, init));
    noteAccepted(slot, first);
    if (Math.random() < o.retries) {
      // The same click sent again (a flaky network, an impatient shopper): the same answer is owed.
      const again = await send('retry', () => o.http.post(`/api/seckill/do/${slot.path}`, init));
      idempotency.retries++;
      checkReplay(first, again);
      noteAccepted(slot, again);
    }
    attemptsDone++;
  }

  function noteAccepted(slot: Ready, answer: Answer): void {
    const requestId = answer.status === 202 ? read.queued(answer.json)?.requestId : undefined;
    if (requestId !== undefined && !accepted.has(requestId)) {
      const entry: Pending = { requestId, userId: slot.shopper.userId, jwt: slot.shopper.jwt, status: 'QUEUED' };
      accepted.set(requestId, entry);
      unresolved++;
      const run: Promise<void> = follow(entry).finally(() => following.delete(run));
      following.add(run);
    }
  }

  /**
   * One accepted purchase's result, read as its shopper page reads it: at once after the 202,
   * each read held up to `resultWaitS` for the final answer, the next one starting
   * `pollIntervalMs` after the last was sent (so at once after a read held that long), until
   * SUCCESS or FAIL or the settle deadline. A read in flight at the deadline is awaited: a
   * held one answers within its wait.
   */
  async function follow(entry: Pending): Promise<void> {
    const path = resultReadPath(entry.requestId, o.resultWaitS);
    for (;;) {
      if (Date.now() > settleUntil) {
        return;
      }
      const sentAt = Date.now();
      const answer = record('result', await o.resultHttp.get(path, { headers: bearer(entry.jwt) }));
      const result = read.result(answer.json);
      if (answer.status === 200 && result && (result.status === 'SUCCESS' || result.status === 'FAIL')) {
        entry.status = result.status;
        entry.orderId = result.orderId;
        entry.reason = result.reason;
        unresolved--;
        return;
      }
      await pauseUntil(sentAt + o.pollIntervalMs);
    }
  }

  /** Sleeps until `at`, or less when the settle deadline comes first (the follow then ends). */
  async function pauseUntil(at: number): Promise<void> {
    for (;;) {
      const ms = Math.min(at, settleUntil + 1) - Date.now();
      if (ms <= 0) {
        return;
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          pausing.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, ms);
        pausing.add(wake);
      });
    }
  }

  /** From now on no follow reads again after `at`; the ones pausing look at the new deadline. */
  function settleBy(at: number): void {
    settleUntil = at;
    for (const wake of [...pausing]) {
      wake();
    }
  }

  function checkReplay(first: Answer, again: Answer): void {
    const same = sameAnswer(first, again);
    if (same === undefined) {
      // Not a decision, or the retry was turned away before the object: nothing to compare.
      idempotency.notCompared++;
      return;
    }
    if (!same) {
      idempotency.mismatches++;
      if (idempotency.examples.length < 5) {
        idempotency.examples.push({ first: outcomeKey(first), again: outcomeKey(again) });
      }
    }
  }

  async function malformedOne(): Promise<void> {
    const shopper = o.shoppers[Math.floor(Math.random() * o.shoppers.length)];
    if (!shopper) {
      return;
    }
    inFlight++;
    try {
      const { kind, answer } = await sendMalformed({ http: o.http, goodsId: o.goodsId, jwt: shopper.jwt });
      requests++;
      const key = outcomeKey(answer);
      steps.malformed.record(answer.ms, key);
      const counts = malformedByKind[kind] ?? {};
      counts[key] = (counts[key] ?? 0) + 1;
      malformedByKind[kind] = counts;
    } finally {
      inFlight--;
    }
  }

  const plan = attemptPlan(o.shoppers, { duplicates: o.duplicates, requests: o.requests });

  /** The next piece of work for a virtual shopper, or undefined when there is none right now. */
  function nextJob(): (() => Promise<void>) | undefined {
    if (!plan.done && o.malformed > 0 && Math.random() < o.malformed) {
      return () => malformedOne();
    }
    const slot = ready.shift();
    if (slot) {
      if (Date.now() - slot.at <= TOKEN_MAX_AGE_MS) {
        return () => buy(slot);
      }
      return () => prepareCounted({ shopper: slot.shopper, duplicate: slot.duplicate });
    }
    if (preparing + ready.length < o.lookahead) {
      const next = plan.next();
      if (next) {
        return () => prepareCounted(next);
      }
    }
    return undefined;
  }

  function prepareCounted(slot: Attempt): Promise<void> {
    preparing++;
    return prepare(slot).finally(() => {
      preparing--;
    });
  }

  async function shopperLoop(): Promise<void> {
    for (;;) {
      const job = nextJob();
      if (job) {
        await job();
      } else if (preparing === 0 && ready.length === 0 && plan.done) {
        return;
      } else {
        await sleep(2);
      }
    }
  }

  // The crowd before the doors open: the first wave answers its captcha first.
  const started = Date.now();
  const wave = Math.max(1, o.lookahead);
  let waveIssued = 0;
  await Promise.all(
    Array.from({ length: Math.min(o.concurrency, wave) }, async () => {
      while (waveIssued < wave) {
        waveIssued++;
        const slot = plan.next();
        if (!slot) {
          return;
        }
        await prepareCounted(slot);
      }
    }),
  );
  openedAt = Date.now();
  if (o.durationS !== undefined) {
    plan.setDeadline(openedAt + o.durationS * 1000);
  }
  const ticker = setInterval(() => o.onTick?.(progress()), 1000);
  try {
    await Promise.all(Array.from({ length: o.concurrency }, shopperLoop));
    closedAt = Date.now();
    settleBy(closedAt + o.settleTimeoutMs);
  } catch (error) {
    settleBy(0);
    throw error;
  } finally {
    // On a failure too: the follows must end, or the process never would.
    clearInterval(ticker);
    await Promise.all(following);
  }

  function progress(): Progress {
    return {
      elapsedS: (Date.now() - (openedAt || started)) / 1000,
      requests,
      attempts: attemptsDone,
      inFlight,
      ready: ready.length,
      purchases: { ...steps.purchase.outcomes },
      accepted: accepted.size,
      unresolved,
    };
  }

  return {
    startedAt: new Date(started).toISOString(),
    preparedFirstWaveMs: openedAt - started,
    loadMs: closedAt - openedAt,
    requests,
    attempts: attemptsDone,
    steps: {
      challenge: steps.challenge.summary(),
      token: steps.token.summary(),
      purchase: steps.purchase.summary(),
      retry: steps.retry.summary(),
      result: steps.result.summary(),
      malformed: steps.malformed.summary(),
    },
    malformedByKind,
    accepted: [...accepted.values()].map(({ jwt: _jwt, ...r }) => r),
    acceptedJwts: new Map([...accepted.values()].map((r) => [r.requestId, r.jwt])),
    idempotency,
  };
}
